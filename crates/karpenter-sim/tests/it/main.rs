//! Integration tests of the sim provider and the simulate plan.

mod provider;
