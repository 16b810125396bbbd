//! CapacityBuffers (`autoscaling.x-k8s.io/v1beta1`, behind the `CapacityBuffer` gate): spare
//! capacity kept provisioned ahead of demand, as virtual pods the provisioner schedules like
//! pending pods (no Pod object is ever created).
//!
//! Upstream's semantics (pkg/controllers/capacitybuffer, pkg/state/virtualpods,
//! pkg/controllers/provisioning/buffers.go, disruption/emptiness.go):
//! - A buffer is resolved to a pod template (its `podTemplateRef` PodTemplate, or the pod template
//!   of its `scalableRef` Deployment/StatefulSet/ReplicaSet) and a number of chunks
//!   ([`desired_replicas`]): the larger of `replicas` and `percentage` (of the workload's replicas,
//!   rounded up, at least 1), capped by how many chunks fit in `limits`; `limits` alone gives as
//!   many chunks as fit. [`resolve`] writes `ReadyForProvisioning` and the status fields.
//! - Each chunk is a virtual pod ([`virtual_pods`]): the template's labels and spec, lowest
//!   priority, marked by [`VIRTUAL_POD_ANNOTATION`]. Every provisioning pass adds them to the
//!   pending pods; a chunk that fits on an existing or in-flight node needs nothing, one that does
//!   not makes the pass create a NodeClaim (within NodePool limits, like any pod). Consumed
//!   capacity is refilled by the next pass. Virtual pods are never nominated or bound.
//! - The provisioner writes `Provisioning` from where the chunks landed
//!   ([`summarize_placements`], [`provisioning_condition`]).
//! - The nodes the chunks landed on ([`hosting_nodes`]) are not consolidation candidates while
//!   they hold them; drift and expiration still replace them (and the next pass refills).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PodTemplateSpec;
use karpenter_api::autoscaling::{
    BUFFER_NAME_ANNOTATION, BUFFER_NAMESPACE_ANNOTATION, CONDITION_PROVISIONING,
    CONDITION_READY_FOR_PROVISIONING, CapacityBuffer, CapacityBufferStatus, LocalObjectRef,
    REASON_BUFFER_EMPTY, REASON_FITS_EXISTING_CAPACITY, REASON_NOT_READY_FOR_PROVISIONING,
    REASON_POD_TEMPLATE_NOT_FOUND, REASON_REQUIRES_NEW_CAPACITY, REASON_RESOLUTION_FAILED,
    REASON_RESOLVED, REASON_SCALABLE_REF_NOT_FOUND, VIRTUAL_POD_ANNOTATION,
};
use karpenter_api::v1::{CONDITION_FALSE, CONDITION_TRUE, ConditionsExt};
use kube_core::ResourceExt;

use crate::pod::{self, Pod, PodSpec};
use crate::resources::{self, ResourceList};
use crate::scheduling::SchedulingResults;

#[cfg(test)]
mod tests;

/// The priority stamped on virtual pods (upstream's `math.MinInt32`): the least valuable pods.
pub const VIRTUAL_POD_PRIORITY: i32 = i32::MIN;

/// The workload kinds a `scalableRef` may name (group `apps`).
pub const SCALABLE_KINDS: [&str; 3] = ["Deployment", "StatefulSet", "ReplicaSet"];

/// `namespace/name` of a buffer (how virtual pods, summaries and logs name it).
pub fn key(buffer: &CapacityBuffer) -> String {
    format!(
        "{}/{}",
        buffer.namespace().unwrap_or_default(),
        buffer.name_any()
    )
}

/// What the lookup of a buffer's reference found (the controller reads the cluster; `simulate`
/// its manifests).
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    /// The `podTemplateRef` PodTemplate: its name, `metadata.generation` and template.
    PodTemplate {
        name: String,
        generation: Option<i64>,
        template: PodTemplateSpec,
    },
    /// The `scalableRef` workload: its `spec.replicas` (1 when unset, as upstream) and template.
    Workload {
        replicas: i32,
        template: PodTemplateSpec,
    },
    /// The referenced object does not exist; the message says which (`podtemplates "x" not found`).
    NotFound(String),
    /// The reference cannot be resolved (unsupported kind or group, neither ref set).
    Failed(String),
}

