//! What the API server and the controllers add to a pod before the scheduler sees it: the
//! RuntimeClass admission plugin (pod overhead, node selector, tolerations), and a StatefulSet's
//! claims from its `volumeClaimTemplates` (with the default StorageClass, as the
//! DefaultStorageClass admission plugin sets it on a claim that names none).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimStatus, PersistentVolumeClaimVolumeSource,
    Toleration,
};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_core::pod::{PodSpec, Volume};

use super::Finding;

/// The annotation that marks the default StorageClass, and its beta spelling (still honoured).
pub const DEFAULT_CLASS_ANNOTATIONS: [&str; 2] = [
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
];

/// The default StorageClass, as Kubernetes picks it when several are marked: the newest, then
/// the first by name.
pub fn default_storage_class(classes: &[StorageClass]) -> Option<String> {
    classes
        .iter()
        .filter(|c| {
            let annotations = c.metadata.annotations.as_ref();
            DEFAULT_CLASS_ANNOTATIONS.iter().any(|key| {
                annotations
                    .and_then(|a| a.get(*key))
                    .is_some_and(|v| v == "true")
            })
        })
        .min_by(|a, b| {
            let created = |c: &StorageClass| c.metadata.creation_timestamp.clone().map(|t| t.0);
            created(b)
                .cmp(&created(a))
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        })
        .and_then(|c| c.metadata.name.clone())
}

/// A StatefulSet's claim templates, ready to stamp one replica's claims.
pub struct ClaimTemplates<'a> {
    pub templates: &'a [PersistentVolumeClaim],
    /// The default StorageClass of the input, for templates that name none.
    pub default_class: Option<&'a str>,
}

impl ClaimTemplates<'_> {
    /// Points replica `ordinal`'s volumes at its claims `<template>-<statefulset>-<ordinal>` (a
    /// template replaces a pod volume of the same name, as the StatefulSet controller does) and
    /// returns the claims the controller would create. The caller keeps a claim of that name the
    /// input already holds: then the replica uses it, bound or not.
    pub fn for_replica(
        &self,
        namespace: &str,
        statefulset: &str,
        ordinal: u32,
        spec: Option<&mut PodSpec>,
    ) -> Vec<PersistentVolumeClaim> {
        let mut claims = Vec::with_capacity(self.templates.len());
        let mut volumes = Vec::with_capacity(self.templates.len());
        for template in self.templates {
            let template_name = template.metadata.name.clone().unwrap_or_default();
            let claim_name = format!("{template_name}-{statefulset}-{ordinal}");
            volumes.push(Volume {
                name: template_name,
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim_name.clone(),
                    read_only: None,
                }),
                ..Default::default()
            });
            let mut spec = template.spec.clone().unwrap_or_default();
            if spec.storage_class_name.is_none() {
                spec.storage_class_name = self.default_class.map(str::to_string);
            }
            claims.push(PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(claim_name),
                    namespace: Some(namespace.to_string()),
                    labels: template.metadata.labels.clone(),
                    ..Default::default()
                },
                spec: Some(spec),
                status: Some(PersistentVolumeClaimStatus {
                    phase: Some("Pending".to_string()),
                    ..Default::default()
                }),
            });
        }
        if let Some(spec) = spec {
            let pod_volumes = spec.volumes.get_or_insert_with(Vec::new);
            pod_volumes.retain(|v| !volumes.iter().any(|c| c.name == v.name));
            pod_volumes.extend(volumes);
        }
        claims
    }
}

