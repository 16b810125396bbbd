//! The world a crash campaign runs in (`crash.rs`): the test API server, controller "processes"
//! (a replica with its own sim cloud restored from the ledger ConfigMaps, as
//! `karpenter controller --cloud-provider sim` starts) and the parts of Kubernetes the test API
//! server does not run: a ReplicaSet (keeps `desired` pods), kube-scheduler (binds pending pods)
//! and the pod garbage collector (pods of vanished Nodes). Plus what the campaign checks: the
//! observations that must hold at every instant and the invariants of a settled cluster.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): the crash campaign's world (injected faults,
//! virtual time).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::v1::EC2NodeClass;
use karpenter_api::well_known as wk;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_controller::provisioning::CoreScheduler;
use karpenter_controller::run::{Options, ProviderTask, RunningController};
use karpenter_controller::{Context, Settings};
use karpenter_core::cloud_provider::{
    CloudError, CloudProvider, DriftReason, NodeClassKind, RepairPolicy,
};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::node::{node_is_ready, node_provider_id};
use karpenter_core::pod::Pod;
use karpenter_core::pod::node_name;
use karpenter_core::resources::ResourceList;
use karpenter_sim::SimInstance;
use karpenter_sim::cluster::{SimCloud, SimKubeletOptions};
use kube::ResourceExt;
use serde_json::json;

use crate::sim_cluster::SimCluster;

/// Where the sim ledger lives (the replicas' namespace).
pub const LEDGER_NAMESPACE: &str = "kube-system";
/// The campaign's pods carry `app=crash`.
const APP: &str = "crash";
/// An instance must have its Node this long after launch (registration takes seconds).
pub const REGISTRATION_TIME: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);
/// A Node of another provider: nobody may touch it.
pub const FOREIGN_NODE: &str = "foreign-node";
/// The NodeClaim name an instance launched outside karpenter-rs was recorded under (it has no
/// `karpenter.sh/nodepool` label and no NodeClaim object).
pub const FOREIGN_MACHINE: &str = "foreign-machine";

/// Cloud calls as a real cloud may answer them: `slow_creates` creates launch the instance and
/// then answer only after the controller's 60 s cloud timeout (the launch went through, the
/// caller saw a timeout).
pub struct FaultyCloud {
    inner: Arc<dyn CloudProvider>,
    pub slow_creates: AtomicUsize,
}

