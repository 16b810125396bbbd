//! Loading ordinary Kubernetes YAML for `simulate`: multi-document files, `kind: List`, whole
//! directories; workloads expanded into the pods their controllers would create.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplateSpec,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::manifest::split_documents;
use karpenter_api::v1::EC2NodeClass;
use karpenter_api::{NodeClaim, NodePool};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Why the input could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("failed to read {path}: {message}")]
    Read { path: String, message: String },
    #[error("{source_name}: invalid YAML: {message}")]
    Yaml {
        source_name: String,
        message: String,
    },
    #[error(
        "{source_name}: document {index} has no `kind` (every Kubernetes object needs apiVersion and kind)"
    )]
    MissingKind { source_name: String, index: usize },
    #[error("{source_name}: invalid {kind} {name:?}: {message}")]
    Object {
        source_name: String,
        kind: String,
        name: String,
        message: String,
    },
}

/// Everything `simulate` read, workloads already expanded into pods.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    pub node_pools: Vec<NodePool>,
    pub node_classes: Vec<EC2NodeClass>,
    /// Pods without `spec.nodeName`: the ones to schedule (in input order).
    pub pending_pods: Vec<Pod>,
    /// Pods bound to an existing node by `spec.nodeName`.
    pub bound_pods: Vec<Pod>,
    pub daemonsets: Vec<DaemonSet>,
    pub pdbs: Vec<PodDisruptionBudget>,
    pub claims: Vec<PersistentVolumeClaim>,
    pub volumes: Vec<PersistentVolume>,
    pub storage_classes: Vec<StorageClass>,
    pub nodes: Vec<Node>,
    pub node_claims: Vec<NodeClaim>,
    /// `Kind namespace/name` of objects `simulate` does not use.
    pub ignored: Vec<String>,
}

const DEFAULT_NAMESPACE: &str = "default";

impl Manifests {
    pub fn new() -> Self {
        Self::default()
    }

    /// Loads a file, or every `*.yaml`/`*.yml`/`*.json` file under a directory (sorted, recursive).
    pub fn load_path(&mut self, path: &Path) -> Result<(), ManifestError> {
        let read_err = |e: std::io::Error| ManifestError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        if path.is_dir() {
            let mut files = Vec::new();
            collect_manifest_files(path, &mut files).map_err(read_err)?;
            for file in files {
                self.load_path(&file)?;
            }
            return Ok(());
        }
        let text = std::fs::read_to_string(path).map_err(read_err)?;
        self.load_str(&path.display().to_string(), &text)
    }

    /// Loads one YAML (or JSON) text with any number of documents; `source_name` names it in
    /// errors.
    pub fn load_str(&mut self, source_name: &str, text: &str) -> Result<(), ManifestError> {
        for document in split_documents(text) {
            let value = document.value.map_err(|message| ManifestError::Yaml {
                source_name: format!("{source_name} (document {})", document.index),
                message,
            })?;
            if !value.is_null() {
                self.add_value(source_name, document.index, value)?;
            }
        }
        Ok(())
    }

    fn add_value(
        &mut self,
        source_name: &str,
        index: usize,
        value: Value,
    ) -> Result<(), ManifestError> {
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .map(str::to_string);
        let Some(kind) = kind else {
            return Err(ManifestError::MissingKind {
                source_name: source_name.to_string(),
                index,
            });
        };
        if kind == "List" || kind.ends_with("List") && value.get("items").is_some() {
            let items = value
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for item in items {
                self.add_value(source_name, index, item)?;
            }
            return Ok(());
        }
        let name = value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let object_err = |message: String| ManifestError::Object {
            source_name: source_name.to_string(),
            kind: kind.clone(),
            name: name.clone(),
            message,
        };
        fn typed<T: DeserializeOwned>(
            value: Value,
            err: impl Fn(String) -> ManifestError,
        ) -> Result<T, ManifestError> {
            serde_json::from_value(value).map_err(|e| err(e.to_string()))
        }
        match kind.as_str() {
            "NodePool" => self.node_pools.push(typed(value, object_err)?),
            "EC2NodeClass" => self.node_classes.push(typed(value, object_err)?),
            "NodeClaim" => self.node_claims.push(typed(value, object_err)?),
            "Node" => self.nodes.push(typed(value, object_err)?),
            "Pod" => {
                let mut pod: Pod = typed(value, object_err)?;
                default_namespace(&mut pod.metadata);
                if pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some()
                {
                    self.bound_pods.push(pod);
                } else {
                    self.pending_pods.push(pod);
                }
            }
            "Deployment" => {
                let d: Deployment = typed(value, object_err)?;
                let spec = d.spec.ok_or_else(|| object_err("spec is missing".into()))?;
                self.expand(&d.metadata, spec.replicas.unwrap_or(1), &spec.template);
            }
            "ReplicaSet" => {
                let r: ReplicaSet = typed(value, object_err)?;
                let spec = r.spec.ok_or_else(|| object_err("spec is missing".into()))?;
                let template = spec
                    .template
                    .ok_or_else(|| object_err("spec.template is missing".into()))?;
                self.expand(&r.metadata, spec.replicas.unwrap_or(1), &template);
            }
            "StatefulSet" => {
                let s: StatefulSet = typed(value, object_err)?;
                let spec = s.spec.ok_or_else(|| object_err("spec is missing".into()))?;
                self.expand(&s.metadata, spec.replicas.unwrap_or(1), &spec.template);
            }
            "Job" => {
                let j: Job = typed(value, object_err)?;
                let spec = j.spec.ok_or_else(|| object_err("spec is missing".into()))?;
                // Pods running at once: parallelism, capped by completions.
                let parallelism = spec.parallelism.unwrap_or(1);
                let count = spec.completions.map_or(parallelism, |c| c.min(parallelism));
                self.expand(&j.metadata, count, &spec.template);
            }
            "DaemonSet" => self.daemonsets.push(typed(value, object_err)?),
            "PodDisruptionBudget" => self.pdbs.push(typed(value, object_err)?),
            "PersistentVolumeClaim" => {
                let mut pvc: PersistentVolumeClaim = typed(value, object_err)?;
                default_namespace(&mut pvc.metadata);
                self.claims.push(pvc);
            }
            "PersistentVolume" => self.volumes.push(typed(value, object_err)?),
            "StorageClass" => self.storage_classes.push(typed(value, object_err)?),
            other => {
                let ns = value.pointer("/metadata/namespace").and_then(Value::as_str);
                self.ignored.push(match ns {
                    Some(ns) => format!("{other} {ns}/{name}"),
                    None => format!("{other} {name}"),
                });
            }
        }
        Ok(())
    }

    /// Adds `replicas` pods stamped from `template`, named `<workload>-<i>`.
    fn expand(&mut self, owner: &ObjectMeta, replicas: i32, template: &PodTemplateSpec) {
        let namespace = owner
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        let owner_name = owner.name.clone().unwrap_or_default();
        for i in 0..replicas.max(0) {
            let mut metadata = template.metadata.clone().unwrap_or_default();
            metadata.name = Some(format!("{owner_name}-{i}"));
            metadata.namespace = Some(namespace.clone());
            let pod = Pod {
                metadata,
                spec: template.spec.clone(),
                status: None,
            };
            if pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some()
            {
                self.bound_pods.push(pod);
            } else {
                self.pending_pods.push(pod);
            }
        }
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

fn collect_manifest_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_manifest_files(&path, out)?;
        } else if path
            .extension()
            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        {
            out.push(path);
        }
    }
    Ok(())
}
