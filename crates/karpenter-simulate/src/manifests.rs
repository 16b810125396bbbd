//! Loading ordinary Kubernetes YAML for `simulate`: multi-document files, `kind: List`, whole
//! directories; workloads expanded into the pods their controllers would create.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    LimitRange, Namespace, Node, PersistentVolume, PersistentVolumeClaim, PodTemplate,
    PodTemplateSpec,
};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::autoscaling::CapacityBuffer;
use karpenter_api::manifest::karpenter_near_miss;
use karpenter_api::v1::EC2NodeClass;
use karpenter_api::v1alpha1::NodeOverlay;
use karpenter_api::validation::{self, Outcome, validate_document};
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::pod::Pod;
use karpenter_core::state::ClusterState;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::pending::PendingPod;
use super::workloads::{self, Workload, WorkloadSource};
use karpenter_input::{
    DuplicateNames, Location, Object, ReadError, Source, Sources, identity, objects,
};

/// Why the input could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error(transparent)]
    Read(#[from] ReadError),
    /// Every problem of the input, one per line (`FILE:DOC (line L): KIND/NAME: FIELD: MESSAGE`).
    #[error("{}", lines(.0))]
    Invalid(Vec<Problem>),
}

fn lines(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// One problem with one object of the input, in `validate`'s format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub location: Location,
    /// `Kind/name` (`<unknown>` for what is missing).
    pub object: String,
    /// Field path (`(document)` for the whole document).
    pub path: String,
    pub message: String,
    pub hint: Option<String>,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}: {}",
            self.location, self.object, self.path, self.message
        )?;
        if let Some(hint) = &self.hint {
            write!(f, " ({hint})")?;
        }
        Ok(())
    }
}

/// A document `simulate` read but does not use (listed so a typo such as `kind: Deploymnet` does
/// not vanish silently).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IgnoredDocument {
    /// `FILE:DOC (line L)`.
    pub document: String,
    pub kind: String,
    /// `namespace/name`, or `name` for objects without a namespace.
    pub name: String,
    pub reason: String,
}

/// Most pods (pending and bound, after expanding workloads) one simulation takes: a bound on
/// memory and time that a typo such as `replicas: 2147483647` runs into with a clear error.
pub const MAX_PODS: usize = 1_000_000;

/// Everything `simulate` read, workloads already expanded into pods.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    pub node_pools: Vec<NodePool>,
    pub node_classes: Vec<EC2NodeClass>,
    /// NodeOverlays (`karpenter.sh/v1alpha1`): applied to every pool's instance types by the
    /// plan, `explain` and `--disruption`. The binary empties this list when the `NodeOverlay`
    /// gate is off (`--feature-gates`), as the controller then does not read them.
    pub node_overlays: Vec<NodeOverlay>,
    /// CapacityBuffers (`autoscaling.x-k8s.io/v1beta1`): with the `CapacityBuffer` gate, the
    /// binary adds their virtual pods to the pending pods ([`Manifests::add_capacity_buffers`]).
    pub capacity_buffers: Vec<CapacityBuffer>,
    /// PodTemplates (what a CapacityBuffer's `podTemplateRef` names).
    pub pod_templates: Vec<PodTemplate>,
    /// Deployments, ReplicaSets and StatefulSets as a `scalableRef` reads them.
    scalables: Vec<Scalable>,
    /// Pods without `spec.nodeName`: the ones to schedule (in input order). The replicas of a
    /// workload share one `Pod`.
    pub pending_pods: Vec<PendingPod>,
    /// Pods bound to an existing node by `spec.nodeName`.
    pub bound_pods: Vec<Pod>,
    pub daemonsets: Vec<DaemonSet>,
    pub pdbs: Vec<PodDisruptionBudget>,
    pub claims: Vec<PersistentVolumeClaim>,
    pub volumes: Vec<PersistentVolume>,
    pub storage_classes: Vec<StorageClass>,
    /// Namespaces given in the input (see [`Manifests::cluster_state`] for the others).
    pub namespaces: Vec<Namespace>,
    pub nodes: Vec<Node>,
    pub node_claims: Vec<NodeClaim>,
    /// RuntimeClasses, whose overhead and scheduling the pods naming them already carry.
    pub runtime_classes: Vec<RuntimeClass>,
    /// LimitRanges, whose container defaults the pods of their namespace already carry (as
    /// admission gives them) and DaemonSet pods get when planned.
    pub limit_ranges: Vec<LimitRange>,
    /// Documents `simulate` does not use, in input order.
    pub ignored: Vec<IgnoredDocument>,
    /// Notes for people from reading the input (skipped files, empty input).
    pub notes: Vec<String>,
    /// Workloads that ask for no pods (`Kind/name has spec.replicas: 0`), in input order: why a plan
    /// may have nothing to schedule (the getting-started guide's `inflate` starts at 0 replicas).
    pub scaled_to_zero: Vec<String>,
    /// Workloads with timed scale steps (`simulate.karpenter-rs.dev/scale-steps`), which
    /// `--disruption` applies in virtual time.
    pub scale_steps: Vec<crate::workloads::ScaleSchedule>,
    names: DuplicateNames,
    /// Workloads read but not yet expanded into pods (see `workloads::expand`).
    pub(super) workloads_to_admit: Vec<Workload>,
}

