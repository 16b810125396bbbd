//! Integration tests of the scheduler, named after the upstream behaviours they port.

mod benchmark;
mod fixtures;
mod instance_selection;
mod invariants;
mod scheduling;
mod topology;
