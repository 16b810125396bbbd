//! The simulated cluster `simulate --disruption` runs on: the input's Nodes, NodeClaims and bound
//! pods plus everything the simulation launched, kept as API objects so every step builds the
//! same [`ClusterState`] the controller would see. Pods that lose their node go through the
//! provisioning pipeline again (the code of the first plan, [`crate::plan_with`], without its
//! cost bound).

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::NodeClaim;
use karpenter_api::v1::{
    CONDITION_TRUE, ConditionsExt, NODECLAIM_CONDITION_INITIALIZED, NODECLAIM_CONDITION_LAUNCHED,
    NODECLAIM_CONDITION_REGISTERED, NodeClaimStatus,
};
use karpenter_api::well_known as wk;
use karpenter_core::disruption::candidates::OfferingCatalog;
use karpenter_core::instance_type::InstanceType;
use karpenter_core::pod::{self, Pod, PodCondition, PodStatus};
use karpenter_core::provisioning::reschedulable::moves_with_its_node;
use karpenter_core::scheduling::SchedulerOptions;
use karpenter_core::state::ClusterState;
use kube_core::ResourceExt;

use super::report::{NodeReport, ReplacementReport, UnschedulableReport};
use crate::manifests::Manifests;
use crate::pending::PendingPod;
use crate::plan::{PlanOutcome, SimulateError, plan_placements};
use karpenter_core::disruption::orchestration::pdb;
use karpenter_sim::SimCloudProvider;
use karpenter_sim::launch::LaunchChoice;

/// How long a launched node takes to initialize in virtual time (issue 10).
pub const INITIALIZATION: SignedDuration = SignedDuration::from_secs(60);

/// The simulated cluster and the catalogue it is priced with.
pub struct SimCluster<'p> {
    /// The input without its pending pods: NodePools, NodeClasses, PDBs, DaemonSets, volumes.
    base: Manifests,
    provider: &'p SimCloudProvider,
    options: SchedulerOptions,
    pub(super) pool_types: BTreeMap<String, Vec<Arc<InstanceType>>>,
    /// By name. A launched node's Node and NodeClaim share the name.
    nodes: BTreeMap<String, Node>,
    claims: BTreeMap<String, NodeClaim>,
    /// Bound pods by `namespace/name`.
    pods: BTreeMap<String, Pod>,
    /// NodeClaims launched by the simulation that initialize at the given instant.
    initializing: BTreeMap<String, Timestamp>,
    /// Prices of what the simulation launched (input nodes are priced from the catalogue).
    launched_prices: BTreeMap<String, f64>,
    /// Per NodePool: the last number used in a launched NodeClaim's name.
    counters: BTreeMap<String, usize>,
    pub(super) unschedulable: Vec<UnschedulableReport>,
    /// Per PDB (`namespace/name`): the pods it expects, fixed once the first plan is applied.
    pdb_expected: BTreeMap<String, i32>,
    /// How many changes the objects went through: a pass on an unchanged cluster decides as
    /// the last one did (see [`super::polls`]).
    changes: u64,
}

impl<'p> SimCluster<'p> {
    /// The input cluster at `now`: bound pods count as bound at `now` and every NodeClaim's last
    /// pod event is `now` (the simulation knows no history before it).
    pub fn new(
        manifests: &Manifests,
        provider: &'p SimCloudProvider,
        options: SchedulerOptions,
        pool_types: BTreeMap<String, Vec<Arc<InstanceType>>>,
        now: Timestamp,
    ) -> Self {
        let mut base = manifests.clone();
        base.pending_pods.clear();
        base.ignored.clear();
        let nodes = std::mem::take(&mut base.nodes)
            .into_iter()
            .map(|n| (n.name_any(), n))
            .collect();
        let now_text = now.to_string();
        let claims = std::mem::take(&mut base.node_claims)
            .into_iter()
            .map(|mut c| {
                c.status
                    .get_or_insert_with(Default::default)
                    .last_pod_event_time = Some(now_text.clone());
                (c.name_any(), c)
            })
            .collect();
        let pods = std::mem::take(&mut base.bound_pods)
            .into_iter()
            .map(|mut p| {
                mark_scheduled(&mut p, now);
                // Input pods on existing nodes run; one that says it is not Ready keeps that.
                if !has_condition(&p, "Ready") {
                    set_ready(&mut p, true, now);
                }
                (pod::key(&p), p)
            })
            .collect();
        SimCluster {
            base,
            provider,
            options,
            pool_types,
            nodes,
            claims,
            pods,
            initializing: BTreeMap::new(),
            launched_prices: BTreeMap::new(),
            counters: BTreeMap::new(),
            unschedulable: Vec::new(),
            pdb_expected: BTreeMap::new(),
            changes: 0,
        }
    }

