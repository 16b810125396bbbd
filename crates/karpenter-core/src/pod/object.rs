//! The pod as karpenter-rs keeps it: the fields of a `core/v1` Pod that scheduling, disruption and
//! drain read, under the same names and with the same nested types, and nothing else.
//!
//! Why not `k8s_openapi`'s `Pod`: its structs carry every field inline, so one pod with one
//! container takes two ~2.5 KB allocations however little it sets (a `PodSpec` is 1.4 KB, a
//! `Container` 2.1 KB). The cluster state keeps every pod of the cluster; at 10,000 pods that was
//! ~50 MB of mostly empty fields. This view is ~1.3 KB per pod with its container; a volume is
//! its name and claim sources (~70 bytes instead of 3.2 KB: many pods carry an `emptyDir`).
//!
//! It decodes from a pod's JSON directly (unknown fields ignored), converts from the full
//! `k8s_openapi` types ([`From`]) for manifests and templates, and implements the object traits
//! (`kube_core::Resource` through `k8s_openapi::Resource`/`Metadata`) so keys and `ResourceExt`
//! work as for any object.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::api::core::v1::{
    Affinity, ContainerPort, EphemeralVolumeSource, PersistentVolumeClaimVolumeSource,
    PodResourceClaim, PodSchedulingGate, ResourceRequirements, Toleration,
    TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

/// A pod: what karpenter-rs reads of `core/v1` Pod. Serialized with its `apiVersion` and `kind`,
/// as the API server wants a written object.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Pod {
    pub metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatus>,
}

/// What a pod asks of its node and where it may run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSpec {
    /// Behind a pointer: inline it was 224 of a pod's 1,080 bytes, and set by few pods. Shared,
    /// as every part behind an `Arc` here, by the replicas of one owner (see [`share_parts`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Arc<Affinity>>,
    /// Shared by the replicas of one owner: their containers, requests included, are equal.
    pub containers: Arc<[Container]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Arc<[Container]>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<Arc<BTreeMap<String, String>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead: Option<BTreeMap<String, Quantity>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemption_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Boxed, as the other rarely set fields here: a thin pointer inline instead of 24 bytes keeps a pod,
    /// with the `Arc` the state holds it in, within jemalloc's 768-byte class.
    pub priority_class_name: Option<Box<String>>,
    /// Dynamic Resource Allocation claims: such pods are not provisioned for (no DRA allocator).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_claims: Option<Box<[PodResourceClaim]>>,
    /// Pod-level requests and limits (the `PodLevelResources` feature).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<Box<ResourceRequirements>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<Box<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduling_gates: Option<Box<[PodSchedulingGate]>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Arc<[Toleration]>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Arc<[TopologySpreadConstraint]>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<Volume>>,
}

impl PodSpec {
    /// The init containers, none when unset.
    pub fn init_containers(&self) -> &[Container] {
        self.init_containers.as_deref().unwrap_or_default()
    }

    /// The tolerations, none when unset.
    pub fn tolerations(&self) -> &[Toleration] {
        self.tolerations.as_deref().unwrap_or_default()
    }

    /// The topology spread constraints, none when unset.
    pub fn topology_spread_constraints(&self) -> &[TopologySpreadConstraint] {
        self.topology_spread_constraints
            .as_deref()
            .unwrap_or_default()
    }
}

/// A container's name, image and what scheduling reads of it (requests, host ports, whether it
/// is a sidecar).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Container {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ContainerPort>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

/// A pod volume: its name and the sources scheduling reads (a claim, or a generic ephemeral
/// volume whose claim is named after the pod). Other sources (emptyDir, hostPath, configMap, ...)
/// keep only the name: the full `k8s_openapi` `Volume` is 3.2 KB whatever it sets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Volume {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    /// Boxed: its claim template is ~0.8 KB inline, and few volumes are ephemeral.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ephemeral: Option<Box<EphemeralVolumeSource>>,
}

/// Phase, conditions and nomination.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodCondition>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Boxed: set on few pods (8 bytes inline instead of 24).
    pub nominated_node_name: Option<Box<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the kubelet started the pod; a duration-valued `karpenter.sh/do-not-disrupt`
    /// counts from it. Boxed: a pointer instead of 24 bytes inline in every pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Box<Time>>,
}

/// A pod condition: what the controllers read of one (`PodScheduled`, `Ready`,
/// `DisruptionTarget`: which, whether, why, since when). `k8s_openapi`'s carries the probe time,
/// message and observed generation too (160 bytes inline against 96): every running pod keeps
/// two conditions, so that was ~1.3 MB at 10,000 pods, before the allocator's rounding.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

impl From<k8s::PodCondition> for PodCondition {
    fn from(c: k8s::PodCondition) -> Self {
        PodCondition {
            type_: c.type_,
            status: c.status,
            reason: c.reason,
            last_transition_time: c.last_transition_time,
        }
    }
}

