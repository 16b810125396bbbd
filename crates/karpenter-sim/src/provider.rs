//! [`SimCloudProvider`]: a cloud that lives in memory. It launches "instances" from the real
//! catalogue, remembers them in a ledger that outlives any controller (share the provider through
//! its cheap `Clone`/`Arc`, or persist [`SimCloudProvider::snapshot`] and
//! [`SimCloudProvider::restore`] it), and hands out the Node a kubelet would register.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use karpenter_api::v1::{EC2NodeClass, NodeClassReference};
use karpenter_api::well_known as wk;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_catalog::{Catalog, NodeClassShape, ProviderSettings};
use karpenter_core::clock::Clock;
use karpenter_core::cloud_provider::{
    CapacityOverlay, CloudError, CloudProvider, DriftReason, NodeClassKind, RepairPolicy,
    parse_claim,
};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::resources::ResourceList;
use serde::{Deserialize, Serialize};

use crate::failures::{self, OfferingPattern};
use crate::instance::{
    find_by_provider_id, hydrate, instance_seq, new_instance, node_claim_of, same_claim,
};
use crate::launch::{self, LaunchChoice};

/// The provider's name (`--cloud-provider sim`).
pub const PROVIDER_NAME: &str = "sim";
/// How long an offering that ran out of capacity stays unavailable (upstream's
/// `UnavailableOfferingsTTL`).
pub const UNAVAILABLE_OFFERING_TTL: SignedDuration = SignedDuration::from_secs(180);
/// The image every sim instance "boots".
pub const SIM_IMAGE_ID: &str = "ami-sim-al2023";

/// Errors of the sim provider's own API (construction, ledger persistence).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("failed to load the instance-type catalogue")]
    Catalog(#[from] karpenter_catalog::CatalogError),
    #[error("failed to serialise the sim ledger: {0}")]
    Snapshot(String),
    #[error("failed to restore the sim ledger (expected the JSON written by snapshot()): {0}")]
    Restore(String),
    #[error("ledger is for region {ledger} but this provider simulates {provider}")]
    RegionMismatch { ledger: String, provider: String },
}

/// One simulated instance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimInstance {
    pub id: String,
    pub provider_id: String,
    pub node_name: String,
    pub private_ip: String,
    pub node_claim: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_claim_uid: Option<String>,
    pub node_class_ref: NodeClassReference,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// USD per hour at launch (spot prices are modelled).
    pub price: f64,
    pub image_id: String,
    /// RFC 3339 launch time (from the provider's clock).
    pub launched_at: Timestamp,
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub taints: Vec<Taint>,
    #[serde(default)]
    pub startup_taints: Vec<Taint>,
    pub capacity: ResourceList,
    pub allocatable: ResourceList,
}

/// The names of a running instance ([`SimCloudProvider::instance_refs`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceRef {
    pub node_name: String,
    pub provider_id: String,
    pub node_claim: String,
    pub private_ip: String,
}

/// Everything the simulated cloud remembers: its instances and the offerings that recently ran
/// out of capacity. Serialised by [`SimCloudProvider::snapshot`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimLedger {
    pub region: String,
    /// Sequence number of the last launched instance (IDs and IPs derive from it).
    pub last_instance_seq: u64,
    /// By instance ID.
    pub instances: BTreeMap<String, SimInstance>,
    /// `<capacity-type>:<instance-type>:<zone>` → when it becomes available again.
    pub unavailable_offerings: BTreeMap<String, Timestamp>,
}

struct SimState {
    ledger: SimLedger,
    /// Offerings the cloud has no capacity for (test knob, not persisted).
    insufficient_capacity: BTreeSet<String>,
    /// Errors the next creates return, in order (test knob, not persisted).
    injected_faults: VecDeque<CloudError>,
}

/// Instance types by name.
type TypeMap = BTreeMap<String, Arc<InstanceType>>;