    /// The objects as the input to another plan (or to [`ClusterState`]).
    fn manifests(&self, pending: Vec<PendingPod>) -> Manifests {
        let mut m = self.base.clone();
        m.nodes = self.nodes.values().cloned().collect();
        m.node_claims = self.claims.values().cloned().collect();
        m.bound_pods = self.pods.values().cloned().collect();
        m.pending_pods = pending;
        m
    }

    /// The cluster as the controller's state would hold it.
    pub fn state(&self) -> ClusterState {
        self.manifests(Vec::new()).cluster_state()
    }

    pub fn scheduler_options(&self) -> &SchedulerOptions {
        &self.options
    }

    /// Puts the first plan's NodeClaims in the cluster, initialized at `now`, with their pods.
    pub fn apply_first_plan(
        &mut self,
        manifests: &Manifests,
        outcome: &PlanOutcome,
        now: Timestamp,
    ) {
        let mut pending: BTreeMap<String, Pod> = manifests
            .pending_pods
            .iter()
            .map(|p| {
                let mut pod = p.pod().clone();
                pod.metadata.name = Some(p.name());
                (p.key(), pod)
            })
            .collect();
        self.apply_outcome(outcome, &mut pending, now, now);
        for pod in &outcome.plan.unschedulable {
            self.unschedulable
                .push(unschedulable(&pod.pod, &pod.reason));
        }
        self.pdb_expected = self
            .base
            .pdbs
            .iter()
            .map(|pdb| (pdb::key(pdb), pdb::matching(pdb, self.pods.values())))
            .collect();
        self.refresh_pdb_status();
    }

    /// Writes every PDB's status as the disruption controller would from the pods now, so the
    /// pass and the evictions read the same numbers.
    pub fn refresh_pdb_status(&mut self) {
        let Self {
            base,
            pods,
            pdb_expected,
            ..
        } = self;
        for budget in &mut base.pdbs {
            let expected = pdb_expected.get(&pdb::key(budget)).copied().unwrap_or(0);
            budget.status = Some(pdb::counts(budget, pods.values(), expected).status());
        }
    }

    /// Every PDB with its counts over the pods bound now.
    pub fn pdb_counts(&self) -> Vec<(&PodDisruptionBudget, pdb::PdbCounts)> {
        self.base
            .pdbs
            .iter()
            .map(|budget| {
                let expected = self
                    .pdb_expected
                    .get(&pdb::key(budget))
                    .copied()
                    .unwrap_or(0);
                (budget, pdb::counts(budget, self.pods.values(), expected))
            })
            .collect()
    }

    /// The pods bound to `node`.
    pub fn pods_on(&self, node: &str) -> Vec<&Pod> {
        self.pods
            .values()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .collect()
    }

    /// Takes pod `key` off its node (an eviction); the caller decides where it goes.
    pub fn evict(&mut self, key: &str) -> Option<Pod> {
        self.changed();
        self.pods.remove(key)
    }