/// Makes `pod` share with `sibling` (an earlier pod of the same owner, or an earlier version of
/// the same pod) every part held behind an `Arc` that is equal in both. The replicas of a
/// Deployment then hold one copy of their containers (requests included), tolerations, affinity,
/// spread constraints and node selector instead of one each: ~1 KB a pod, ~10 MB of the
/// controller's state at 10,000 pods.
pub fn share_parts(pod: &mut Pod, sibling: &Pod) {
    let (Some(spec), Some(theirs)) = (pod.spec.as_mut(), sibling.spec.as_ref()) else {
        return;
    };
    share(&mut spec.containers, &theirs.containers);
    share_some(&mut spec.init_containers, &theirs.init_containers);
    share_some(&mut spec.tolerations, &theirs.tolerations);
    share_some(&mut spec.affinity, &theirs.affinity);
    share_some(
        &mut spec.topology_spread_constraints,
        &theirs.topology_spread_constraints,
    );
    share_some(&mut spec.node_selector, &theirs.node_selector);
}

/// Appends `item` to a list held behind an `Arc` (a new list: others may share the old one).
pub fn append_shared<T: Clone>(list: &mut Option<Arc<[T]>>, item: T) {
    let mut items = list.as_deref().map(<[T]>::to_vec).unwrap_or_default();
    items.push(item);
    *list = Some(items.into());
}

fn share<T: ?Sized + PartialEq>(mine: &mut Arc<T>, theirs: &Arc<T>) {
    if !Arc::ptr_eq(mine, theirs) && **mine == **theirs {
        *mine = Arc::clone(theirs);
    }
}

fn share_some<T: ?Sized + PartialEq>(mine: &mut Option<Arc<T>>, theirs: &Option<Arc<T>>) {
    if let (Some(mine), Some(theirs)) = (mine.as_mut(), theirs.as_ref()) {
        share(mine, theirs);
    }
}

impl Serialize for Pod {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Typed<'a> {
            api_version: &'static str,
            kind: &'static str,
            metadata: &'a ObjectMeta,
            #[serde(skip_serializing_if = "Option::is_none")]
            spec: Option<&'a PodSpec>,
            #[serde(skip_serializing_if = "Option::is_none")]
            status: Option<&'a PodStatus>,
        }
        Typed {
            api_version: "v1",
            kind: "Pod",
            metadata: &self.metadata,
            spec: self.spec.as_ref(),
            status: self.status.as_ref(),
        }
        .serialize(serializer)
    }
}

