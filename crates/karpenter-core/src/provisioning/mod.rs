//! The provisioning pipeline shared by the controller's provisioner and `simulate` (and next by
//! consolidation): a [`ClusterState`](crate::state::ClusterState) snapshot → the scheduler's
//! input → solve → NodeClaim objects.
//!
//! * [`reschedulable`]: pods of deleting nodes that the pass plans capacity for.
//! * [`nodeclaim`]: the one NodeClaim builder.

pub mod nodeclaim;
pub mod reschedulable;