    /// The number of changes so far; it grows with every write to a Node, NodeClaim or pod.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    fn changed(&mut self) {
        self.changes = self.changes.wrapping_add(1);
    }

    /// `karpenter.sh/disrupted:NoSchedule` on the Node (`on`), as the orchestration queue taints a
    /// candidate: no pod is placed there any more; or off again, as a rollback untaints it.
    pub fn taint_disrupted(&mut self, node: &str, on: bool) {
        self.changed();
        let Some(spec) = self
            .nodes
            .get_mut(node)
            .map(|n| n.spec.get_or_insert_with(Default::default))
        else {
            return;
        };
        let taints = spec.taints.get_or_insert_with(Vec::new);
        taints.retain(|t| t.key != wk::DISRUPTED_TAINT_KEY);
        if on {
            taints.push(Taint {
                key: wk::DISRUPTED_TAINT_KEY.to_string(),
                effect: "NoSchedule".to_string(),
                ..Default::default()
            });
        }
        if taints.is_empty() {
            spec.taints = None;
        }
    }

    /// The NodeClaim of Node `node` (joined by provider ID, else by name).
    pub fn claim_of_node(&self, node: &str) -> Option<&NodeClaim> {
        let provider_id = self
            .nodes
            .get(node)
            .and_then(|n| n.spec.as_ref()?.provider_id.as_deref());
        self.claims
            .values()
            .find(|c| {
                provider_id.is_some()
                    && c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == provider_id
            })
            .or_else(|| self.claims.get(node))
    }

    /// The `karpenter.sh/nodepool` label of Node `node`.
    pub fn node_pool_of(&self, node: &str) -> Option<String> {
        self.nodes
            .get(node)?
            .labels()
            .get(wk::NODEPOOL_LABEL)
            .cloned()
    }

    pub fn has_node(&self, node: &str) -> bool {
        self.nodes.contains_key(node)
    }

    /// The Node carries `karpenter.sh/initialized=true` (or is gone: nothing left to wait for).
    pub fn initialized_or_gone(&self, node: &str) -> bool {
        self.nodes.get(node).is_none_or(|n| {
            n.labels()
                .get(wk::NODE_INITIALIZED_LABEL)
                .is_some_and(|v| v == "true")
        })
    }

    /// Launches the NodeClaims of a plan (named afresh), binds the placed pods at `now` and
    /// records the launched nodes; the nodes initialize at `initialized_at`.
    fn apply_outcome(
        &mut self,
        outcome: &PlanOutcome,
        pending: &mut BTreeMap<String, Pod>,
        now: Timestamp,
        initialized_at: Timestamp,
    ) -> Vec<ReplacementReport> {
        let mut launched = Vec::new();
        for (planned, claim) in outcome.plan.node_claims.iter().zip(&outcome.node_claims) {
            let choice = LaunchChoice {
                instance_type: planned.instance_type.clone(),
                zone: planned.zone.clone(),
                capacity_type: planned.capacity_type.clone(),
                price: planned.price,
            };
            let name = self.launch(claim.clone(), &choice, now, Some(initialized_at));
            for key in &planned.pods {
                if let Some(pod) = pending.remove(key) {
                    self.bind(pod, &name, now);
                }
            }
            launched.push(replacement_report(&name, &choice));
        }
        for placement in &outcome.plan.existing_nodes {
            for key in &placement.pods {
                if let Some(pod) = pending.remove(key) {
                    self.bind(pod, &placement.name, now);
                }
            }
        }
        launched
    }

    /// Adds a Node and its NodeClaim for `claim` launched as `choice`; returns the name. It
    /// initializes at `initialized_at` (`None`: never).
    pub fn launch(
        &mut self,
        mut claim: NodeClaim,
        choice: &LaunchChoice,
        now: Timestamp,
        initialized_at: Option<Timestamp>,
    ) -> String {
        let pool = claim.nodepool_name().unwrap_or_default().to_string();
        let name = self.fresh_name(&pool);
        let launched_type = self
            .pool_types
            .get(&pool)
            .into_iter()
            .flatten()
            .find(|t| t.name == choice.instance_type)
            .cloned();
        let mut labels = launched_type
            .as_ref()
            .map(|t| t.labels.clone())
            .unwrap_or_default();
        labels.insert(wk::ZONE_LABEL.to_string(), choice.zone.clone());
        labels.insert(
            wk::CAPACITY_TYPE_LABEL.to_string(),
            choice.capacity_type.clone(),
        );
        labels.extend(claim.metadata.labels.clone().unwrap_or_default());
        labels.insert(wk::HOSTNAME_LABEL.to_string(), name.clone());
        labels.insert(wk::NODE_REGISTERED_LABEL.to_string(), "true".to_string());
        let allocatable = launched_type
            .as_ref()
            .map(|t| t.allocatable().to_k8s())
            .unwrap_or_default();
        let capacity = launched_type
            .as_ref()
            .map(|t| t.capacity.to_k8s())
            .unwrap_or_default();
        let provider_id = format!("sim:///{}/{name}", choice.zone);
        let created = Time(now);
        claim.metadata.name = Some(name.clone());
        claim.metadata.generate_name = None;
        claim.metadata.creation_timestamp = Some(created.clone());
        let mut claim_labels = labels.clone();
        claim_labels.remove(wk::HOSTNAME_LABEL);
        claim.metadata.labels = Some(claim_labels);
        let status = claim.status.get_or_insert_with(NodeClaimStatus::default);
        status.provider_id = Some(provider_id.clone());
        status.node_name = Some(name.clone());
        status.capacity = capacity.clone();
        status.allocatable = allocatable.clone();
        let at = now.to_string();
        for condition in [NODECLAIM_CONDITION_LAUNCHED, NODECLAIM_CONDITION_REGISTERED] {
            status.set_condition(condition, CONDITION_TRUE, condition, "", &at, None);
        }
        let node = Node {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels),
                creation_timestamp: Some(created),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(provider_id),
                taints: Some(claim.spec.taints.clone()).filter(|t| !t.is_empty()),
                ..Default::default()
            }),
            // The kubelet reports Ready once registered: a launched node that is not Ready
            // would count against its NodePool's disruption budget for good.
            status: Some(NodeStatus {
                capacity: Some(capacity),
                allocatable: Some(allocatable),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".to_string(),
                    status: CONDITION_TRUE.to_string(),
                    last_transition_time: Some(Time(now)),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        };
        self.changed();
        self.claims.insert(name.clone(), claim);
        self.nodes.insert(name.clone(), node);
        self.launched_prices.insert(name.clone(), choice.price);
        if let Some(at) = initialized_at {
            self.initializing.insert(name.clone(), at);
            self.initialize_due(now);
        }
        name
    }

    /// `<pool>-NNNNN`, the next number not in use (the input may hold such names too).
    fn fresh_name(&mut self, pool: &str) -> String {
        let counter = self.counters.entry(pool.to_string()).or_default();
        loop {
            *counter = counter.saturating_add(1);
            let name = format!("{pool}-{:05}", *counter);
            if !self.nodes.contains_key(&name) && !self.claims.contains_key(&name) {
                return name;
            }
        }
    }

    /// Initializes the launched nodes whose time has come (label on the Node, condition on the
    /// NodeClaim, both at their own instant).
    pub fn initialize_due(&mut self, now: Timestamp) {
        let due: Vec<(String, Timestamp)> = self
            .initializing
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(n, at)| (n.clone(), *at))
            .collect();
        for (name, at) in due {
            self.changed();
            self.initializing.remove(&name);
            // Pods bound while the node initialized start running now.
            for pod in self.pods.values_mut() {
                if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str()) {
                    set_ready(pod, true, at);
                }
            }
            if let Some(node) = self.nodes.get_mut(&name) {
                node.labels_mut()
                    .insert(wk::NODE_INITIALIZED_LABEL.to_string(), "true".to_string());
            }
            if let Some(claim) = self.claims.get_mut(&name) {
                let status = claim.status.get_or_insert_with(NodeClaimStatus::default);
                status.set_condition(
                    NODECLAIM_CONDITION_INITIALIZED,
                    CONDITION_TRUE,
                    NODECLAIM_CONDITION_INITIALIZED,
                    "",
                    &at.to_string(),
                    None,
                );
            }
        }
    }

    /// The next instant a launched node initializes.
    pub fn next_initialization(&self) -> Option<Timestamp> {
        self.initializing.values().min().copied()
    }

    fn bind(&mut self, mut pod: Pod, node: &str, now: Timestamp) {
        self.changed();
        pod.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
        mark_scheduled(&mut pod, now);
        // Ready at once on a running node, else when its node initializes.
        set_ready(&mut pod, self.initialized_or_gone(node), now);
        self.pods.insert(pod::key(&pod), pod);
    }

    /// Removes the Node `node` (and its NodeClaim); returns its pods that need a new home
    /// (DaemonSet and static pods go with the node).
    pub fn remove_node(&mut self, node: &str) -> Vec<Pod> {
        self.changed();
        let provider_id = self
            .nodes
            .get(node)
            .and_then(|n| n.spec.as_ref()?.provider_id.clone());
        self.nodes.remove(node);
        self.claims.retain(|name, claim| {
            let same_provider = provider_id.is_some()
                && claim.status.as_ref().and_then(|s| s.provider_id.as_ref())
                    == provider_id.as_ref();
            !(same_provider || name == node)
        });
        self.initializing.remove(node);
        let keys: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| self.pods.remove(&k))
            .filter(moves_with_its_node)
            .collect()
    }

    /// The Node of NodeClaim `claim` (joined by provider ID, else `status.nodeName`).
    pub fn node_of_claim(&self, claim: &str) -> Option<String> {
        let claim = self.claims.get(claim)?;
        let status = claim.status.as_ref()?;
        if let Some(id) = status.provider_id.as_deref()
            && let Some((name, _)) = self
                .nodes
                .iter()
                .find(|(_, n)| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(id))
        {
            return Some(name.clone());
        }
        status.node_name.clone()
    }

    /// Removes a NodeClaim that has no Node.
    pub fn remove_claim(&mut self, claim: &str) {
        self.changed();
        self.claims.remove(claim);
        self.initializing.remove(claim);
    }

    /// Provisions `pods` (displaced at `now`) with the pipeline of the first plan: onto nodes
    /// with room, else onto new NodeClaims that initialize [`INITIALIZATION`] later. Returns the
    /// launched nodes.
    pub fn reprovision(
        &mut self,
        pods: Vec<Pod>,
        now: Timestamp,
    ) -> Result<Vec<ReplacementReport>, SimulateError> {
        if pods.is_empty() {
            return Ok(Vec::new());
        }
        let mut pending: BTreeMap<String, Pod> = BTreeMap::new();
        let mut queue = Vec::new();
        for mut pod in pods {
            if let Some(spec) = pod.spec.as_mut() {
                spec.node_name = None;
            }
            pod.status = None;
            queue.push(PendingPod::single(pod.clone()));
            pending.insert(pod::key(&pod), pod);
        }
        let outcome = plan_placements(&self.manifests(queue), self.provider, self.options.clone())?;
        let initialized_at = now.checked_add(INITIALIZATION).unwrap_or(now);
        let launched = self.apply_outcome(&outcome, &mut pending, now, initialized_at);
        for pod in &outcome.plan.unschedulable {
            self.unschedulable
                .push(unschedulable(&pod.pod, &pod.reason));
        }
        Ok(launched)
    }

    /// Price per hour of node `name`: what the simulation paid, else the catalogue's offering.
    pub fn price(&self, name: &str) -> Option<f64> {
        if let Some(price) = self.launched_prices.get(name) {
            return Some(*price);
        }
        let node = self.nodes.get(name)?;
        let labels = node.labels();
        self.pool_types.price(
            labels.get(wk::NODEPOOL_LABEL)?,
            labels.get(wk::INSTANCE_TYPE_LABEL)?,
            labels.get(wk::ZONE_LABEL)?,
            labels.get(wk::CAPACITY_TYPE_LABEL)?,
        )
    }

    /// Every node with its pods, by name.
    pub fn node_reports(&self) -> Vec<NodeReport> {
        let mut pods_by_node: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (key, pod) in &self.pods {
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                pods_by_node.entry(node).or_default().push(key.clone());
            }
        }
        self.nodes
            .iter()
            .map(|(name, node)| {
                let label = |key: &str| node.labels().get(key).cloned();
                NodeReport {
                    name: name.clone(),
                    node_pool: label(wk::NODEPOOL_LABEL),
                    instance_type: label(wk::INSTANCE_TYPE_LABEL),
                    zone: label(wk::ZONE_LABEL),
                    capacity_type: label(wk::CAPACITY_TYPE_LABEL),
                    price: self.price(name),
                    pods: pods_by_node.remove(name.as_str()).unwrap_or_default(),
                }
            })
            .collect()
    }

    /// The fractional lower bound (USD/hour) for the pods on the managed nodes, per NodePool
    /// over its instance types, summed: the controller's `karpenter_cluster_cost_lower_bound_per_hour`.
    pub fn cost_lower_bound(&self) -> f64 {
        let mut demand: BTreeMap<String, karpenter_core::resources::ResourceList> = BTreeMap::new();
        for pod in self.pods.values().filter(|p| !pod::is_terminal(p)) {
            let Some(pool) = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(|node| self.node_pool_of(node))
            else {
                continue;
            };
            if let Ok(requests) = pod::effective_requests(pod) {
                demand.entry(pool).or_default().add(&requests);
            }
        }
        demand
            .iter()
            .filter_map(|(pool, requests)| {
                let types = self.pool_types.get(pool)?;
                let types = match self.base.node_pools.iter().find(|p| p.name_any() == *pool) {
                    Some(p) => karpenter_core::cost::launchable_by(types, p),
                    None => types.clone(),
                };
                Some(karpenter_core::cost::fractional_lower_bound(
                    &types,
                    karpenter_core::cost::demand_row(requests),
                ))
            })
            .sum()
    }

    /// Ordinals of the bound pods stamped from `template` (`<namespace>/<name>-<i>`).
    pub fn replica_ordinals(&self, template: &Pod) -> Vec<u32> {
        let prefix = format!(
            "{}/{}-",
            pod::namespace(template),
            template.metadata.name.as_deref().unwrap_or_default()
        );
        self.pods
            .keys()
            .filter_map(|key| key.strip_prefix(&prefix)?.parse().ok())
            .collect()
    }

    /// Deletes pod `key` (a scale-down): it goes with its node's room.
    pub fn delete_pod(&mut self, key: &str) {
        self.changed();
        self.pods.remove(key);
    }

    pub fn hourly_cost(&self) -> f64 {
        self.nodes.keys().filter_map(|n| self.price(n)).sum()
    }

    /// Bound pods (DaemonSet pods included).
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }
}