impl k8s_openapi::Resource for Pod {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for Pod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<k8s::Pod> for Pod {
    fn from(pod: k8s::Pod) -> Self {
        Pod {
            metadata: pod.metadata,
            spec: pod.spec.map(PodSpec::from),
            status: pod.status.map(PodStatus::from),
        }
    }
}

impl From<k8s::PodSpec> for PodSpec {
    fn from(spec: k8s::PodSpec) -> Self {
        let containers = |cs: Vec<k8s::Container>| cs.into_iter().map(Container::from).collect();
        PodSpec {
            affinity: spec.affinity.map(Arc::new),
            containers: containers(spec.containers),
            host_network: spec.host_network,
            init_containers: spec.init_containers.map(containers),
            node_name: spec.node_name,
            node_selector: spec.node_selector.map(Arc::new),
            overhead: spec.overhead,
            preemption_policy: spec.preemption_policy,
            priority: spec.priority,
            priority_class_name: spec.priority_class_name.map(Into::into),
            resource_claims: spec.resource_claims.map(Into::into),
            resources: spec.resources.map(Box::new),
            runtime_class_name: spec.runtime_class_name.map(Into::into),
            scheduler_name: spec.scheduler_name,
            scheduling_gates: spec.scheduling_gates.map(Into::into),
            termination_grace_period_seconds: spec.termination_grace_period_seconds,
            tolerations: spec.tolerations.map(Into::into),
            topology_spread_constraints: spec.topology_spread_constraints.map(Into::into),
            volumes: spec
                .volumes
                .map(|vs| vs.into_iter().map(Volume::from).collect()),
        }
    }
}

impl From<k8s::Container> for Container {
    fn from(c: k8s::Container) -> Self {
        Container {
            name: c.name,
            image: c.image,
            ports: c.ports,
            resources: c.resources,
            restart_policy: c.restart_policy,
        }
    }
}

impl From<k8s::Volume> for Volume {
    fn from(v: k8s::Volume) -> Self {
        Volume {
            name: v.name,
            persistent_volume_claim: v.persistent_volume_claim,
            ephemeral: v.ephemeral.map(Box::new),
        }
    }
}

impl From<k8s::PodStatus> for PodStatus {
    fn from(status: k8s::PodStatus) -> Self {
        PodStatus {
            conditions: status
                .conditions
                .map(|cs| cs.into_iter().map(PodCondition::from).collect()),
            nominated_node_name: status.nominated_node_name.map(Into::into),
            phase: status.phase,
            reason: status.reason,
            start_time: status.start_time.map(Box::new),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_core::ResourceExt;

    #[test]
    fn a_pod_is_decoded_from_its_json_keeping_what_scheduling_reads() {
        let json = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {
                "nodeName": "n1",
                "containers": [{
                    "name": "app", "image": "nginx", "env": [{"name": "A", "value": "1"}],
                    "resources": {"requests": {"cpu": "250m"}},
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "livenessProbe": {"httpGet": {"port": 80}}
                }],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "dnsPolicy": "ClusterFirst",
                "volumes": [
                    {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
                    {"name": "cache", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}}
                ]
            },
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                       "conditions": [{"type": "Ready", "status": "True"}]}
        });
        let pod: Pod = serde_json::from_value(json).unwrap();
        assert_eq!(pod.name_any(), "web-0");
        assert_eq!(pod.namespace().as_deref(), Some("shop"));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(
            spec.containers[0].ports.as_ref().unwrap()[0].host_port,
            Some(8080)
        );
        assert_eq!(
            spec.containers[0]
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["cpu"]
                .0,
            "250m"
        );
        assert_eq!(spec.tolerations.as_ref().unwrap().len(), 1);
        let volumes = spec.volumes.as_ref().unwrap();
        let names: Vec<&str> = volumes.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["scratch", "data", "cache"]);
        assert_eq!(
            volumes[0],
            Volume {
                name: "scratch".into(),
                ..Default::default()
            }
        );
        assert_eq!(
            volumes[1]
                .persistent_volume_claim
                .as_ref()
                .unwrap()
                .claim_name,
            "data-web-0"
        );
        assert!(volumes[2].ephemeral.is_some());
        assert_eq!(
            pod.status.as_ref().unwrap().phase.as_deref(),
            Some("Running")
        );
    }

    #[test]
    fn converting_from_the_full_type_keeps_every_field_the_view_has() {
        let full = k8s::Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(k8s::PodSpec {
                node_name: Some("n".into()),
                priority: Some(7),
                termination_grace_period_seconds: Some(30),
                containers: vec![k8s::Container {
                    name: "c".into(),
                    restart_policy: Some("Always".into()),
                    command: Some(vec!["sleep".into()]),
                    ..Default::default()
                }],
                init_containers: Some(vec![k8s::Container {
                    name: "init".into(),
                    ..Default::default()
                }]),
                hostname: Some("not kept".into()),
                ..Default::default()
            }),
            status: Some(k8s::PodStatus {
                phase: Some("Pending".into()),
                pod_ip: Some("not kept".into()),
                ..Default::default()
            }),
        };
        // Through JSON, the way the reflector decodes a watched pod: the same view.
        let decoded: Pod = serde_json::from_value(serde_json::to_value(&full).unwrap()).unwrap();
        let view = Pod::from(full);
        assert_eq!(view, decoded);
        assert_eq!(view.metadata.namespace.as_deref(), Some("ns"));
        let spec = view.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n"));
        assert_eq!(spec.priority, Some(7));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(spec.containers[0].restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.init_containers.unwrap()[0].name, "init");
        assert_eq!(view.status.unwrap().phase.as_deref(), Some("Pending"));
    }

    #[test]
    fn a_pod_is_written_with_its_api_version_and_kind_as_the_api_server_wants() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let json = serde_json::to_value(&pod).unwrap();
        assert_eq!(json["apiVersion"], "v1");
        assert_eq!(json["kind"], "Pod");
        assert_eq!(json["metadata"]["name"], "p");
        assert!(json.get("spec").is_none() && json.get("status").is_none());
        let back: Pod = serde_json::from_value(json).unwrap();
        assert_eq!(back, pod);
        let full: k8s::Pod = serde_json::from_value(serde_json::to_value(&pod).unwrap()).unwrap();
        assert_eq!(Pod::from(full), pod);
    }

    #[test]
    fn the_view_is_a_fraction_of_the_full_types_size() {
        assert!(
            size_of::<Pod>() * 2 < size_of::<k8s::Pod>(),
            "{}",
            size_of::<Pod>()
        );
        // The state holds every pod in an `Arc`: its counts and the pod within 768 bytes keep
        // it in jemalloc's 768-byte class (1,080 bytes took the 1,280-byte class, 808 the
        // 896-byte one).
        assert!(
            2 * size_of::<usize>() + size_of::<Pod>() <= 768,
            "{}",
            size_of::<Pod>()
        );
        assert!(size_of::<Container>() * 8 < size_of::<k8s::Container>());
        assert!(
            size_of::<Volume>() * 8 < size_of::<k8s::Volume>(),
            "{}",
            size_of::<Volume>()
        );
    }
}