/// The catalogue as EC2NodeClasses shape it (see [`SimCloudProvider::instance_types_for`]).
#[derive(Default)]
struct ShapedTypes {
    /// Built types per distinct shape (a handful of NodeClasses: a linear search is enough).
    by_shape: Vec<(NodeClassShape, Arc<TypeMap>)>,
    /// The types last handed out for each EC2NodeClass name: launches for NodeClaims referring
    /// to it pick from these, so they agree with what the scheduler saw.
    by_node_class: BTreeMap<String, Arc<TypeMap>>,
    /// The offerings each EC2NodeClass (by name) declares out of capacity
    /// ([`failures::INSUFFICIENT_CAPACITY_ANNOTATION`]), as last handed types out.
    failing_by_node_class: BTreeMap<String, Arc<Vec<OfferingPattern>>>,
}

struct Inner {
    region: String,
    /// The types without an EC2NodeClass. From the catalogue they are built on first use: a
    /// cluster whose NodePools all name an EC2NodeClass only ever needs the shaped ones, and
    /// the ~1,300 built types are most of the controller's resident memory.
    types: OnceLock<Arc<TypeMap>>,
    /// Set when the types come from the embedded catalogue (then NodeClasses can shape them).
    catalog: Option<&'static Catalog>,
    shaped: Mutex<ShapedTypes>,
    clock: Arc<dyn Clock>,
    state: Mutex<SimState>,
}

/// The in-memory cloud. Cloning is cheap and shares the same inventory.
#[derive(Clone)]
pub struct SimCloudProvider {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SimCloudProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCloudProvider")
            .field("region", &self.inner.region)
            .field("instance_types", &self.inner.types.get().map(|t| t.len()))
            .finish_non_exhaustive()
    }
}

fn offering_key(capacity_type: &str, instance_type: &str, zone: &str) -> String {
    format!("{capacity_type}:{instance_type}:{zone}")
}

impl SimCloudProvider {
    /// A provider over the embedded AWS catalogue for `region`.
    pub fn new(region: &str, clock: Arc<dyn Clock>) -> Result<Self, SimError> {
        let catalog = Catalog::embedded()?;
        // An unknown region is an error now, not when the types are first built.
        catalog.zones(region)?;
        Ok(Self::build(region, None, Some(catalog), clock))
    }

    /// A provider over custom instance types (tests, what-if studies).
    /// EC2NodeClasses do not change custom types (there is no EC2 description to shape).
    pub fn with_instance_types(
        region: &str,
        types: Vec<InstanceType>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self::build(region, Some(types), None, clock)
    }

    fn build(
        region: &str,
        types: Option<Vec<InstanceType>>,
        catalog: Option<&'static Catalog>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let built = OnceLock::new();
        if let Some(types) = types {
            built.get_or_init(|| Arc::new(type_map(types)));
        }
        let ledger = SimLedger {
            region: region.to_string(),
            ..Default::default()
        };
        Self {
            inner: Arc::new(Inner {
                region: region.to_string(),
                types: built,
                catalog,
                shaped: Mutex::new(ShapedTypes::default()),
                clock,
                state: Mutex::new(SimState {
                    ledger,
                    insufficient_capacity: BTreeSet::new(),
                    injected_faults: VecDeque::new(),
                }),
            }),
        }
    }

    pub fn region(&self) -> &str {
        &self.inner.region
    }

    fn state(&self) -> MutexGuard<'_, SimState> {
        // A panic elsewhere cannot leave the ledger half-written (every update is one insert or
        // remove), so a poisoned lock is still safe to use.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Simulates that the cloud has no capacity for this offering: launches that would pick it
    /// fail over to the next one, or return [`CloudError::InsufficientCapacity`].
    pub fn set_insufficient_capacity(&self, instance_type: &str, zone: &str, capacity_type: &str) {
        self.state()
            .insufficient_capacity
            .insert(offering_key(capacity_type, instance_type, zone));
    }

    /// Capacity is back everywhere (offerings already marked unavailable stay so until their TTL).
    pub fn clear_insufficient_capacity(&self) {
        self.state().insufficient_capacity.clear();
    }

