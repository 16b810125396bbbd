//! The in-memory cluster state every controller reads: what the watchers have seen, joined
//! (Nodes with their NodeClaims, pods with their nodes) and annotated with what Karpenter itself
//! decided but the API has not reflected yet (nominations, just-created NodeClaims).
//!
//! Pure and synchronous: the controller's watchers call [`ClusterState::apply`] /
//! [`ClusterState::delete`] / [`ClusterState::reset`]; `simulate` builds a state from the objects
//! of its manifests the same way ([`ClusterState::from_objects`]), so both decide on the same
//! index.
//!
//! **Joining Nodes to NodeClaims** has one rule, upstream's: by provider ID (`Node.spec.providerID`
//! = `NodeClaim.status.providerID`). A Node without a provider ID (the cloud controller has not set
//! it yet) joins no NodeClaim: it is tracked under its name as an unmanaged node until it gets one,
//! and its NodeClaim meanwhile counts as in flight.

pub mod ignored;
pub mod node;
pub mod version;

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::pod::Pod;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    LimitRange, Namespace, Node, PersistentVolume, PersistentVolumeClaim,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use karpenter_api::v1::{EC2NodeClass, ValuesPool};
use karpenter_api::{NodeClaim, NodePool};
use kube_core::ResourceExt;

use crate::pod;

pub use node::StateNode;
pub use version::Source;

/// The kinds the state tracks; the state is synced once each has been listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Pod,
    Node,
    NodeClaim,
    NodePool,
    EC2NodeClass,
    DaemonSet,
    PodDisruptionBudget,
    PersistentVolumeClaim,
    PersistentVolume,
    StorageClass,
    Namespace,
    /// Admission defaults of pod resources (DaemonSet pods are planned with them).
    LimitRange,
}

impl Kind {
    pub const ALL: [Kind; 12] = [
        Kind::Pod,
        Kind::Node,
        Kind::NodeClaim,
        Kind::NodePool,
        Kind::EC2NodeClass,
        Kind::DaemonSet,
        Kind::PodDisruptionBudget,
        Kind::PersistentVolumeClaim,
        Kind::PersistentVolume,
        Kind::StorageClass,
        Kind::Namespace,
        Kind::LimitRange,
    ];
}

/// A pod Karpenter expects to land on a NodeClaim it created, until `until`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nomination {
    pub nodeclaim: String,
    pub until: Timestamp,
}

/// Everything the watchers have seen, plus Karpenter's own in-flight decisions. `Clone` gives
/// the controller a snapshot to decide on without holding its lock (pods are shared).
#[derive(Clone, Debug, Default)]
pub struct ClusterState {
    pub(crate) pods: BTreeMap<String, Arc<Pod>>,
    pub(crate) pods_by_node: BTreeMap<String, BTreeSet<String>>,
    /// For each controlling owner's UID (a ReplicaSet's, a StatefulSet's, a Job's), the key of
    /// one of its pods held in `pods`: a new pod of that owner shares the spec parts equal to
    /// that pod's ([`pod::share_parts`]), so the replicas of a Deployment hold one copy of their
    /// containers, tolerations and affinity instead of one each.
    pod_of_owner: BTreeMap<String, String>,
    pub(crate) nodes: BTreeMap<String, Arc<Node>>,
    pub(crate) nodeclaims: BTreeMap<String, Arc<NodeClaim>>,
    /// The NodeClaims' requirement values, one copy of each distinct list: the NodeClaims of one
    /// plan carry the same `instance-type In [...]` list of up to 600 names.
    nodeclaim_values: ValuesPool,
    pub(crate) nodepools: BTreeMap<String, NodePool>,
    pub(crate) nodeclasses: BTreeMap<String, EC2NodeClass>,
    pub(crate) daemonsets: BTreeMap<String, DaemonSet>,
    pub(crate) pdbs: BTreeMap<String, PodDisruptionBudget>,
    pub(crate) pvcs: BTreeMap<String, PersistentVolumeClaim>,
    pub(crate) pvs: BTreeMap<String, PersistentVolume>,
    pub(crate) storage_classes: BTreeMap<String, StorageClass>,
    pub(crate) namespaces: BTreeMap<String, Namespace>,
    pub(crate) limit_ranges: BTreeMap<String, LimitRange>,
    nominations: BTreeMap<String, Nomination>,
    listed: BTreeSet<Kind>,
    tombstones: version::Tombstones,
    ignored: ignored::IgnoredObjects,
    /// Node (or in-flight NodeClaim) names Karpenter decided to delete: the provisioner plans
    /// their pods elsewhere and takes no capacity from them.
    marked_for_deletion: BTreeSet<String>,
    /// Node names a disruption command is working on: nothing else may disrupt them meanwhile.
    being_disrupted: BTreeSet<String>,
    /// NodeClaim names a disruption command launched to take its candidates' pods, with those
    /// candidates' Node names: no command may disrupt a replacement while one of them is still
    /// in the state. Until the pods move, a replacement is an empty node, and with
    /// `consolidateAfter: 0s` emptiness would delete it as soon as it is initialized, before
    /// the candidates are drained onto it (then their pods need new nodes again).
    replacing: BTreeMap<String, BTreeSet<String>>,
    /// Node names whose disruption command rolled back, with the instant before which no pass
    /// decides them again (issue 33: the same command is not re-decided at once).
    rollback_holds: BTreeMap<String, Timestamp>,
}

