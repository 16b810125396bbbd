use karpenter_core::scheduling::SchedulerOptions;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use karpenter_api::well_known as wk;
use karpenter_core::clock::FakeClock;
use karpenter_core::pod::Pod;
use karpenter_core::pod::effective_requests;
use karpenter_core::requirements::Requirements;
use karpenter_core::resources::ResourceList;
use karpenter_core::taints::first_untolerated;
use karpenter_sim::SimCloudProvider;
use karpenter_simulate::{self as simulate, Manifests, Plan, SimulateError};
use proptest::prelude::*;

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn embedded() -> SimCloudProvider {
    SimCloudProvider::new("us-east-1", Arc::new(FakeClock::default())).unwrap()
}

const CUSTOM_TYPES: &str = r#"
instanceTypes:
  - name: small
    capacity: {cpu: "2", memory: 4Gi, pods: "10"}
    overhead: {cpu: 100m, memory: 256Mi}
    labels: {karpenter.k8s.aws/instance-category: c}
    offerings:
      - {zone: test-1a, capacityType: on-demand, price: 0.05}
      - {zone: test-1b, capacityType: on-demand, price: 0.05}
      - {zone: test-1a, capacityType: spot, price: 0.02}
  - name: large
    capacity: {cpu: "8", memory: 32Gi, pods: "50"}
    overhead: {cpu: 200m, memory: 1Gi}
    labels: {karpenter.k8s.aws/instance-category: m}
    offerings:
      - {zone: test-1a, capacityType: on-demand, price: 0.30}
      - {zone: test-1b, capacityType: spot, price: 0.09}
"#;

fn custom() -> SimCloudProvider {
    let types = simulate::parse_instance_types(CUSTOM_TYPES, "test-1").unwrap();
    SimCloudProvider::with_instance_types("test-1", types, Arc::new(FakeClock::default()))
}

fn load(text: &str) -> Manifests {
    let mut m = Manifests::new();
    m.load_str("test.yaml", text).unwrap();
    m
}

/// Every placed pod fits, every constraint holds, every pod is accounted for once.
fn check_plan(manifests: &Manifests, provider: &SimCloudProvider, plan: &Plan) {
    let pods: BTreeMap<String, &Pod> = manifests
        .pending_pods
        .iter()
        .map(|p| (p.key(), p.pod()))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for claim in &plan.node_claims {
        let it = provider
            .catalog_types()
            .find(|t| t.name == claim.instance_type)
            .expect("launched type exists");
        assert!(
            claim.instance_type_options.contains(&claim.instance_type),
            "{}: launched type is an option",
            claim.name
        );
        assert_eq!(claim.allocatable, it.allocatable());
        let offering = it
            .offerings
            .iter()
            .find(|o| o.zone == claim.zone && o.capacity_type == claim.capacity_type)
            .expect("launched offering exists");
        assert!(offering.available);
        assert_eq!(offering.price, claim.price);
        assert!(
            claim.allocatable.fits(&claim.requests),
            "{}: requests {:?} exceed allocatable",
            claim.name,
            claim.requests
        );

        let mut sum = ResourceList::new();
        let pool = manifests
            .node_pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(&claim.node_pool))
            .unwrap();
        let pool_reqs =
            Requirements::from_node_selector_with_min_values(&pool.spec.template.spec.requirements)
                .unwrap();
        for (key, req) in pool_reqs.iter() {
            let value = claim.labels.get(key);
            assert!(
                value.is_some_and(|v| req.has(v))
                    || value.is_none() && req.operator().tolerates_absence(),
                "{}: label {key}={value:?} violates the pool's requirement {req}",
                claim.name
            );
        }
        for name in &claim.pods {
            assert!(seen.insert(name.clone()), "{name} placed twice");
            let pod = pods[name];
            sum.add(&effective_requests(pod).unwrap());
            let spec = pod.spec.as_ref().unwrap();
            for (k, v) in spec.node_selector.iter().flat_map(|s| s.iter()) {
                assert_eq!(
                    claim.labels.get(k),
                    Some(v),
                    "{name}: nodeSelector {k}={v} on {}",
                    claim.name
                );
            }
            let tolerations = spec.tolerations.clone().unwrap_or_default();
            assert!(
                first_untolerated(&tolerations, &claim.taints).is_none(),
                "{name} does not tolerate {}",
                claim.name
            );
        }
        assert!(
            claim.allocatable.fits(&sum),
            "{}: pods {:?} exceed allocatable",
            claim.name,
            sum
        );
    }
    for node in &plan.existing_nodes {
        for name in &node.pods {
            assert!(seen.insert(name.clone()), "{name} placed twice");
        }
    }
    for pod in &plan.unschedulable {
        assert!(!pod.reason.trim().is_empty(), "{} has no reason", pod.pod);
        assert!(
            seen.insert(pod.pod.clone()),
            "{} both placed and unschedulable",
            pod.pod
        );
    }
    assert_eq!(
        seen.len(),
        pods.len(),
        "every pending pod is placed or explained"
    );
    assert_eq!(plan.summary.pods, pods.len());
    assert_eq!(
        plan.summary.scheduled + plan.unschedulable.len(),
        pods.len()
    );
    assert_eq!(plan.summary.new_node_claims, plan.node_claims.len());
    let cost: f64 = plan.node_claims.iter().map(|c| c.price).sum();
    assert!((plan.summary.hourly_cost - cost).abs() < 1e-6);
    // The bound never exceeds what is bought, in total and per NodePool.
    assert!(plan.summary.cost_lower_bound <= plan.summary.hourly_cost + 1e-6);
    for (pool, costs) in &plan.summary.node_pools {
        assert!(
            costs.cost_lower_bound <= costs.hourly_cost + 1e-6,
            "{pool}: {costs:?}"
        );
    }
}