/// The RuntimeClass admission plugin: a pod naming a RuntimeClass gets its `overhead.podFixed`
/// as `spec.overhead` and its `scheduling` node selector and tolerations; the API server refuses
/// the pod when the class is missing or conflicts with the pod. `spec_path` is where the pod spec
/// is in the object, for the error.
pub fn apply_runtime_class<S: RuntimeClassFields>(
    spec: Option<&mut S>,
    classes: &[RuntimeClass],
    spec_path: &str,
) -> Result<(), Finding> {
    let Some(spec) = spec else { return Ok(()) };
    let spec = spec.runtime_class_fields();
    let Some(name) = spec.runtime_class_name.map(str::to_string) else {
        return Ok(());
    };
    let field = format!("{spec_path}.runtimeClassName");
    let Some(class) = classes
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(name.as_str()))
    else {
        return Err((
            field,
            format!(
                "Not found: {name:?}: the API server refuses pods whose RuntimeClass does not exist"
            ),
            format!(
                "add RuntimeClass {name} (node.k8s.io/v1) to the input, or remove runtimeClassName"
            ),
        ));
    };
    if let Some(pod_fixed) = class.overhead.as_ref().and_then(|o| o.pod_fixed.as_ref()) {
        if let Some(overhead) = spec.overhead.as_ref().filter(|o| !o.is_empty())
            && overhead != pod_fixed
        {
            return Err((
                format!("{spec_path}.overhead"),
                format!(
                    "Forbidden: pod rejected: Pod's Overhead doesn't match RuntimeClass {name:?}'s defined Overhead"
                ),
                "remove spec.overhead: the RuntimeClass sets it".to_string(),
            ));
        }
        *spec.overhead = Some(pod_fixed.clone());
    }
    let Some(scheduling) = class.scheduling.as_ref() else {
        return Ok(());
    };
    if let Some(selector) = scheduling.node_selector.as_ref() {
        let pod_selector = spec.node_selector.map_mut();
        for (key, value) in selector {
            match pod_selector.get(key) {
                Some(pod_value) if pod_value != value => {
                    return Err((
                        format!("{spec_path}.nodeSelector[{key}]"),
                        format!(
                            "Forbidden: pod rejected: conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value}; pod.spec.nodeSelector[{key}] = {pod_value}"
                        ),
                        format!("RuntimeClass {name} already selects {key}={value}"),
                    ));
                }
                Some(_) => {}
                None => {
                    pod_selector.insert(key.clone(), value.clone());
                }
            }
        }
    }
    if let Some(tolerations) = scheduling.tolerations.as_ref() {
        for toleration in tolerations {
            spec.tolerations.add_missing(toleration);
        }
    }
    Ok(())
}

/// The parts of a pod spec the RuntimeClass plugin reads and sets, in a pod's spec as karpenter-rs
/// keeps it and in a full template's (a DaemonSet's, kept whole).
pub struct RuntimeClassFieldsMut<'a> {
    pub runtime_class_name: Option<&'a str>,
    pub overhead: &'a mut Option<BTreeMap<String, Quantity>>,
    pub node_selector: &'a mut dyn NodeSelectorSlot,
    pub tolerations: &'a mut dyn TolerationsSlot,
}

/// A spec's node selector, kept inline (a full template) or shared (a pod as karpenter-rs keeps
/// it, where the replicas of one owner share it).
pub trait NodeSelectorSlot {
    /// The selector to change, created empty when unset (copied first when shared).
    fn map_mut(&mut self) -> &mut BTreeMap<String, String>;
}

impl NodeSelectorSlot for Option<BTreeMap<String, String>> {
    fn map_mut(&mut self) -> &mut BTreeMap<String, String> {
        self.get_or_insert_with(BTreeMap::new)
    }
}

impl NodeSelectorSlot for Option<Arc<BTreeMap<String, String>>> {
    fn map_mut(&mut self) -> &mut BTreeMap<String, String> {
        Arc::make_mut(self.get_or_insert_with(Default::default))
    }
}

/// A spec's tolerations, kept inline or shared (as [`NodeSelectorSlot`]).
pub trait TolerationsSlot {
    /// Adds `toleration` unless the spec has it already.
    fn add_missing(&mut self, toleration: &Toleration);
}

impl TolerationsSlot for Option<Vec<Toleration>> {
    fn add_missing(&mut self, toleration: &Toleration) {
        let tolerations = self.get_or_insert_with(Vec::new);
        if !tolerations.contains(toleration) {
            tolerations.push(toleration.clone());
        }
    }
}

impl TolerationsSlot for Option<Arc<[Toleration]>> {
    fn add_missing(&mut self, toleration: &Toleration) {
        if !self.as_deref().unwrap_or_default().contains(toleration) {
            karpenter_core::pod::append_shared(self, toleration.clone());
        }
    }
}

/// A pod spec the RuntimeClass plugin can admit.
pub trait RuntimeClassFields {
    fn runtime_class_fields(&mut self) -> RuntimeClassFieldsMut<'_>;
}

macro_rules! runtime_class_fields {
    ($spec:ty) => {
        impl RuntimeClassFields for $spec {
            fn runtime_class_fields(&mut self) -> RuntimeClassFieldsMut<'_> {
                RuntimeClassFieldsMut {
                    runtime_class_name: self.runtime_class_name.as_ref().map(|n| n.as_str()),
                    overhead: &mut self.overhead,
                    node_selector: &mut self.node_selector,
                    tolerations: &mut self.tolerations,
                }
            }
        }
    };
}