/// A workload a CapacityBuffer's `scalableRef` may name: kind, namespace, name, replicas, template.
#[derive(Clone, Debug)]
struct Scalable {
    kind: &'static str,
    namespace: String,
    name: String,
    replicas: i32,
    template: PodTemplateSpec,
}

impl Scalable {
    fn new(
        kind: &'static str,
        meta: &ObjectMeta,
        replicas: i32,
        template: &PodTemplateSpec,
    ) -> Self {
        Scalable {
            kind,
            namespace: meta
                .namespace
                .clone()
                .unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
            name: meta.name.clone().unwrap_or_default(),
            replicas,
            template: template.clone(),
        }
    }
}

pub(super) const DEFAULT_NAMESPACE: &str = "default";

/// The label the API server puts on every namespace (`namespaceSelector`s match on it).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Kinds `simulate` reads (everything else is listed as ignored).
const USED_KINDS: [&str; 20] = [
    "NodePool",
    "NodeOverlay",
    "CapacityBuffer",
    "PodTemplate",
    "EC2NodeClass",
    "NodeClaim",
    "Node",
    "Pod",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "Job",
    "DaemonSet",
    "PodDisruptionBudget",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
    "Namespace",
    "RuntimeClass",
    "LimitRange",
];

impl Manifests {
    pub fn new() -> Self {
        Self::default()
    }

    /// Loads one YAML (or JSON) text with any number of documents; `source_name` names it in
    /// errors.
    pub fn load_str(&mut self, source_name: &str, text: &str) -> Result<(), ManifestError> {
        self.load_sources(Sources {
            sources: vec![Source {
                name: source_name.to_string(),
                text: text.to_string(),
            }],
            notes: Vec::new(),
        })
    }

