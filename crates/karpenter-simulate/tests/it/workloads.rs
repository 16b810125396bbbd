//! Workloads as Kubernetes makes them: a StatefulSet's claims from its `volumeClaimTemplates`
//! land its pods in their volumes' zones; a RuntimeClass's overhead counts in the pods' requests.

use std::collections::BTreeMap;
use std::sync::Arc;

use karpenter_core::clock::FakeClock;
use karpenter_sim::SimCloudProvider;
use karpenter_simulate::{self as simulate, Manifests, Plan};

const NODEPOOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"#;

/// A StatefulSet `db` of three replicas in namespace `data` with one claim template `pgdata`
/// (storage class `storage_class`, or none), written before the objects it uses.
fn statefulset(storage_class: Option<&str>) -> String {
    let class = storage_class.map_or(String::new(), |c| format!("storageClassName: {c}, "));
    format!(
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: db, namespace: data}}
spec:
  replicas: 3
  serviceName: db
  selector: {{matchLabels: {{app: db}}}}
  template:
    metadata: {{labels: {{app: db}}}}
    spec: {{containers: [{{name: db, image: x, resources: {{requests: {{cpu: 1, memory: 2Gi}}}}}}]}}
  volumeClaimTemplates:
  - metadata: {{name: pgdata}}
    spec: {{{class}accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 10Gi}}}}}}
"#
    )
}

fn plan(text: &str) -> (Manifests, Plan) {
    let mut m = Manifests::new();
    m.load_str("np.yaml", NODEPOOL).unwrap();
    m.load_str("w.yaml", text).unwrap();
    let provider = SimCloudProvider::new("us-east-1", Arc::new(FakeClock::default())).unwrap();
    let plan = simulate::plan(&m, &provider).unwrap().plan;
    (m, plan)
}

/// Pod → zone of the NodeClaim it landed on.
fn zones(plan: &Plan) -> BTreeMap<String, String> {
    plan.node_claims
        .iter()
        .flat_map(|c| c.pods.iter().map(|p| (p.clone(), c.zone.clone())))
        .collect()
}

#[test]
fn a_statefulset_with_zonal_volumes_lands_in_its_volumes_zones() {
    let mut input = statefulset(Some("gp3"));
    input.push_str(
        r#"
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: gp3}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
"#,
    );
    for (i, zone) in ["us-east-1c", "us-east-1a", "us-east-1b"]
        .iter()
        .enumerate()
    {
        input.push_str(&format!(
            r#"
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: pv-{i}}}
spec:
  capacity: {{storage: 10Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: gp3
  csi: {{driver: ebs.csi.aws.com, volumeHandle: vol-{i}}}
  claimRef: {{namespace: data, name: pgdata-db-{i}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: topology.kubernetes.io/zone, operator: In, values: [{zone}]}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: pgdata-db-{i}, namespace: data}}
spec: {{storageClassName: gp3, volumeName: pv-{i}, accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 10Gi}}}}}}
status: {{phase: Bound}}
"#
        ));
    }
    let (m, plan) = plan(&input);
    assert_eq!(
        m.claims.len(),
        3,
        "the input's claims are used, none generated"
    );
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let zones = zones(&plan);
    assert_eq!(zones["data/db-0"], "us-east-1c");
    assert_eq!(zones["data/db-1"], "us-east-1a");
    assert_eq!(zones["data/db-2"], "us-east-1b");
    for claim in &plan.node_claims {
        assert_eq!(
            claim.labels["topology.kubernetes.io/zone"], claim.zone,
            "the NodeClaim carries its zone"
        );
    }
}

#[test]
fn claims_to_be_provisioned_follow_the_default_storage_class_topology() {
    let mut input = statefulset(None);
    input.push_str(
        r#"
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: zonal
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
- matchLabelExpressions: [{key: topology.kubernetes.io/zone, values: [us-east-1d]}]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: other}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
"#,
    );
    let (m, plan) = plan(&input);
    let claims: Vec<(&str, &str)> = m
        .claims
        .iter()
        .map(|c| {
            (
                c.metadata.name.as_deref().unwrap(),
                c.spec
                    .as_ref()
                    .unwrap()
                    .storage_class_name
                    .as_deref()
                    .unwrap(),
            )
        })
        .collect();
    assert_eq!(
        claims,
        [
            ("pgdata-db-0", "zonal"),
            ("pgdata-db-1", "zonal"),
            ("pgdata-db-2", "zonal")
        ]
    );
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let zones = zones(&plan);
    assert_eq!(zones.len(), 3);
    assert!(zones.values().all(|z| z == "us-east-1d"), "{zones:?}");
}