/// `namespace/name` for namespaced objects, `name` for cluster-scoped ones.
pub fn object_key<K: kube_core::Resource>(obj: &K) -> String {
    match obj.meta().namespace.as_deref() {
        Some(ns) if !ns.is_empty() => {
            format!("{ns}/{}", obj.meta().name.as_deref().unwrap_or_default())
        }
        _ => obj.meta().name.clone().unwrap_or_default(),
    }
}

/// A Kubernetes kind the state keeps.
pub trait Tracked: kube_core::Resource + Clone + Send + Sync + 'static {
    const KIND: Kind;
    /// How the state holds it: the object itself, or (pods) shared, so the scheduler's input
    /// takes a pointer to each bound pod instead of a copy.
    type Stored: Borrow<Self> + Clone + From<Self> + Send + Sync;
    fn map(state: &mut ClusterState) -> &mut BTreeMap<String, Self::Stored>;

    /// The object's key in [`Tracked::map`].
    fn key(obj: &Self) -> String {
        object_key(obj)
    }

    /// Inserts or replaces the object.
    fn apply(state: &mut ClusterState, obj: Self) {
        Self::map(state).insert(object_key(&obj), obj.into());
    }

    fn delete(state: &mut ClusterState, obj: &Self) {
        Self::map(state).remove(&object_key(obj));
    }

    /// Replaces every object of this kind (after a fresh list).
    fn reset(state: &mut ClusterState, objs: Vec<Self>) {
        Self::map(state).clear();
        for obj in objs {
            Self::apply(state, obj);
        }
    }
}

/// `tracked!(Type, Kind, field)` keeps the objects themselves; `tracked!(Type, Kind, field,
/// shared)` keeps them behind `Arc`, as Nodes and NodeClaims are: the disruption pass decides on
/// a copy of the state (so it never holds the state's lock for seconds), and shared, that copy
/// costs a pointer per object instead of every Node and NodeClaim.
macro_rules! tracked {
    ($ty:ty, $kind:ident, $field:ident) => {
        tracked!($ty, $kind, $field, Self);
    };
    ($ty:ty, $kind:ident, $field:ident, shared) => {
        tracked!($ty, $kind, $field, Arc<Self>);
    };
    ($ty:ty, $kind:ident, $field:ident, $stored:ty) => {
        impl Tracked for $ty {
            const KIND: Kind = Kind::$kind;
            type Stored = $stored;
            fn map(state: &mut ClusterState) -> &mut BTreeMap<String, $stored> {
                &mut state.$field
            }
        }
    };
}

tracked!(Node, Node, nodes, shared);
tracked!(NodePool, NodePool, nodepools);
tracked!(EC2NodeClass, EC2NodeClass, nodeclasses);
tracked!(DaemonSet, DaemonSet, daemonsets);
tracked!(PodDisruptionBudget, PodDisruptionBudget, pdbs);
tracked!(PersistentVolumeClaim, PersistentVolumeClaim, pvcs);
tracked!(PersistentVolume, PersistentVolume, pvs);
tracked!(StorageClass, StorageClass, storage_classes);
tracked!(Namespace, Namespace, namespaces);
tracked!(LimitRange, LimitRange, limit_ranges);

