//! Voluntary disruption decisions (issue 10): which nodes Karpenter may take away, and why not.
//!
//! The first bricks: [`budgets`] (how many nodes of each NodePool may be disrupted now for a
//! reason), [`candidates`] (every node that could be disrupted, or the reason it cannot) and
//! [`emptiness`] (empty candidates past `consolidateAfter`, within budgets). Drift and
//! consolidation build on them.

pub mod budgets;
pub mod candidates;
pub mod emptiness;

pub use budgets::{BudgetAllowance, BudgetMapping, DisruptionReason, PoolNodeCount};
