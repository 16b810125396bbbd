//! `autoscaling.x-k8s.io/v1beta1`: CapacityBuffer, the API Karpenter shares with Cluster
//! Autoscaler (used behind the `CapacityBuffer` gate).

mod capacitybuffer;

pub use capacitybuffer::*;