impl Tracked for NodeClaim {
    const KIND: Kind = Kind::NodeClaim;
    type Stored = Arc<NodeClaim>;
    fn map(state: &mut ClusterState) -> &mut BTreeMap<String, Arc<NodeClaim>> {
        &mut state.nodeclaims
    }

    fn apply(state: &mut ClusterState, mut claim: NodeClaim) {
        for requirement in &mut claim.spec.requirements {
            state.nodeclaim_values.share(&mut requirement.values);
        }
        state.nodeclaims.insert(object_key(&claim), Arc::new(claim));
        // A replaced copy may have left lists no one holds; deletions prune too.
        if state.nodeclaim_values.len() > 4 * state.nodeclaims.len() + 64 {
            state.nodeclaim_values.prune();
        }
    }

    fn delete(state: &mut ClusterState, claim: &NodeClaim) {
        state.nodeclaims.remove(&object_key(claim));
        state.nodeclaim_values.prune();
    }

    fn reset(state: &mut ClusterState, claims: Vec<NodeClaim>) {
        state.nodeclaims.clear();
        state.nodeclaim_values.prune();
        for claim in claims {
            Self::apply(state, claim);
        }
    }
}

impl Tracked for Pod {
    const KIND: Kind = Kind::Pod;
    type Stored = Arc<Pod>;
    fn map(state: &mut ClusterState) -> &mut BTreeMap<String, Arc<Pod>> {
        &mut state.pods
    }

    fn key(pod: &Self) -> String {
        pod::key(pod)
    }

    fn apply(state: &mut ClusterState, mut pod: Pod) {
        let key = pod::key(&pod);
        state.share_pod_parts(&key, &mut pod);
        state.unindex_pod(&key);
        if let Some(node) = pod::node_name(&pod) {
            state
                .pods_by_node
                .entry(node.to_string())
                .or_default()
                .insert(key.clone());
            // Bound: whatever we nominated it to no longer matters.
            state.nominations.remove(&key);
        }
        state.pods.insert(key, Arc::new(pod));
    }

    fn delete(state: &mut ClusterState, pod: &Pod) {
        let key = pod::key(pod);
        state.unindex_pod(&key);
        state.pods.remove(&key);
        state.nominations.remove(&key);
        if let Some(owner) = pod::controller_uid(pod)
            && state.pod_of_owner.get(owner) == Some(&key)
        {
            state.pod_of_owner.remove(owner);
        }
    }

    fn reset(state: &mut ClusterState, pods: Vec<Pod>) {
        state.pods.clear();
        state.pods_by_node.clear();
        state.pod_of_owner.clear();
        for pod in pods {
            Self::apply(state, pod);
        }
    }
}