fn plan_dir(dir: &str) -> (Manifests, Plan) {
    let mut manifests = Manifests::new();
    let read =
        karpenter_input::read_sources(&[examples().join(dir)], &mut std::io::empty()).unwrap();
    manifests.load_sources(read).unwrap();
    let provider = embedded();
    let outcome = simulate::plan(&manifests, &provider).unwrap();
    check_plan(&manifests, &provider, &outcome.plan);
    assert_eq!(
        outcome.node_claims.len(),
        outcome.plan.node_claims.len(),
        "one object per planned NodeClaim"
    );
    // What `karpenter simulate` prints: the same plan, without keeping the objects.
    let only = simulate::plan_only(&manifests, &provider, SchedulerOptions::default()).unwrap();
    assert_eq!(only.plan, outcome.plan);
    assert!(only.node_claims.is_empty());
    (manifests, outcome.plan)
}

#[test]
fn inflate_example_plans_one_node_for_five_pods() {
    let (manifests, plan) = plan_dir("inflate");
    assert_eq!(manifests.pending_pods.len(), 5);
    assert_eq!(plan.summary.scheduled, 5);
    assert!(plan.unschedulable.is_empty());
    assert!(plan.summary.hourly_cost > 0.0);
    for claim in &plan.node_claims {
        assert_eq!(claim.capacity_type, "on-demand");
        assert_eq!(claim.labels[wk::NODEPOOL_LABEL], "default");
    }
}

const MIXED_DEPLOYMENTS: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
        - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["4"]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 40
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx, resources: {requests: {cpu: "1", memory: 1Gi}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: cache, namespace: default}
spec:
  replicas: 20
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache}}
    spec:
      containers: [{name: cache, image: redis, resources: {requests: {cpu: 500m, memory: 6Gi}}}]
"#;

#[test]
fn cost_optimal_plans_cheaper_than_upstream_and_both_report_the_bound() {
    let m = load(MIXED_DEPLOYMENTS);
    let provider = embedded();
    let upstream = SchedulerOptions {
        packing_policy: karpenter_core::scheduling::PackingPolicy::Upstream,
        ..SchedulerOptions::default()
    };
    let upstream = simulate::plan_with(&m, &provider, upstream).unwrap().plan;
    // `plan` takes the default policy: CostOptimal.
    let optimal = simulate::plan(&m, &provider).unwrap().plan;
    for plan in [&upstream, &optimal] {
        check_plan(&m, &provider, plan);
        assert_eq!(plan.summary.scheduled, 60);
        assert!(plan.summary.cost_lower_bound > 0.0);
        assert_eq!(
            plan.summary.node_pools["default"].cost_lower_bound,
            plan.summary.cost_lower_bound
        );
    }
    assert_eq!(
        upstream.summary.cost_lower_bound, optimal.summary.cost_lower_bound,
        "the same pods on the same pool: the same bound"
    );
    assert!(
        optimal.summary.hourly_cost < upstream.summary.hourly_cost,
        "{} vs {}",
        optimal.summary.hourly_cost,
        upstream.summary.hourly_cost
    );
}

