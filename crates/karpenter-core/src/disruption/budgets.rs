//! Disruption budgets per NodePool and reason (upstream `BuildDisruptionBudgetMapping`, spec
//! §4.3): how many more of a pool's nodes a voluntary method may start disrupting now.
//!
//! The arithmetic of one `Budget` (is its schedule window open at `now`, what `nodes: 10%` means
//! for N nodes, rounding up) lives beside the API type in `karpenter_api::v1::budget`, shared with
//! validation. This module adds what needs the cluster — which nodes count, which are already
//! being disrupted — and an explanation a person can read. `now` is always a parameter.
//!
//! Budgets bind only voluntary methods (emptiness, drift, consolidation); expiration, repair,
//! interruption and manual deletion ignore them.

use std::collections::BTreeMap;
use std::fmt;

use jiff::Timestamp;
use karpenter_api::NodePool;
use karpenter_api::v1::{
    Budget, BudgetError, ConditionsExt, NODECLAIM_CONDITION_INSTANCE_TERMINATING,
    parse_budget_nodes,
};

use crate::node::node_is_ready;
use crate::state::{ClusterState, StateNode};

/// Why a voluntary method disrupts a node; budgets may be limited to some of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DisruptionReason {
    Empty,
    Drifted,
    Underutilized,
}

impl DisruptionReason {
    pub const ALL: [Self; 3] = [Self::Empty, Self::Drifted, Self::Underutilized];

    /// The name used in `budgets[].reasons`, events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::Drifted => "Drifted",
            Self::Underutilized => "Underutilized",
        }
    }
}

impl fmt::Display for DisruptionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A NodePool's nodes as its budgets see them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolNodeCount {
    /// Managed, initialized nodes whose instance is not terminating: the base of percentages
    /// (replacements still initializing do not inflate it).
    pub nodes: u32,
    /// Of those, the ones already consuming budget: Node not Ready, or being deleted/disrupted.
    pub disrupting: u32,
}

impl PoolNodeCount {
    /// Counts every NodePool's nodes in `state` (keyed by the `karpenter.sh/nodepool` label).
    pub fn by_nodepool(state: &ClusterState) -> BTreeMap<String, PoolNodeCount> {
        let mut counts: BTreeMap<String, PoolNodeCount> = BTreeMap::new();
        for node in state.state_nodes() {
            let Some(pool) = node.nodepool() else {
                continue;
            };
            if !counts_towards_budget(&node) {
                continue;
            }
            let count = counts.entry(pool.to_string()).or_default();
            count.nodes = count.nodes.saturating_add(1);
            if is_disrupting(state, &node) {
                count.disrupting = count.disrupting.saturating_add(1);
            }
        }
        counts
    }
}

fn counts_towards_budget(node: &StateNode<'_>) -> bool {
    let instance_terminating = node.nodeclaim.is_some_and(|claim| {
        claim
            .status
            .as_ref()
            .is_some_and(|s| s.is_condition_true(NODECLAIM_CONDITION_INSTANCE_TERMINATING))
    });
    // `initialized()` needs a Node, so NodeClaims still in flight do not count either.
    node.is_managed() && node.initialized() && !instance_terminating
}

fn is_disrupting(state: &ClusterState, node: &StateNode<'_>) -> bool {
    !node.node.is_some_and(node_is_ready)
        || node.marked_for_deletion()
        || state.is_being_disrupted(&node.name())
}

/// The budget that set a pool's limit for a reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingBudget {
    /// Position in `spec.disruption.budgets` (0 for the CRD default `nodes: 10%`).
    pub index: usize,
    pub budget: Budget,
    /// What the budget allows for the pool's node count, before subtracting disrupting nodes.
    pub limit: u32,
}

/// How many of one NodePool's nodes may start being disrupted now for one reason, and why.
/// `Display` gives the sentence `simulate`, events and logs print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetAllowance {
    pub nodepool: String,
    pub reason: DisruptionReason,
    pub count: PoolNodeCount,
    /// The most restrictive active budget applying to the reason (the first one on a tie);
    /// `None` when no budget limits the reason now.
    pub binding: Option<BindingBudget>,
    /// Budgets that could not be evaluated. Like upstream, any invalid budget of the pool (even
    /// one limited to another reason) fails closed: nothing may be disrupted.
    pub errors: Vec<BudgetError>,
    /// Disruptions still allowed now; `u32::MAX` when unlimited.
    pub allowed: u32,
}

impl BudgetAllowance {
    /// Evaluates `pool`'s budgets (the CRD default `nodes: 10%` when it has none) at `now`.
    pub fn evaluate(
        pool: &NodePool,
        reason: DisruptionReason,
        count: PoolNodeCount,
        now: Timestamp,
    ) -> Self {
        let mut binding: Option<BindingBudget> = None;
        let mut errors = Vec::new();
        for (index, budget) in pool.budgets().into_iter().enumerate() {
            let limit = match active_limit(&budget, count.nodes, now) {
                Ok(Some(limit)) => limit,
                Ok(None) => continue,
                Err(err) => {
                    errors.push(err);
                    continue;
                }
            };
            if !budget.applies_to(reason.as_str()) {
                continue;
            }
            if binding.as_ref().is_none_or(|b| limit < b.limit) {
                binding = Some(BindingBudget {
                    index,
                    budget,
                    limit,
                });
            }
        }
        let allowed = match (&binding, errors.is_empty()) {
            (_, false) => 0,
            (Some(b), true) => b.limit.saturating_sub(count.disrupting),
            (None, true) => u32::MAX,
        };
        BudgetAllowance {
            nodepool: pool.metadata.name.clone().unwrap_or_default(),
            reason,
            count,
            binding,
            errors,
            allowed,
        }
    }

