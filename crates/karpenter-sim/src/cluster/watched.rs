//! What the sim kubelet knows of the cluster, fed by watches ([`SimKubelet::watch`]): only what it
//! acts on. It used to list every pod, Node, NodeClaim and node Lease every second, which held
//! whole decoded lists (tens of MB at a few thousand pods) and made the API server serve them;
//! now each kind is listed once (100 objects a page, `karpenter_kube::watch`) and then followed,
//! and only these small views are kept:
//!
//! - Nodes: name, uid, creation/deletion time, providerID, taints and the Ready condition
//!   ([`node_view`]); a write fetches the whole Node first;
//! - NodeClaims: the names of those being deleted (followed as metadata only);
//! - node Leases: the last renewal time;
//! - pods bound to a node (`spec.nodeName!=`) that need the kubelet: not yet Ready, or
//!   terminating ([`PodWork`]). A Ready pod is forgotten until it is deleted.
//!
//! [`SimKubelet::watch`]: super::SimKubelet::watch

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::NodeClaim;
use karpenter_core::node::pod_is_ready;
use karpenter_core::pod::{self, Pod};
use karpenter_kube::lock;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource, ResourceExt};

/// A bound pod the kubelet has to start or finish deleting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PodWork {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub node: String,
    pub deleting: bool,
}

impl PodWork {
    /// `Some` when `pod` is bound and needs the kubelet: terminating, or not yet Ready.
    fn of(pod: &Pod) -> Option<PodWork> {
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())?;
        if karpenter_core::pod::is_terminal(pod) {
            return None;
        }
        let deleting = pod.metadata.deletion_timestamp.is_some();
        let started_unready = super::kubelet::never_ready(pod.metadata.labels.as_ref())
            && super::kubelet::started(pod);
        if !deleting && (pod_is_ready(pod) || started_unready) {
            return None;
        }
        Some(PodWork {
            namespace: pod::namespace(pod).to_string(),
            name: pod.name_any(),
            uid: pod.metadata.uid.clone(),
            node: node.to_string(),
            deleting,
        })
    }
}

/// The part of a Node the kubelet reads: enough for [`super::kubelet::node_lifecycle`] to decide
/// whether a write is due, and for a Lease's owner reference.
pub fn node_view(node: &Node) -> Node {
    Node {
        metadata: ObjectMeta {
            name: node.metadata.name.clone(),
            uid: node.metadata.uid.clone(),
            creation_timestamp: node.metadata.creation_timestamp.clone(),
            deletion_timestamp: node.metadata.deletion_timestamp.clone(),
            ..ObjectMeta::default()
        },
        spec: node.spec.as_ref().map(|s| NodeSpec {
            provider_id: s.provider_id.clone(),
            taints: s.taints.clone(),
            ..NodeSpec::default()
        }),
        status: node.status.as_ref().map(|s| NodeStatus {
            conditions: s
                .conditions
                .as_ref()
                .map(|c| c.iter().filter(|c| c.type_ == "Ready").cloned().collect()),
            ..NodeStatus::default()
        }),
    }
}

/// One kind's part of [`Watched`], rebuilt from each (re)list and updated by watch events.
trait Section<K>: Default {
    fn apply(&mut self, object: &K);
    fn delete(&mut self, object: &K);
}

/// Nodes by name, as [`node_view`]s.
#[derive(Debug, Default)]
/// Each view behind an `Arc`: a kubelet pass takes a copy of the map (it must not hold the lock
/// across its writes), which then copies pointers, not ~1,000 Nodes' labels (~3 MB a pass).
pub(crate) struct NodeViews(pub BTreeMap<String, Arc<Node>>);

impl Section<Node> for NodeViews {
    fn apply(&mut self, node: &Node) {
        self.0.insert(node.name_any(), Arc::new(node_view(node)));
    }
    fn delete(&mut self, node: &Node) {
        self.0.remove(&node.name_any());
    }
}

/// Names of NodeClaims being deleted. Followed as metadata only: a relist of whole NodeClaims
/// (up to 600 instance-type options and ~40 labels each) held ~16 MB at 1,000 nodes (heaptrack,
/// docs/benchmarks.md) for the names this keeps.
#[derive(Debug, Default)]
pub(crate) struct DeletingClaims(pub BTreeSet<String>);

