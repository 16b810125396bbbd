//! The consolidation guard (issue 35): under `CostOptimal` a pass never ends costlier than
//! `Upstream`'s would, on upstream's own scenarios (§7.6) over upstream's assorted catalogue.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::disruption::decide;
use crate::disruption::testkit::{World, node_with_cpu, pod, pool};
use crate::instance_type::{InstanceType, Offering};

const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

/// Upstream's `InstanceTypesAssorted` (linux/amd64, on-demand): every cpu × memory size in each
/// test zone, priced $0.10 per cpu plus $0.10 per 10⁹ bytes of memory.
fn assorted() -> Vec<Arc<InstanceType>> {
    let mut out = Vec::new();
    for cpu in [1i64, 2, 4, 8, 16, 32, 64] {
        for gib in [1i64, 2, 4, 8, 16, 32, 64, 128] {
            let name = format!("{cpu}-cpu-{gib}-mem");
            let price = 0.1 * cpu as f64 + 0.1 * (gib * (1 << 30)) as f64 / 1e9;
            out.push(Arc::new(InstanceType {
                name: name.clone(),
                labels: [(
                    karpenter_api::well_known::INSTANCE_TYPE_LABEL.to_string(),
                    name,
                )]
                .into(),
                capacity: crate::resources::ResourceList::parse([
                    ("cpu", cpu.to_string().as_str()),
                    ("memory", format!("{gib}Gi").as_str()),
                    ("pods", "110"),
                ])
                .unwrap(),
                offerings: ZONES
                    .iter()
                    .map(|zone| Offering {
                        zone: (*zone).into(),
                        capacity_type: "on-demand".into(),
                        price,
                        available: true,
                        ..Offering::default()
                    })
                    .collect(),
                ..InstanceType::default()
            }));
        }
    }
    out
}

/// A 1-cpu pod of `app: zonal` on `node`, spread over zones with maxSkew 1.
fn zonal(name: &str, node: &str) -> crate::pod::Pod {
    let mut p = pod(name, node, "1");
    p.metadata
        .labels
        .get_or_insert_default()
        .insert("app".into(), "zonal".into());
    p.spec.as_mut().unwrap().topology_spread_constraints = Some(
        serde_json::from_value(json!([{
            "maxSkew": 1, "topologyKey": karpenter_api::well_known::ZONE_LABEL,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "zonal"}}}]))
        .unwrap(),
    );
    p
}

/// A node of `size` with 1 cpu allocatable (as upstream's test sets) in `zone`.
fn zoned(
    name: &str,
    size: &str,
    zone: &str,
) -> (karpenter_api::NodeClaim, k8s_openapi::api::core::v1::Node) {
    let (mut claim, mut node) = node_with_cpu(name, size, "1", "on-demand", "default");
    for labels in [
        node.metadata.labels.as_mut().unwrap(),
        claim.metadata.labels.as_mut().unwrap(),
    ] {
        labels.insert(karpenter_api::well_known::ZONE_LABEL.into(), zone.into());
    }
    (claim, node)
}

/// Upstream's "can replace node maintaining zonal topology spread": the cheapest type in zones
/// 1 and 3, the dearest in zone 2, one spread pod each (and, with `pending`, the ReplicaSet's
/// fourth replica waiting, as the run had it: upstream then ends at $0.722/h).
fn zonal_spread_world(policy: PackingPolicy, pending: bool) -> World {
    let types = assorted();
    let mut pods = vec![zonal("p1", "n1"), zonal("p2", "n2"), zonal("p3", "n3")];
    if pending {
        // The ReplicaSet's fourth replica, not yet bound.
        let mut p4 = zonal("p4", "n1");
        p4.spec.as_mut().unwrap().node_name = None;
        p4.status = serde_json::from_value(json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}))
        .unwrap();
        pods.push(p4);
    }
    let mut world = World::new(
        vec![pool("default", &["on-demand"], json!({}))],
        vec![
            zoned("n1", "1-cpu-1-mem", ZONES[0]),
            zoned("n2", "64-cpu-128-mem", ZONES[1]),
            zoned("n3", "1-cpu-1-mem", ZONES[2]),
        ],
        pods,
    )
    .with_types(&types);
    world.scheduler.packing_policy = policy;
    world
}

/// The hourly cost after the pass: what the nodes cost less what its commands save.
fn end_cost(world: &World, pass: &crate::disruption::Pass) -> f64 {
    world.hourly_cost()
        - pass
            .commands
            .iter()
            .map(|c| c.savings_per_hour)
            .sum::<f64>()
}

#[test]
fn zonal_spread_consolidation_under_cost_optimal_ends_no_costlier_than_upstream() {
    // Ends at $0.622/h (three 1-cpu nodes) and, with the pending replica, $0.722/h (its
    // zone-2 replacement a 2-cpu node) under both policies.
    for (pending, expected) in [(false, 0.622), (true, 0.722)] {
        let mut ends = Vec::new();
        for policy in [PackingPolicy::Upstream, PackingPolicy::CostOptimal] {
            let world = zonal_spread_world(policy, pending);
            let pass = decide(&world.input());
            assert_eq!(pass.commands.len(), 1, "{policy:?}: {:?}", pass.blocked);
            let command = &pass.commands[0];
            assert_eq!(command.candidates[0].name, "n2", "{policy:?}");
            ends.push(end_cost(&world, &pass));
        }
        assert!(
            (ends[0] - expected).abs() < 1e-3,
            "Upstream ends at ${:.4}/h",
            ends[0]
        );
        assert!(
            ends[1] <= ends[0] + 1e-9,
            "CostOptimal ${:.3}/h, Upstream ${:.3}/h",
            ends[1],
            ends[0]
        );
    }
}
