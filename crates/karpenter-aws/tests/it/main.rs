//! Integration tests of the aws provider. The `moto_*` modules talk to the moto emulator started by
//! `./scripts/test.sh` (see `harness`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

mod agreement;
mod controller_e2e;
mod controller_rebalance;
mod controller_reserved;
mod harness;
mod moto_amis;
mod moto_gc;
mod moto_instance_types;
mod moto_interruption;
mod moto_launch;
mod moto_network;
mod moto_pricing;
