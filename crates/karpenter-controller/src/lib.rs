//! Kubernetes controllers.
