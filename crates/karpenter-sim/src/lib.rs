//! The `sim` cloud provider and the `simulate` plan.
//!
//! * [`SimCloudProvider`] implements [`karpenter_core::cloud_provider::CloudProvider`] in memory
//!   over the embedded AWS catalogue (or custom instance types): it picks offerings the way EC2
//!   CreateFleet does, can run out of capacity or fail on demand, and registers the Nodes itself.
//! * [`launch`] holds the offering choice, shared by the provider and `simulate`.
//! * [`simulate`] loads Kubernetes manifests and computes the `karpenter simulate` plan.

pub mod launch;
pub mod provider;
pub mod simulate;

pub use launch::LaunchChoice;
pub use provider::{SimCloudProvider, SimError, SimInstance, SimLedger};