    /// The next `count` creates fail with `error` (after the idempotency check).
    pub fn fail_next_creates(&self, count: usize, error: CloudError) {
        let mut state = self.state();
        state
            .injected_faults
            .extend(std::iter::repeat_n(error, count));
    }

    /// What the sim kubelet needs of every running instance (it looks each second; copying
    /// every instance with its labels and resources each time cost megabytes at 1,000 nodes).
    pub fn instance_refs(&self) -> Vec<InstanceRef> {
        self.state()
            .ledger
            .instances
            .values()
            .map(|i| InstanceRef {
                node_name: i.node_name.clone(),
                provider_id: i.provider_id.clone(),
                node_claim: i.node_claim.clone(),
                private_ip: i.private_ip.clone(),
            })
            .collect()
    }

    /// Every instance currently running.
    pub fn instances(&self) -> Vec<SimInstance> {
        self.state().ledger.instances.values().cloned().collect()
    }

    /// The ledger as JSON (store it in a ConfigMap to survive controller restarts).
    pub fn snapshot(&self) -> Result<String, SimError> {
        serde_json::to_string(&self.state().ledger).map_err(|e| SimError::Snapshot(e.to_string()))
    }

    /// Replaces the ledger with one written by [`Self::snapshot`].
    pub fn restore(&self, json: &str) -> Result<(), SimError> {
        self.restore_parts(json, &[])
    }

    /// The ledger without its instances, as JSON: what a store that keeps each instance on its
    /// own ([`Self::instance_json`]) writes besides them. A ledger's size then does not grow
    /// with the cloud, and a launch writes one instance instead of all of them.
    pub fn snapshot_head(&self) -> Result<String, SimError> {
        let mut state = self.state();
        let instances = std::mem::take(&mut state.ledger.instances);
        let head = serde_json::to_string(&state.ledger);
        state.ledger.instances = instances;
        head.map_err(|e| SimError::Snapshot(e.to_string()))
    }

    /// The head of an empty ledger for this provider's region.
    pub fn empty_head(&self) -> Result<String, SimError> {
        let empty = SimLedger {
            region: self.inner.region.clone(),
            ..SimLedger::default()
        };
        serde_json::to_string(&empty).map_err(|e| SimError::Snapshot(e.to_string()))
    }

    /// The IDs of the running instances.
    pub fn instance_ids(&self) -> BTreeSet<String> {
        self.state().ledger.instances.keys().cloned().collect()
    }