runtime_class_fields!(PodSpec);
runtime_class_fields!(k8s_openapi::api::core::v1::PodSpec);

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime_class(yaml: &str) -> RuntimeClass {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn pod_spec(yaml: &str) -> PodSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn a_runtime_class_brings_overhead_selector_and_tolerations() {
        let class = runtime_class(
            r#"
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: kata}
handler: kata
overhead: {podFixed: {cpu: 250m, memory: 160Mi}}
scheduling:
  nodeSelector: {sandbox: kata}
  tolerations: [{key: sandbox, operator: Exists, effect: NoSchedule}]
"#,
        );
        let mut spec = pod_spec(
            "{runtimeClassName: kata, containers: [{name: c}], nodeSelector: {team: a}, tolerations: [{key: sandbox, operator: Exists, effect: NoSchedule}]}",
        );
        apply_runtime_class(Some(&mut spec), std::slice::from_ref(&class), "spec").unwrap();
        let overhead = spec.overhead.as_ref().unwrap();
        assert_eq!(overhead["cpu"].0, "250m");
        assert_eq!(overhead["memory"].0, "160Mi");
        let selector = spec.node_selector.as_ref().unwrap();
        assert_eq!(selector["sandbox"], "kata");
        assert_eq!(selector["team"], "a");
        assert_eq!(spec.tolerations.as_ref().unwrap().len(), 1, "no duplicate");

        let mut conflicting = pod_spec(
            "{runtimeClassName: kata, containers: [{name: c}], nodeSelector: {sandbox: gvisor}}",
        );
        let err = apply_runtime_class(Some(&mut conflicting), std::slice::from_ref(&class), "spec")
            .unwrap_err();
        assert_eq!(err.0, "spec.nodeSelector[sandbox]");

        let mut other_overhead =
            pod_spec("{runtimeClassName: kata, containers: [{name: c}], overhead: {cpu: 1}}");
        let err = apply_runtime_class(Some(&mut other_overhead), &[class], "spec").unwrap_err();
        assert_eq!(err.0, "spec.overhead");
    }

    #[test]
    fn a_missing_runtime_class_names_the_field() {
        let mut spec = pod_spec("{runtimeClassName: gvisor, containers: [{name: c}]}");
        let err = apply_runtime_class(Some(&mut spec), &[], "spec.template.spec").unwrap_err();
        assert_eq!(err.0, "spec.template.spec.runtimeClassName");
        assert!(err.1.contains("\"gvisor\""), "{}", err.1);
        let mut plain = pod_spec("{containers: [{name: c}]}");
        apply_runtime_class(Some(&mut plain), &[], "spec").unwrap();
        assert_eq!(plain.overhead, None);
    }

    #[test]
    fn the_newest_default_storage_class_wins() {
        let classes: Vec<StorageClass> = [
            "{metadata: {name: old, creationTimestamp: '2024-01-01T00:00:00Z', annotations: {storageclass.kubernetes.io/is-default-class: 'true'}}, provisioner: x}",
            "{metadata: {name: new, creationTimestamp: '2025-01-01T00:00:00Z', annotations: {storageclass.beta.kubernetes.io/is-default-class: 'true'}}, provisioner: x}",
            "{metadata: {name: newest-not-default, creationTimestamp: '2026-01-01T00:00:00Z'}, provisioner: x}",
        ]
        .iter()
        .map(|y| serde_saphyr::from_str(y).unwrap())
        .collect();
        assert_eq!(default_storage_class(&classes).as_deref(), Some("new"));
        assert_eq!(default_storage_class(&classes[2..]), None);
    }

    #[test]
    fn each_replica_gets_its_claims_named_as_the_controller_names_them() {
        let templates: Vec<PersistentVolumeClaim> = vec![serde_saphyr::from_str(
            "{metadata: {name: data}, spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}",
        )
        .unwrap()];
        let stamp = ClaimTemplates {
            templates: &templates,
            default_class: Some("gp3"),
        };
        let mut spec = pod_spec(
            "{containers: [{name: c}], volumes: [{name: data, emptyDir: {}}, {name: cache, emptyDir: {}}]}",
        );
        let claims = stamp.for_replica("db", "pg", 2, Some(&mut spec));
        assert_eq!(claims.len(), 1);
        assert_eq!(claims[0].metadata.name.as_deref(), Some("data-pg-2"));
        assert_eq!(claims[0].metadata.namespace.as_deref(), Some("db"));
        let claim_spec = claims[0].spec.as_ref().unwrap();
        assert_eq!(claim_spec.storage_class_name.as_deref(), Some("gp3"));
        let volumes = spec.volumes.unwrap();
        let names: Vec<_> = volumes.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            ["cache", "data"],
            "the template replaces the pod's volume"
        );
        let source = volumes[1].persistent_volume_claim.as_ref().unwrap();
        assert_eq!(source.claim_name, "data-pg-2");
    }
}
