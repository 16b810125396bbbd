//! LimitRanges in `simulate`: pods and DaemonSet pods are planned with the requests the API
//! server's LimitRanger admission gives them (issue 38: a DaemonSet whose template sets no
//! requests, sized from the template, made every planned node too small for its real pod).

use std::collections::BTreeMap;
use std::sync::Arc;

use karpenter_core::clock::FakeClock;
use karpenter_sim::SimCloudProvider;
use karpenter_simulate::{self as simulate, Manifests, Plan};
use proptest::prelude::*;
use serde_json::{Value, json};

const TYPES: &str = r#"
instanceTypes:
  - name: small
    capacity: {cpu: "2", memory: 4Gi, pods: "10"}
    overhead: {cpu: 100m, memory: 256Mi}
    offerings:
      - {zone: test-1a, capacityType: on-demand, price: 0.05}
  - name: medium
    capacity: {cpu: "4", memory: 8Gi, pods: "20"}
    overhead: {cpu: 100m, memory: 256Mi}
    offerings:
      - {zone: test-1a, capacityType: on-demand, price: 0.11}
  - name: large
    capacity: {cpu: "8", memory: 32Gi, pods: "50"}
    overhead: {cpu: 200m, memory: 1Gi}
    offerings:
      - {zone: test-1a, capacityType: on-demand, price: 0.30}
"#;

fn provider() -> SimCloudProvider {
    let types = simulate::parse_instance_types(TYPES, "test-1").unwrap();
    SimCloudProvider::with_instance_types("test-1", types, Arc::new(FakeClock::default()))
}

fn nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }}}
    })
}

const RESOURCES: [&str; 2] = ["cpu", "memory"];

/// A quantity of `resource` from the generator's unit (millicores, MiB).
fn quantity(resource: &str, units: u32) -> String {
    match resource {
        "cpu" => format!("{units}m"),
        _ => format!("{units}Mi"),
    }
}

/// One resource of a LimitRange's `Container` item: nothing, a default limit, a default
/// request, or both (request ≤ limit, as the API server's validation wants).
#[derive(Clone, Copy, Debug)]
enum ItemDefault {
    None,
    Limit(u32),
    Request(u32),
    Both { request: u32, limit: u32 },
}

/// One container's own resources of one resource: nothing, a request, or a limit.
#[derive(Clone, Copy, Debug)]
enum Own {
    None,
    Request(u32),
    Limit(u32),
}

#[derive(Clone, Debug)]
struct Range {
    namespace: &'static str,
    cpu: ItemDefault,
    memory: ItemDefault,
}

#[derive(Clone, Debug)]
struct Workload {
    namespace: &'static str,
    replicas: u8,
    cpu: Own,
    memory: Own,
}

fn namespace() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("default"), Just("team")]
}

fn item_default(max: u32) -> impl Strategy<Value = ItemDefault> {
    prop_oneof![
        Just(ItemDefault::None),
        (1..max).prop_map(ItemDefault::Limit),
        (1..max).prop_map(ItemDefault::Request),
        (1..max, 0..max).prop_map(|(request, extra)| ItemDefault::Both {
            request,
            limit: request.saturating_add(extra),
        }),
    ]
}

fn own(max: u32) -> impl Strategy<Value = Own> {
    prop_oneof![
        Just(Own::None),
        (1..max).prop_map(Own::Request),
        (1..max).prop_map(Own::Limit),
    ]
}

fn range() -> impl Strategy<Value = Range> {
    (namespace(), item_default(1500), item_default(1500)).prop_map(|(namespace, cpu, memory)| {
        Range {
            namespace,
            cpu,
            memory,
        }
    })
}

fn workload() -> impl Strategy<Value = Workload> {
    (namespace(), 1u8..5, own(1200), own(1200)).prop_map(|(namespace, replicas, cpu, memory)| {
        Workload {
            namespace,
            replicas,
            cpu,
            memory,
        }
    })
}

