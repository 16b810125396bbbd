//! Watch streams → [`ClusterState`]. One task per kind; all replicas run them.
//!
//! Each kind is watched as raw objects ([`DynamicObject`]) and every object is decoded on its
//! own: an object the API server accepted but karpenter-rs cannot decode is skipped and reported
//! ([`super::ignored`]) instead of failing the whole list/watch of its kind (which would leave
//! the state unsynced and stop every controller).
//!
//! Before decoding, [`trim`] drops what no controller reads (managed fields, the images a Node
//! has pulled, a pod's file volumes and unread conditions, ...), so the state does not keep a
//! second copy of every pod's full manifest; pods then decode into karpenter-rs' own
//! [`karpenter_core::pod::Pod`], which has no field for the rest (env, probes, container
//! statuses). Objects the controller writes back whole (Nodes, NodeClaims) lose only what the API
//! server keeps anyway when a write omits it.

use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use serde_json::Value;

use karpenter_core::state::ignored::IgnoredObject;
use karpenter_core::state::{Kind, Tracked};

use super::SharedState;

/// `kubectl apply`'s copy of the whole manifest.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What the controllers read of a Node's status (not images, nodeInfo, addresses, volumes).
const NODE_STATUS_FIELDS: [&str; 4] = ["capacity", "allocatable", "conditions", "phase"];
/// What the controllers read of a Node condition (repair: type, status and since when).
const NODE_CONDITION_FIELDS: [&str; 4] = ["type", "status", "reason", "lastTransitionTime"];

/// The pod conditions the controllers read, and what they read of them. `DisruptionTarget` is
/// on evicted pods only: the provisioner plans for an evicted pod until its replacement exists
/// (`karpenter_core::provisioning::reschedulable::evicted_for_replacement`).
const POD_CONDITIONS: [&str; 3] = ["PodScheduled", "Ready", "DisruptionTarget"];
const POD_CONDITION_FIELDS: [&str; 4] = ["type", "status", "reason", "lastTransitionTime"];

/// Pod volume sources that only carry files into the containers: nothing to schedule or drain.
const FILE_VOLUME_SOURCES: [&str; 4] = ["projected", "configMap", "secret", "downwardAPI"];

fn retain_keys(object: &mut Value, keep: &[&str]) {
    if let Some(map) = object.as_object_mut() {
        map.retain(|key, _| keep.contains(&key.as_str()));
    }
}

/// Drops, from one watched object, what no controller reads. `managedFields` goes from every
/// kind: an update that omits them keeps the server's. The rest only goes from kinds the
/// controller never writes back whole (pods are only evicted or deleted), or from parts such a
/// write does not carry (a Node's status: `replace` of the main resource ignores it).
pub(crate) fn trim(kind: Kind, metadata: &mut kube::api::ObjectMeta, data: &mut Value) {
    metadata.managed_fields = None;
    let written_back = matches!(
        kind,
        Kind::Node | Kind::NodeClaim | Kind::NodePool | Kind::EC2NodeClass
    );
    if !written_back && let Some(annotations) = metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
    match kind {
        Kind::Pod => trim_pod(data),
        // A Node is written back through its main resource only, where the API server ignores
        // `status`: its status can lose what no controller reads.
        Kind::Node => {
            if let Some(status) = data.get_mut("status") {
                retain_keys(status, &NODE_STATUS_FIELDS);
                if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut)
                {
                    for condition in conditions.iter_mut() {
                        retain_keys(condition, &NODE_CONDITION_FIELDS);
                    }
                }
            }
        }
        _ => {}
    }
}

fn trim_pod(data: &mut Value) {
    if let Some(volumes) = data
        .pointer_mut("/spec/volumes")
        .and_then(Value::as_array_mut)
    {
        volumes.retain(|v| {
            v.as_object()
                .is_none_or(|v| !FILE_VOLUME_SOURCES.iter().any(|s| v.contains_key(*s)))
        });
    }
    if let Some(status) = data.get_mut("status") {
        // Of the kubelet's five conditions the controllers read two: PodScheduled (provisionable,
        // when bound) and Ready (PDB health); a thousand bytes per running pod otherwise. And
        // the API server's DisruptionTarget of an evicted pod.
        if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
            conditions.retain(|c| {
                c.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| POD_CONDITIONS.contains(&t))
            });
            for condition in conditions.iter_mut() {
                retain_keys(condition, &POD_CONDITION_FIELDS);
            }
        }
    }
}

/// A watched object: decoded, or skipped with the reason.
enum Decoded<K> {
    Object(K),
    Ignored(Box<IgnoredObject>),
}

