//! Integration tests of the sim provider and the simulate plan.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod node_class;
mod provider;
mod simulate;
mod workloads;