fn limit_range(index: usize, range: &Range) -> Value {
    let (mut default, mut default_request) = (json!({}), json!({}));
    for (resource, value) in [("cpu", range.cpu), ("memory", range.memory)] {
        match value {
            ItemDefault::None => {}
            ItemDefault::Limit(l) => default[resource] = json!(quantity(resource, l)),
            ItemDefault::Request(r) => default_request[resource] = json!(quantity(resource, r)),
            ItemDefault::Both { request, limit } => {
                default[resource] = json!(quantity(resource, limit));
                default_request[resource] = json!(quantity(resource, request));
            }
        }
    }
    json!({
        "apiVersion": "v1", "kind": "LimitRange",
        "metadata": {"name": format!("lr-{index}"), "namespace": range.namespace},
        "spec": {"limits": [{"type": "Container", "default": default, "defaultRequest": default_request}]}
    })
}

/// The oracle, written from Kubernetes' rules independently of the code under test: a resource's
/// request is the container's own request, else its own limit (pod defaulting), else the first
/// LimitRange's (by name) default request, which the API server defaults from its default limit.
fn admitted_request(resource: &str, own: Own, ranges: &[(usize, &Range)]) -> Option<u32> {
    match own {
        Own::Request(r) | Own::Limit(r) => return Some(r),
        Own::None => {}
    }
    ranges.iter().find_map(|(_, range)| {
        match if resource == "cpu" {
            range.cpu
        } else {
            range.memory
        } {
            ItemDefault::None => None,
            ItemDefault::Limit(l) => Some(l),
            ItemDefault::Request(r) | ItemDefault::Both { request: r, .. } => Some(r),
        }
    })
}

/// A container's resources: as written (`ranges` None) or as admitted (explicit requests).
fn resources(workload: &Workload, admitted: Option<&[(usize, &Range)]>) -> Value {
    let mut out = json!({});
    for (resource, own) in [("cpu", workload.cpu), ("memory", workload.memory)] {
        match admitted {
            None => match own {
                Own::None => {}
                Own::Request(r) => out["requests"][resource] = json!(quantity(resource, r)),
                Own::Limit(l) => out["limits"][resource] = json!(quantity(resource, l)),
            },
            Some(ranges) => {
                if let Some(r) = admitted_request(resource, own, ranges) {
                    out["requests"][resource] = json!(quantity(resource, r));
                }
            }
        }
    }
    out
}

fn pod_template(app: &str, resources: Value) -> Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]}
    })
}

struct Objects {
    ranges: Vec<Range>,
    daemonsets: Vec<Workload>,
    deployments: Vec<Workload>,
}

impl Objects {
    fn ranges_of(&self, namespace: &str) -> Vec<(usize, &Range)> {
        let mut ranges: Vec<(usize, &Range)> = self
            .ranges
            .iter()
            .enumerate()
            .filter(|(_, r)| r.namespace == namespace)
            .collect();
        // Admission goes through them in the order the API server lists them: by name.
        ranges.sort_by_key(|(i, _)| format!("lr-{i}"));
        ranges
    }

    /// Whether the API server accepts every pod: a container's own request must not exceed the
    /// limit a LimitRange gives it (the first, by name, to set one).
    fn valid(&self) -> bool {
        // Admission applies the LimitRanges one after the other; a request above a limit makes
        // the pod invalid (the API server refuses it), whichever range sets which.
        self.daemonsets.iter().chain(&self.deployments).all(|w| {
            let ranges = self.ranges_of(w.namespace);
            [("cpu", w.cpu), ("memory", w.memory)]
                .into_iter()
                .all(|(resource, own)| {
                    let defaults = || {
                        ranges
                            .iter()
                            .map(|(_, r)| if resource == "cpu" { r.cpu } else { r.memory })
                    };
                    let limits: Vec<u32> = defaults()
                        .filter_map(|d| match d {
                            ItemDefault::Limit(l) | ItemDefault::Both { limit: l, .. } => Some(l),
                            ItemDefault::None | ItemDefault::Request(_) => None,
                        })
                        .collect();
                    let requests: Vec<u32> = match own {
                        Own::Request(r) => vec![r],
                        Own::Limit(_) => Vec::new(),
                        Own::None => defaults()
                            .filter_map(|d| match d {
                                ItemDefault::Request(r) | ItemDefault::Both { request: r, .. } => {
                                    Some(r)
                                }
                                ItemDefault::None | ItemDefault::Limit(_) => None,
                            })
                            .collect(),
                    };
                    let own_limit = match own {
                        Own::Limit(l) => Some(l),
                        _ => None,
                    };
                    requests
                        .iter()
                        .all(|r| limits.iter().all(|l| r <= l) && own_limit.is_none_or(|l| *r <= l))
                })
        })
    }

