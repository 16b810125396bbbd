//! The `sim` cloud provider.
