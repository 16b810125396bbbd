//! The `sim` cloud provider.
//!
//! * [`SimCloudProvider`] implements [`karpenter_core::cloud_provider::CloudProvider`] in memory
//!   over the embedded AWS catalogue (or custom instance types): it picks offerings the way EC2
//!   CreateFleet does, can run out of capacity or fail on demand, and registers the Nodes itself.
//! * [`launch`] holds the offering choice, shared by the provider and `simulate`.
//! * `cluster` (the `cluster` feature) runs the provider on a real (or test) API server: its ledger in a ConfigMap and
//!   the sim kubelet that registers its Nodes and runs their pods.

#[cfg(feature = "cluster")]
pub mod cluster;
pub mod failures;
mod instance;
pub mod launch;
pub mod nodeclass;
pub mod provider;

pub use launch::LaunchChoice;
pub use provider::{InstanceRef, SimCloudProvider, SimError, SimInstance, SimLedger};