    /// The manifests as a user writes them (`admitted` false: LimitRanges, no requests), or as
    /// the API server holds the pods after admission (`admitted` true: explicit requests).
    fn manifests(&self, admitted: bool) -> Vec<Value> {
        let mut out = vec![nodepool()];
        if !admitted {
            out.extend(
                self.ranges
                    .iter()
                    .enumerate()
                    .map(|(i, r)| limit_range(i, r)),
            );
        }
        let res = |w: &Workload| {
            let ranges = self.ranges_of(w.namespace);
            resources(w, admitted.then_some(ranges.as_slice()))
        };
        for (i, ds) in self.daemonsets.iter().enumerate() {
            let app = format!("ds-{i}");
            out.push(json!({
                "apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": app, "namespace": ds.namespace},
                "spec": {"selector": {"matchLabels": {"app": app}}, "template": pod_template(&app, res(ds))}
            }));
        }
        for (i, dep) in self.deployments.iter().enumerate() {
            let app = format!("app-{i}");
            out.push(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": app, "namespace": dep.namespace},
                "spec": {"replicas": dep.replicas, "selector": {"matchLabels": {"app": app}},
                         "template": pod_template(&app, res(dep))}
            }));
        }
        out
    }

    /// The admitted requests of every DaemonSet's pod, summed (all run on every node).
    fn daemonset_pods(&self, node: &str) -> Vec<Value> {
        self.daemonsets
            .iter()
            .enumerate()
            .map(|(i, ds)| {
                let ranges = self.ranges_of(ds.namespace);
                json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("ds-{i}-{node}"), "namespace": ds.namespace,
                                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": format!("ds-{i}"), "uid": format!("uid-ds-{i}")}]},
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x", "resources": resources(ds, Some(&ranges))}]}
                })
            })
            .collect()
    }
}

fn plan(objects: Vec<Value>) -> (Manifests, Plan) {
    let mut manifests = Manifests::new();
    manifests.load_objects("generated", objects).unwrap();
    let plan = simulate::plan(&manifests, &provider()).unwrap().plan;
    (manifests, plan)
}

/// A planned NodeClaim without its generated name: (instance type, pods, requests).
type Decision = (String, Vec<String>, String);

/// What a plan decides, without the NodeClaims' generated names: its NodeClaims and the pods
/// left unschedulable.
fn decisions(plan: &Plan) -> (Vec<Decision>, Vec<String>) {
    let claims = plan
        .node_claims
        .iter()
        .map(|c| {
            (
                c.instance_type.clone(),
                c.pods.clone(),
                format!("{:?}", c.requests),
            )
        })
        .collect();
    let unschedulable = plan.unschedulable.iter().map(|u| u.pod.clone()).collect();
    (claims, unschedulable)
}