#[test]
fn inflate_twelve_costs_at_least_inflate_five() {
    let (_, five) = plan_dir("inflate");
    let (_, twelve) = plan_dir("inflate-12");
    assert_eq!(twelve.summary.scheduled, 12);
    assert!(twelve.summary.hourly_cost >= five.summary.hourly_cost);
}

#[test]
fn workshop_scenario_picks_m5_large_as_the_guide_says() {
    let (_, plan) = plan_dir("workshop-inflate");
    assert_eq!(plan.node_claims.len(), 1);
    assert_eq!(plan.node_claims[0].instance_type, "m5.large");
    assert_eq!(plan.node_claims[0].price, 0.096);
    assert_eq!(plan.node_claims[0].labels["type"], "karpenter");
}

#[test]
fn spot_pool_with_taints_places_tolerating_pods_only() {
    let (_, plan) = plan_dir("spot-tainted");
    assert!(
        plan.node_claims
            .iter()
            .all(|c| c.capacity_type == "spot" && c.instance_type == "t3a.large")
    );
    assert_eq!(plan.summary.scheduled, 6);
    assert_eq!(plan.unschedulable.len(), 1);
    assert_eq!(plan.unschedulable[0].pod, "default/batch");
    assert!(
        plan.unschedulable[0]
            .reason
            .contains("spot=only:NoSchedule"),
        "{}",
        plan.unschedulable[0].reason
    );
}

#[test]
fn heavier_nodepool_weight_wins_and_selectors_pick_pools() {
    let (_, plan) = plan_dir("multi-nodepool");
    let pool_of = |pod: &str| {
        plan.node_claims
            .iter()
            .find(|c| c.pods.iter().any(|p| p == pod))
            .map(|c| c.node_pool.as_str())
    };
    assert_eq!(pool_of("prod/api-0"), Some("production"));
    assert_eq!(pool_of("dev/nightly-tests-0"), Some("development"));
    assert_eq!(
        plan.summary.scheduled, 7,
        "4 api pods + min(parallelism 3, completions 10) job pods"
    );
}

#[test]
fn existing_capacity_is_used_first() {
    let (manifests, plan) = plan_dir("existing-capacity");
    assert_eq!(manifests.bound_pods.len(), 1);
    assert_eq!(plan.existing_nodes.len(), 1);
    assert!(!plan.existing_nodes[0].pods.is_empty());
    assert_eq!(plan.summary.scheduled, 6);
}

#[test]
fn loads_lists_multi_documents_and_workloads() {
    let m = load(
        r#"
apiVersion: v1
kind: List
items:
  - {apiVersion: v1, kind: Pod, metadata: {name: a}, spec: {containers: [{name: c, image: x}]}}
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: cfg, namespace: ns}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: data}
spec:
  replicas: 3
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: x, resources: {requests: {cpu: 1}}}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: once}
spec:
  template:
    spec: {restartPolicy: Never, containers: [{name: j, image: x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: bound}
spec: {nodeName: n1, containers: [{name: c, image: x}]}
"#,
    );
    let names: Vec<_> = m.pending_pods.iter().map(|p| p.name()).collect();
    assert_eq!(names, ["a", "db-0", "db-1", "db-2", "once-0"]);
    assert_eq!(m.pending_pods[0].namespace(), "default");
    assert_eq!(m.pending_pods[1].namespace(), "data");
    assert_eq!(
        m.pending_pods[1].pod().metadata.labels.as_ref().unwrap()["app"],
        "db"
    );
    assert_eq!(m.bound_pods.len(), 1);
    let ignored: Vec<String> = m
        .ignored
        .iter()
        .map(|i| format!("{} {}", i.kind, i.name))
        .collect();
    assert_eq!(ignored, ["ConfigMap ns/cfg"]);
}