#[async_trait]
impl CloudProvider for FaultyCloud {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
        let slow = self
            .slow_creates
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let launched = self.inner.create(node_claim).await;
        if slow {
            tokio::time::sleep(Duration::from_secs(70)).await;
        }
        launched
    }

    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudError> {
        self.inner.delete(node_claim).await
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError> {
        self.inner.get(provider_id).await
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudError> {
        self.inner.list().await
    }

    async fn instance_types(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        self.inner.instance_types(node_pool, node_class).await
    }

    async fn is_drifted(&self, node_claim: &NodeClaim) -> Result<Option<DriftReason>, CloudError> {
        self.inner.is_drifted(node_claim).await
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.inner.repair_policies()
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        self.inner.supported_node_classes()
    }
}

/// One controller process: a replica (leader election on) with its own sim cloud.
pub struct Process {
    pub running: RunningController,
    pub sim: karpenter_sim::SimCloudProvider,
    pub cloud: Arc<FaultyCloud>,
}

impl Process {
    /// Starts replica `identity` as the binary does: restore the ledger, then the controller
    /// with the sim kubelet as its provider task.
    pub async fn start(cluster: &SimCluster, identity: &str) -> Process {
        let sim = cluster.another_process_cloud();
        let client = cluster.server.client_named(identity);
        let restored = SimCloud::restore(
            client.clone(),
            sim.clone(),
            LEDGER_NAMESPACE,
            cluster.clock.clone(),
            SimKubeletOptions {
                emulate_node_lifecycle: true,
                ..SimKubeletOptions::default()
            },
        )
        .await
        .unwrap();
        let cloud = Arc::new(FaultyCloud {
            inner: restored.cloud_provider(),
            slow_creates: AtomicUsize::new(0),
        });
        let settings = Settings {
            identity: identity.into(),
            leader_election_namespace: LEDGER_NAMESPACE.into(),
            ..Settings::default()
        };
        let (ctx, batcher) = Context::new(
            client,
            settings,
            cloud.clone(),
            Arc::new(CoreScheduler),
            cluster.clock.clone(),
        );
        let kubelet = ProviderTask::new("sim kubelet", move |cx| {
            restored.follow_leadership(cx.leadership.clone());
            restored.run(cx.leadership, cx.shutdown)
        });
        let running = RunningController::start(
            ctx,
            batcher,
            Options {
                provider_tasks: vec![kubelet],
                ..Options::default()
            },
        )
        .await
        .unwrap();
        Process {
            running,
            sim,
            cloud,
        }
    }

    /// `kill -9`: every task stops where it is, nothing is released.
    pub fn kill(self) {
        self.running.abort();
    }
}

/// The cloud as the ledger ConfigMaps hold it (the sim cloud's truth across processes).
pub fn ledger_instances(cluster: &SimCluster) -> Vec<SimInstance> {
    crate::support::stored_sim_instances(&cluster.server, LEDGER_NAMESPACE)
        .iter()
        .filter_map(|raw| serde_json::from_str(raw).ok())
        .collect()
}

/// The campaign's stand-ins for kube-controller-manager and kube-scheduler.
#[derive(Default)]
pub struct Kubernetes {
    /// Pods the ReplicaSet keeps.
    pub desired: usize,
    next_pod: usize,
}

impl Kubernetes {
    /// One pass of the ReplicaSet, the pod garbage collector and the scheduler.
    pub fn step(&mut self, cluster: &SimCluster) {
        self.collect_pods_of_missing_nodes(cluster);
        self.replicate(cluster);
        bind(cluster);
    }

    fn live_pods(cluster: &SimCluster) -> Vec<Pod> {
        cluster
            .server
            .list::<Pod>()
            .into_iter()
            .filter(|p| p.labels().get("app").is_some_and(|a| a == APP))
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect()
    }

    fn replicate(&mut self, cluster: &SimCluster) {
        let live = Self::live_pods(cluster);
        if live.len() < self.desired {
            for _ in live.len()..self.desired {
                self.next_pod += 1;
                cluster.server.put(&crash_pod(self.next_pod)).unwrap();
            }
        } else {
            // Pending pods go first, as a ReplicaSet scales down.
            let mut extra: Vec<&Pod> = live.iter().collect();
            extra.sort_by_key(|p| node_name(p).is_some());
            for pod in extra.into_iter().take(live.len() - self.desired) {
                let _ = cluster
                    .server
                    .delete::<Pod>(Some("default"), &pod.name_any());
            }
        }
    }

    /// The pod garbage collector: pods bound to a Node that no longer exists go.
    fn collect_pods_of_missing_nodes(&self, cluster: &SimCluster) {
        let nodes: BTreeSet<String> = cluster
            .server
            .list::<Node>()
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        let orphans: Vec<Pod> = cluster
            .server
            .list::<Pod>()
            .into_iter()
            .filter(|p| node_name(p).is_some_and(|n| !nodes.contains(n)))
            .collect();
        if orphans.is_empty() {
            return;
        }
        cluster.server.set_pods_terminate_immediately(true);
        for pod in orphans {
            let _ = cluster
                .server
                .delete::<Pod>(Some("default"), &pod.name_any());
        }
        cluster.server.set_pods_terminate_immediately(false);
    }
}

fn crash_pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("crash-{i}"), "namespace": "default", "uid": format!("crash-uid-{i}"), "labels": {"app": APP}},
        "spec": {"terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .unwrap()
}

fn cpu_millis(pod: &Pod) -> i64 {
    karpenter_core::pod::effective_requests(pod)
        .map(|r| r.get("cpu").millis())
        .unwrap_or(0)
}