fn decode<K>(mut raw: DynamicObject, resource: &ApiResource) -> Decoded<K>
where
    K: Tracked + DeserializeOwned,
{
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(resource.api_version.clone()),
        kind: Some(resource.kind.clone()),
        name: raw.metadata.name.clone(),
        namespace: raw.metadata.namespace.clone(),
        uid: raw.metadata.uid.clone(),
        ..Default::default()
    };
    let key = match raw.metadata.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", raw.name_any()),
        _ => raw.name_any(),
    };
    trim(K::KIND, &mut raw.metadata, &mut raw.data);
    let decoded = into_value(raw).and_then(serde_json::from_value::<K>);
    match decoded {
        Ok(obj) => Decoded::Object(obj),
        Err(err) => Decoded::Ignored(Box::new(IgnoredObject {
            kind: K::KIND,
            key,
            reference,
            error: err.to_string(),
        })),
    }
}

/// The object as one JSON value, built by moving its parts (serializing the whole object by
/// reference would hold a second copy of it while decoding).
fn into_value(raw: DynamicObject) -> serde_json::Result<Value> {
    let DynamicObject {
        types,
        metadata,
        data,
    } = raw;
    let mut object = match data {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    if let Some(types) = types {
        object.insert("apiVersion".into(), Value::String(types.api_version));
        object.insert("kind".into(), Value::String(types.kind));
    }
    object.insert("metadata".into(), serde_json::to_value(metadata)?);
    Ok(Value::Object(object))
}

fn log_ignored(object: &IgnoredObject) {
    tracing::error!(
        kind = ?object.kind,
        object = %object.key,
        error = %object.error,
        "ignoring object karpenter-rs cannot decode"
    );
}

/// Applies watch events of one kind to the state until the stream ends (never, with backoff) or
/// the task is aborted. `on_change` runs after each applied object (outside the state lock), so
/// callers can wake controllers.
pub async fn reflect<K>(api: Api<K>, state: Arc<SharedState>, on_change: impl Fn(&K) + Send)
where
    K: Tracked + DeserializeOwned + Debug + Resource<DynamicType = ()>,
{
    let resource = ApiResource::erase::<K>(&());
    let raw_api: Api<DynamicObject> = Api::all_with(kube::Client::from(api), &resource);
    let stream = watcher::watcher(raw_api, karpenter_kube::watch::config()).default_backoff();
    futures::pin_mut!(stream);
    let mut initial: Vec<K> = Vec::new();
    let mut initial_ignored: Vec<IgnoredObject> = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => {
                initial.clear();
                initial_ignored.clear();
            }
            Ok(Event::InitApply(raw)) => match decode::<K>(raw, &resource) {
                Decoded::Object(obj) => initial.push(obj),
                Decoded::Ignored(ignored) => initial_ignored.push(*ignored),
            },
            Ok(Event::InitDone) => {
                let objs = std::mem::take(&mut initial);
                let ignored = std::mem::take(&mut initial_ignored);
                for object in &ignored {
                    log_ignored(object);
                }
                tracing::debug!(kind = ?K::KIND, count = objs.len(), ignored = ignored.len(), "listed");
                // The list moves into the state (no second copy of every object); the hook then
                // sees each object as the state holds it, one copy at a time.
                let keys: Vec<String> = objs.iter().map(K::key).collect();
                {
                    let mut state = state.write();
                    state.reset(objs);
                    state.reset_ignored(K::KIND, ignored);
                }
                state.publish_synced();
                for key in &keys {
                    let held = K::map(&mut state.write()).get(key).cloned();
                    if let Some(obj) = held {
                        on_change(std::borrow::Borrow::borrow(&obj));
                    }
                }
            }
            Ok(Event::Apply(raw)) => match decode::<K>(raw, &resource) {
                Decoded::Object(obj) => {
                    // The hook sees the object as the state holds it (shared, for the big kinds)
                    // rather than a second copy made for it.
                    let key = K::key(&obj);
                    let held = {
                        let mut state = state.write();
                        state.apply(obj);
                        K::map(&mut state).get(&key).cloned()
                    };
                    if let Some(obj) = held {
                        on_change(std::borrow::Borrow::borrow(&obj));
                    }
                }
                Decoded::Ignored(ignored) => {
                    if state.write().ignore::<K>((*ignored).clone()) {
                        log_ignored(&ignored);
                    }
                }
            },
            Ok(Event::Delete(raw)) => match decode::<K>(raw, &resource) {
                Decoded::Object(obj) => {
                    state.write().delete(&obj);
                    on_change(&obj);
                }
                Decoded::Ignored(ignored) => state.write().forget::<K>(&ignored.key),
            },
            // The backoff retries; log so a missing RBAC rule is visible.
            Err(err) => tracing::warn!(kind = ?K::KIND, error = %err, "watch failed, retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pods_keep_what_controllers_read_and_lose_the_rest() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "default",
                "annotations": {"karpenter.sh/do-not-disrupt": "true", LAST_APPLIED_ANNOTATION: "{...}"},
                "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
            },
            "spec": {
                "containers": [{"name": "app", "image": "app:1", "env": [{"name": "A", "value": "x"}],
                                "livenessProbe": {"exec": {"command": ["true"]}},
                                "resources": {"requests": {"cpu": "1"}}, "ports": [{"containerPort": 80, "hostPort": 80}]}],
                "volumes": [{"name": "token", "projected": {"sources": []}},
                            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
            },
            "status": {"phase": "Pending", "podIP": "10.0.0.1",
                       "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"},
                                      {"type": "Initialized", "status": "True"},
                                      {"type": "Ready", "status": "False", "lastTransitionTime": "2024-01-01T00:00:00Z"},
                                      {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                                       "message": "Eviction API: evicting", "lastTransitionTime": "2024-01-01T00:00:05Z"}],
                       "containerStatuses": [{"name": "app", "image": "app:1", "imageID": "", "ready": false, "restartCount": 0}]}
        });
        let raw: DynamicObject = serde_json::from_value(pod).unwrap();
        let resource = ApiResource::erase::<karpenter_core::pod::Pod>(&());
        let Decoded::Object(pod) = decode::<karpenter_core::pod::Pod>(raw, &resource) else {
            panic!("not decoded");
        };
        assert!(pod.metadata.managed_fields.is_none());
        let annotations = pod.metadata.annotations.unwrap();
        assert_eq!(annotations.len(), 1);
        assert!(annotations.contains_key("karpenter.sh/do-not-disrupt"));
        let spec = pod.spec.unwrap();
        let container = &spec.containers[0];
        assert_eq!(
            container
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["cpu"]
                .0,
            "1"
        );
        assert_eq!(container.ports.as_ref().unwrap()[0].host_port, Some(80));
        let volumes = spec.volumes.unwrap();
        assert_eq!(volumes.len(), 1);
        assert_eq!(volumes[0].name, "data");
        let status = pod.status.unwrap();
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        let conditions = status.conditions.clone().unwrap();
        assert_eq!(conditions[0].reason.as_deref(), Some("Unschedulable"));
        let kept: Vec<&str> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            kept,
            ["PodScheduled", "Ready", "DisruptionTarget"],
            "only the conditions read"
        );
        assert!(conditions[1].last_transition_time.is_some());
        // An evicted pod stands in for its replacement (the provisioner reads when and why).
        assert_eq!(
            conditions[2].reason.as_deref(),
            Some("EvictionByEvictionAPI")
        );
        assert!(conditions[2].last_transition_time.is_some());
    }

    #[test]
    fn nodes_keep_their_annotations_and_lose_what_no_controller_reads() {
        let node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "n",
                "annotations": {LAST_APPLIED_ANNOTATION: "{...}"},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}]
            },
            "status": {"images": [{"names": ["app:1"], "sizeBytes": 1}],
                       "allocatable": {"cpu": "4"},
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                       "nodeInfo": {"kubeletVersion": "v1.33.0", "architecture": "amd64", "bootID": "", "containerRuntimeVersion": "",
                                    "kernelVersion": "", "kubeProxyVersion": "", "machineID": "", "operatingSystem": "linux",
                                    "osImage": "", "systemUUID": ""},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "kubelet is posting ready status",
                                       "lastHeartbeatTime": "2024-01-01T00:00:00Z",
                                       "lastTransitionTime": "2024-01-01T00:00:00Z"}]}
        });
        let raw: DynamicObject = serde_json::from_value(node).unwrap();
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&());
        let Decoded::Object(node) = decode::<k8s_openapi::api::core::v1::Node>(raw, &resource)
        else {
            panic!("not decoded");
        };
        assert!(node.metadata.managed_fields.is_none());
        // The controller replaces Nodes whole: an annotation dropped here would be deleted.
        assert!(
            node.metadata
                .annotations
                .unwrap()
                .contains_key(LAST_APPLIED_ANNOTATION)
        );
        let status = node.status.unwrap();
        assert!(status.images.is_none());
        assert!(status.node_info.is_none() && status.addresses.is_none());
        assert_eq!(status.allocatable.unwrap()["cpu"].0, "4");
        let ready = &status.conditions.unwrap()[0];
        assert_eq!(
            (ready.type_.as_str(), ready.status.as_str()),
            ("Ready", "True")
        );
        assert!(ready.last_transition_time.is_some() && ready.reason.is_some());
        assert!(ready.message.is_none() && ready.last_heartbeat_time.is_none());
    }
}