#[test]
fn bad_documents_are_rejected_with_their_place() {
    let mut m = Manifests::new();
    let err = m
        .load_str("x.yaml", "apiVersion: v1\nmetadata: {name: a}\n")
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("x.yaml:1 (line 1): <unknown>/a: kind: Required value"),
        "{err}"
    );
    let err = m
        .load_str(
            "y.yaml",
            "kind: Deployment\nmetadata: {name: d}\nspec: {replicas: many}\n",
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("y.yaml:1 (line 1): Deployment/d: spec.replicas: Invalid value: \"many\""),
        "{err}"
    );
}

#[test]
fn no_nodepool_is_a_clear_error() {
    let m = load(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: x}]}\n",
    );
    let err = simulate::plan(&m, &custom()).unwrap_err();
    assert!(matches!(err, SimulateError::NoNodePool));
    assert!(err.to_string().contains("add a karpenter.sh/v1 NodePool"));
}

#[test]
fn invalid_nodepool_names_the_field() {
    // The same checks as `validate`, at load time, naming the document and the field.
    let err = Manifests::new()
        .load_str(
            "np.yaml",
            r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: broken}
spec:
  template:
    spec:
      requirements: [{key: karpenter.sh/capacity-type, operator: Sometimes, values: [spot]}]
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"#,
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("np.yaml:1 (line 2): NodePool/broken"), "{err}");
    assert!(err.contains("requirements[0]"), "{err}");
}

#[test]
fn pods_bound_to_unknown_nodes_are_an_error() {
    let mut m = load(NODEPOOL);
    m.load_str("p.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {nodeName: ghost, containers: [{name: c, image: x}]}\n").unwrap();
    let err = simulate::plan(&m, &custom()).unwrap_err().to_string();
    assert!(err.contains("node ghost"), "{err}");
}

const NODEPOOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}]
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"#;