/// kube-scheduler, enough for the campaign: a pending pod goes to an initialized, Ready,
/// untainted, not deleting Node with room for it.
fn bind(cluster: &SimCluster) {
    let nodes: Vec<Node> = cluster
        .server
        .list::<Node>()
        .into_iter()
        .filter(|n| {
            n.labels()
                .get(wk::NODE_INITIALIZED_LABEL)
                .is_some_and(|v| v == "true")
                && n.metadata.deletion_timestamp.is_none()
                && node_is_ready(n)
                && n.spec.as_ref().is_none_or(|s| {
                    s.unschedulable != Some(true)
                        && s.taints
                            .as_ref()
                            .is_none_or(|t| t.iter().all(|t| t.effect == "PreferNoSchedule"))
                })
        })
        .collect();
    let pods = cluster.server.list::<Pod>();
    let mut used: BTreeMap<String, i64> = BTreeMap::new();
    for pod in &pods {
        if let Some(node) = node_name(pod) {
            *used.entry(node.to_string()).or_default() += cpu_millis(pod);
        }
    }
    for pod in pods
        .iter()
        .filter(|p| node_name(p).is_none() && p.metadata.deletion_timestamp.is_none())
    {
        let need = cpu_millis(pod);
        let target = nodes.iter().find(|n| {
            let allocatable = n
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| ResourceList::from_k8s(a).ok())
                .map(|a| a.get("cpu").millis())
                .unwrap_or(0);
            allocatable - used.get(&n.name_any()).copied().unwrap_or(0) >= need
        });
        if let Some(node) = target {
            let mut bound = pod.clone();
            bound.spec.get_or_insert_default().node_name = Some(node.name_any());
            cluster.server.put(&bound).unwrap();
            *used.entry(node.name_any()).or_default() += need;
        }
    }
}

/// What must hold at every instant, checked as the campaign goes.
#[derive(Default)]
pub struct Watch {
    /// NodeClaim UID → the first instance ID launched for it.
    launched_for: BTreeMap<String, String>,
    /// NodeClaim UID → the first provider ID its status showed.
    provider_ids: BTreeMap<String, String>,
    /// The foreign Node as set up (what karpenter-rs might change of it).
    foreign_node: Option<String>,
    pub double_launches: Vec<String>,
    pub changed_provider_ids: Vec<String>,
    pub foreign_touched: Vec<String>,
}

/// The fields of a Node karpenter-rs writes (labels, taints, finalizers, owners, deletion).
fn karpenter_view(node: &Node) -> String {
    json!({
        "labels": node.metadata.labels,
        "annotations": node.metadata.annotations,
        "finalizers": node.metadata.finalizers,
        "owners": node.metadata.owner_references,
        "deleting": node.metadata.deletion_timestamp.is_some(),
        "taints": node.spec.as_ref().and_then(|s| s.taints.clone()),
        "unschedulable": node.spec.as_ref().and_then(|s| s.unschedulable),
    })
    .to_string()
}

impl Watch {
    pub fn observe(&mut self, cluster: &SimCluster) {
        for instance in ledger_instances(cluster) {
            let Some(uid) = instance.node_claim_uid.clone() else {
                continue;
            };
            let first = self
                .launched_for
                .entry(uid)
                .or_insert_with(|| instance.id.clone());
            if *first != instance.id {
                self.double_launches.push(format!(
                    "nodeclaim {} got instance {} after {first}",
                    instance.node_claim, instance.id
                ));
                *first = instance.id.clone();
            }
        }
        for claim in cluster.server.list::<NodeClaim>() {
            let (Some(uid), Some(id)) = (
                claim.uid(),
                claim
                    .status
                    .as_ref()
                    .and_then(|s| s.provider_id.clone())
                    .filter(|id| !id.is_empty()),
            ) else {
                continue;
            };
            let first = self.provider_ids.entry(uid).or_insert_with(|| id.clone());
            if *first != id {
                self.changed_provider_ids.push(format!(
                    "nodeclaim {} changed provider ID {first} → {id}",
                    claim.name_any()
                ));
                *first = id;
            }
        }
        let foreign = cluster.node(FOREIGN_NODE).map(|n| karpenter_view(&n));
        match (&self.foreign_node, foreign) {
            (None, Some(view)) => self.foreign_node = Some(view),
            (Some(before), Some(now)) if *before != now => {
                self.foreign_touched
                    .push(format!("node {FOREIGN_NODE}: {before} → {now}"));
                self.foreign_node = Some(now);
            }
            (Some(_), None) => {
                self.foreign_touched
                    .push(format!("node {FOREIGN_NODE} deleted"));
                self.foreign_node = None;
            }
            _ => {}
        }
    }
}

/// The foreign instance's Node (registered by the sim kubelet for the instance launched
/// outside karpenter-rs), by provider ID.
fn foreign_instance(cluster: &SimCluster) -> Option<SimInstance> {
    ledger_instances(cluster)
        .into_iter()
        .find(|i| i.node_claim == FOREIGN_MACHINE)
}

