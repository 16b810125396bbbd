//! `simulate` applies the pool's EC2NodeClass to the embedded catalogue (issue 11 item 3): the
//! same rules the aws provider applies to live EC2 answers.

use std::sync::Arc;

use karpenter_api::well_known as wk;
use karpenter_core::clock::FakeClock;
use karpenter_core::resources::Quantity;
use karpenter_sim::SimCloudProvider;
use karpenter_simulate::{self as simulate, Manifests, Plan, PlannedNodeClaim, SimulateError};

fn provider() -> SimCloudProvider {
    SimCloudProvider::new("us-east-1", Arc::new(FakeClock::default())).unwrap()
}

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

/// A NodePool `pool` (`requirements` as YAML list items) on EC2NodeClass `nc` (`spec_extra`
/// appended to its spec), and a deployment of `replicas` pods with `pod_extra` in the pod spec.
fn manifests(
    requirements: &str,
    spec_extra: &str,
    replicas: u32,
    requests: &str,
    pod_extra: &str,
) -> Manifests {
    let yaml = format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: pool}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: nc}}
      requirements:
{requirements}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: nc}}
spec:
  role: KarpenterNodeRole-my-cluster
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: my-cluster}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: my-cluster}}}}]
{spec_extra}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: app, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: app}}}}
  template:
    metadata: {{labels: {{app: app}}}}
    spec:
{pod_extra}
      containers:
        - name: app
          image: pause
          resources: {{requests: {requests}}}
"#
    );
    let mut m = Manifests::new();
    m.load_str("test.yaml", &yaml).unwrap();
    m
}

fn plan(m: &Manifests) -> Plan {
    let outcome = simulate::plan(m, &provider()).unwrap();
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    outcome.plan
}

fn only_claim(plan: &Plan) -> &PlannedNodeClaim {
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(plan.node_claims.len(), 1, "{:?}", plan.node_claims);
    &plan.node_claims[0]
}

const SPOT_ONLY: &str = "        - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}";
const AL2023: &str = "  amiSelectorTerms: [{alias: al2023@latest}]";

#[test]
fn the_guides_spot_pool_gets_no_a1_metal_node() {
    // The guide's spot-first pool: spot only, nothing else constrained. Without the NodeClass
    // the cheapest spot offering for 16 vCPUs of pods was a1.metal: an AL2023 AMI cannot run a1
    // (upstream's compatibility check) and the launch skips metal while other types fit
    // (upstream's exotic filter).
    let m = manifests(SPOT_ONLY, AL2023, 15, "{cpu: '1', memory: 1Gi}", "");
    let plan = plan(&m);
    assert_eq!(plan.summary.scheduled, 15);
    for claim in &plan.node_claims {
        assert_eq!(claim.capacity_type, "spot");
        assert!(
            !claim.instance_type.starts_with("a1."),
            "{}",
            claim.instance_type
        );
        assert!(
            !claim.instance_type.contains("metal"),
            "{}",
            claim.instance_type
        );
        assert!(
            !claim
                .instance_type_options
                .iter()
                .any(|t| t.starts_with("a1.")),
            "AL2023 offers no a1 type: {:?}",
            claim.instance_type_options
        );
    }
}

#[test]
fn max_pods_110_is_honoured() {
    // 60 tiny pods fit one t3.small-sized node only if maxPods lifts the ENI limit (11 pods).
    let requirements =
        "        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}";
    let with = format!("{AL2023}\n  kubelet: {{maxPods: 110}}");
    let plan = plan(&manifests(
        requirements,
        &with,
        60,
        "{cpu: 10m, memory: 16Mi}",
        "",
    ));
    let claim = only_claim(&plan);
    assert_eq!(claim.allocatable.get("pods"), q("110"));
    assert_eq!(claim.pods.len(), 60);

    // Without it, m5.large takes 29 pods: three nodes.
    let plan = self::plan(&manifests(
        requirements,
        AL2023,
        60,
        "{cpu: 10m, memory: 16Mi}",
        "",
    ));
    assert_eq!(plan.node_claims.len(), 3);
    assert!(
        plan.node_claims
            .iter()
            .all(|c| c.allocatable.get("pods") == q("29"))
    );
}

#[test]
fn a_100gi_root_volume_gives_about_100gi_of_ephemeral_storage() {
    let requirements =
        "        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}";
    let volume = format!(
        "{AL2023}\n  blockDeviceMappings:\n    - {{deviceName: /dev/xvda, rootVolume: true, ebs: {{volumeSize: 100Gi, volumeType: gp3}}}}"
    );
    // A pod asking for 50Gi of scratch space: unschedulable on the default 20Gi volume.
    let requests = "{cpu: 100m, memory: 128Mi, ephemeral-storage: 50Gi}";
    let plan = plan(&manifests(requirements, &volume, 1, requests, ""));
    let claim = only_claim(&plan);
    // 100Gi − 1Gi kube-reserved − 10Gi eviction threshold.
    assert_eq!(claim.allocatable.get("ephemeral-storage"), q("89Gi"));

    let outcome = simulate::plan(
        &manifests(requirements, AL2023, 1, requests, ""),
        &provider(),
    )
    .unwrap();
    assert!(outcome.plan.node_claims.is_empty());
    assert_eq!(outcome.plan.unschedulable.len(), 1);
}