impl ClusterState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a state from objects, as if every watcher had listed them.
    pub fn from_objects(
        nodepools: Vec<NodePool>,
        nodeclaims: Vec<NodeClaim>,
        nodes: Vec<Node>,
        pods: Vec<Pod>,
    ) -> Self {
        let mut state = ClusterState::new();
        state.reset(nodepools);
        state.reset(nodeclaims);
        state.reset(nodes);
        state.reset(pods);
        for kind in Kind::ALL {
            state.mark_listed(kind);
        }
        state
    }

    /// Takes a watched copy, unless the state already holds a newer one (see [`version`]).
    pub fn apply<K: Tracked>(&mut self, obj: K) {
        self.apply_from(obj, Source::Watch);
    }

    /// Takes the answer to this replica's own write, so the next decision sees it before the
    /// watch delivers it; never replaces a newer (or an incomparable watched) copy, never
    /// revives an object the watch reported deleted. Returns whether the copy was taken.
    pub fn remember<K: Tracked>(&mut self, obj: K) -> bool {
        self.apply_from(obj, Source::OwnWrite)
    }

    fn apply_from<K: Tracked>(&mut self, obj: K, source: Source) -> bool {
        let key = K::key(&obj);
        let incoming = version::resource_version(&obj);
        if self.tombstones.is_ghost(K::KIND, &key, incoming) {
            return false;
        }
        let current = K::map(self)
            .get(&key)
            .map(|o| version::resource_version(o.borrow()));
        if !version::may_replace(current, incoming, source) {
            return false;
        }
        self.ignored.remove(K::KIND, &key);
        K::apply(self, obj);
        true
    }

    pub fn delete<K: Tracked>(&mut self, obj: &K) {
        if let Some(rv) = version::resource_version(obj) {
            self.tombstones.bury(K::KIND, &K::key(obj), rv);
        }
        K::delete(self, obj);
    }

    /// Skips an object that cannot be decoded: records it and drops any older decoded copy (the
    /// object as it is now is unknown). Returns whether this is news worth logging.
    pub fn ignore<K: Tracked>(&mut self, object: ignored::IgnoredObject) -> bool {
        self.forget_decoded::<K>(&object.key);
        self.ignored.insert(object)
    }

    /// An undecodable object was deleted.
    pub fn forget<K: Tracked>(&mut self, key: &str) {
        self.ignored.remove(K::KIND, key);
        self.forget_decoded::<K>(key);
    }

    fn forget_decoded<K: Tracked>(&mut self, key: &str) {
        if let Some(old) = K::map(self).get(key).cloned() {
            K::delete(self, old.borrow());
        }
    }

    /// After a list: exactly these objects of the kind are skipped.
    pub fn reset_ignored(&mut self, kind: Kind, objects: Vec<ignored::IgnoredObject>) {
        self.ignored.clear(kind);
        for object in objects {
            self.ignored.insert(object);
        }
    }

    pub fn ignored_objects(&self) -> &ignored::IgnoredObjects {
        &self.ignored
    }

    /// Replaces all objects of the kind and records that it has been listed.
    pub fn reset<K: Tracked>(&mut self, objs: Vec<K>) {
        self.tombstones.clear(K::KIND);
        K::reset(self, objs);
        self.listed.insert(K::KIND);
    }

    pub fn mark_listed(&mut self, kind: Kind) {
        self.listed.insert(kind);
    }

    /// Every watcher has completed its initial list, so decisions see the whole cluster.
    pub fn synced(&self) -> bool {
        Kind::ALL.iter().all(|k| self.listed.contains(k))
    }

    /// Kinds not listed yet (for the "waiting on cluster sync" log).
    pub fn unsynced_kinds(&self) -> Vec<Kind> {
        Kind::ALL
            .into_iter()
            .filter(|k| !self.listed.contains(k))
            .collect()
    }

    /// Makes `pod` (about to be held under `key`) share its equal spec parts with the version it
    /// replaces, or else with the pod its owner's entry names; a pod of an owner without a live
    /// entry becomes the owner's entry.
    fn share_pod_parts(&mut self, key: &str, pod: &mut Pod) {
        let Some(owner) = pod::controller_uid(pod).map(str::to_string) else {
            return;
        };
        let sibling_key = self
            .pod_of_owner
            .get(&owner)
            .filter(|k| self.pods.contains_key(k.as_str()));
        let sibling = self
            .pods
            .get(key)
            .or_else(|| sibling_key.and_then(|k| self.pods.get(k)));
        if let Some(sibling) = sibling {
            pod::share_parts(pod, sibling);
        }
        if sibling_key.is_none() {
            self.pod_of_owner.insert(owner, key.to_string());
        }
    }

    fn unindex_pod(&mut self, key: &str) {
        let old_node = self
            .pods
            .get(key)
            .and_then(|p| pod::node_name(p))
            .map(str::to_string);
        if let Some(node) = old_node
            && let Some(set) = self.pods_by_node.get_mut(&node)
        {
            set.remove(key);
            if set.is_empty() {
                self.pods_by_node.remove(&node);
            }
        }
    }

    pub fn pods(&self) -> impl Iterator<Item = &Pod> {
        self.pods.values().map(|p| &**p)
    }

    pub fn pod(&self, key: &str) -> Option<&Pod> {
        self.pods.get(key).map(|p| &**p)
    }

    /// Pods bound to `node_name`.
    pub fn pods_on_node(&self, node_name: &str) -> impl Iterator<Item = &Pod> {
        self.pods_on_node_shared(node_name).map(|p| &**p)
    }

    /// Pods bound to `node_name`, as the state shares them (a clone is a pointer).
    pub fn pods_on_node_shared(&self, node_name: &str) -> impl Iterator<Item = &Arc<Pod>> {
        self.pods_by_node
            .get(node_name)
            .into_iter()
            .flatten()
            .filter_map(|key| self.pods.get(key))
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values().map(|n| &**n)
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name).map(|n| &**n)
    }

    pub fn nodeclaims(&self) -> impl Iterator<Item = &NodeClaim> {
        self.nodeclaims.values().map(|c| &**c)
    }

    pub fn nodeclaim(&self, name: &str) -> Option<&NodeClaim> {
        self.nodeclaims.get(name).map(|c| &**c)
    }

    pub fn nodepools(&self) -> impl Iterator<Item = &NodePool> {
        self.nodepools.values()
    }

    pub fn nodepool(&self, name: &str) -> Option<&NodePool> {
        self.nodepools.get(name)
    }

    pub fn nodeclass(&self, name: &str) -> Option<&EC2NodeClass> {
        self.nodeclasses.get(name)
    }

    pub fn nodeclasses(&self) -> impl Iterator<Item = &EC2NodeClass> {
        self.nodeclasses.values()
    }

    pub fn daemonsets(&self) -> impl Iterator<Item = &DaemonSet> {
        self.daemonsets.values()
    }

    /// The LimitRanges of `namespace` (whose defaults admission gives the pods created there).
    pub fn limit_ranges<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a LimitRange> {
        self.limit_ranges
            .values()
            .filter(move |lr| lr.metadata.namespace.as_deref().unwrap_or("default") == namespace)
    }

    pub fn pdbs(&self) -> impl Iterator<Item = &PodDisruptionBudget> {
        self.pdbs.values()
    }

    pub fn pvc(&self, namespace: &str, name: &str) -> Option<&PersistentVolumeClaim> {
        self.pvcs.get(&format!("{namespace}/{name}"))
    }

    pub fn pv(&self, name: &str) -> Option<&PersistentVolume> {
        self.pvs.get(name)
    }

    pub fn storage_class(&self, name: &str) -> Option<&StorageClass> {
        self.storage_classes.get(name)
    }

    pub fn pvcs(&self) -> impl Iterator<Item = &PersistentVolumeClaim> {
        self.pvcs.values()
    }

    pub fn pvs(&self) -> impl Iterator<Item = &PersistentVolume> {
        self.pvs.values()
    }

    pub fn storage_classes(&self) -> impl Iterator<Item = &StorageClass> {
        self.storage_classes.values()
    }

    pub fn namespaces(&self) -> impl Iterator<Item = &Namespace> {
        self.namespaces.values()
    }

    pub fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces.get(name)
    }

    /// Marks a node (or in-flight NodeClaim, by name) as going away: its pods are planned for
    /// elsewhere and it offers no capacity. Returns whether the mark is new.
    pub fn mark_for_deletion(&mut self, name: &str) -> bool {
        self.marked_for_deletion.insert(name.to_string())
    }

    /// Drops the mark (the deletion was abandoned). Returns whether it was set.
    pub fn unmark_for_deletion(&mut self, name: &str) -> bool {
        self.marked_for_deletion.remove(name)
    }

    /// Marked by [`ClusterState::mark_for_deletion`] (the objects' own deletion timestamps are
    /// read by [`StateNode::marked_for_deletion`]).
    pub fn is_marked_for_deletion(&self, name: &str) -> bool {
        self.marked_for_deletion.contains(name)
    }

    /// Marks a node as being disrupted by a command in progress. Returns whether it is new.
    pub fn mark_being_disrupted(&mut self, name: &str) -> bool {
        self.being_disrupted.insert(name.to_string())
    }

    pub fn unmark_being_disrupted(&mut self, name: &str) -> bool {
        self.being_disrupted.remove(name)
    }

    pub fn is_being_disrupted(&self, name: &str) -> bool {
        self.being_disrupted.contains(name)
    }

    /// Marks NodeClaim `name` as a replacement for the Nodes `candidates` (see
    /// [`ClusterState::is_replacing`]); forgets the marks that no longer protect anything.
    pub fn mark_replacing<'n>(
        &mut self,
        name: &str,
        candidates: impl IntoIterator<Item = &'n str>,
    ) {
        let nodes = &self.nodes;
        let nodeclaims = &self.nodeclaims;
        self.replacing.retain(|claim, of| {
            nodeclaims.contains_key(claim) && of.iter().any(|c| nodes.contains_key(c))
        });
        self.replacing.insert(
            name.to_string(),
            candidates.into_iter().map(str::to_string).collect(),
        );
    }

    /// Drops the mark of a replacement whose command rolled back.
    pub fn unmark_replacing(&mut self, name: &str) -> bool {
        self.replacing.remove(name).is_some()
    }

    /// Drops every replacement mark (a replica that stops leading forgets its commands).
    pub fn clear_replacing(&mut self) {
        self.replacing.clear();
    }

    /// Whether NodeClaim `name` replaces Nodes of a disruption command that are still in the
    /// state: it is no candidate itself until they are gone (their pods are on their way to
    /// it; once they are pending, the provisioner's nomination protects it while they land).
    pub fn is_replacing(&self, name: &str) -> bool {
        self.replacing
            .get(name)
            .is_some_and(|of| of.iter().any(|c| self.nodes.contains_key(c)))
    }

    /// Holds node `name` out of disruption decisions until `until` (its command rolled back,
    /// see [`crate::disruption::orchestration::command::hold_after_rollback`]). Holds that
    /// ended before `now` are forgotten, so a reused Node name starts free.
    pub fn hold_after_rollback(&mut self, name: &str, until: Timestamp, now: Timestamp) {
        self.rollback_holds.retain(|_, held| *held > now);
        self.rollback_holds.insert(name.to_string(), until);
    }

    /// The instant node `name`'s rollback hold ends, if it has one (possibly past).
    pub fn rollback_hold(&self, name: &str) -> Option<Timestamp> {
        self.rollback_holds.get(name).copied()
    }

    /// Records that `pod_key` should land on `nodeclaim`; until `until` the pod is not
    /// provisioned for again.
    pub fn nominate(&mut self, pod_key: &str, target: &str, until: Timestamp) {
        // Bound since the pass's snapshot: the binding is what counts.
        if self.pods.get(pod_key).is_some_and(|p| is_bound(p)) {
            return;
        }
        let nodeclaim = self.nomination_key(target);
        self.nominations
            .insert(pod_key.to_string(), Nomination { nodeclaim, until });
    }

    /// The name a nomination to `target` (a NodeClaim's or a Node's name, as the scheduler's
    /// placements name them) is kept under: the NodeClaim's when the node has one, else the
    /// Node's. A placement on a registered node names the Node; kept under the Node's name, the
    /// nomination was never judged by [`Self::displaced_nominations`] nor counted against the
    /// node's room, and a pod the kube-scheduler could not fit there waited out its whole window.
    pub fn nomination_key(&self, target: &str) -> String {
        if self.nodeclaims.contains_key(target) {
            return target.to_string();
        }
        let provider_id = self
            .nodes
            .get(target)
            .and_then(|n| n.spec.as_ref()?.provider_id.as_deref())
            .filter(|id| !id.is_empty());
        provider_id
            .and_then(|id| {
                self.nodeclaims()
                    .find(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(id))
            })
            .map_or_else(|| target.to_string(), ResourceExt::name_any)
    }

    /// The NodeClaim `pod_key` is nominated to, if the nomination is still live at `now`.
    pub fn nomination(&self, pod_key: &str, now: Timestamp) -> Option<&Nomination> {
        self.nominations.get(pod_key).filter(|n| n.until > now)
    }

    /// Drops expired nominations.
    pub fn expire_nominations(&mut self, now: Timestamp) {
        self.nominations.retain(|_, n| n.until > now);
    }

    /// Drops the live nominations a registered Node can no longer honour, and returns the pods
    /// released (by key, in order).
    ///
    /// The kube-scheduler binds whichever pending pod fits first, often other pods than those a
    /// pass planned onto a node, so the room a nomination reserved may be gone. Upstream
    /// re-simulates every pending pod each pass; here a nomination holds while its node still
    /// has room for it after the pods bound there and the nominations kept before it (by pod
    /// key), so a displaced pod is planned for in the next pass instead of waiting out its
    /// window. Only an initialized Node is judged: before, nothing is bound there (the
    /// kube-scheduler waits for Ready and the startup taints) and its allocatable may still lack
    /// what a device plugin registers later, so an in-flight or registering NodeClaim keeps
    /// every nomination.
    pub fn release_displaced_nominations(&mut self, now: Timestamp) -> Vec<String> {
        let released = self.displaced_nominations(now);
        for key in &released {
            self.nominations.remove(key);
        }
        released
    }

    /// The pods [`Self::release_displaced_nominations`] would release, without releasing them
    /// (a reader's check before it takes the writer's lock).
    pub fn displaced_nominations(&self, now: Timestamp) -> Vec<String> {
        let mut by_claim: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (key, nomination) in &self.nominations {
            if nomination.until > now {
                by_claim
                    .entry(nomination.nodeclaim.as_str())
                    .or_default()
                    .push(key.as_str());
            }
        }
        if by_claim.is_empty() {
            return Vec::new();
        }
        let mut released = Vec::new();
        for node in self.state_nodes() {
            if node.node.is_none() || !node.initialized() {
                continue;
            }
            let Some(keys) = by_claim.get(node.nomination_key().as_str()) else {
                continue;
            };
            let mut room = node.available();
            for key in keys {
                let Some(pod) = self.pods.get(*key).filter(|p| !is_bound(p)) else {
                    continue;
                };
                match pod::effective_requests(pod) {
                    Ok(requests) if room.fits(&requests) => room.sub_floor_zero(&requests),
                    _ => released.push((*key).to_string()),
                }
            }
        }
        released
    }

    /// Pods waiting for capacity that Karpenter has not already planned for.
    pub fn provisionable_pods(&self, now: Timestamp) -> Vec<&Pod> {
        self.provisionable_pods_shared(now)
            .into_iter()
            .map(|pod| &**pod)
            .collect()
    }

    /// [`ClusterState::provisionable_pods`] as the state holds them (shared, not copied).
    pub fn provisionable_pods_shared(&self, now: Timestamp) -> Vec<&Arc<Pod>> {
        self.pods
            .iter()
            .filter(|(key, pod)| pod::is_provisionable(pod) && self.nomination(key, now).is_none())
            .map(|(_, pod)| pod)
            .collect()
    }

    /// Nodes joined with their NodeClaims (by provider ID), plus NodeClaims still in flight (no
    /// Node yet) and Nodes Karpenter does not manage. Ordered by name.
    pub fn state_nodes(&self) -> Vec<StateNode<'_>> {
        let mut claims_by_provider: BTreeMap<&str, &NodeClaim> = BTreeMap::new();
        for claim in self.nodeclaims() {
            if let Some(id) = claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .filter(|id| !id.is_empty())
            {
                claims_by_provider.insert(id, claim);
            }
        }
        let mut joined: BTreeSet<String> = BTreeSet::new();
        let mut out = Vec::new();
        for node in self.nodes() {
            let provider_id = node
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .unwrap_or_default();
            let claim = claims_by_provider.get(provider_id).copied();
            if let Some(claim) = claim {
                joined.insert(claim.name_any());
            }
            let name = node.name_any();
            let mut joined_node =
                StateNode::new(Some(node), claim, self.pods_on_node(&name).collect());
            joined_node.marked = self.is_marked_for_deletion(&name)
                || claim.is_some_and(|c| self.is_marked_for_deletion(&c.name_any()));
            out.push(joined_node);
        }
        for claim in self.nodeclaims() {
            let name = claim.name_any();
            if !joined.contains(&name) {
                let mut in_flight = StateNode::new(None, Some(claim), Vec::new());
                in_flight.marked = self.is_marked_for_deletion(&name);
                out.push(in_flight);
            }
        }
        out
    }

    /// Pods nominated to `nodeclaim` and still pending.
    pub fn nominated_pods(&self, nodeclaim: &str, now: Timestamp) -> Vec<&Pod> {
        self.nominated_pods_shared(nodeclaim, now)
            .map(|p| &**p)
            .collect()
    }

    /// [`nominated_pods`](Self::nominated_pods), as the state shares them.
    pub fn nominated_pods_shared(
        &self,
        nodeclaim: &str,
        now: Timestamp,
    ) -> impl Iterator<Item = &Arc<Pod>> {
        self.nominations
            .iter()
            .filter(move |(_, n)| n.nodeclaim == nodeclaim && n.until > now)
            .filter_map(|(key, _)| self.pods.get(key))
            // A pass nominates after its snapshot: a pod the kube-scheduler bound meanwhile
            // already uses its node's room and must not hold the nominated one too.
            .filter(|pod| !is_bound(pod))
    }
}

#[cfg(any(test, feature = "test-fixtures"))]
pub mod fixtures;

#[cfg(test)]
mod tests;

/// Whether the pod has been bound to a node (`spec.nodeName`).
fn is_bound(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}
