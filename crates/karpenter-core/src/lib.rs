//! The pure core of karpenter-rs.
//!
//! Everything here is deterministic and free of I/O: controllers and the `simulate` command feed
//! it plain data and act on what it decides. Time enters only through [`clock::Clock`].

pub mod capacity_buffer;
pub mod clock;
pub mod cloud_provider;
pub mod cost;
pub mod disruption;
pub mod drain;
pub mod feature_gates;
pub mod instance_type;
pub mod node;
pub mod node_overlay;
pub mod nodeclaim_lifecycle;
pub mod nodepool;
pub mod pod;
pub mod provisioning;
pub mod requirements;
pub mod resources;
pub mod scheduling;
pub mod state;
pub mod taints;