pub(super) fn replacement_report(name: &str, choice: &LaunchChoice) -> ReplacementReport {
    ReplacementReport {
        name: name.to_string(),
        instance_type: choice.instance_type.clone(),
        zone: choice.zone.clone(),
        capacity_type: choice.capacity_type.clone(),
        price: choice.price,
    }
}

fn unschedulable(pod: &str, reason: &str) -> UnschedulableReport {
    let (namespace, name) = pod.split_once('/').unwrap_or(("default", pod));
    UnschedulableReport {
        namespace: namespace.to_string(),
        name: name.to_string(),
        reason: reason.to_string(),
    }
}

fn has_condition(pod: &Pod, type_: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_))
}

/// `Ready` with its transition at `at`: what a PDB counts as healthy.
fn set_ready(pod: &mut Pod, ready: bool, at: Timestamp) {
    let status = pod.status.get_or_insert_with(PodStatus::default);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != "Ready");
    conditions.push(PodCondition {
        type_: "Ready".to_string(),
        status: if ready { CONDITION_TRUE } else { "False" }.to_string(),
        last_transition_time: Some(Time(at)),
        ..Default::default()
    });
}

/// `PodScheduled=True` at `at`: the bind emptiness and consolidation count idle time from.
fn mark_scheduled(pod: &mut Pod, at: Timestamp) {
    let status = pod.status.get_or_insert_with(PodStatus::default);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != "PodScheduled");
    conditions.push(PodCondition {
        type_: "PodScheduled".to_string(),
        status: CONDITION_TRUE.to_string(),
        last_transition_time: Some(Time(at)),
        ..Default::default()
    });
}