impl Section<PartialObjectMeta<NodeClaim>> for DeletingClaims {
    fn apply(&mut self, claim: &PartialObjectMeta<NodeClaim>) {
        if claim.metadata.deletion_timestamp.is_some() {
            self.0.insert(claim.name_any());
        } else {
            self.0.remove(&claim.name_any());
        }
    }
    fn delete(&mut self, claim: &PartialObjectMeta<NodeClaim>) {
        self.0.remove(&claim.name_any());
    }
}

/// The last renewal of each node Lease, by Lease (= node) name.
#[derive(Debug, Default)]
pub(crate) struct LeaseRenewals(pub BTreeMap<String, Timestamp>);

impl Section<Lease> for LeaseRenewals {
    fn apply(&mut self, lease: &Lease) {
        match lease.spec.as_ref().and_then(|s| s.renew_time.as_ref()) {
            Some(at) => self.0.insert(lease.name_any(), at.0),
            None => self.0.remove(&lease.name_any()),
        };
    }
    fn delete(&mut self, lease: &Lease) {
        self.0.remove(&lease.name_any());
    }
}

/// Bound pods that need the kubelet, by `namespace/name`.
#[derive(Debug, Default)]
pub(crate) struct PodsToRun(pub BTreeMap<String, PodWork>);

impl Section<Pod> for PodsToRun {
    fn apply(&mut self, pod: &Pod) {
        match PodWork::of(pod) {
            Some(work) => self.0.insert(pod::key(pod), work),
            None => self.0.remove(&pod::key(pod)),
        };
    }
    fn delete(&mut self, pod: &Pod) {
        self.0.remove(&pod::key(pod));
    }
}

/// Which kinds have been listed at least once.
#[derive(Debug, Default, Clone, Copy)]
struct Synced {
    nodes: bool,
    claims: bool,
    leases: bool,
    pods: bool,
}

/// The kubelet's view of the cluster.
#[derive(Debug, Default)]
pub(crate) struct Watched {
    pub nodes: NodeViews,
    pub deleting_claims: DeletingClaims,
    pub leases: LeaseRenewals,
    pub pods: PodsToRun,
    synced: Synced,
}

impl Watched {
    /// Every kind has been listed: a sync may act (before that, a missing Node would look new).
    pub fn is_synced(&self) -> bool {
        let s = self.synced;
        s.nodes && s.claims && s.leases && s.pods
    }
}

/// Follows every kind the kubelet reads into `watched`, until the future is dropped.
pub(crate) async fn follow_all(
    client: kube::Client,
    lease_namespace: &str,
    watched: &Mutex<Watched>,
) {
    let pods_bound = karpenter_kube::watch::config().fields("spec.nodeName!=");
    let config = karpenter_kube::watch::config;
    futures::join!(
        follow(
            watcher::watcher(Api::<Node>::all(client.clone()), config()),
            watched,
            |w| (&mut w.nodes, &mut w.synced.nodes),
        ),
        follow(
            watcher::watcher(
                Api::<PartialObjectMeta<NodeClaim>>::all(client.clone()),
                config(),
            ),
            watched,
            |w| (&mut w.deleting_claims, &mut w.synced.claims),
        ),
        follow(
            watcher::watcher(
                Api::<Lease>::namespaced(client.clone(), lease_namespace),
                config(),
            ),
            watched,
            |w| (&mut w.leases, &mut w.synced.leases),
        ),
        follow(
            watcher::watcher(Api::<Pod>::all(client), pods_bound),
            watched,
            |w| (&mut w.pods, &mut w.synced.pods),
        ),
    );
}