    /// Loads what the shared reader read. Every problem of every object is collected, so one run
    /// reports them all.
    pub fn load_sources(&mut self, read: Sources) -> Result<(), ManifestError> {
        self.notes.extend(read.notes);
        let mut problems = Vec::new();
        for source in &read.sources {
            for object in objects(source) {
                self.add_object(object, &mut problems);
            }
        }
        // Once everything is read: a workload may come before the objects its pods use.
        self.admit_workloads(&mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ManifestError::Invalid(problems))
        }
    }

    /// Loads objects already parsed (e.g. listed from a live cluster), each as its own
    /// document of `source_name`, with the same checks as [`Manifests::load_sources`]: no text
    /// is rendered and parsed again, which matters at 10,000 pods.
    pub fn load_objects(
        &mut self,
        source_name: &str,
        values: impl IntoIterator<Item = Value>,
    ) -> Result<(), ManifestError> {
        let mut problems = Vec::new();
        for (index, value) in values.into_iter().enumerate() {
            let location = Location {
                source: source_name.to_string(),
                document: index.saturating_add(1),
                item: None,
                line: 1,
            };
            self.add_object(
                Object {
                    location,
                    value: Ok(value),
                    text: None,
                },
                &mut problems,
            );
        }
        self.admit_workloads(&mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ManifestError::Invalid(problems))
        }
    }

    fn add_object(&mut self, object: Object, problems: &mut Vec<Problem>) {
        let location = object.location;
        let value = match object.value {
            Ok(value) => value,
            Err(message) => {
                problems.push(Problem {
                    location,
                    object: "<unknown>/<unknown>".into(),
                    path: "(document)".into(),
                    message: format!("invalid YAML: {message}"),
                    hint: Some("fix the YAML syntax".into()),
                });
                return;
            }
        };
        if value.is_null() {
            return;
        }
        let (kind, name, namespace) = identity(&value);
        let (kind, name, namespace) = (kind.to_string(), name.to_string(), namespace.to_string());
        let api_version = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let object_name = format!("{}/{}", or_unknown(&kind), or_unknown(&name));
        let mut problem = |path: &str, message: String, hint: Option<String>| {
            problems.push(Problem {
                location: location.clone(),
                object: object_name.clone(),
                path: path.to_string(),
                message,
                hint,
            });
        };
        if !value.is_object() || kind.is_empty() {
            problem(
                "kind",
                "Required value: every Kubernetes object needs apiVersion and kind".into(),
                Some("add e.g. `apiVersion: apps/v1` and `kind: Deployment`".into()),
            );
            return;
        }
        // Karpenter's own kinds (and near misses such as `karpenter.sh/v2` or `Nodepool`) get
        // exactly `validate`'s checks.
        let karpenter = validation::v1_kind(&api_version, &kind).is_some()
            || validation::is_legacy(&api_version, &kind)
            || karpenter_near_miss(&api_version, &kind).is_some();
        if karpenter {
            if let Outcome::Invalid(errors) = validate_document(&value).outcome {
                for e in errors {
                    problem(&e.path, e.message, e.hint);
                }
                return;
            }
        } else if !USED_KINDS.contains(&kind.as_str()) {
            self.ignored.push(IgnoredDocument {
                document: location.to_string(),
                kind: kind.clone(),
                name: if namespace.is_empty() {
                    name.clone()
                } else {
                    format!("{namespace}/{name}")
                },
                reason: ignored_reason(&kind),
            });
            return;
        }
        if !karpenter && name.is_empty() {
            let message = match value.pointer("/metadata/name") {
                // `name: yes` or `name: 1` parse as a boolean or a number.
                Some(other) if !other.is_null() => {
                    format!("Invalid value: {other}: must be a string")
                }
                _ => "Required value".into(),
            };
            problem(
                "metadata.name",
                message,
                Some(
                    "give the object a name (quote names YAML reads as booleans or numbers)".into(),
                ),
            );
            return;
        }
        let namespaced = !matches!(
            kind.as_str(),
            "NodePool"
                | "EC2NodeClass"
                | "NodeOverlay"
                | "NodeClaim"
                | "Node"
                | "PersistentVolume"
                | "StorageClass"
                | "RuntimeClass"
        );
        let namespace_key = if namespaced {
            if namespace.is_empty() {
                DEFAULT_NAMESPACE
            } else {
                namespace.as_str()
            }
        } else {
            ""
        };
        if let Some(first) = self
            .names
            .check(&api_version, &kind, namespace_key, &name, &location)
        {
            problem(
                "metadata.name",
                format!("Duplicate value: {name:?}: {kind} {name} is already defined at {first}"),
                Some("names are unique per kind (and namespace); rename or remove one".into()),
            );
            return;
        }
        let findings = workloads::check(&kind, &value);
        if !findings.is_empty() {
            for (path, message, hint) in findings {
                problem(&path, message, Some(hint));
            }
            return;
        }
        if let Err(message) = self.add_typed(&kind, value, &location, &object_name) {
            let (path, message, hint) = message;
            problem(&path, message, Some(hint));
        }
    }

    /// Adds an object whose kind `simulate` uses; errors are (field path, message, hint).
    /// Workloads wait for the whole input (`admit_workloads`).
    fn add_typed(
        &mut self,
        kind: &str,
        value: Value,
        location: &Location,
        object: &str,
    ) -> Result<(), (String, String, String)> {
        fn typed<T: DeserializeOwned>(
            value: Value,
            kind: &str,
        ) -> Result<T, (String, String, String)> {
            serde_json::from_value(value).map_err(|e| {
                (
                    "(object)".to_string(),
                    format!("cannot be read as a {kind}: {e}"),
                    "fix the field's type (see `kubectl explain`)".to_string(),
                )
            })
        }
        let missing = |path: &str| {
            (
                path.to_string(),
                "Required value".to_string(),
                format!("a {kind} needs {path}"),
            )
        };
        let mut scalable = None;
        let mut admit = |source| {
            self.workloads_to_admit.push(Workload {
                location: location.clone(),
                object: object.to_string(),
                source,
            });
        };
        match kind {
            "NodePool" => self.node_pools.push(typed(value, kind)?),
            "EC2NodeClass" => self.node_classes.push(typed(value, kind)?),
            "NodeOverlay" => self.node_overlays.push(typed(value, kind)?),
            "CapacityBuffer" => {
                let mut buffer: CapacityBuffer = typed(value, kind)?;
                default_namespace(&mut buffer.metadata);
                self.capacity_buffers.push(buffer);
            }
            "PodTemplate" => {
                let mut template: PodTemplate = typed(value, kind)?;
                default_namespace(&mut template.metadata);
                self.pod_templates.push(template);
            }
            "NodeClaim" => self.node_claims.push(typed(value, kind)?),
            "Node" => self.nodes.push(typed(value, kind)?),
            "Pod" => {
                // Read as the full type, so a malformed field is refused even where
                // scheduling does not read it, then kept as the scheduling view.
                let pod: k8s_openapi::api::core::v1::Pod = typed(value, kind)?;
                let mut pod = Pod::from(pod);
                default_namespace(&mut pod.metadata);
                admit(WorkloadSource::Pod(Box::new(pod)));
            }
            "Deployment" => {
                let d: Deployment = typed(value, kind)?;
                let spec = d.spec.ok_or_else(|| missing("spec"))?;
                scalable = Some(Scalable::new(
                    "Deployment",
                    &d.metadata,
                    spec.replicas.unwrap_or(1),
                    &spec.template,
                ));
                admit(WorkloadSource::Replicas {
                    owner: Box::new(d.metadata),
                    replicas: spec.replicas.unwrap_or(1),
                    template: Box::new(spec.template),
                    count_field: "spec.replicas",
                    claim_templates: Vec::new(),
                });
            }
            "ReplicaSet" => {
                let r: ReplicaSet = typed(value, kind)?;
                let spec = r.spec.ok_or_else(|| missing("spec"))?;
                let template = spec.template.ok_or_else(|| missing("spec.template"))?;
                scalable = Some(Scalable::new(
                    "ReplicaSet",
                    &r.metadata,
                    spec.replicas.unwrap_or(1),
                    &template,
                ));
                admit(WorkloadSource::Replicas {
                    owner: Box::new(r.metadata),
                    replicas: spec.replicas.unwrap_or(1),
                    template: Box::new(template),
                    count_field: "spec.replicas",
                    claim_templates: Vec::new(),
                });
            }
            "StatefulSet" => {
                let s: StatefulSet = typed(value, kind)?;
                let spec = s.spec.ok_or_else(|| missing("spec"))?;
                scalable = Some(Scalable::new(
                    "StatefulSet",
                    &s.metadata,
                    spec.replicas.unwrap_or(1),
                    &spec.template,
                ));
                admit(WorkloadSource::Replicas {
                    owner: Box::new(s.metadata),
                    replicas: spec.replicas.unwrap_or(1),
                    template: Box::new(spec.template),
                    count_field: "spec.replicas",
                    claim_templates: spec.volume_claim_templates.unwrap_or_default(),
                });
            }
            "Job" => {
                let j: Job = typed(value, kind)?;
                let spec = j.spec.ok_or_else(|| missing("spec"))?;
                // Pods running at once: parallelism, capped by completions.
                let parallelism = spec.parallelism.unwrap_or(1);
                let count = spec.completions.map_or(parallelism, |c| c.min(parallelism));
                admit(WorkloadSource::Replicas {
                    owner: Box::new(j.metadata),
                    replicas: count,
                    template: Box::new(spec.template),
                    count_field: "spec.parallelism",
                    claim_templates: Vec::new(),
                });
            }
            "DaemonSet" => admit(WorkloadSource::DaemonSet(Box::new(typed(value, kind)?))),
            "PodDisruptionBudget" => self.pdbs.push(typed(value, kind)?),
            "PersistentVolumeClaim" => {
                let mut pvc: PersistentVolumeClaim = typed(value, kind)?;
                default_namespace(&mut pvc.metadata);
                self.claims.push(pvc);
            }
            "PersistentVolume" => self.volumes.push(typed(value, kind)?),
            "StorageClass" => self.storage_classes.push(typed(value, kind)?),
            "Namespace" => self.namespaces.push(typed(value, kind)?),
            "RuntimeClass" => self.runtime_classes.push(typed(value, kind)?),
            "LimitRange" => {
                let mut limit_range: LimitRange = typed(value, kind)?;
                default_namespace(&mut limit_range.metadata);
                self.limit_ranges.push(limit_range);
            }
            // Read for their names only (duplicates); they do not change the plan.
            _ => {}
        }
        if let Some(scalable) = scalable {
            self.scalables.push(scalable);
        }
        Ok(())
    }

    /// Resolves every CapacityBuffer against the input's PodTemplates and workloads, as the
    /// controller does against the cluster, and adds the chunks of the ready ones to the pending
    /// pods (virtual pods: `capacity-buffer-NAME-i`). Returns one line per buffer: its chunks, or
    /// why it is not ready.
    pub fn add_capacity_buffers(&mut self, now_rfc3339: &str) -> Vec<String> {
        use karpenter_core::capacity_buffer::{self as buffers, Lookup};
        let mut lines = Vec::new();
        for buffer in &self.capacity_buffers {
            let namespace = buffer
                .metadata
                .namespace
                .as_deref()
                .unwrap_or(DEFAULT_NAMESPACE);
            let lookup = match buffers::reference(buffer) {
                Err(message) => Lookup::Failed(message),
                Ok(("PodTemplate", name)) => self
                    .pod_templates
                    .iter()
                    .find(|t| {
                        t.metadata.name.as_deref() == Some(name)
                            && t.metadata.namespace.as_deref() == Some(namespace)
                    })
                    .map(|t| Lookup::PodTemplate {
                        name: name.to_string(),
                        generation: t.metadata.generation,
                        template: t.template.clone().unwrap_or_default(),
                    })
                    .unwrap_or_else(|| {
                        Lookup::NotFound(buffers::not_found_message("PodTemplate", name))
                    }),
                Ok((kind, name)) => self
                    .scalables
                    .iter()
                    .find(|s| s.kind == kind && s.name == name && s.namespace == namespace)
                    .map(|s| Lookup::Workload {
                        replicas: s.replicas,
                        template: s.template.clone(),
                    })
                    .unwrap_or_else(|| Lookup::NotFound(buffers::not_found_message(kind, name))),
            };
            let key = buffers::key(buffer);
            let resolution = buffers::resolve(buffer, lookup, now_rfc3339);
            match &resolution.chunks {
                Some((template, replicas)) => {
                    lines.push(format!(
                        "CapacityBuffer {key}: {replicas} virtual pod(s), scheduled like pending pods (no Pod is created)"
                    ));
                    self.pending_pods.extend(
                        buffers::virtual_pods(buffer, template, *replicas)
                            .into_iter()
                            .map(PendingPod::single),
                    );
                }
                None => {
                    let why = resolution
                        .status
                        .conditions
                        .iter()
                        .find(|c| {
                            c.type_ == karpenter_api::autoscaling::CONDITION_READY_FOR_PROVISIONING
                        })
                        .map(|c| {
                            format!(
                                "{}: {}",
                                c.reason.as_deref().unwrap_or_default(),
                                c.message.as_deref().unwrap_or_default()
                            )
                        })
                        .unwrap_or_default();
                    lines.push(format!("CapacityBuffer {key}: not ready ({why})"));
                }
            }
        }
        lines
    }

    /// The cluster state these objects make, as the controller's watchers would build it: the
    /// same index the controller decides on (Nodes joined to NodeClaims by provider ID, bound
    /// pods by node, namespaces). A namespace an object uses but the input does not give exists
    /// with just its `kubernetes.io/metadata.name` label, as on a real API server (which also
    /// sets that label on every namespace).
    pub fn cluster_state(&self) -> ClusterState {
        let mut node_pools = self.node_pools.clone();
        let mut node_claims = self.node_claims.clone();
        stamp_nodepool_hashes(&mut node_pools, &mut node_claims);
        let mut state = ClusterState::from_objects(
            node_pools,
            node_claims,
            self.nodes.clone(),
            self.bound_pods.clone(),
        );
        for class in &self.node_classes {
            state.apply(class.clone());
        }
        for daemonset in &self.daemonsets {
            state.apply(daemonset.clone());
        }
        for pdb in &self.pdbs {
            state.apply(pdb.clone());
        }
        for claim in &self.claims {
            state.apply(claim.clone());
        }
        for volume in &self.volumes {
            state.apply(volume.clone());
        }
        for class in &self.storage_classes {
            state.apply(class.clone());
        }
        for limit_range in &self.limit_ranges {
            state.apply(limit_range.clone());
        }
        let mut named: BTreeMap<String, Namespace> = BTreeMap::new();
        let used = self
            .pending_pods
            .iter()
            .map(|p| p.pod().metadata.namespace.as_deref())
            .chain(
                self.bound_pods
                    .iter()
                    .map(|p| p.metadata.namespace.as_deref()),
            )
            .chain(self.claims.iter().map(|c| c.metadata.namespace.as_deref()))
            .chain(self.pdbs.iter().map(|p| p.metadata.namespace.as_deref()))
            .chain(
                self.daemonsets
                    .iter()
                    .map(|d| d.metadata.namespace.as_deref()),
            );
        for name in used {
            let name = name.unwrap_or(DEFAULT_NAMESPACE);
            named.entry(name.to_string()).or_insert_with(|| Namespace {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            });
        }
        for namespace in &self.namespaces {
            if let Some(name) = namespace.metadata.name.clone() {
                named.insert(name, namespace.clone());
            }
        }
        for (name, mut namespace) in named {
            namespace
                .metadata
                .labels
                .get_or_insert_default()
                .insert(NAMESPACE_NAME_LABEL.to_string(), name);
            state.apply(namespace);
        }
        state
    }

    /// Pods bound to each node, by node name.
    pub fn pods_by_node(&self) -> BTreeMap<&str, Vec<Pod>> {
        let mut by_node: BTreeMap<&str, Vec<Pod>> = BTreeMap::new();
        for pod in &self.bound_pods {
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                by_node.entry(node).or_default().push(pod.clone());
            }
        }
        by_node
    }
}