#[test]
fn custom_catalogue_prefers_spot_and_reports_too_big_pods() {
    let mut m = load(NODEPOOL);
    m.load_str(
        "pods.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: {name: fits}
spec: {containers: [{name: c, image: x, resources: {requests: {cpu: 1, memory: 1Gi}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: huge}
spec: {containers: [{name: c, image: x, resources: {requests: {cpu: 64}}}]}
"#,
    )
    .unwrap();
    let provider = custom();
    let plan = simulate::plan(&m, &provider).unwrap().plan;
    check_plan(&m, &provider, &plan);
    assert_eq!(plan.node_claims.len(), 1);
    let claim = &plan.node_claims[0];
    assert_eq!(
        (
            claim.instance_type.as_str(),
            claim.zone.as_str(),
            claim.capacity_type.as_str()
        ),
        ("small", "test-1a", "spot")
    );
    assert_eq!(claim.price, 0.02);
    assert_eq!(plan.unschedulable.len(), 1);
    assert_eq!(plan.unschedulable[0].pod, "default/huge");
}

/// Replicas share one `Pod` named after their workload: every place of the plan still names each
/// replica `<workload>-<i>`, unschedulable ones included.
#[test]
fn shared_replicas_keep_their_own_names_in_the_plan() {
    let mut m = load(NODEPOOL);
    m.load_str(
        "w.yaml",
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: apps}
spec:
  replicas: 2
  template:
    spec: {containers: [{name: c, image: x, resources: {requests: {cpu: 1, memory: 1Gi}}}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: huge}
spec:
  replicas: 2
  template:
    spec: {containers: [{name: c, image: x, resources: {requests: {cpu: 64}}}]}
"#,
    )
    .unwrap();
    let provider = custom();
    let plan = simulate::plan(&m, &provider).unwrap().plan;
    check_plan(&m, &provider, &plan);
    let placed: Vec<&str> = plan
        .node_claims
        .iter()
        .flat_map(|c| c.pods.iter().map(String::as_str))
        .collect();
    assert_eq!(placed, ["apps/web-0", "apps/web-1"]);
    let unschedulable: Vec<&str> = plan.unschedulable.iter().map(|u| u.pod.as_str()).collect();
    assert_eq!(unschedulable, ["default/huge-0", "default/huge-1"]);
}

/// The launch choice is always one of the scheduler's options: here the cheapest type (`small`)
/// fits the pod alone but not with the daemonset that runs only on category-c types, so the
/// scheduler offers only `large` and the launch must not fall back to `small`.
#[test]
fn launch_choice_stays_among_the_options_when_daemonset_overhead_differs() {
    let mut m = load(NODEPOOL);
    m.load_str(
        "w.yaml",
        r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: c-agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: c-agent}}
  template:
    metadata: {labels: {app: c-agent}}
    spec:
      nodeSelector: {karpenter.k8s.aws/instance-category: c}
      containers: [{name: c, image: x, resources: {requests: {cpu: 1}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec: {containers: [{name: c, image: x, resources: {requests: {cpu: 1500m}}}]}
"#,
    )
    .unwrap();
    let provider = custom();
    let plan = simulate::plan(&m, &provider).unwrap().plan;
    assert_eq!(plan.node_claims.len(), 1, "{plan:?}");
    let claim = &plan.node_claims[0];
    assert_eq!(claim.instance_type_options, ["large"]);
    assert_eq!(claim.instance_type, "large");
    check_plan(&m, &provider, &plan);
}

const IN_FLIGHT_CLAIM: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-abcde
  labels: {karpenter.sh/nodepool: default}
spec:
  requirements:
    - {key: karpenter.sh/nodepool, operator: In, values: [default]}
    - {key: node.kubernetes.io/instance-type, operator: In, values: [large]}
    - {key: topology.kubernetes.io/zone, operator: In, values: [test-1a]}
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
status:
  providerID: sim://test-1/test-1a/i-00000000000000001
  capacity: {cpu: "8", memory: 32Gi, pods: "50"}
  allocatable: {cpu: 7800m, memory: 31Gi, pods: "50"}
"#;

const TWO_PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: a}
spec: {containers: [{name: c, image: x, resources: {requests: {cpu: 3}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b}
spec: {containers: [{name: c, image: x, resources: {requests: {cpu: 3}}}]}
"#;

/// A launched NodeClaim with no Node yet is capacity: pending pods go there, not to a new one.
#[test]
fn in_flight_node_claims_take_pods_before_new_ones() {
    let mut m = load(NODEPOOL);
    m.load_str("claim.yaml", IN_FLIGHT_CLAIM).unwrap();
    m.load_str("pods.yaml", TWO_PODS).unwrap();
    let provider = custom();
    let plan = simulate::plan(&m, &provider).unwrap().plan;
    check_plan(&m, &provider, &plan);
    assert!(plan.node_claims.is_empty(), "{plan:?}");
    assert_eq!(plan.existing_nodes.len(), 1);
    assert_eq!(plan.existing_nodes[0].name, "default-abcde");
    assert_eq!(plan.existing_nodes[0].pods, ["default/a", "default/b"]);
    assert_eq!(plan.summary.scheduled, 2);
}

/// Not launched yet (no status): nothing says what fits, so the pods get a new NodeClaim; a
/// deleting NodeClaim takes no pods either.
#[test]
fn unlaunched_or_deleting_node_claims_take_no_pods() {
    let unlaunched = IN_FLIGHT_CLAIM.split("status:").next().unwrap().to_string();
    let deleting = IN_FLIGHT_CLAIM.replace(
        "  name: default-abcde\n",
        "  name: default-abcde\n  deletionTimestamp: 2024-01-01T00:00:00Z\n  finalizers: [karpenter.sh/termination]\n",
    );
    assert_ne!(deleting, IN_FLIGHT_CLAIM);
    for claim in [unlaunched, deleting] {
        let mut m = load(NODEPOOL);
        m.load_str("claim.yaml", &claim).unwrap();
        m.load_str("pods.yaml", TWO_PODS).unwrap();
        let provider = custom();
        let plan = simulate::plan(&m, &provider).unwrap().plan;
        check_plan(&m, &provider, &plan);
        assert!(plan.existing_nodes.is_empty(), "{plan:?}");
        assert_eq!(plan.summary.scheduled, 2);
        assert!(!plan.node_claims.is_empty());
    }
}

/// A NodeClaim matched to a Node of the input is that Node's capacity, not a second copy of it.
#[test]
fn node_claims_with_a_node_are_not_counted_twice() {
    let mut m = load(NODEPOOL);
    m.load_str("claim.yaml", IN_FLIGHT_CLAIM).unwrap();
    m.load_str(
        "node.yaml",
        r#"
apiVersion: v1
kind: Node
metadata:
  name: ip-10-0-0-1
  labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: large, karpenter.sh/initialized: "true"}
spec: {providerID: sim://test-1/test-1a/i-00000000000000001}
status:
  capacity: {cpu: "8", memory: 32Gi, pods: "50"}
  allocatable: {cpu: 7800m, memory: 31Gi, pods: "50"}
"#,
    )
    .unwrap();
    m.load_str("pods.yaml", TWO_PODS).unwrap();
    let provider = custom();
    let plan = simulate::plan(&m, &provider).unwrap().plan;
    check_plan(&m, &provider, &plan);
    assert_eq!(plan.existing_nodes.len(), 1, "{plan:?}");
    assert_eq!(plan.existing_nodes[0].name, "ip-10-0-0-1");
}

fn workload(
    index: usize,
    replicas: u8,
    cpu_m: u32,
    mem_mi: u32,
    selector: Option<&str>,
    zone: Option<&str>,
) -> String {
    let mut selectors = Vec::new();
    if let Some(category) = selector {
        selectors.push(format!("karpenter.k8s.aws/instance-category: {category}"));
    }
    if let Some(zone) = zone {
        selectors.push(format!("topology.kubernetes.io/zone: {zone}"));
    }
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: w{index}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: w{index}}}}}
  template:
    metadata: {{labels: {{app: w{index}}}}}
    spec:
      nodeSelector: {{{}}}
      containers: [{{name: c, image: x, resources: {{requests: {{cpu: {cpu_m}m, memory: {mem_mi}Mi}}}}}}]
"#,
        selectors.join(", ")
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// On any workload mix, the plan's invariants hold (fit, selectors, taints, offerings, totals).
    #[test]
    fn plans_hold_their_invariants(
        workloads in proptest::collection::vec(
            (1u8..6, 50u32..9000, 64u32..40000, proptest::option::of(prop_oneof![Just("c"), Just("m")]),
             proptest::option::of(prop_oneof![Just("test-1a"), Just("test-1b"), Just("test-1z")])),
            1..5),
    ) {
        let mut m = load(NODEPOOL);
        for (i, (replicas, cpu, mem, category, zone)) in workloads.iter().enumerate() {
            m.load_str("w.yaml", &workload(i, *replicas, *cpu, *mem, *category, *zone)).unwrap();
        }
        let provider = custom();
        let plan = simulate::plan(&m, &provider).unwrap().plan;
        check_plan(&m, &provider, &plan);
    }
}

/// The arrival pattern's second step (`examples/arrivals.yaml` at its 30-minute replicas: 200
/// pods, web and cache spread over the zones, batch and sidecar free of them) plans within
/// 1.10× the bound under the default policy. Planned zone by zone with every zone-free pod on
/// offer to the first zones, the last zones' cache replicas were left alone on half-idle
/// memory-optimised nodes: 1.113× the bound. With the zone-free pods shared out to the zones
/// too (`scheduling::bins`), 1.087×.
#[test]
fn the_arrival_patterns_second_step_plans_within_ten_percent_of_the_bound() {
    let text = std::fs::read_to_string(examples().join("arrivals.yaml")).unwrap();
    let step_two: Vec<String> = text
        .split("\n---\n")
        .map(|doc| {
            let Some(at) = doc.find("30m=") else {
                return doc.to_string();
            };
            let replicas: String = doc[at + 4..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            doc.lines()
                .filter(|l| {
                    !l.contains("scale-steps") && !l.trim_start().starts_with("annotations:")
                })
                .map(|l| {
                    if l.trim_start().starts_with("replicas:") {
                        format!("  replicas: {replicas}")
                    } else {
                        l.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    let m = load(&step_two.join("\n---\n"));
    let provider = embedded();
    let plan = simulate::plan(&m, &provider).unwrap().plan;
    check_plan(&m, &provider, &plan);
    assert_eq!(plan.summary.scheduled, 200);
    let ratio = plan.summary.hourly_cost / plan.summary.cost_lower_bound;
    assert!(
        ratio <= 1.10,
        "{} against the bound {}: {ratio:.3}×",
        plan.summary.hourly_cost,
        plan.summary.cost_lower_bound
    );
}
