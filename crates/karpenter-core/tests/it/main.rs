//! Integration tests of the scheduler, named after the upstream behaviours they port.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

mod benchmark;
mod fixtures;
mod instance_selection;
mod invariants;
mod scheduling;
mod topology;