/// The object a buffer's reference names, for the lookup: `(kind, name)`, where a `scalableRef`
/// outside group `apps` or of another kind is an error message (upstream's words).
pub fn reference(buffer: &CapacityBuffer) -> Result<(&'static str, &str), String> {
    let spec = &buffer.spec;
    if let Some(template) = &spec.pod_template_ref {
        return Ok(("PodTemplate", template.name.as_str()));
    }
    let Some(scalable) = &spec.scalable_ref else {
        return Err("Neither podTemplateRef nor scalableRef is set".into());
    };
    if !scalable.api_group.is_empty() && scalable.api_group != "apps" {
        return Err(format!(
            "unsupported scalableRef API group {:?}",
            scalable.api_group
        ));
    }
    SCALABLE_KINDS
        .iter()
        .find(|k| **k == scalable.kind)
        .map(|k| (*k, scalable.name.as_str()))
        .ok_or_else(|| format!("unsupported kind {:?}", scalable.kind))
}

/// The `NotFound` message for a reference, as the API server words it.
pub fn not_found_message(kind: &str, name: &str) -> String {
    let plural = match kind {
        "PodTemplate" => "podtemplates",
        "Deployment" => "deployments.apps",
        "StatefulSet" => "statefulsets.apps",
        "ReplicaSet" => "replicasets.apps",
        other => other,
    };
    format!("{plural} {name:?} not found")
}

/// A buffer resolved: the status to write and, when ready, its chunks' template and count.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolution {
    pub status: CapacityBufferStatus,
    /// The chunks' template and count; `None` when the buffer is not ready.
    pub chunks: Option<(PodTemplateSpec, i32)>,
}

/// Resolves `buffer` against what its reference's lookup found (upstream's
/// `resolveAndUpdateStatus`): `ReadyForProvisioning`, `replicas`, `podTemplateRef`,
/// `podTemplateGeneration`, `provisioningStrategy`. Other status fields are kept.
pub fn resolve(buffer: &CapacityBuffer, lookup: Lookup, now_rfc3339: &str) -> Resolution {
    let mut status = buffer.status.clone().unwrap_or_default();
    status.provisioning_strategy = buffer.spec.provisioning_strategy.clone();
    let generation = buffer.metadata.generation;
    let not_ready = |mut status: CapacityBufferStatus, reason: &str, message: &str| {
        status.set_condition(
            CONDITION_READY_FOR_PROVISIONING,
            CONDITION_FALSE,
            reason,
            message,
            now_rfc3339,
            generation,
        );
        Resolution {
            status,
            chunks: None,
        }
    };
    let (template, workload_replicas) = match lookup {
        Lookup::PodTemplate {
            name,
            generation: template_generation,
            template,
        } => {
            status.pod_template_ref = Some(LocalObjectRef { name });
            status.pod_template_generation = Some(template_generation.unwrap_or(0));
            (template, None)
        }
        Lookup::Workload { replicas, template } => {
            status.pod_template_ref = None;
            status.pod_template_generation = None;
            (template, Some(replicas))
        }
        Lookup::NotFound(message) => {
            let reason = if buffer.spec.pod_template_ref.is_some() {
                REASON_POD_TEMPLATE_NOT_FOUND
            } else {
                REASON_SCALABLE_REF_NOT_FOUND
            };
            return not_ready(status, reason, &message);
        }
        Lookup::Failed(message) => return not_ready(status, REASON_RESOLUTION_FAILED, &message),
    };
    let requests = template_requests(&template);
    let replicas = desired_replicas(buffer, workload_replicas, requests.as_ref());
    status.replicas = Some(replicas);
    status.set_condition(
        CONDITION_READY_FOR_PROVISIONING,
        CONDITION_TRUE,
        REASON_RESOLVED,
        "Pod template resolved successfully",
        now_rfc3339,
        generation,
    );
    Resolution {
        status,
        chunks: Some((template, replicas)),
    }
}

/// The requests of one chunk (containers, init containers, overhead; not `pods`), `None` when a
/// quantity cannot be read (then `limits` cannot bound anything).
pub fn template_requests(template: &PodTemplateSpec) -> Option<ResourceList> {
    let pod = Pod {
        metadata: template.metadata.clone().unwrap_or_default(),
        spec: template.spec.clone().map(PodSpec::from),
        status: None,
    };
    let mut requests = pod::effective_requests(&pod).ok()?;
    requests.remove(resources::PODS);
    Some(requests)
}

