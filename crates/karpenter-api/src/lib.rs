//! Karpenter's Kubernetes API, as users write it: `karpenter.sh/v1` NodePool and NodeClaim and
//! `karpenter.k8s.aws/v1` EC2NodeClass, plus the well-known labels, annotations and taints.
//!
//! This crate is pure: types, CRD generation, offline validation and conversion of legacy
//! manifests. Nothing here talks to a cluster or a cloud.

pub mod autoscaling;
pub mod convert;
pub mod crd;
pub mod manifest;
pub mod quantity;
pub mod rules;
pub mod v1;
pub mod v1alpha1;
pub mod validation;
pub mod well_known;

pub use v1::{NodeClaim, NodeClaimSpec, NodeClaimStatus, NodePool, NodePoolSpec, NodePoolStatus};
