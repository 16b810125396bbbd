//! What the methods of a disruption pass read besides the input: the candidates of each
//! [`DisruptionClass`] and the budgets of each [`DisruptionReason`].
//!
//! Several methods of one pass want the same ones (emptiness and both consolidations the
//! graceful candidates, both drifts the eventual ones and the `Drifted` budgets), and computing
//! candidates walks every node, pod and PDB. [`decide`](super::decide) therefore hands every
//! method a [`PassCache`], which computes each at most once per pass; a method called on its own
//! (tests, `bench disruption`, validation) can be handed the [`DisruptionInput`] itself, which
//! computes them on each ask. Both answer through [`PassFacts`], so a method cannot tell them
//! apart and a new one gets the sharing for free.

use std::borrow::Cow;
use std::cell::OnceCell;

use super::budgets::{BudgetMapping, DisruptionReason};
use super::candidates::{Candidate, DisruptionClass, Rejection, candidates};
use super::command::DisruptionInput;
use kube_core::ResourceExt;

/// The candidates of one class: every node a method of the class may disrupt, and the reason
/// for every other node.
#[derive(Clone, Debug)]
pub struct Classified<'a> {
    pub found: Vec<Candidate<'a>>,
    pub rejected: Vec<Rejection>,
}

impl<'a> Classified<'a> {
    /// Walks `input`'s state for the candidates of `class`.
    /// Emptiness and consolidation leave the nodes holding CapacityBuffer capacity alone
    /// (upstream's emptiness check; its consolidation keeps them because the buffer's virtual
    /// pods would need a new home).
    pub fn compute(input: &DisruptionInput<'a>, class: DisruptionClass) -> Self {
        let (found, mut rejected) = candidates(input.state, input.now, class, input.instance_types);
        let hosts = &input.options.buffer_hosts;
        if class == DisruptionClass::Eventual || hosts.is_empty() {
            return Classified { found, rejected };
        }
        let (held, found): (Vec<_>, Vec<_>) = found
            .into_iter()
            .partition(|c| hosts.contains(&c.name()) || hosts.contains(&c.nodeclaim.name_any()));
        rejected.extend(held.into_iter().map(|c| Rejection {
            name: c.name(),
            nodepool: Some(c.nodepool_name()),
            reason: super::candidates::BlockReason::HostsCapacityBuffer,
        }));
        Classified { found, rejected }
    }
}

/// What a disruption method reads: the pass's input, its candidates and its budgets. Budgets
/// come back whole: a method that takes from them takes from its own copy, so the methods of a
/// pass never see each other's takings (as when each built its own).
pub trait PassFacts<'a> {
    fn input(&self) -> &DisruptionInput<'a>;
    fn candidates(&self, class: DisruptionClass) -> Cow<'_, Classified<'a>>;
    fn budgets(&self, reason: DisruptionReason) -> Cow<'_, BudgetMapping>;
}

/// A method run on its own: everything is computed when asked.
impl<'a> PassFacts<'a> for DisruptionInput<'a> {
    fn input(&self) -> &DisruptionInput<'a> {
        self
    }

    fn candidates(&self, class: DisruptionClass) -> Cow<'_, Classified<'a>> {
        Cow::Owned(Classified::compute(self, class))
    }

    fn budgets(&self, reason: DisruptionReason) -> Cow<'_, BudgetMapping> {
        Cow::Owned(BudgetMapping::build(self.state, reason, self.now))
    }
}

/// The facts of one pass, each computed the first time a method asks and shared after.
#[derive(Debug)]
pub struct PassCache<'i, 'a> {
    input: &'i DisruptionInput<'a>,
    graceful: OnceCell<Classified<'a>>,
    eventual: OnceCell<Classified<'a>>,
    /// Indexed like [`DisruptionReason::ALL`].
    budgets: [OnceCell<BudgetMapping>; 3],
}

impl<'i, 'a> PassCache<'i, 'a> {
    pub fn new(input: &'i DisruptionInput<'a>) -> Self {
        PassCache {
            input,
            graceful: OnceCell::new(),
            eventual: OnceCell::new(),
            budgets: Default::default(),
        }
    }
}

