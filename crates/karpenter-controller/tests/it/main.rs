#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

//! Integration tests of the controller runtime against the in-process API server
//! (`karpenter-testapi`), in virtual time. One binary; add modules here.

mod leader;
mod provisioning;
mod support;
