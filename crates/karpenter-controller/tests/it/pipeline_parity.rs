//! The controller's provisioner (on the test API server) and `simulate` run one pipeline: fed
//! the same objects, they create the same NodeClaim objects, field by field (names and fields the
//! API server generates aside), for a dynamic and a static NodePool; and pod affinity with a
//! `namespaceSelector` matches on Namespace labels in both.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): deterministic names and clock, compared field by
//! field with `simulate`.

use std::sync::Arc;

use jiff::Timestamp;
use karpenter_api::NodeClaim;
use karpenter_api::well_known as wk;
use karpenter_controller::provisioning::CoreScheduler;
use karpenter_controller::{Context, Settings, TokioClock};
use karpenter_core::clock::Clock;
use karpenter_core::state::Kind;
use karpenter_sim::SimCloudProvider;
use karpenter_simulate::{Manifests, plan};
use karpenter_testapi::TestApiServer;
use kube::Api;
use kube::api::ListParams;
use serde_json::Value;

const EPOCH: i64 = 1_704_067_200;

const OBJECTS: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default, uid: uid-class}
spec:
  role: KarpenterNodeRole-test
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default, uid: uid-default}
spec:
  template:
    metadata:
      labels: {team: web}
      annotations: {example.com/owner: web-team}
    spec:
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}
        - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["4"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      taints: [{key: dedicated, value: web, effect: NoSchedule}]
      startupTaints: [{key: example.com/warming, effect: NoSchedule}]
      expireAfter: 720h
      terminationGracePeriod: 1h
  limits: {cpu: "1000"}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: fixed, uid: uid-fixed}
spec:
  replicas: 2
  template:
    metadata:
      labels: {team: batch}
    spec:
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      expireAfter: 720h
---
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {team: a}}
---
apiVersion: v1
kind: Pod
metadata: {name: db, namespace: team-a, uid: uid-db, labels: {app: db}}
spec:
  nodeSelector: {topology.kubernetes.io/zone: us-east-1b}
  tolerations: [{key: dedicated, operator: Equal, value: web, effect: NoSchedule}]
  containers: [{name: db, image: db, resources: {requests: {cpu: "1", memory: 2Gi}}}]
status:
  phase: Pending
  conditions: [{type: PodScheduled, status: "False", reason: Unschedulable}]
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default, uid: uid-web}
spec:
  tolerations: [{key: dedicated, operator: Equal, value: web, effect: NoSchedule}]
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {matchLabels: {app: db}}
          namespaceSelector: {matchLabels: {team: a}}
          topologyKey: topology.kubernetes.io/zone
  containers: [{name: web, image: web, resources: {requests: {cpu: "2", memory: 4Gi}}}]
status:
  phase: Pending
  conditions: [{type: PodScheduled, status: "False", reason: Unschedulable}]
---
apiVersion: v1
kind: Pod
metadata: {name: worker, namespace: default, uid: uid-worker}
spec:
  tolerations: [{key: dedicated, operator: Equal, value: web, effect: NoSchedule}]
  containers: [{name: w, image: w, resources: {requests: {cpu: "3", memory: 1Gi}}}]
status:
  phase: Pending
  conditions: [{type: PodScheduled, status: "False", reason: Unschedulable}]
"#;

fn manifests() -> Manifests {
    let mut manifests = Manifests::new();
    manifests.load_str("objects.yaml", OBJECTS).unwrap();
    manifests
}

fn provider() -> SimCloudProvider {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::starting_at(
        Timestamp::from_second(EPOCH).unwrap(),
    ));
    SimCloudProvider::new("us-east-1", clock).unwrap()
}

/// A NodeClaim without what differs between two creations of the same object: its name and
/// the fields the API server fills in. Sorted requirements so list order does not matter.
fn comparable(claim: &NodeClaim) -> Value {
    let mut value = serde_json::to_value(claim).unwrap();
    let metadata = value["metadata"].as_object_mut().unwrap();
    for generated in [
        "name",
        "generateName",
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "managedFields",
    ] {
        metadata.remove(generated);
    }
    if let Some(object) = value.as_object_mut() {
        object.remove("status");
    }
    value
}