impl<'a> PassFacts<'a> for PassCache<'_, 'a> {
    fn input(&self) -> &DisruptionInput<'a> {
        self.input
    }

    fn candidates(&self, class: DisruptionClass) -> Cow<'_, Classified<'a>> {
        let cell = match class {
            DisruptionClass::Graceful => &self.graceful,
            DisruptionClass::Eventual => &self.eventual,
        };
        Cow::Borrowed(cell.get_or_init(|| Classified::compute(self.input, class)))
    }

    fn budgets(&self, reason: DisruptionReason) -> Cow<'_, BudgetMapping> {
        let cell = match reason {
            DisruptionReason::Empty => &self.budgets[0],
            DisruptionReason::Drifted => &self.budgets[1],
            DisruptionReason::Underutilized => &self.budgets[2],
        };
        Cow::Borrowed(
            cell.get_or_init(|| BudgetMapping::build(self.input.state, reason, self.input.now)),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;
    use crate::disruption::testkit::{World, node, pod, pool};

    fn world() -> World {
        World::new(
            vec![pool("default", &["on-demand"], json!({}))],
            vec![
                node("empty", "medium.4x", "on-demand", "default"),
                node("busy", "medium.4x", "on-demand", "default"),
            ],
            vec![pod("web-1", "busy", "1")],
        )
    }

    fn names(classified: &Classified<'_>) -> Vec<String> {
        classified.found.iter().map(Candidate::name).collect()
    }

    #[test]
    fn a_pass_computes_each_class_and_reason_once_and_shares_it() {
        let world = world();
        let input = world.input();
        let cache = PassCache::new(&input);
        for class in [DisruptionClass::Graceful, DisruptionClass::Eventual] {
            let first = cache.candidates(class);
            let again = cache.candidates(class);
            assert!(matches!(first, Cow::Borrowed(_)));
            assert!(std::ptr::eq(first.as_ref(), again.as_ref()), "{class:?}");
        }
        for reason in DisruptionReason::ALL {
            let first = cache.budgets(reason);
            assert!(std::ptr::eq(first.as_ref(), cache.budgets(reason).as_ref()));
            assert_eq!(first.reason(), reason);
        }
        assert!(!std::ptr::eq(
            cache.candidates(DisruptionClass::Graceful).as_ref(),
            cache.candidates(DisruptionClass::Eventual).as_ref()
        ));
    }

    #[test]
    fn the_cache_answers_what_the_input_computes() {
        let world = world();
        let input = world.input();
        let cache = PassCache::new(&input);
        for class in [DisruptionClass::Graceful, DisruptionClass::Eventual] {
            let fresh = input.candidates(class);
            let cached = cache.candidates(class);
            assert_eq!(names(&fresh), names(&cached));
            assert_eq!(fresh.rejected, cached.rejected);
            assert!(matches!(fresh, Cow::Owned(_)));
        }
        assert_eq!(
            names(&cache.candidates(DisruptionClass::Graceful)),
            ["busy", "empty"]
        );
        for reason in DisruptionReason::ALL {
            assert_eq!(*input.budgets(reason), *cache.budgets(reason));
        }
    }

    #[test]
    fn nodes_holding_buffer_capacity_are_no_graceful_candidates_but_stay_eventual_ones() {
        let mut world = world();
        world.options.buffer_hosts = ["empty".to_string()].into();
        let input = world.input();
        let graceful = Classified::compute(&input, DisruptionClass::Graceful);
        assert_eq!(names(&graceful), ["busy"]);
        let held = graceful
            .rejected
            .iter()
            .find(|r| r.name == "empty")
            .unwrap();
        assert_eq!(
            held.reason,
            crate::disruption::candidates::BlockReason::HostsCapacityBuffer
        );
        assert_eq!(held.reason.to_string(), "node has buffer pods");
        let eventual = Classified::compute(&input, DisruptionClass::Eventual);
        assert_eq!(names(&eventual), ["busy", "empty"]);
    }
}