fn default_namespace(metadata: &mut ObjectMeta) {
    if metadata.namespace.is_none() {
        metadata.namespace = Some(DEFAULT_NAMESPACE.to_string());
    }
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "<unknown>" } else { s }
}

/// Why a kind is ignored, with a hint when it looks like a misspelt kind `simulate` uses.
fn ignored_reason(kind: &str) -> String {
    let near = USED_KINDS.iter().find(|used| {
        used.eq_ignore_ascii_case(kind)
            || karpenter_api::validation::edit_distance(
                &used.to_ascii_lowercase(),
                &kind.to_ascii_lowercase(),
            ) <= 2
    });
    match near {
        Some(used) => format!("simulate does not use {kind} objects (did you mean {used}?)"),
        None => format!("simulate does not use {kind} objects"),
    }
}

/// What the controller's NodePool hash controller writes before anything else happens, applied to
/// the input's objects: a pool stamped by another hash version re-stamps its NodeClaims first
/// (upstream `nodepool.hash`, so a hash-function change alone drifts nothing), then every pool that
/// carries a hash takes its template's current hash and version. Without this a pool whose
/// `karpenter.sh/nodepool-hash` is stale (a manifest edited after `kubectl get -o yaml`) drifted
/// every replacement again, since replacements carry the template's hash: 577 replacements in a
/// day for a 3-node pool. A pool with no hash at all (a user's own file) is left alone: drift then
/// compares the NodeClaims with its template's hash directly.
fn stamp_nodepool_hashes(pools: &mut [NodePool], claims: &mut [NodeClaim]) {
    use karpenter_api::well_known::{
        NODEPOOL_HASH_ANNOTATION, NODEPOOL_HASH_VERSION, NODEPOOL_HASH_VERSION_ANNOTATION,
        NODEPOOL_LABEL,
    };
    use karpenter_core::nodepool::hash;
    for pool in pools.iter_mut() {
        let Some(annotations) = pool.metadata.annotations.as_ref() else {
            continue;
        };
        if !annotations.contains_key(NODEPOOL_HASH_ANNOTATION) {
            continue;
        }
        let name = pool.metadata.name.clone().unwrap_or_default();
        if hash::pool_needs_claim_restamp(pool) {
            for claim in claims.iter_mut().filter(|c| {
                c.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(NODEPOOL_LABEL))
                    == Some(&name)
            }) {
                if let Some(restamp) = hash::nodeclaim_restamp(pool, claim) {
                    claim
                        .metadata
                        .annotations
                        .get_or_insert_default()
                        .extend(restamp);
                }
            }
        }
        let current = hash::template_hash(pool);
        let annotations = pool.metadata.annotations.get_or_insert_default();
        annotations.insert(NODEPOOL_HASH_ANNOTATION.to_string(), current);
        annotations.insert(
            NODEPOOL_HASH_VERSION_ANNOTATION.to_string(),
            NODEPOOL_HASH_VERSION.to_string(),
        );
    }
}
