//! Integration tests of the API crate: seed manifests, invalid variants, CRD structure and the CRD's
//! CEL rules evaluated client-side.

// Test helpers panic on purpose: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_server_checks;
mod cel;
mod convert;
mod crd_structure;
mod fixtures;
mod invalid;
mod nodeoverlay;
mod seeds;
