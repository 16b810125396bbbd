//! Integration tests of the `simulate` pipeline: plans on manifests, workloads, node classes.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod consolidation;
mod limit_range;
mod node_class;
mod simulate;
mod workloads;