/// What is wrong with the cluster now, if it should have settled (empty: settled). Each line
/// names one broken invariant.
pub fn unsettled(cluster: &SimCluster, kube: &Kubernetes) -> Vec<String> {
    let mut wrong = Vec::new();
    let now = cluster.now();
    let claims = cluster.server.list::<NodeClaim>();
    let nodes = cluster.server.list::<Node>();
    let instances = ledger_instances(cluster);
    let foreign = foreign_instance(cluster);
    if foreign.is_none() {
        wrong.push(format!("the foreign instance ({FOREIGN_MACHINE}) is gone"));
    }
    let foreign_id = foreign.map(|i| i.provider_id);
    let claimed: BTreeMap<&str, &NodeClaim> = claims
        .iter()
        .filter_map(|c| Some((c.status.as_ref()?.provider_id.as_deref()?, c)))
        .collect();
    let mut per_claim: BTreeMap<String, usize> = BTreeMap::new();
    for instance in &instances {
        if Some(&instance.provider_id) == foreign_id.as_ref() {
            continue;
        }
        *per_claim.entry(instance.node_claim.clone()).or_default() += 1;
        if !claimed.contains_key(instance.provider_id.as_str()) {
            wrong.push(format!(
                "leak: instance {} ({}) has no NodeClaim",
                instance.provider_id, instance.node_claim
            ));
        }
        let registered = nodes
            .iter()
            .any(|n| node_provider_id(n) == Some(instance.provider_id.as_str()));
        if !registered && now.duration_since(instance.launched_at) > REGISTRATION_TIME {
            wrong.push(format!(
                "instance {} has no Node {} after launch",
                instance.provider_id,
                now.duration_since(instance.launched_at)
            ));
        }
    }
    for (claim, count) in per_claim {
        if count > 1 {
            wrong.push(format!("nodeclaim {claim} has {count} instances"));
        }
    }
    for claim in &claims {
        if claim.metadata.deletion_timestamp.is_some() {
            wrong.push(format!("nodeclaim {} is still deleting", claim.name_any()));
        } else if !claim.is_ready() {
            wrong.push(format!("nodeclaim {} is not Ready", claim.name_any()));
        }
    }
    for node in &nodes {
        let name = node.name_any();
        if name == FOREIGN_NODE || node_provider_id(node) == foreign_id.as_deref() {
            continue;
        }
        if node.metadata.deletion_timestamp.is_some() {
            wrong.push(format!("node {name} is still deleting"));
        }
        if node_provider_id(node).is_none_or(|id| !claimed.contains_key(id)) {
            wrong.push(format!("node {name} has no NodeClaim"));
        }
    }
    let pods: Vec<Pod> = cluster
        .server
        .list::<Pod>()
        .into_iter()
        .filter(|p| p.labels().get("app").is_some_and(|a| a == APP))
        .collect();
    let pending = pods.iter().filter(|p| node_name(p).is_none()).count();
    if pending > 0 {
        wrong.push(format!("{pending} pod(s) pending"));
    }
    if pods.len() != kube.desired {
        wrong.push(format!("{} pod(s), {} desired", pods.len(), kube.desired));
    }
    wrong
}

/// A Node of another provider and an instance launched outside karpenter-rs (no NodePool
/// label, no NodeClaim object): both must outlive every restart untouched.
pub async fn put_foreign_capacity(cluster: &SimCluster) {
    cluster
        .server
        .put_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": FOREIGN_NODE, "labels": {"team": "other"}},
            "spec": {"providerID": "kind://docker/other/foreign-node",
                     "taints": [{"key": "dedicated", "value": "other", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}
        }))
        .unwrap();
    let sim = cluster.another_process_cloud();
    let cloud = SimCloud::restore(
        cluster.client.clone(),
        sim,
        LEDGER_NAMESPACE,
        cluster.clock.clone(),
        SimKubeletOptions::default(),
    )
    .await
    .unwrap();
    let machine: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": FOREIGN_MACHINE, "uid": "foreign-machine-uid", "labels": {"team": "other"}},
        "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["sim.large"]}],
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
    }))
    .unwrap();
    cloud.cloud_provider().create(&machine).await.unwrap();
}