/// The planned nodes as they come up: each a Node of its launched type, its pods bound to it
/// and every DaemonSet's admitted pod beside them; nothing pending.
fn bound(objects: &Objects, plan: &Plan, pending: &Manifests) -> Vec<Value> {
    let mut out = vec![nodepool()];
    out.extend(
        objects
            .ranges
            .iter()
            .enumerate()
            .map(|(i, r)| limit_range(i, r)),
    );
    let pods: BTreeMap<String, _> = pending
        .pending_pods
        .iter()
        .map(|p| (p.key(), p.pod().clone()))
        .collect();
    for (n, claim) in plan.node_claims.iter().enumerate() {
        let node = format!("node-{n}");
        let mut labels = claim.labels.clone();
        labels.insert("karpenter.sh/initialized".into(), "true".into());
        labels.insert("karpenter.sh/registered".into(), "true".into());
        let allocatable = serde_json::to_value(&claim.allocatable).unwrap();
        out.push(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": labels},
            "spec": {"providerID": format!("sim://test-1/test-1a/i-{n}")},
            "status": {"capacity": allocatable, "allocatable": allocatable}
        }));
        for key in &claim.pods {
            let pod = &pods[key];
            let mut value = serde_json::to_value(pod).unwrap();
            value["apiVersion"] = json!("v1");
            value["kind"] = json!("Pod");
            value["metadata"]["name"] = json!(key.rsplit('/').next().unwrap());
            value["spec"]["nodeName"] = json!(node);
            out.push(value);
        }
        out.extend(objects.daemonset_pods(&node));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// For any mix of LimitRanges, DaemonSets and Deployments without requests: the plan is the
    /// plan of the same objects after admission (explicit requests, no LimitRanges), every
    /// planned node holds its pods plus the DaemonSets' admitted pods, and a second pass over
    /// the same pods, bound to those nodes, plans nothing.
    #[test]
    fn limit_ranges_plan_as_admitted_pods_and_a_second_pass_plans_nothing(
        ranges in proptest::collection::vec(range(), 0..3),
        daemonsets in proptest::collection::vec(workload(), 0..3),
        deployments in proptest::collection::vec(workload(), 1..4),
    ) {
        let objects = Objects { ranges, daemonsets, deployments };
        prop_assume!(objects.valid());
        let (manifests, as_written) = plan(objects.manifests(false));
        let (_, as_admitted) = plan(objects.manifests(true));
        prop_assert_eq!(decisions(&as_written), decisions(&as_admitted));

        for claim in &as_written.node_claims {
            prop_assert!(
                claim.allocatable.fits(&claim.requests),
                "{}: {:?} over {:?}", claim.name, claim.requests, claim.allocatable
            );
        }
        let (bound_manifests, second) = plan(bound(&objects, &as_written, &manifests));
        prop_assert!(bound_manifests.pending_pods.is_empty());
        prop_assert!(second.node_claims.is_empty(), "{:?}", second.node_claims);
        // Every node holds what the scheduler will bind to it, DaemonSet pods included.
        for (node, pods) in bound_manifests.pods_by_node() {
            let mut sum = karpenter_core::resources::ResourceList::new();
            for pod in &pods {
                sum.add(&karpenter_core::pod::effective_requests(pod).unwrap());
            }
            let allocatable = &as_written.node_claims
                [node.trim_start_matches("node-").parse::<usize>().unwrap()]
                .allocatable;
            for resource in RESOURCES {
                prop_assert!(
                    sum.get(resource) <= allocatable.get(resource),
                    "{node}: {resource} {:?} over {:?}", sum, allocatable
                );
            }
        }
    }
}

/// Upstream's regression spec on `simulate`: a LimitRange `default` of 2 CPU and 1Gi, a
/// DaemonSet limiting only memory, one pod requesting 4 bytes: one node that holds both.
#[test]
fn upstream_limit_range_default_case_plans_one_node_that_holds_the_daemonset_pod() {
    let objects = Objects {
        ranges: vec![Range {
            namespace: "default",
            cpu: ItemDefault::Limit(2000),
            memory: ItemDefault::Limit(1024),
        }],
        daemonsets: vec![Workload {
            namespace: "default",
            replicas: 1,
            cpu: Own::None,
            memory: Own::Limit(1024),
        }],
        deployments: vec![Workload {
            namespace: "default",
            replicas: 1,
            cpu: Own::None,
            memory: Own::Request(1),
        }],
    };
    let (_, plan) = plan(objects.manifests(false));
    assert_eq!(plan.node_claims.len(), 1, "{plan:?}");
    let claim = &plan.node_claims[0];
    // 2 CPU for the pod and 2 for the DaemonSet's pod: a 4-CPU type's 3.9 allocatable is short.
    assert_eq!(claim.instance_type, "large", "{claim:?}");
    assert_eq!(
        claim.requests.get("cpu"),
        karpenter_core::resources::Quantity::parse("4").unwrap()
    );
}