/// Upstream's `computeReplicas`: the larger of `replicas` and the `percentage` of the workload's
/// replicas (`workload_replicas`, scalableRef buffers only), capped by [`limit_replicas`]; with
/// neither set, `limits` alone decides (0 without limits).
pub fn desired_replicas(
    buffer: &CapacityBuffer,
    workload_replicas: Option<i32>,
    requests: Option<&ResourceList>,
) -> i32 {
    let spec = &buffer.spec;
    let mut candidates = Vec::new();
    if let (Some(percentage), Some(workload)) = (spec.percentage, workload_replicas)
        && workload > 0
    {
        candidates.push(percentage_replicas(workload, percentage));
    }
    if let Some(replicas) = spec.replicas {
        candidates.push(replicas);
    }
    let desired = candidates.iter().copied().max();
    let limited = spec
        .limits
        .as_ref()
        .zip(requests)
        .and_then(|(limits, requests)| limit_replicas(limits, requests));
    match (desired, limited) {
        (Some(desired), Some(limited)) => desired.min(limited),
        (Some(desired), None) => desired,
        (None, Some(limited)) => limited,
        (None, None) => 0,
    }
    .max(0)
}

/// How many chunks of `requests` fit in `limits`: the smallest `floor(limit / request)` over the
/// resources both name; `None` when they share none (the limits bound nothing). A limit that
/// cannot be read counts as 0.
pub fn limit_replicas(
    limits: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    requests: &ResourceList,
) -> Option<i32> {
    let mut fewest: Option<i64> = None;
    for (name, limit) in limits {
        let request = requests.get(name);
        if request.is_zero() {
            continue;
        }
        let limit = resources::Quantity::parse(&limit.0)
            .map(|q| q.millis().max(0))
            .unwrap_or(0);
        let fit = limit.checked_div(request.millis()).unwrap_or(0).max(0);
        fewest = Some(fewest.map_or(fit, |f| f.min(fit)));
    }
    fewest.map(|n| i32::try_from(n).unwrap_or(i32::MAX))
}

/// `ceil(workload * percentage / 100)`, at least 1 when both are positive.
pub fn percentage_replicas(workload: i32, percentage: i32) -> i32 {
    let product = i64::from(workload).saturating_mul(i64::from(percentage));
    let ceil = if product > 0 {
        (product + 99) / 100
    } else {
        product / 100
    };
    let n = i32::try_from(ceil).unwrap_or(i32::MAX);
    if n < 1 && workload > 0 && percentage > 0 {
        1
    } else {
        n
    }
}

/// Whether the buffer's chunks are provisioned: `ReadyForProvisioning=True` and `replicas > 0`.
pub fn ready(buffer: &CapacityBuffer) -> bool {
    buffer.status.as_ref().is_some_and(|s| {
        s.is_condition_true(CONDITION_READY_FOR_PROVISIONING) && s.replicas.unwrap_or(0) > 0
    })
}

/// The buffer's chunks as virtual pods (upstream's `BuildVirtualPods`): named
/// `capacity-buffer-NAME-i`, uid `UID-i`, the template's labels (so affinity and topology spread
/// see them) and spec without a node name or claim-backed volumes (a virtual pod's claim would
/// never exist), lowest priority, unschedulable, annotated with their buffer.
pub fn virtual_pods(
    buffer: &CapacityBuffer,
    template: &PodTemplateSpec,
    replicas: i32,
) -> Vec<Pod> {
    let count = usize::try_from(replicas).unwrap_or(0);
    let mut spec: PodSpec = template.spec.clone().map(PodSpec::from).unwrap_or_default();
    spec.node_name = None;
    if let Some(volumes) = spec.volumes.as_mut() {
        volumes.retain(|v| v.persistent_volume_claim.is_none() && v.ephemeral.is_none());
    }
    spec.priority = Some(VIRTUAL_POD_PRIORITY);
    let labels = template.metadata.as_ref().and_then(|m| m.labels.clone());
    let name = buffer.name_any();
    let namespace = buffer.namespace().unwrap_or_default();
    let uid = buffer.uid().unwrap_or_else(|| key(buffer));
    (1..=count)
        .map(|i| {
            let mut pod = Pod::default();
            pod.metadata.name = Some(format!("capacity-buffer-{name}-{i}"));
            pod.metadata.namespace = Some(namespace.clone());
            pod.metadata.uid = Some(format!("{uid}-{i}"));
            pod.metadata.labels = labels.clone();
            pod.metadata.annotations = Some(BTreeMap::from([
                (VIRTUAL_POD_ANNOTATION.to_string(), "true".to_string()),
                (BUFFER_NAME_ANNOTATION.to_string(), name.clone()),
                (BUFFER_NAMESPACE_ANNOTATION.to_string(), namespace.clone()),
            ]));
            pod.spec = Some(spec.clone());
            pod.status = Some(pod::PodStatus {
                conditions: Some(vec![pod::PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some("Unschedulable".into()),
                    ..pod::PodCondition::default()
                }]),
                phase: Some("Pending".into()),
                ..pod::PodStatus::default()
            });
            pod
        })
        .collect()
}

