#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

//! Integration tests of the controller runtime against the in-process API server
//! (`karpenter-testapi`), in virtual time. One binary; add modules here.

mod crash;
mod crash_world;
mod disruption;
mod e2e_inflate;
mod e2e_seed_flow;
mod faults;
mod isolation;
mod leader;
mod lifecycle;
mod load;
mod pipeline_parity;
mod provisioning;
mod provisioning_core;
mod repair;
mod restart;
mod sim_cluster;
mod sim_kubelet;
mod state_freshness;
mod support;
mod termination;
