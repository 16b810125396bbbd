//! In-process Kubernetes API server for tests.