#[test]
fn a_windows2022_node_class_schedules_windows_pods() {
    let windows = "  amiSelectorTerms: [{alias: windows2022@latest}]";
    let node_selector = "      nodeSelector: {kubernetes.io/os: windows}";
    let on_demand =
        "        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}";
    let plan = plan(&manifests(
        on_demand,
        windows,
        2,
        "{cpu: 500m, memory: 1Gi}",
        node_selector,
    ));
    let claim = only_claim(&plan);
    assert_eq!(claim.labels[wk::OS_LABEL], "windows");
    assert_eq!(claim.labels[wk::WINDOWS_BUILD_LABEL], "10.0.20348");
    assert_eq!(claim.labels[wk::ARCH_LABEL], "amd64");
    assert_eq!(claim.allocatable.get("pods"), q("110"));

    // On an AL2023 NodeClass the same pods cannot be placed.
    let outcome = simulate::plan(
        &manifests(
            on_demand,
            AL2023,
            2,
            "{cpu: 500m, memory: 1Gi}",
            node_selector,
        ),
        &provider(),
    )
    .unwrap();
    assert!(outcome.plan.node_claims.is_empty());
    assert_eq!(outcome.plan.unschedulable.len(), 2);
}

#[test]
fn an_invalid_node_class_field_is_named() {
    // Loading checks quantities against the CRD already; manifests built in code are not.
    let mut m = manifests(SPOT_ONLY, AL2023, 1, "{cpu: '1'}", "");
    m.node_classes[0].spec.kubelet = Some(karpenter_api::v1::KubeletConfiguration {
        kube_reserved: [("memory".to_string(), "lots".to_string())].into(),
        ..Default::default()
    });
    let err = simulate::plan(&m, &provider()).unwrap_err();
    assert!(matches!(err, SimulateError::InvalidNodeClass(_)), "{err}");
    assert!(
        err.to_string()
            .contains("EC2NodeClass nc: spec.kubelet.kubeReserved.memory"),
        "{err}"
    );
}

#[tokio::test]
async fn create_launches_from_the_types_the_node_class_shaped() {
    use karpenter_api::{NodeClaim, NodeClaimSpec, v1::NodeSelectorRequirementWithMinValues};
    use karpenter_core::cloud_provider::CloudProvider;

    let m = manifests(
        "        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}",
        &format!("{AL2023}\n  kubelet: {{maxPods: 110}}"),
        1,
        "{cpu: 100m}",
        "",
    );
    let sim = provider();
    let types = sim
        .instance_types_for(&m.node_pools[0], m.node_classes.first())
        .unwrap();
    assert_eq!(
        types
            .iter()
            .find(|t| t.name == "m5.large")
            .unwrap()
            .capacity
            .get("pods"),
        q("110")
    );
    let claim = NodeClaim::new(
        "c1",
        NodeClaimSpec {
            requirements: vec![NodeSelectorRequirementWithMinValues {
                key: wk::INSTANCE_TYPE_LABEL.to_string(),
                operator: "In".to_string(),
                values: vec!["m5.large".to_string()].into(),
                min_values: None,
            }],
            node_class_ref: m.node_pools[0].spec.template.spec.node_class_ref.clone(),
            ..Default::default()
        },
    );
    let launched = sim.create(&claim).await.unwrap();
    let status = launched.status.unwrap();
    assert_eq!(status.allocatable["pods"].0, "110");
}

#[test]
fn launches_skip_metal_while_another_option_fits() {
    use karpenter_api::{NodeClaim, NodeClaimSpec, v1::NodeSelectorRequirementWithMinValues};

    let claim = |types: &[&str]| {
        NodeClaim::new(
            "c1",
            NodeClaimSpec {
                requirements: vec![
                    NodeSelectorRequirementWithMinValues {
                        key: wk::INSTANCE_TYPE_LABEL.to_string(),
                        operator: "In".to_string(),
                        values: types.iter().map(ToString::to_string).collect(),
                        min_values: None,
                    },
                    NodeSelectorRequirementWithMinValues {
                        key: wk::CAPACITY_TYPE_LABEL.to_string(),
                        operator: "In".to_string(),
                        values: vec!["on-demand".to_string()].into(),
                        min_values: None,
                    },
                ],
                ..Default::default()
            },
        )
    };
    let sim = provider();
    // a1.metal ($0.408/h) is cheaper than m5.4xlarge ($0.768/h), but metal is exotic.
    let choice = sim
        .launch_choice(&claim(&["a1.metal", "m5.4xlarge"]))
        .unwrap();
    assert_eq!(choice.instance_type, "m5.4xlarge");
    // Metal when it is the only option.
    let choice = sim.launch_choice(&claim(&["a1.metal"])).unwrap();
    assert_eq!(choice.instance_type, "a1.metal");
}
