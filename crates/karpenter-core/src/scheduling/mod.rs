//! The scheduler.
