//! Integration tests of the API crate: seed manifests, invalid variants, CRD structure and the CRD's
//! CEL rules evaluated client-side.

mod cel;
mod crd_structure;
mod fixtures;
mod invalid;
mod seeds;