#[test]
fn claims_of_an_immediate_class_without_volumes_wait_for_binding() {
    let mut input = statefulset(Some("immediate"));
    input.push_str(
        r#"
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: immediate}
provisioner: ebs.csi.aws.com
volumeBindingMode: Immediate
"#,
    );
    let (_, plan) = plan(&input);
    assert!(plan.node_claims.is_empty());
    assert_eq!(plan.unschedulable.len(), 3);
    assert!(
        plan.unschedulable[0].reason.contains("Immediate"),
        "{}",
        plan.unschedulable[0].reason
    );
}

const CUSTOM_TYPES: &str = r#"
instanceTypes:
  - name: small
    capacity: {cpu: "2", memory: 4Gi, pods: "10"}
    overhead: {cpu: 100m, memory: 256Mi}
    offerings: [{zone: test-1a, capacityType: on-demand, price: 0.05}]
  - name: large
    capacity: {cpu: "8", memory: 32Gi, pods: "50"}
    overhead: {cpu: 200m, memory: 1Gi}
    offerings: [{zone: test-1a, capacityType: on-demand, price: 0.30}]
"#;

/// One pod of 1.5 CPU, in a sandbox whose RuntimeClass (given after it) adds `overhead`.
fn sandboxed(overhead: &str) -> Plan {
    let mut m = Manifests::new();
    m.load_str("np.yaml", NODEPOOL).unwrap();
    m.load_str(
        "w.yaml",
        &format!(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: sandboxed}}
spec:
  replicas: 1
  template:
    spec:
      runtimeClassName: kata
      containers: [{{name: c, image: x, resources: {{requests: {{cpu: 1500m, memory: 1Gi}}}}}}]
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {{name: kata}}
handler: kata
overhead: {{podFixed: {overhead}}}
scheduling: {{nodeSelector: {{karpenter.sh/capacity-type: on-demand}}}}
"#
        ),
    )
    .unwrap();
    let pod = m.pending_pods[0].pod();
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(
        spec.node_selector.as_ref().unwrap()["karpenter.sh/capacity-type"],
        "on-demand"
    );
    let types = simulate::parse_instance_types(CUSTOM_TYPES, "test-1").unwrap();
    let provider =
        SimCloudProvider::with_instance_types("test-1", types, Arc::new(FakeClock::default()));
    simulate::plan(&m, &provider).unwrap().plan
}

#[test]
fn runtime_class_overhead_changes_the_instance_type() {
    let light = sandboxed("{cpu: 100m, memory: 64Mi}");
    assert_eq!(light.node_claims[0].instance_type, "small");
    let heavy = sandboxed("{cpu: 1, memory: 64Mi}");
    assert_eq!(heavy.node_claims[0].instance_type, "large");
    assert_eq!(
        heavy.node_claims[0].requests.get("cpu").to_string(),
        "2500m",
        "the pod's requests include the RuntimeClass overhead"
    );
}

#[test]
fn a_missing_runtime_class_is_an_input_error_naming_the_field() {
    let mut m = Manifests::new();
    let err = m
        .load_str(
            "w.yaml",
            r#"
apiVersion: v1
kind: Pod
metadata: {name: p}
spec: {runtimeClassName: gvisor, containers: [{name: c, image: x}]}
"#,
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("w.yaml:1 (line 2): Pod/p: spec.runtimeClassName: Not found: \"gvisor\""),
        "{err}"
    );
}

#[test]
fn daemonset_pods_get_their_runtime_class_overhead_too() {
    let mut m = Manifests::new();
    m.load_str(
        "ds.yaml",
        r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {runtimeClassName: kata, containers: [{name: a, image: x}]}
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: kata}
handler: kata
overhead: {podFixed: {cpu: 250m}}
"#,
    )
    .unwrap();
    let template = &m.daemonsets[0].spec.as_ref().unwrap().template;
    let overhead = template.spec.as_ref().unwrap().overhead.as_ref().unwrap();
    assert_eq!(overhead["cpu"].0, "250m");
}
