//! Packing cost against the fractional lower bound on the embedded catalogue (one on-demand
//! c/m/r pool, generation > 4): `CostOptimal` within 5 % of the bound on the generated
//! workloads, never dearer than `Upstream`, every pod placed.

use std::sync::Arc;
use std::time::Instant;

use karpenter_catalog::{Catalog, DEFAULT_REGION};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::scheduling::packing_workloads::{self, Workload};
use karpenter_core::scheduling::{PackingPolicy, Scheduler, SchedulingResults};

fn catalogue_types() -> Vec<Arc<InstanceType>> {
    Catalog::embedded()
        .unwrap()
        .instance_types(DEFAULT_REGION)
        .unwrap()
        .into_iter()
        .map(Arc::new)
        .collect()
}

struct Measured {
    results: SchedulingResults,
    cost: f64,
    bound: f64,
    seconds: f64,
}

fn measure(types: &[Arc<InstanceType>], w: &Workload, policy: PackingPolicy) -> Measured {
    let pods = w.pods();
    let input = packing_workloads::scheduler_input(types.to_vec(), policy);
    let started = Instant::now();
    let results = Scheduler::new(input.clone()).solve(&pods);
    let seconds = started.elapsed().as_secs_f64();
    let bound = Scheduler::new(input)
        .cost_lower_bound(&pods, &results)
        .total;
    Measured {
        cost: results.new_node_claims_cost(),
        results,
        bound,
        seconds,
    }
}

/// The ratio `CostOptimal` must reach on every standard workload (the 1.05).
const CEILING: f64 = 1.05;

#[test]
fn cost_optimal_plans_near_the_bound_and_never_above_upstream() {
    let types = catalogue_types();
    for w in packing_workloads::standard() {
        let upstream = measure(&types, &w, PackingPolicy::Upstream);
        let optimal = measure(&types, &w, PackingPolicy::CostOptimal);
        let ratio = |m: &Measured| m.cost / m.bound;
        eprintln!(
            "{}: upstream {:.2}/{:.2} = {:.3} ({:.3}s); cost-optimal {:.2}/{:.2} = {:.3} ({:.3}s)",
            w.name,
            upstream.cost,
            upstream.bound,
            ratio(&upstream),
            upstream.seconds,
            optimal.cost,
            optimal.bound,
            ratio(&optimal),
            optimal.seconds,
        );
        assert!(upstream.results.unschedulable.is_empty(), "{}", w.name);
        assert!(optimal.results.unschedulable.is_empty(), "{}", w.name);
        assert!(optimal.cost <= upstream.cost + 1e-9, "{}", w.name);
        assert!(
            ratio(&optimal) <= CEILING,
            "{}: {:.3}",
            w.name,
            ratio(&optimal)
        );
        assert!(
            ratio(&upstream) > 1.3,
            "{}: upstream's greedy is far from the bound ({:.3})",
            w.name,
            ratio(&upstream)
        );
    }
}