    /// One running instance as JSON (`None` once it is terminated).
    pub fn instance_json(&self, id: &str) -> Result<Option<String>, SimError> {
        self.state()
            .ledger
            .instances
            .get(id)
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| SimError::Snapshot(e.to_string()))
    }

    /// Replaces the ledger with a head (from [`Self::snapshot_head`], or a whole ledger from
    /// [`Self::snapshot`]) plus instances each from [`Self::instance_json`]. The sequence
    /// number never goes below an instance's own, so a head written before its instances (or
    /// lost) cannot make a later launch reuse an ID.
    pub fn restore_parts(&self, head: &str, instances: &[String]) -> Result<(), SimError> {
        let mut ledger: SimLedger =
            serde_json::from_str(head).map_err(|e| SimError::Restore(e.to_string()))?;
        if ledger.region != self.inner.region {
            return Err(SimError::RegionMismatch {
                ledger: ledger.region,
                provider: self.inner.region.clone(),
            });
        }
        for json in instances {
            let instance: SimInstance =
                serde_json::from_str(json).map_err(|e| SimError::Restore(e.to_string()))?;
            ledger.instances.insert(instance.id.clone(), instance);
        }
        let highest = ledger
            .instances
            .keys()
            .filter_map(|id| instance_seq(id))
            .max()
            .unwrap_or(0);
        ledger.last_instance_seq = ledger.last_instance_seq.max(highest);
        self.state().ledger = ledger;
        Ok(())
    }

    /// The catalogue this provider launches from, without unavailability marks.
    pub fn catalog_types(&self) -> impl Iterator<Item = &Arc<InstanceType>> {
        self.default_types().values()
    }

    /// The types without an EC2NodeClass (built from the catalogue on first use).
    fn default_types(&self) -> &Arc<TypeMap> {
        self.inner.types.get_or_init(|| {
            let types = self
                .inner
                .catalog
                .and_then(|c| c.instance_types(&self.inner.region).ok())
                .unwrap_or_default();
            Arc::new(type_map(types))
        })
    }

    fn shaped(&self) -> MutexGuard<'_, ShapedTypes> {
        // Only caches live here: a poisoned lock still holds consistent entries.
        self.inner.shaped.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The catalogue as `node_class` shapes it (`None`: unshaped), built once per distinct shape.
    fn types_for(&self, node_class: Option<&EC2NodeClass>) -> Result<Arc<TypeMap>, CloudError> {
        let (Some(node_class), Some(catalog)) = (node_class, self.inner.catalog) else {
            return Ok(Arc::clone(self.default_types()));
        };
        let shape = NodeClassShape::from_node_class(node_class, ProviderSettings::default())
            .map_err(|e| CloudError::NodeClassNotReady(e.to_string()))?;
        if let Some((_, types)) = self.shaped().by_shape.iter().find(|(s, _)| *s == shape) {
            return Ok(Arc::clone(types));
        }
        let types: TypeMap = catalog
            .instance_types_for(&self.inner.region, &shape)
            .map_err(|e| CloudError::other_from(e.to_string(), e))?
            .into_iter()
            .map(|t| (t.name.clone(), Arc::new(t)))
            .collect();
        let types = Arc::new(types);
        let mut shaped = self.shaped();
        // Another caller (the provisioner and the disruption loop ask at once) may have built
        // the same shape meanwhile: keep one.
        if let Some((_, built)) = shaped.by_shape.iter().find(|(s, _)| *s == shape) {
            return Ok(Arc::clone(built));
        }
        shaped.by_shape.push((shape, Arc::clone(&types)));
        Ok(types)
    }

    /// The types a launch for `node_claim` picks from: those last handed out for its
    /// EC2NodeClass, else the unshaped catalogue.
    fn launch_types(&self, node_claim: &NodeClaim) -> Arc<TypeMap> {
        let class = &node_claim.spec.node_class_ref;
        self.shaped()
            .by_node_class
            .get(&class.name)
            .filter(|_| class.kind == "EC2NodeClass")
            .map_or_else(|| Arc::clone(self.default_types()), Arc::clone)
    }

    /// Every instance type for `node_pool`, shaped by its EC2NodeClass (kubelet, block devices,
    /// AMI family: `karpenter_catalog::NodeClassShape`), offerings marked unavailable after a
    /// shortage. Launches for the pool's NodeClaims then pick from the same shaped types.
    pub fn instance_types_for(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        let types = self.types_for(node_class)?;
        let failing = node_class
            .map(failures::declared)
            .transpose()?
            .unwrap_or_default();
        let class_name = &node_pool.spec.template.spec.node_class_ref.name;
        {
            let mut shaped = self.shaped();
            if failing.is_empty() {
                shaped.failing_by_node_class.remove(class_name);
            } else {
                shaped
                    .failing_by_node_class
                    .insert(class_name.clone(), Arc::new(failing));
            }
            if node_class.is_some() && self.inner.catalog.is_some() {
                shaped
                    .by_node_class
                    .insert(class_name.clone(), Arc::clone(&types));
            } else {
                shaped.by_node_class.remove(class_name);
            }
            // Shapes no NodeClass uses any more (one was edited, or its subnets resolved, which
            // changes its zones) go: each is a whole catalogue (~7 MB), and they were kept for
            // the process's life. `types` (this call's) and `by_node_class` hold the ones in use.
            shaped.by_shape.retain(|(_, t)| Arc::strong_count(t) > 1);
        }
        let now = self.inner.clock.now();
        let state = self.state();
        let unavailable = &state.ledger.unavailable_offerings;
        let marked_types: BTreeSet<&str> = unavailable
            .iter()
            .filter(|(_, until)| **until > now)
            .filter_map(|(key, _)| key.split(':').nth(1))
            .collect();
        Ok(types
            .values()
            .map(|it| {
                if !marked_types.contains(it.name.as_str()) {
                    return Arc::clone(it);
                }
                let mut copy = InstanceType::clone(it);
                for o in &mut copy.offerings {
                    if is_marked(
                        unavailable,
                        &offering_key(&o.capacity_type, &copy.name, &o.zone),
                        now,
                    ) {
                        o.available = false;
                    }
                }
                Arc::new(copy)
            })
            .collect())
    }

    /// What `create` would launch for `node_claim` right now (no side effects; offerings
    /// marked unavailable are skipped, simulated shortages not yet discovered are not; the
    /// offerings its EC2NodeClass declares out of capacity are tried and fail over, as `create`
    /// does, ending in `InsufficientCapacity` when none is left).
    pub fn launch_choice(&self, node_claim: &NodeClaim) -> Result<LaunchChoice, CloudError> {
        let (requirements, requests) = parse_claim(node_claim)?;
        let types = self.launch_types(node_claim);
        let failing = self.declared_failures(node_claim);
        let now = self.inner.clock.now();
        let state = self.state();
        let unavailable = &state.ledger.unavailable_offerings;
        let launch_order = karpenter_core::node_overlay::launch_order(node_claim);
        let candidates = launch::candidates(
            &types,
            &requirements,
            &requests,
            launch_order.as_deref(),
            |it, o| {
                // Nothing marked (the usual case): no key to build per offering.
                unavailable.is_empty()
                    || !is_marked(
                        unavailable,
                        &offering_key(&o.capacity_type, &it.name, &o.zone),
                        now,
                    )
            },
        );
        if candidates.is_empty() {
            return Err(launch::no_offering_error(&requirements));
        }
        candidates
            .iter()
            .find(|c| !declared_out(&failing, c))
            .map(launch::Candidate::choice)
            .ok_or_else(|| {
                CloudError::InsufficientCapacity(format!(
                    "no capacity for any of {} offering(s) (EC2NodeClass annotation {})",
                    candidates.len(),
                    failures::INSUFFICIENT_CAPACITY_ANNOTATION
                ))
            })
    }

    /// The offerings `node_claim`'s EC2NodeClass declares out of capacity.
    fn declared_failures(&self, node_claim: &NodeClaim) -> Arc<Vec<OfferingPattern>> {
        let class = &node_claim.spec.node_class_ref;
        self.shaped()
            .failing_by_node_class
            .get(&class.name)
            .filter(|_| class.kind == "EC2NodeClass")
            .map_or_else(Arc::default, Arc::clone)
    }

    /// The Node the kubelet of this instance registers: labels, capacity, allocatable, the
    /// NodeClaim's taints and startup taints plus `karpenter.sh/unregistered:NoExecute`.
    pub fn registered_node(&self, provider_id: &str) -> Result<Node, CloudError> {
        let state = self.state();
        let instance = find_by_provider_id(&state.ledger, provider_id)?;
        let mut labels = instance.labels.clone();
        labels.insert(wk::HOSTNAME_LABEL.to_string(), instance.node_name.clone());
        let mut taints = instance.taints.clone();
        taints.extend(instance.startup_taints.iter().cloned());
        taints.push(Taint {
            key: wk::UNREGISTERED_TAINT_KEY.to_string(),
            effect: "NoExecute".to_string(),
            ..Default::default()
        });
        let launched = Time(instance.launched_at);
        Ok(Node {
            metadata: ObjectMeta {
                name: Some(instance.node_name.clone()),
                labels: Some(labels),
                creation_timestamp: Some(launched.clone()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(instance.provider_id.clone()),
                taints: Some(taints),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                capacity: Some(instance.capacity.to_k8s()),
                allocatable: Some(instance.allocatable.to_k8s()),
                addresses: Some(vec![
                    NodeAddress {
                        type_: "InternalIP".to_string(),
                        address: instance.private_ip.clone(),
                    },
                    NodeAddress {
                        type_: "Hostname".to_string(),
                        address: instance.node_name.clone(),
                    },
                ]),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".to_string(),
                    status: "True".to_string(),
                    reason: Some("KubeletReady".to_string()),
                    message: Some("kubelet is posting ready status (simulated)".to_string()),
                    last_heartbeat_time: Some(launched.clone()),
                    last_transition_time: Some(launched),
                }]),
                ..Default::default()
            }),
        })
    }

    /// Launches `node_claim`'s instance; `overlay` is the capacity NodeOverlays add to the
    /// pool's types: its requests are not looked for in the catalogue, and the instance has it
    /// (its kubelet registers what the overlay says the machine has, as a real kubelet reports
    /// the hugepages a user configured).
    fn launch(
        &self,
        node_claim: &NodeClaim,
        overlay: &CapacityOverlay,
    ) -> Result<NodeClaim, CloudError> {
        let types = self.launch_types(node_claim);
        let failing = self.declared_failures(node_claim);
        let now = self.inner.clock.now();
        let mut state = self.state();
        let name = node_claim.metadata.name.clone().unwrap_or_default();
        let uid = node_claim.metadata.uid.clone();
        if let Some(existing) = state
            .ledger
            .instances
            .values()
            .find(|i| same_claim(i, &name, uid.as_deref()))
        {
            return Ok(hydrate(node_claim.clone(), existing));
        }
        if let Some(fault) = state.injected_faults.pop_front() {
            return Err(fault);
        }
        let (requirements, requests) = parse_claim(&overlay.claim_for_provider(node_claim))?;
        state
            .ledger
            .unavailable_offerings
            .retain(|_, until| *until > now);

        let SimState {
            ledger,
            insufficient_capacity,
            ..
        } = &mut *state;
        let launch_order = karpenter_core::node_overlay::launch_order(node_claim);
        let candidates = launch::candidates(
            &types,
            &requirements,
            &requests,
            launch_order.as_deref(),
            |it, o| {
                !is_marked(
                    &ledger.unavailable_offerings,
                    &offering_key(&o.capacity_type, &it.name, &o.zone),
                    now,
                )
            },
        );
        if candidates.is_empty() {
            return Err(launch::no_offering_error(&requirements));
        }
        // Like CreateFleet: try the offerings cheapest first; each one out of capacity is marked
        // unavailable for a while.
        let mut exhausted = Vec::new();
        let mut launched = None;
        for candidate in &candidates {
            let key = offering_key(
                &candidate.offering.capacity_type,
                &candidate.instance_type.name,
                &candidate.offering.zone,
            );
            if insufficient_capacity.contains(&key) || declared_out(&failing, candidate) {
                exhausted.push(key);
            } else {
                launched = Some((
                    candidate.choice(),
                    Arc::clone(&types[&candidate.instance_type.name]),
                ));
                break;
            }
        }
        let until = now.saturating_add(UNAVAILABLE_OFFERING_TTL).unwrap_or(now);
        for key in &exhausted {
            ledger.unavailable_offerings.insert(key.clone(), until);
        }
        let Some((choice, instance_type)) = launched else {
            return Err(CloudError::InsufficientCapacity(format!(
                "no capacity for any of {} offering(s): {}",
                exhausted.len(),
                exhausted.join(", ")
            )));
        };

        ledger.last_instance_seq += 1;
        let seq = ledger.last_instance_seq;
        let mut instance = new_instance(
            &self.inner.region,
            seq,
            node_claim,
            &name,
            uid,
            &choice,
            &instance_type,
            &requests,
            now,
        );
        for (resource, quantity) in overlay.added(&instance_type.name).iter() {
            instance.capacity.set(resource, quantity);
            instance.allocatable.set(resource, quantity);
        }
        let hydrated = hydrate(node_claim.clone(), &instance);
        ledger.instances.insert(instance.id.clone(), instance);
        Ok(hydrated)
    }
}

