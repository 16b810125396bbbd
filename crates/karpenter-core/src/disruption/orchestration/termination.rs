//! One deleting Node through upstream's termination controller: drain, wait out the minimum
//! drain time, terminate the instance, release the Node.
//!
//! The drain order and the force-delete rule are [`crate::drain::plan`]'s; this machine adds
//! the PDB check of each graceful eviction (when the caller knows the PDBs' counts, as
//! `simulate` does; the controller leaves it to the Eviction API), the instants at which a
//! waiting drain moves by itself (a pod's `terminationGracePeriod` forcing it, a pod becoming
//! stuck terminating, a do-not-disrupt duration running out) and the phases after the drain.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::earliest;
use super::pdb::{self, PdbCounts};
use crate::drain::{self, Action, PodAction, STUCK_TERMINATING_AFTER, grace_seconds};
use crate::pod::{self, DoNotDisrupt, Pod};

/// Upstream waits this long after the last pod is gone before terminating (catches pods bound
/// just before the taint was seen).
pub const MIN_DRAIN_TIME: SignedDuration = SignedDuration::from_secs(5);

/// The instance behind the Node, as the cloud provider reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceView {
    Running,
    /// Termination asked for; gone at this instant when the caller knows it (`simulate`).
    Terminating {
        gone_at: Option<Timestamp>,
    },
    /// The provider no longer knows it.
    Gone,
}

/// What the machine needs to know of one deleting Node.
#[derive(Clone, Debug)]
pub struct NodeView<'a> {
    /// The pods bound to the Node, terminating ones included.
    pub pods: Vec<&'a Pod>,
    /// The NodeClaim's `terminationGracePeriod` deadline.
    pub deadline: Option<Timestamp>,
    /// Every PDB with its counts now; `None`: the Eviction API checks each eviction.
    pub pdbs: Option<Vec<(&'a PodDisruptionBudget, PdbCounts)>>,
    /// When the drain was first seen complete (the caller keeps it between calls).
    pub drained_since: Option<Timestamp>,
    /// [`MIN_DRAIN_TIME`] in the controller.
    pub min_drain_time: SignedDuration,
    pub node_ready: bool,
    pub instance: InstanceView,
}

/// What to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TerminationStep {
    /// Evict (through the Eviction API) or force-delete one pod, as the action says.
    Remove(PodAction),
    /// The drain is not complete: pods still waited for, of which this many a PDB holds back
    /// and this many `karpenter.sh/do-not-disrupt` holds until the deadline.
    WaitForPods {
        waiting: usize,
        blocked_by_pdb: usize,
        do_not_disrupt: usize,
    },
    /// The drain just became complete: remember `now` as the drain's end.
    Drained,
    /// Ask the provider to terminate the instance.
    TerminateInstance,
    /// Remove the termination finalizer: the Node (and its NodeClaim) are gone.
    ReleaseNode,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TerminationPlan {
    pub steps: Vec<TerminationStep>,
    /// When the Node moves on by itself (`None` with no wait step: at once).
    pub look_again: Option<Timestamp>,
}

impl TerminationPlan {
    pub fn is_final(&self) -> bool {
        self.steps.contains(&TerminationStep::ReleaseNode)
    }
}

/// The next steps of the deleting Node observed as `view` at `now`.
pub fn next(view: &NodeView<'_>, now: Timestamp) -> TerminationPlan {
    // A Node whose instance is gone and that is not Ready has nothing left to drain to.
    if view.instance == InstanceView::Gone && !view.node_ready {
        return TerminationPlan {
            steps: vec![TerminationStep::ReleaseNode],
            look_again: None,
        };
    }
    let plan = drain::plan(&view.pods, now, view.deadline);
    if plan.waiting > 0 {
        let mut steps = Vec::new();
        let mut pdbs = view.pdbs.clone();
        let mut blocked_by_pdb = 0;
        for action in plan.actions {
            if action.action == Action::Evict
                && let Some(pdbs) = pdbs.as_mut()
                && let Some(pod) = view.pods.iter().find(|p| pod::key(p) == action.key)
            {
                if !pdb::eviction_allowed(pod, pdbs) {
                    blocked_by_pdb += 1;
                    continue;
                }
                // The pod stops counting as healthy: the next eviction in this step sees it.
                if pdb::is_healthy(pod) {
                    for (budget, counts) in pdbs.iter_mut() {
                        if pdb::selects(budget, pod) {
                            counts.healthy = counts.healthy.saturating_sub(1);
                        }
                    }
                }
            }
            steps.push(TerminationStep::Remove(action));
        }
        steps.push(TerminationStep::WaitForPods {
            waiting: plan.waiting,
            blocked_by_pdb,
            do_not_disrupt: plan.do_not_disrupt,
        });
        return TerminationPlan {
            steps,
            look_again: drain_moves_at(view, now),
        };
    }
    let Some(drained_since) = view.drained_since else {
        return TerminationPlan {
            steps: vec![TerminationStep::Drained],
            look_again: now.checked_add(view.min_drain_time).ok(),
        };
    };
    let drain_over = drained_since
        .checked_add(view.min_drain_time)
        .unwrap_or(drained_since);
    if now < drain_over {
        return TerminationPlan {
            steps: Vec::new(),
            look_again: Some(drain_over),
        };
    }
    match view.instance {
        InstanceView::Running => TerminationPlan {
            steps: vec![TerminationStep::TerminateInstance],
            look_again: None,
        },
        InstanceView::Terminating { gone_at } => TerminationPlan {
            steps: Vec::new(),
            look_again: gone_at,
        },
        InstanceView::Gone => TerminationPlan {
            steps: vec![TerminationStep::ReleaseNode],
            look_again: None,
        },
    }
}

/// The earliest instant after `now` at which a waiting drain changes by itself: a pod's
/// deadline forcing it, a terminating pod counted as stuck, a do-not-disrupt duration ending.
/// (A PDB that refuses changes when pods elsewhere become Ready: the caller's own events.)
pub fn drain_moves_at(view: &NodeView<'_>, now: Timestamp) -> Option<Timestamp> {
    let one_second = SignedDuration::from_secs(1);
    let mut next = None;
    for pod in view
        .pods
        .iter()
        .copied()
        .filter(|p| drain::is_drainable(p, now))
    {
        let deleted = pod.metadata.deletion_timestamp.as_ref().map(|t| t.0);
        // `is_stuck_terminating` is strict: one second past the minute.
        let stuck = deleted
            .and_then(|at| at.checked_add(STUCK_TERMINATING_AFTER).ok())
            .and_then(|at| at.checked_add(one_second).ok());
        // `force_delete_grace` forces strictly after the latest start.
        let forced = view.deadline.and_then(|d| {
            d.checked_sub(SignedDuration::from_secs(grace_seconds(pod)))
                .ok()?
                .checked_add(one_second)
                .ok()
        });
        let released = match pod::do_not_disrupt(pod) {
            DoNotDisrupt::Until(until) => Some(until),
            _ => None,
        };
        for at in [stuck, forced, released].into_iter().flatten() {
            if at > now {
                next = earliest(next, Some(at));
            }
        }
    }
    next
}

#[cfg(test)]
#[path = "termination_tests.rs"]
mod tests;