/// Applies one kind's watch events to its section. A (re)list builds a fresh section and swaps
/// it in when complete, so readers never see half a list.
async fn follow<K, S>(
    events: impl Stream<Item = Result<Event<K>, watcher::Error>>,
    watched: &Mutex<Watched>,
    section: impl Fn(&mut Watched) -> (&mut S, &mut bool),
) where
    K: Resource + Clone + Debug + Send + 'static,
    S: Section<K>,
{
    let stream = events.default_backoff();
    futures::pin_mut!(stream);
    let mut initial: Option<S> = None;
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => initial = Some(S::default()),
            Ok(Event::InitApply(object)) => initial.get_or_insert_default().apply(&object),
            Ok(Event::InitDone) => {
                let fresh = initial.take().unwrap_or_default();
                let mut watched = lock(watched);
                let (current, synced) = section(&mut watched);
                *current = fresh;
                *synced = true;
            }
            Ok(Event::Apply(object)) => section(&mut lock(watched)).0.apply(&object),
            Ok(Event::Delete(object)) => section(&mut lock(watched)).0.delete(&object),
            Err(err) => tracing::warn!(error = %err, "sim kubelet: watch failed, retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn only_bound_pods_that_need_the_kubelet_are_kept() {
        let mut pods = PodsToRun::default();
        let pending =
            pod(json!({"metadata": {"name": "a", "namespace": "d"}, "spec": {"containers": []}}));
        pods.apply(&pending);
        assert!(pods.0.is_empty(), "not bound");
        let bound = pod(
            json!({"metadata": {"name": "a", "namespace": "d", "uid": "u"},
                               "spec": {"containers": [], "nodeName": "n1"}}),
        );
        pods.apply(&bound);
        assert_eq!(
            pods.0["d/a"],
            PodWork {
                namespace: "d".into(),
                name: "a".into(),
                uid: Some("u".into()),
                node: "n1".into(),
                deleting: false
            }
        );
        let mut running = bound.clone();
        running.status = Some(
            super::super::kubelet::running_status(
                &k8s_openapi::api::core::v1::Pod::default(),
                "10.0.0.1",
                "10.0.0.2",
                Timestamp::UNIX_EPOCH,
            )
            .into(),
        );
        pods.apply(&running);
        assert!(pods.0.is_empty(), "a Ready pod is forgotten");
        let mut terminating = running.clone();
        terminating.metadata.deletion_timestamp =
            bound.metadata.creation_timestamp.clone().or(Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
            ));
        pods.apply(&terminating);
        assert!(pods.0["d/a"].deleting);
        pods.delete(&terminating);
        assert!(pods.0.is_empty());
    }

    /// kwok's `unhealthy` stage: started once (Running, not Ready), then left alone.
    #[test]
    fn an_unhealthy_stage_pod_is_started_once_and_then_forgotten() {
        let mut pods = PodsToRun::default();
        let mut bound = pod(json!({"metadata": {"name": "a", "namespace": "d",
                                                "labels": {"kwok.x-k8s.io/stage": "unhealthy"}},
                                   "spec": {"containers": [], "nodeName": "n1"}}));
        pods.apply(&bound);
        assert!(!pods.0["d/a"].deleting, "to start");
        bound.status = Some(pod::PodStatus {
            phase: Some("Running".into()),
            ..pod::PodStatus::default()
        });
        pods.apply(&bound);
        assert!(
            pods.0.is_empty(),
            "running though not Ready: nothing more to do"
        );
        bound.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
        );
        pods.apply(&bound);
        assert!(
            pods.0["d/a"].deleting,
            "its deletion is still ours to finish"
        );
    }

    #[test]
    fn a_pod_without_a_namespace_is_keyed_in_default() {
        let mut pods = PodsToRun::default();
        let bound = pod(json!({"metadata": {"name": "a"},
                               "spec": {"containers": [], "nodeName": "n1"}}));
        pods.apply(&bound);
        assert_eq!(pods.0.keys().collect::<Vec<_>>(), ["default/a"]);
        assert_eq!(pods.0["default/a"].namespace, "default");
        pods.delete(&bound);
        assert!(pods.0.is_empty());
    }

    #[test]
    fn node_view_keeps_what_the_kubelet_reads() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "uid": "u1", "labels": {"a": "b"}, "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"providerID": "sim://r/z/i-1", "podCIDR": "10.0.0.0/24",
                     "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "False"}],
                       "allocatable": {"cpu": "4"}}
        }))
        .unwrap();
        let view = node_view(&node);
        assert_eq!(view.metadata.uid.as_deref(), Some("u1"));
        assert!(view.metadata.labels.is_none());
        let spec = view.spec.as_ref().unwrap();
        assert_eq!(spec.provider_id.as_deref(), Some("sim://r/z/i-1"));
        assert_eq!(spec.taints.as_ref().unwrap().len(), 1);
        assert!(spec.pod_cidr.is_none());
        let status = view.status.as_ref().unwrap();
        assert_eq!(status.conditions.as_ref().unwrap().len(), 1);
        assert!(status.allocatable.is_none());
    }
}