/// Whether a launch candidate's offering is one its EC2NodeClass declares out of capacity.
fn declared_out(failing: &[OfferingPattern], candidate: &launch::Candidate<'_>) -> bool {
    failing.iter().any(|p| {
        p.matches(
            &candidate.offering.capacity_type,
            &candidate.instance_type.name,
            &candidate.offering.zone,
        )
    })
}

fn type_map(types: Vec<InstanceType>) -> TypeMap {
    types
        .into_iter()
        .map(|t| (t.name.clone(), Arc::new(t)))
        .collect()
}

fn is_marked(unavailable: &BTreeMap<String, Timestamp>, key: &str, now: Timestamp) -> bool {
    unavailable.get(key).is_some_and(|until| *until > now)
}

#[async_trait]
impl CloudProvider for SimCloudProvider {
    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
        self.launch(node_claim, &CapacityOverlay::default())
    }

    async fn create_with_capacity_overlay(
        &self,
        node_claim: &NodeClaim,
        overlay: &CapacityOverlay,
    ) -> Result<NodeClaim, CloudError> {
        self.launch(node_claim, overlay)
    }

    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudError> {
        let mut state = self.state();
        let provider_id = node_claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone());
        let name = node_claim.metadata.name.clone().unwrap_or_default();
        let uid = node_claim.metadata.uid.as_deref();
        let id = state
            .ledger
            .instances
            .values()
            .find(|i| match &provider_id {
                Some(pid) => &i.provider_id == pid,
                None => same_claim(i, &name, uid),
            })
            .map(|i| i.id.clone())
            .ok_or_else(|| {
                CloudError::NodeClaimNotFound(format!("nodeclaim {name} has no instance"))
            })?;
        state.ledger.instances.remove(&id);
        Ok(())
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError> {
        let state = self.state();
        find_by_provider_id(&state.ledger, provider_id).map(node_claim_of)
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudError> {
        Ok(self
            .state()
            .ledger
            .instances
            .values()
            .map(node_claim_of)
            .collect())
    }

    async fn instance_types(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        self.instance_types_for(node_pool, node_class)
    }

    async fn is_drifted(&self, _node_claim: &NodeClaim) -> Result<Option<DriftReason>, CloudError> {
        Ok(None)
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        karpenter_core::cloud_provider::node_not_ready_repair_policies()
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        vec![karpenter_core::cloud_provider::ec2_node_class_kind()]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use karpenter_core::clock::FakeClock;

    fn node_class(subnet_zones: &[&str]) -> EC2NodeClass {
        let mut value = serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
                     "subnetSelectorTerms": [{"tags": {"a": "b"}}],
                     "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]}
        });
        if !subnet_zones.is_empty() {
            value["status"] = serde_json::json!({"subnets": subnet_zones.iter().enumerate()
                .map(|(i, z)| serde_json::json!({"id": format!("subnet-{i}"), "zone": z}))
                .collect::<Vec<_>>()});
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_shape_no_node_class_uses_any_more_is_dropped() {
        let sim = SimCloudProvider::new("us-east-1", Arc::new(FakeClock::default())).unwrap();
        let mut pool = NodePool::new("default", Default::default());
        pool.spec.template.spec.node_class_ref.name = "default".into();
        pool.spec.template.spec.node_class_ref.kind = "EC2NodeClass".into();
        // Before its subnets resolve, then after (all zones, then two): two shapes in turn.
        let before = sim
            .instance_types_for(&pool, Some(&node_class(&[])))
            .unwrap();
        assert!(!before.is_empty());
        assert_eq!(sim.shaped().by_shape.len(), 1);
        let after = sim
            .instance_types_for(&pool, Some(&node_class(&["us-east-1a", "us-east-1b"])))
            .unwrap();
        assert!(!after.is_empty());
        assert_eq!(
            sim.shaped().by_shape.len(),
            1,
            "the unresolved shape is gone"
        );
        // Asked again with the same shape: no new build.
        let again = sim
            .instance_types_for(&pool, Some(&node_class(&["us-east-1a", "us-east-1b"])))
            .unwrap();
        assert!(Arc::ptr_eq(&after[0], &again[0]));
        assert_eq!(sim.shaped().by_shape.len(), 1);
    }
}
