//! Voluntary disruption decisions (issue 10): which nodes Karpenter may take away, and why not.
//!
//! So far only the first brick exists: [`budgets`], how many nodes of each NodePool may be
//! disrupted now for a reason. Candidates, emptiness, drift and consolidation build on it.

pub mod budgets;

pub use budgets::{BudgetAllowance, BudgetMapping, DisruptionReason, PoolNodeCount};
