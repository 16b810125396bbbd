//! The benchmark workload produces upstream's shape: nodes = pods / 5, everything scheduled.

use karpenter_core::scheduling::benchmark::{diverse_pods, preference_pods, scheduler_input};
use karpenter_core::scheduling::{PackingPolicy, PreferencePolicy, Scheduler};

#[test]
fn diverse_workload_schedules_everything_on_pods_over_five_node_claims() {
    // Upstream's pinned shape is upstream's greedy: run with the policy set to Upstream. The
    // default (CostOptimal) plans other node counts, never dearer (docs/conformance.md lists
    // both plans' costs).
    for n in [5, 50, 500] {
        let pods = diverse_pods(n, 42);
        let mut input = scheduler_input(PreferencePolicy::Respect);
        input.options.packing_policy = PackingPolicy::Upstream;
        let r = Scheduler::new(input).solve(&pods);
        assert!(
            r.unschedulable.is_empty(),
            "{n}: {:?}",
            r.unschedulable.first()
        );
        assert_eq!(r.new_node_claims.len(), n / 5, "{n} pods");
        assert_eq!(r.pods_on_new_node_claims(), n);
        let default = Scheduler::new(scheduler_input(PreferencePolicy::Respect)).solve(&pods);
        eprintln!(
            "{n} pods: Upstream {} nodes ${:.5}/h, default {} nodes ${:.5}/h",
            r.new_node_claims.len(),
            r.new_node_claims_cost(),
            default.new_node_claims.len(),
            default.new_node_claims_cost()
        );
        assert!(default.unschedulable.is_empty());
        assert_eq!(default.pods_on_new_node_claims(), n);
        assert!(default.new_node_claims_cost() <= r.new_node_claims_cost() + 1e-9);
    }
}

#[test]
fn preference_workload_relaxes_to_one_pod_per_node() {
    let pods = preference_pods(40, 42);
    let r = Scheduler::new(scheduler_input(PreferencePolicy::Respect)).solve(&pods);
    assert!(r.unschedulable.is_empty());
    assert_eq!(
        r.new_node_claims.len(),
        40,
        "hostname anti-affinity preference kept"
    );
    let r = Scheduler::new(scheduler_input(PreferencePolicy::Ignore)).solve(&pods);
    assert!(
        r.new_node_claims.len() < 40,
        "preferences ignored: pods pack"
    );
}