fn sorted(claims: &[NodeClaim]) -> Vec<Value> {
    let mut values: Vec<Value> = claims.iter().map(comparable).collect();
    values.sort_by_key(|v| v.to_string());
    values
}

fn zone_of(claim: &NodeClaim) -> Option<Vec<String>> {
    claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == wk::ZONE_LABEL && r.operator == "In")
        .map(|r| r.values.to_vec())
}

async fn controller_nodeclaims(manifests: &Manifests) -> Vec<NodeClaim> {
    let server = TestApiServer::builder()
        .clock(|| Timestamp::from_second(EPOCH).unwrap())
        .build();
    for crd in karpenter_api::crd::all().unwrap() {
        server.register_crd(&crd).unwrap();
    }
    let client = server.client();
    let clock = Arc::new(TokioClock::starting_at(
        Timestamp::from_second(EPOCH).unwrap(),
    ));
    let settings = Settings {
        disable_leader_election: true,
        ..Settings::default()
    };
    let (ctx, _batcher) = Context::new(
        client.clone(),
        settings,
        Arc::new(provider()),
        Arc::new(CoreScheduler),
        clock,
    );
    {
        // What the watchers would have listed.
        let mut state = ctx.state.write();
        state.reset(manifests.node_pools.clone());
        state.reset(manifests.node_classes.clone());
        state.reset(manifests.namespaces.clone());
        state.reset(
            manifests
                .pending_pods
                .iter()
                .map(|p| p.pod().clone())
                .collect(),
        );
        for kind in Kind::ALL {
            state.mark_listed(kind);
        }
    }
    let outcome = karpenter_controller::provisioning::provision(&ctx)
        .await
        .unwrap();
    assert_eq!(outcome.unschedulable, 0, "{outcome:?}");
    let claims = Api::<NodeClaim>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(claims.len(), outcome.created.len());
    claims
}

#[tokio::test(start_paused = true)]
async fn the_provisioner_and_simulate_create_the_same_nodeclaims() {
    let manifests = manifests();
    let simulated = plan(&manifests, &provider()).unwrap();
    assert!(
        simulated.plan.unschedulable.is_empty(),
        "{:?}",
        simulated.plan.unschedulable
    );
    let controller = controller_nodeclaims(&manifests).await;

    let is_static =
        |c: &&NodeClaim| c.metadata.labels.as_ref().unwrap()[wk::NODEPOOL_LABEL] == "fixed";
    let statics: Vec<&NodeClaim> = controller.iter().filter(is_static).collect();
    assert_eq!(statics.len(), 2, "exactly spec.replicas NodeClaims");
    assert_eq!(
        simulated.node_claims.iter().filter(is_static).count(),
        2,
        "the same in simulate"
    );
    assert!(
        controller.iter().any(|c| !is_static(&c)),
        "the pods need dynamic capacity: {controller:?}"
    );
    assert_eq!(sorted(&controller), sorted(&simulated.node_claims));

    // namespaceSelector: `web` follows `db` (namespace team-a, by its label) into us-east-1b.
    let web = simulated
        .plan
        .node_claims
        .iter()
        .position(|c| c.pods.iter().any(|p| p == "default/web"))
        .expect("web is placed");
    assert_eq!(
        zone_of(&simulated.node_claims[web]),
        Some(vec!["us-east-1b".to_string()]),
        "{:?}",
        simulated.node_claims[web].spec.requirements
    );
}

#[tokio::test(start_paused = true)]
async fn without_the_namespace_label_the_affinity_matches_nothing() {
    // Same input, but team-a lacks the label: `web`'s namespaceSelector selects no namespace,
    // so no pod satisfies its required affinity and it cannot be placed, in both.
    let mut manifests = manifests();
    for namespace in &mut manifests.namespaces {
        namespace.metadata.labels = None;
    }
    let simulated = plan(&manifests, &provider()).unwrap();
    let unplaced: Vec<&str> = simulated
        .plan
        .unschedulable
        .iter()
        .map(|u| u.pod.as_str())
        .collect();
    assert_eq!(unplaced, ["default/web"]);
}