    /// The pool has nodes but its budgets allow none of them to be disrupted for the reason,
    /// whatever is in flight (an active `nodes: 0`-like budget, or an invalid one): upstream's
    /// condition for the NodePool's `DisruptionBlocked` event.
    pub fn blocks_all(&self) -> bool {
        self.count.nodes > 0
            && (!self.errors.is_empty() || self.binding.as_ref().is_some_and(|b| b.limit == 0))
    }

    /// No active budget limits this reason and none is invalid.
    pub fn is_unlimited(&self) -> bool {
        self.errors.is_empty() && self.binding.is_none()
    }
}

/// What an active budget allows for `num_nodes` nodes; `None` when its schedule window is closed.
/// Like upstream, `nodes` is only read when the budget is active.
fn active_limit(
    budget: &Budget,
    num_nodes: u32,
    now: Timestamp,
) -> Result<Option<u32>, BudgetError> {
    if !budget.is_active(now)? {
        return Ok(None);
    }
    let limit = parse_budget_nodes(&budget.nodes, num_nodes)?;
    // Never negative; fail closed should that change.
    Ok(Some(u32::try_from(limit).unwrap_or(0)))
}

impl fmt::Display for BudgetAllowance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pool = &self.nodepool;
        let reason = self.reason;
        if !self.errors.is_empty() {
            let errors: Vec<String> = self.errors.iter().map(ToString::to_string).collect();
            return write!(
                f,
                "NodePool {pool} has an invalid disruption budget ({}), so it allows 0 disruptions now (reason {reason})",
                errors.join("; ")
            );
        }
        let Some(binding) = &self.binding else {
            return write!(
                f,
                "no active budget of NodePool {pool} limits reason {reason} now: disruptions are unlimited"
            );
        };
        let budget = &binding.budget;
        write!(
            f,
            "budget \"nodes: {}\" of NodePool {pool} (reason {reason}",
            budget.nodes
        )?;
        if let (Some(schedule), Some(duration)) = (&budget.schedule, &budget.duration) {
            write!(f, ", schedule \"{schedule}\" for {duration}")?;
        }
        let plural = if self.allowed == 1 { "" } else { "s" };
        write!(f, ") allows {} disruption{plural} now", self.allowed)?;
        let percent = budget.nodes.ends_with('%');
        let disrupting = self.count.disrupting;
        match (percent, disrupting > 0) {
            (false, false) => Ok(()),
            (true, false) => write!(
                f,
                " ({} of {} nodes rounds up to {})",
                budget.nodes, self.count.nodes, binding.limit
            ),
            (false, true) => write!(
                f,
                " ({} minus {disrupting} already disrupting)",
                binding.limit
            ),
            (true, true) => write!(
                f,
                " ({} of {} nodes rounds up to {}, minus {disrupting} already disrupting)",
                budget.nodes, self.count.nodes, binding.limit
            ),
        }
    }
}

/// Every NodePool's allowance for one reason, consumed as a method selects candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetMapping {
    reason: DisruptionReason,
    pools: BTreeMap<String, BudgetAllowance>,
}

impl BudgetMapping {
    /// Evaluates the budgets of every NodePool in `state` for `reason` at `now`.
    pub fn build(state: &ClusterState, reason: DisruptionReason, now: Timestamp) -> Self {
        let counts = PoolNodeCount::by_nodepool(state);
        let pools = state
            .nodepools()
            .map(|pool| {
                let name = pool.metadata.name.clone().unwrap_or_default();
                let count = counts.get(&name).copied().unwrap_or_default();
                let allowance = BudgetAllowance::evaluate(pool, reason, count, now);
                (name, allowance)
            })
            .collect();
        BudgetMapping { reason, pools }
    }

    pub fn reason(&self) -> DisruptionReason {
        self.reason
    }

    /// The allowance of `nodepool`, with its explanation; `None` for a pool the state lacks.
    pub fn allowance(&self, nodepool: &str) -> Option<&BudgetAllowance> {
        self.pools.get(nodepool)
    }

    /// Disruptions still allowed in `nodepool` (0 for an unknown pool, like upstream's map).
    pub fn allowed(&self, nodepool: &str) -> u32 {
        self.pools.get(nodepool).map_or(0, |a| a.allowed)
    }

    /// Takes one disruption from `nodepool`'s allowance; `false` (nothing taken) when none is
    /// left.
    pub fn take(&mut self, nodepool: &str) -> bool {
        match self.pools.get_mut(nodepool) {
            Some(allowance) if allowance.allowed > 0 => {
                if !allowance.is_unlimited() {
                    allowance.allowed -= 1;
                }
                true
            }
            _ => false,
        }
    }

    /// Every pool's allowance, by pool name.
    pub fn iter(&self) -> impl Iterator<Item = &BudgetAllowance> {
        self.pools.values()
    }
}

#[cfg(test)]
mod tests;
