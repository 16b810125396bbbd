//! Which resources the server serves: built-in kinds the controllers use, plus CRDs added at runtime.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::crd_check::admission::ObjectSchema;
use crate::error::ApiError;

/// One served resource (a group/version/plural). Objects are stored once per (group, plural),
/// so a CRD served in several versions shares its objects between them (no conversion).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group; empty for the core group.
    pub group: String,
    /// Served version.
    pub version: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Lower-case plural used in URLs, e.g. `pods`.
    pub plural: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Whether the `/status` subresource exists (main-resource writes then keep the old status).
    pub has_status: bool,
}

impl ResourceInfo {
    /// A resource description.
    pub fn new(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
        has_status: bool,
    ) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            plural: plural.to_owned(),
            namespaced,
            has_status,
        }
    }

    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural` or `plural.group`, as Kubernetes names resources in messages.
    pub fn qualified_plural(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub(crate) fn is(&self, group: &str, plural: &str) -> bool {
        self.group == group && self.plural == plural
    }
}

/// The built-in resources: what Karpenter's controllers read and write.
fn builtins() -> Vec<ResourceInfo> {
    let r = ResourceInfo::new;
    vec![
        r("", "v1", "Pod", "pods", true, true),
        r("", "v1", "Node", "nodes", false, true),
        r("", "v1", "Namespace", "namespaces", false, true),
        r("", "v1", "ConfigMap", "configmaps", true, false),
        r("", "v1", "Secret", "secrets", true, false),
        r("", "v1", "Service", "services", true, true),
        r("", "v1", "Event", "events", true, false),
        r("", "v1", "LimitRange", "limitranges", true, false),
        r(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
            true,
        ),
        r(
            "",
            "v1",
            "PersistentVolume",
            "persistentvolumes",
            false,
            true,
        ),
        r("apps", "v1", "DaemonSet", "daemonsets", true, true),
        r("apps", "v1", "Deployment", "deployments", true, true),
        r("apps", "v1", "ReplicaSet", "replicasets", true, true),
        r("apps", "v1", "StatefulSet", "statefulsets", true, true),
        r(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            true,
        ),
        r(
            "storage.k8s.io",
            "v1",
            "StorageClass",
            "storageclasses",
            false,
            false,
        ),
        r("storage.k8s.io", "v1", "CSINode", "csinodes", false, false),
        r(
            "storage.k8s.io",
            "v1",
            "VolumeAttachment",
            "volumeattachments",
            false,
            true,
        ),
        r("coordination.k8s.io", "v1", "Lease", "leases", true, false),
        r("events.k8s.io", "v1", "Event", "events", true, false),
        r(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            true,
        ),
    ]
}

/// Whether a (group, plural) is one of the built-in kinds rather than a custom resource.
pub(crate) fn is_builtin(group: &str, plural: &str) -> bool {
    builtins().iter().any(|r| r.is(group, plural))
}

/// All served resources.
#[derive(Debug, Clone)]
pub(crate) struct Registry {
    resources: Vec<ResourceInfo>,
    /// The schema of each served CRD version, keyed by (group, version, plural).
    schemas: HashMap<(String, String, String), Arc<ObjectSchema>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            resources: builtins(),
            schemas: HashMap::new(),
        }
    }
}

impl Registry {
    /// Adds (or replaces) a resource.
    pub(crate) fn register(&mut self, info: ResourceInfo) {
        self.resources.retain(|r| {
            !(r.group == info.group && r.version == info.version && r.plural == info.plural)
        });
        self.resources.push(info);
    }

    /// Registers every served version of a CRD.
    pub(crate) fn register_crd(&mut self, crd: &CustomResourceDefinition) -> Result<(), ApiError> {
        let spec = &crd.spec;
        if spec.names.plural.is_empty() || spec.names.kind.is_empty() {
            return Err(ApiError::invalid(
                "customresourcedefinitions",
                crd.metadata.name.as_deref().unwrap_or_default(),
                "spec.names.plural and spec.names.kind are required",
            ));
        }
        // Refuse what the real API server refuses (bad defaults, non-structural schemas, CEL
        // rules over budget), with its 422 and wording.
        crate::crd_check::check_crd(crd)
            .map_err(|invalid| ApiError::new(422, "Invalid", invalid.to_string()))?;
        let namespaced = spec.scope == "Namespaced";
        for version in spec.versions.iter().filter(|v| v.served) {
            let has_status = version
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some());
            self.register(ResourceInfo::new(
                &spec.group,
                &version.name,
                &spec.names.kind,
                &spec.names.plural,
                namespaced,
                has_status,
            ));
            let key = (
                spec.group.clone(),
                version.name.clone(),
                spec.names.plural.clone(),
            );
            let schema = version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .and_then(|s| serde_json::to_value(s).ok());
            match schema {
                Some(schema) => {
                    self.schemas.insert(key, ObjectSchema::new(schema));
                }
                None => {
                    self.schemas.remove(&key);
                }
            }
        }
        Ok(())
    }

    /// The CRD schema custom objects of `res` are validated and defaulted against, if any.
    pub(crate) fn schema(&self, res: &ResourceInfo) -> Option<Arc<ObjectSchema>> {
        self.schemas
            .get(&(res.group.clone(), res.version.clone(), res.plural.clone()))
            .cloned()
    }

    pub(crate) fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceInfo> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// Looks a resource up by an object's `apiVersion` and `kind`.
    pub(crate) fn find_kind(&self, api_version: &str, kind: &str) -> Option<&ResourceInfo> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.kind == kind)
    }

    pub(crate) fn all(&self) -> &[ResourceInfo] {
        &self.resources
    }

    /// Groups with their versions, in registration order.
    pub(crate) fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for r in self.resources.iter().filter(|r| !r.group.is_empty()) {
            match groups.iter_mut().find(|(g, _)| *g == r.group) {
                Some((_, versions)) if !versions.contains(&r.version) => {
                    versions.push(r.version.clone());
                }
                Some(_) => {}
                None => groups.push((r.group.clone(), vec![r.version.clone()])),
            }
        }
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_builtins_by_url_and_by_kind() {
        let registry = Registry::default();
        assert_eq!(
            registry.find("", "v1", "pods").map(|r| r.kind.as_str()),
            Some("Pod")
        );
        let lease = registry.find_kind("coordination.k8s.io/v1", "Lease");
        assert_eq!(lease.map(|r| r.plural.as_str()), Some("leases"));
        assert!(registry.find("apps", "v1", "pods").is_none());
    }

    #[test]
    fn groups_list_each_version_once() {
        let mut registry = Registry::default();
        registry.register(ResourceInfo::new(
            "karpenter.sh",
            "v1",
            "NodePool",
            "nodepools",
            false,
            true,
        ));
        registry.register(ResourceInfo::new(
            "karpenter.sh",
            "v1",
            "NodeClaim",
            "nodeclaims",
            false,
            true,
        ));
        let groups = registry.groups();
        let karpenter = groups.iter().find(|(g, _)| g == "karpenter.sh");
        assert_eq!(
            karpenter.map(|(_, v)| v.clone()),
            Some(vec!["v1".to_owned()])
        );
    }
}