/// Whether `pod` is a buffer's virtual pod.
pub fn is_virtual(pod: &Pod) -> bool {
    pod.annotations()
        .get(VIRTUAL_POD_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// `namespace/name` of the buffer a virtual pod belongs to; `None` for a real pod.
pub fn buffer_of(pod: &Pod) -> Option<String> {
    if !is_virtual(pod) {
        return None;
    }
    let annotations = pod.annotations();
    let namespace = annotations.get(BUFFER_NAMESPACE_ANNOTATION)?;
    let name = annotations.get(BUFFER_NAME_ANNOTATION)?;
    Some(format!("{namespace}/{name}"))
}

/// Where one buffer's chunks landed in a scheduling pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// On existing nodes or in-flight NodeClaims.
    pub existing: usize,
    /// On NodeClaims the pass plans.
    pub new_capacity: usize,
    /// Nowhere.
    pub failed: usize,
}

/// Per buffer (`namespace/name`), where its virtual pods among `pods` landed in `results`.
pub fn summarize_placements<P: std::borrow::Borrow<Pod>>(
    pods: &[P],
    results: &SchedulingResults,
) -> BTreeMap<String, Placement> {
    let mut out: BTreeMap<String, Placement> = BTreeMap::new();
    let mut count = |index: usize, bump: fn(&mut Placement)| {
        if let Some(buffer) = pods.get(index).and_then(|p| buffer_of(p.borrow())) {
            bump(out.entry(buffer).or_default());
        }
    };
    for placement in &results.existing_nodes {
        for &i in &placement.pods {
            count(i, |p| p.existing += 1);
        }
    }
    for claim in &results.new_node_claims {
        for &i in &claim.pods {
            count(i, |p| p.new_capacity += 1);
        }
    }
    for failure in &results.unschedulable {
        count(failure.pod, |p| p.failed += 1);
    }
    out
}

/// The nodes (Node or in-flight NodeClaim names) that virtual pods landed on in `results`.
pub fn hosting_nodes<P: std::borrow::Borrow<Pod>>(
    pods: &[P],
    results: &SchedulingResults,
) -> BTreeSet<String> {
    results
        .existing_nodes
        .iter()
        .filter(|placement| {
            placement
                .pods
                .iter()
                .any(|&i| pods.get(i).is_some_and(|p| is_virtual(p.borrow())))
        })
        .map(|placement| placement.node.clone())
        .collect()
}

/// The `Provisioning` condition the provisioner writes after a pass, as `(status, reason,
/// message)` (upstream's `computeProvisioningCondition`); `None` leaves it as it is (a ready
/// buffer none of whose chunks the pass saw, or some placed and none failing yet).
pub fn provisioning_condition(
    buffer: &CapacityBuffer,
    placement: Option<&Placement>,
) -> Option<(&'static str, &'static str, String)> {
    let status = buffer.status.clone().unwrap_or_default();
    if !status.is_condition_true(CONDITION_READY_FOR_PROVISIONING) {
        return Some((
            CONDITION_FALSE,
            REASON_NOT_READY_FOR_PROVISIONING,
            "Buffer is not ReadyForProvisioning".into(),
        ));
    }
    let desired = usize::try_from(status.replicas.unwrap_or(0)).unwrap_or(0);
    if desired == 0 {
        return Some((
            CONDITION_FALSE,
            REASON_BUFFER_EMPTY,
            "Buffer has zero desired replicas".into(),
        ));
    }
    let placement = placement?;
    if placement.new_capacity > 0 || placement.failed > 0 {
        return Some((
            CONDITION_FALSE,
            REASON_REQUIRES_NEW_CAPACITY,
            format!(
                "{}/{desired} virtual pods required new capacity, {} failed",
                placement.new_capacity, placement.failed
            ),
        ));
    }
    (placement.existing == desired).then(|| {
        (
            CONDITION_TRUE,
            REASON_FITS_EXISTING_CAPACITY,
            format!("All {desired} virtual pods fit on existing capacity"),
        )
    })
}

/// The status with the `Provisioning` condition set, when that changes anything.
pub fn with_provisioning_condition(
    buffer: &CapacityBuffer,
    placement: Option<&Placement>,
    now_rfc3339: &str,
) -> Option<CapacityBufferStatus> {
    let (state, reason, message) = provisioning_condition(buffer, placement)?;
    let mut status = buffer.status.clone().unwrap_or_default();
    status
        .set_condition(
            CONDITION_PROVISIONING,
            state,
            reason,
            &message,
            now_rfc3339,
            buffer.metadata.generation,
        )
        .then_some(status)
}
