//! CustomResourceDefinitions for NodePool, NodeClaim, EC2NodeClass, NodeOverlay and
//! CapacityBuffer.
//!
//! kube-derive generates the structural schema from the Rust types; this module adds what the
//! types cannot express: CRD defaults, string patterns, bounds, list markers and the CEL rules from
//! [`crate::rules`]. The offline validator reads the same finished schema, so the CRD and
//! `karpenter validate` cannot drift apart.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use crate::autoscaling::CapacityBuffer;
use crate::rules::{self, Crd};
use crate::v1::{EC2NodeClass, NodeClaim, NodePool};
use crate::v1alpha1::NodeOverlay;

/// Go duration made of h/m/s parts (terminationGracePeriod).
pub const DURATION_PATTERN: &str = r"^([0-9]+(s|m|h))+$";
/// Go duration or `Never` (expireAfter, consolidateAfter).
pub const NILLABLE_DURATION_PATTERN: &str = r"^(([0-9]+(s|m|h))+|Never)$";
/// Budget `nodes`: a count or a percentage up to 100%.
pub const BUDGET_NODES_PATTERN: &str = r"^((100|[0-9]{1,2})%|[0-9]+)$";
/// Budget `schedule`: a cron macro or five fields.
pub const BUDGET_SCHEDULE_PATTERN: &str =
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$";
/// Budget `duration`: hours and/or minutes only.
pub const BUDGET_DURATION_PATTERN: &str = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$";
/// A label value (may be empty).
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// A qualified name: optional DNS-subdomain prefix and `/`, then a name.
pub const QUALIFIED_NAME_PATTERN: &str = r"^([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";
/// A resource quantity.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
/// EBS volume size with the per-unit upper bounds EC2 enforces.
pub const VOLUME_SIZE_PATTERN: &str = r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$";
/// Eviction thresholds: a percentage or a quantity.
pub const EVICTION_VALUE_PATTERN: &str = r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%|(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?)$";

/// The CRD generator found a schema path missing: a bug in this module, caught by its tests.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("schema path {path:?} does not exist in the {crd:?} CRD (at {segment:?})")]
    MissingPath {
        crd: Crd,
        path: String,
        segment: String,
    },
    #[error("CRD YAML rendering failed: {0}")]
    Yaml(String),
    #[error("CRD (de)serialization failed: {0}")]
    Json(#[from] serde_json::Error),
}

/// A NodeOverlay price adjustment: `+`/`-` a number, `+` a percentage, or a
/// decrease of at most 100% (upstream's pattern).
pub const PRICE_ADJUSTMENT_PATTERN: &str =
    r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$";
/// A NodeOverlay replacement price: a non-negative decimal.
pub const PRICE_PATTERN: &str = r"^\d+(\.\d+)?$";

/// Every CRD in a stable order: nodepools, nodeclaims, ec2nodeclasses, nodeoverlays,
/// capacitybuffers.
pub fn all() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    Crd::ALL.into_iter().map(crd).collect()
}

/// One finished CRD.
pub fn crd(which: Crd) -> Result<CustomResourceDefinition, CrdError> {
    let mut value = serde_json::to_value(base_crd(which))?;
    if let Some(schema) = value.pointer_mut("/spec/versions/0/schema/openAPIV3Schema") {
        finish_schema(which, schema)?;
    }
    Ok(serde_json::from_value(value)?)
}

/// The finished `openAPIV3Schema` of one CRD, as JSON (what the validator walks).
pub fn schema(which: Crd) -> Result<Value, CrdError> {
    let mut value = serde_json::to_value(base_crd(which))?;
    let schema = value
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema")
        .map(Value::take)
        .unwrap_or_default();
    let mut schema = schema;
    finish_schema(which, &mut schema)?;
    Ok(schema)
}

/// The file name `karpenter crds --dir` writes for a CRD, e.g. `karpenter.sh_nodepools.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// The CRDs as YAML documents, each starting with `---`, with their file names; what
/// `karpenter crds` prints and what `deploy/crds/` holds.
pub fn render_yaml() -> Result<Vec<(String, String)>, CrdError> {
    all()?
        .iter()
        .map(|c| {
            let yaml = serde_saphyr::to_string(c).map_err(|err| CrdError::Yaml(err.to_string()))?;
            Ok((file_name(c), format!("---\n{yaml}")))
        })
        .collect()
}

fn base_crd(which: Crd) -> CustomResourceDefinition {
    match which {
        Crd::NodePool => NodePool::crd(),
        Crd::NodeClaim => NodeClaim::crd(),
        Crd::EC2NodeClass => EC2NodeClass::crd(),
        Crd::NodeOverlay => NodeOverlay::crd(),
        Crd::CapacityBuffer => CapacityBuffer::crd(),
    }
}

fn finish_schema(which: Crd, schema: &mut Value) -> Result<(), CrdError> {
    strip_nullable(schema);
    strip_defaults(schema);
    merge(
        schema,
        json!({
            "properties": {
                "apiVersion": { "type": "string", "description": "APIVersion defines the versioned schema of this representation of an object." },
                "kind": { "type": "string", "description": "Kind is a string value representing the REST resource this object represents." },
                "metadata": { "type": "object" }
            },
            "required": ["spec"]
        }),
    );
    let description = match which {
        Crd::NodePool => {
            "NodePool is the Schema for the NodePools API: the nodes Karpenter may launch and how it may disrupt them."
        }
        Crd::NodeClaim => "NodeClaim is the Schema for the NodeClaims API: a request for one node.",
        Crd::EC2NodeClass => {
            "EC2NodeClass is the Schema for the EC2NodeClass API: AWS-specific node configuration."
        }
        Crd::NodeOverlay => {
            "NodeOverlay is the Schema for the NodeOverlays API: price and capacity changes to the instance types it selects."
        }
        Crd::CapacityBuffer => {
            "CapacityBuffer is the configuration that an autoscaler can use to provision buffer capacity within a cluster."
        }
    };
    merge(schema, json!({ "description": description }));
    for (crd, path, patch) in patches() {
        if crd == which {
            merge(at(crd, schema, path)?, patch);
        }
    }
    for rule in rules::ALL {
        for (crd, path) in rule.paths {
            if *crd != which {
                continue;
            }
            let node = at(*crd, schema, path)?;
            let mut entry = json!({ "rule": rule.rule, "message": rule.message });
            if rule.is_transition()
                && let Some(obj) = entry.as_object_mut()
            {
                obj.insert("reason".into(), json!("FieldValueForbidden"));
            }
            push_validation(node, entry);
        }
    }
    Ok(())
}

fn push_validation(node: &mut Value, entry: Value) {
    let Some(obj) = node.as_object_mut() else {
        return;
    };
    let list = obj
        .entry("x-kubernetes-validations")
        .or_insert_with(|| json!([]));
    if let Some(items) = list.as_array_mut() {
        items.push(entry);
    }
}

/// Go omits `nullable`; optional fields are simply absent.
fn strip_nullable(node: &mut Value) {
    match node {
        Value::Object(obj) => {
            obj.remove("nullable");
            obj.values_mut().for_each(strip_nullable);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nullable),
        _ => {}
    }
}

/// schemars turns every `#[serde(default)]` into a schema `default` (`[]` for the EC2NodeClass
/// selector terms), but the API server checks each default against its own node (`minItems: 1`,
/// `self.size() != 0`) and refuses the CRD. Deserialization defaults are not API defaults: the
/// CRD's defaults are exactly the ones [`patches`] lists (documented in `docs/api.md`).
fn strip_defaults(node: &mut Value) {
    let Some(obj) = node.as_object_mut() else {
        return;
    };
    obj.remove("default");
    if let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut) {
        props.values_mut().for_each(strip_defaults);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = obj.get_mut(key) {
            strip_defaults(child);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(branches) = obj.get_mut(key).and_then(Value::as_array_mut) {
            branches.iter_mut().for_each(strip_defaults);
        }
    }
}

fn merge(node: &mut Value, patch: Value) {
    match (node, patch) {
        (Value::Object(target), Value::Object(source)) => {
            for (key, value) in source {
                match target.get_mut(&key) {
                    Some(existing) if existing.is_object() && value.is_object() => {
                        merge(existing, value)
                    }
                    _ => {
                        target.insert(key, value);
                    }
                }
            }
        }
        (target, patch) => *target = patch,
    }
}

/// Navigates `a.b[].c` (properties, `[]` = items) inside a schema.
pub(crate) fn at<'a>(
    crd: Crd,
    schema: &'a mut Value,
    path: &str,
) -> Result<&'a mut Value, CrdError> {
    let missing = |segment: &str| CrdError::MissingPath {
        crd,
        path: path.to_string(),
        segment: segment.to_string(),
    };
    let mut node = schema;
    for segment in path.split('.') {
        let (field, items) = match segment.strip_suffix("[]") {
            Some(field) => (field, true),
            None => (segment, false),
        };
        node = node
            .get_mut("properties")
            .and_then(|p| p.get_mut(field))
            .ok_or_else(|| missing(segment))?;
        if items {
            node = node.get_mut("items").ok_or_else(|| missing(segment))?;
        }
    }
    Ok(node)
}

fn taint_schema() -> Value {
    json!({
        "properties": {
            "key": { "minLength": 1, "pattern": QUALIFIED_NAME_PATTERN },
            "value": { "pattern": LABEL_VALUE_PATTERN },
            "effect": { "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"] }
        }
    })
}

fn requirement_schema() -> Value {
    json!({
        "items": {
            "properties": {
                "key": { "maxLength": 316, "pattern": QUALIFIED_NAME_PATTERN },
                "operator": { "enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"] },
                "values": {
                    "items": { "maxLength": 63, "pattern": LABEL_VALUE_PATTERN },
                    "x-kubernetes-list-type": "atomic"
                },
                "minValues": { "minimum": 1, "maximum": 50 }
            }
        },
        "maxItems": 100
    })
}

fn node_class_ref_schema() -> Value {
    json!({
        "properties": {
            "group": { "maxLength": 253, "pattern": "^[^/]*$" },
            "kind": { "maxLength": 63 },
            "name": { "maxLength": 253 }
        }
    })
}

fn conditions_schema() -> Value {
    json!({
        "items": {
            "properties": {
                "type": { "maxLength": 316, "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$" },
                "status": { "enum": ["True", "False", "Unknown"] },
                "reason": { "maxLength": 1024 },
                "message": { "maxLength": 32768 },
                "lastTransitionTime": { "format": "date-time" },
                "observedGeneration": { "minimum": 0 }
            }
        },
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"]
    })
}

fn selector_tags_schema() -> Value {
    json!({ "maxProperties": 20 })
}

fn patches() -> Vec<(Crd, &'static str, Value)> {
    use Crd::{
        CapacityBuffer as CB, EC2NodeClass as EC2, NodeClaim as NC, NodeOverlay as NO,
        NodePool as NP,
    };
    let quantity_map = json!({ "additionalProperties": { "pattern": QUANTITY_PATTERN } });
    vec![
        // ---- NodePool -------------------------------------------------------------------------
        (NP, "spec", json!({ "required": ["template"] })),
        (NP, "spec.template", json!({ "required": ["spec"] })),
        (
            NP,
            "spec.template.metadata.labels",
            json!({ "maxProperties": 100, "additionalProperties": { "maxLength": 63, "pattern": LABEL_VALUE_PATTERN } }),
        ),
        (
            NP,
            "spec.template.spec",
            json!({ "required": ["nodeClassRef", "requirements"] }),
        ),
        (NP, "spec.template.spec.taints[]", taint_schema()),
        (NP, "spec.template.spec.startupTaints[]", taint_schema()),
        (NP, "spec.template.spec.requirements", requirement_schema()),
        (
            NP,
            "spec.template.spec.nodeClassRef",
            node_class_ref_schema(),
        ),
        (
            NP,
            "spec.template.spec.terminationGracePeriod",
            json!({ "pattern": DURATION_PATTERN }),
        ),
        (
            NP,
            "spec.template.spec.expireAfter",
            json!({ "default": "720h" }),
        ),
        (
            NP,
            "spec.disruption",
            json!({ "default": { "consolidateAfter": "0s" } }),
        ),
        (
            NP,
            "spec.disruption.consolidateAfter",
            json!({ "default": "0s" }),
        ),
        (
            NP,
            "spec.disruption.consolidationPolicy",
            json!({ "default": "WhenEmptyOrUnderutilized", "enum": ["WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"] }),
        ),
        (
            NP,
            "spec.disruption.budgets",
            json!({ "default": [{ "nodes": "10%" }], "maxItems": 50, "x-kubernetes-list-type": "atomic" }),
        ),
        (
            NP,
            "spec.disruption.budgets[].nodes",
            json!({ "default": "10%", "pattern": BUDGET_NODES_PATTERN }),
        ),
        (
            NP,
            "spec.disruption.budgets[].schedule",
            json!({ "pattern": BUDGET_SCHEDULE_PATTERN }),
        ),
        (
            NP,
            "spec.disruption.budgets[].duration",
            json!({ "pattern": BUDGET_DURATION_PATTERN }),
        ),
        (
            NP,
            "spec.disruption.budgets[].reasons",
            json!({ "maxItems": 50, "items": { "enum": ["Underutilized", "Empty", "Drifted"] }, "x-kubernetes-list-type": "set" }),
        ),
        (NP, "spec.limits", quantity_map.clone()),
        (NP, "spec.weight", json!({ "minimum": 1, "maximum": 100 })),
        (NP, "spec.replicas", json!({ "minimum": 0 })),
        (NP, "status.resources", quantity_map.clone()),
        (NP, "status.nodes", json!({ "minimum": 0 })),
        (NP, "status.conditions", conditions_schema()),
        // ---- NodeClaim ------------------------------------------------------------------------
        (
            NC,
            "spec",
            json!({ "required": ["nodeClassRef", "requirements"] }),
        ),
        (NC, "spec.taints[]", taint_schema()),
        (NC, "spec.startupTaints[]", taint_schema()),
        (NC, "spec.requirements", requirement_schema()),
        (NC, "spec.nodeClassRef", node_class_ref_schema()),
        (NC, "spec.resources.requests", quantity_map.clone()),
        (
            NC,
            "spec.terminationGracePeriod",
            json!({ "pattern": DURATION_PATTERN }),
        ),
        (NC, "spec.expireAfter", json!({ "default": "720h" })),
        (NC, "status.capacity", quantity_map.clone()),
        (NC, "status.allocatable", quantity_map),
        (NC, "status.conditions", conditions_schema()),
        // ---- EC2NodeClass ---------------------------------------------------------------------
        (
            EC2,
            "spec",
            json!({ "required": ["amiSelectorTerms", "securityGroupSelectorTerms", "subnetSelectorTerms"] }),
        ),
        (EC2, "spec.subnetSelectorTerms", json!({ "maxItems": 30 })),
        (
            EC2,
            "spec.subnetSelectorTerms[].tags",
            selector_tags_schema(),
        ),
        (
            EC2,
            "spec.subnetSelectorTerms[].id",
            json!({ "pattern": "subnet-[0-9a-z]+" }),
        ),
        (
            EC2,
            "spec.securityGroupSelectorTerms",
            json!({ "maxItems": 30 }),
        ),
        (
            EC2,
            "spec.securityGroupSelectorTerms[].tags",
            selector_tags_schema(),
        ),
        (
            EC2,
            "spec.securityGroupSelectorTerms[].id",
            json!({ "pattern": "sg-[0-9a-z]+" }),
        ),
        (
            EC2,
            "spec.capacityReservationSelectorTerms",
            json!({ "maxItems": 30 }),
        ),
        (
            EC2,
            "spec.capacityReservationSelectorTerms[].tags",
            selector_tags_schema(),
        ),
        (
            EC2,
            "spec.capacityReservationSelectorTerms[].id",
            json!({ "pattern": "^cr-[0-9a-z]+$" }),
        ),
        (
            EC2,
            "spec.capacityReservationSelectorTerms[].ownerID",
            json!({ "pattern": "^[0-9]{12}$" }),
        ),
        (
            EC2,
            "spec.capacityReservationSelectorTerms[].instanceMatchCriteria",
            json!({ "enum": ["open", "targeted"] }),
        ),
        (
            EC2,
            "spec.placementGroupSelector.name",
            json!({ "minLength": 1 }),
        ),
        (
            EC2,
            "spec.placementGroupSelector.id",
            json!({ "pattern": "^pg-[0-9a-z]+$" }),
        ),
        (EC2, "spec.ipPrefixCount", json!({ "minimum": 0 })),
        (
            EC2,
            "spec.amiSelectorTerms",
            json!({ "minItems": 1, "maxItems": 30 }),
        ),
        (
            EC2,
            "spec.amiSelectorTerms[].alias",
            json!({ "maxLength": 30, "pattern": "^[a-zA-Z0-9]+@.+$" }),
        ),
        (EC2, "spec.amiSelectorTerms[].tags", selector_tags_schema()),
        (
            EC2,
            "spec.amiSelectorTerms[].id",
            json!({ "pattern": "ami-[0-9a-z]+" }),
        ),
        (
            EC2,
            "spec.amiSelectorTerms[].owner",
            json!({ "pattern": r"(^\d{12}$)|(^[a-zA-Z0-9-]+$)" }),
        ),
        (
            EC2,
            "spec.amiFamily",
            json!({ "enum": ["AL2", "AL2023", "Bottlerocket", "Custom", "Windows2019", "Windows2022", "Windows2025"] }),
        ),
        (EC2, "spec.tags", json!({ "maxProperties": 50 })),
        (EC2, "spec.kubelet.maxPods", json!({ "minimum": 0 })),
        (EC2, "spec.kubelet.podsPerCore", json!({ "minimum": 0 })),
        // The kubelet maps accept only a few keys (4 reserved resources, 6 eviction signals;
        // CEL rules below); bounding them by that count keeps the CEL rules that iterate them
        // within the API server's cost budget without changing what is accepted.
        (
            EC2,
            "spec.kubelet.systemReserved",
            json!({ "maxProperties": 4, "additionalProperties": { "pattern": QUANTITY_PATTERN } }),
        ),
        (
            EC2,
            "spec.kubelet.kubeReserved",
            json!({ "maxProperties": 4, "additionalProperties": { "pattern": QUANTITY_PATTERN } }),
        ),
        (
            EC2,
            "spec.kubelet.evictionHard",
            json!({ "maxProperties": 6, "additionalProperties": { "pattern": EVICTION_VALUE_PATTERN } }),
        ),
        (
            EC2,
            "spec.kubelet.evictionSoft",
            json!({ "maxProperties": 6, "additionalProperties": { "pattern": EVICTION_VALUE_PATTERN } }),
        ),
        (
            EC2,
            "spec.kubelet.evictionSoftGracePeriod",
            json!({ "maxProperties": 6, "additionalProperties": { "pattern": DURATION_PATTERN } }),
        ),
        (
            EC2,
            "spec.kubelet.imageGCHighThresholdPercent",
            json!({ "minimum": 0, "maximum": 100 }),
        ),
        (
            EC2,
            "spec.kubelet.imageGCLowThresholdPercent",
            json!({ "minimum": 0, "maximum": 100 }),
        ),
        (
            EC2,
            "spec.kubelet.clusterDNS",
            json!({ "x-kubernetes-list-type": "atomic" }),
        ),
        (EC2, "spec.blockDeviceMappings", json!({ "maxItems": 50 })),
        (
            EC2,
            "spec.blockDeviceMappings[].ebs.volumeSize",
            json!({ "pattern": VOLUME_SIZE_PATTERN }),
        ),
        (
            EC2,
            "spec.blockDeviceMappings[].ebs.volumeType",
            json!({ "enum": ["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"] }),
        ),
        (
            EC2,
            "spec.blockDeviceMappings[].ebs.volumeInitializationRate",
            json!({ "minimum": 100, "maximum": 300 }),
        ),
        (
            EC2,
            "spec.instanceStorePolicy",
            json!({ "enum": ["RAID0"] }),
        ),
        (EC2, "spec.networkInterfaces", json!({ "maxItems": 150 })),
        (
            EC2,
            "spec.networkInterfaces[].networkCardIndex",
            json!({ "minimum": 0 }),
        ),
        (
            EC2,
            "spec.networkInterfaces[].deviceIndex",
            json!({ "minimum": 0 }),
        ),
        (
            EC2,
            "spec.networkInterfaces[].interfaceType",
            json!({ "enum": ["interface", "efa-only"] }),
        ),
        (
            EC2,
            "spec.metadataOptions",
            json!({ "default": { "httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required" } }),
        ),
        (
            EC2,
            "spec.metadataOptions.httpEndpoint",
            json!({ "default": "enabled", "enum": ["enabled", "disabled"] }),
        ),
        (
            EC2,
            "spec.metadataOptions.httpProtocolIPv6",
            json!({ "default": "disabled", "enum": ["enabled", "disabled"] }),
        ),
        (
            EC2,
            "spec.metadataOptions.httpPutResponseHopLimit",
            json!({ "default": 1, "minimum": 1, "maximum": 64 }),
        ),
        (
            EC2,
            "spec.metadataOptions.httpTokens",
            json!({ "default": "required", "enum": ["required", "optional"] }),
        ),
        (
            EC2,
            "spec.connectionTracking.tcpEstablishedTimeout",
            json!({ "minimum": 60, "maximum": 432000 }),
        ),
        (
            EC2,
            "spec.connectionTracking.udpStreamTimeout",
            json!({ "minimum": 60, "maximum": 180 }),
        ),
        (
            EC2,
            "spec.connectionTracking.udpTimeout",
            json!({ "minimum": 30, "maximum": 60 }),
        ),
        (
            EC2,
            "spec.cpuOptions.nestedVirtualization",
            json!({ "enum": ["enabled", "disabled"] }),
        ),
        (
            EC2,
            "status.subnets[]",
            json!({ "required": ["id", "zone"] }),
        ),
        (
            EC2,
            "status.capacityReservations[].instanceMatchCriteria",
            json!({ "enum": ["open", "targeted"] }),
        ),
        (
            EC2,
            "status.capacityReservations[].reservationType",
            json!({ "enum": ["default", "capacity-block"] }),
        ),
        (
            EC2,
            "status.capacityReservations[].state",
            json!({ "enum": ["active", "expiring"] }),
        ),
        (EC2, "status.conditions", conditions_schema()),
        // ---- NodeOverlay ----------------------------------------------------------------------
        (NO, "spec", json!({ "required": ["requirements"] })),
        (
            NO,
            "spec.requirements",
            json!({
                "items": {
                    "properties": {
                        "key": { "maxLength": 316, "pattern": QUALIFIED_NAME_PATTERN },
                        "operator": { "enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"] },
                        "values": {
                            "items": { "maxLength": 63, "pattern": LABEL_VALUE_PATTERN },
                            "x-kubernetes-list-type": "atomic"
                        }
                    }
                },
                "maxItems": 100,
                "x-kubernetes-list-type": "atomic"
            }),
        ),
        (
            NO,
            "spec.priceAdjustment",
            json!({ "pattern": PRICE_ADJUSTMENT_PATTERN }),
        ),
        (NO, "spec.price", json!({ "pattern": PRICE_PATTERN })),
        // Upstream leaves the map unbounded; the API server's cost estimate of its CEL rule then
        // exceeds the budget (karpenter_testapi::crd_check). A node has a handful of extended
        // resources: 100 keeps the rule well within budget without refusing a real overlay.
        (
            NO,
            "spec.capacity",
            json!({ "maxProperties": 100, "additionalProperties": { "pattern": QUANTITY_PATTERN } }),
        ),
        (NO, "spec.weight", json!({ "minimum": 1, "maximum": 10000 })),
        (NO, "status.conditions", conditions_schema()),
        // ---- CapacityBuffer (upstream's kubebuilder markers) ------------------------------------
        (
            CB,
            "spec.provisioningStrategy",
            json!({ "default": "buffer.x-k8s.io/active-capacity" }),
        ),
        (CB, "spec.podTemplateRef.name", json!({ "minLength": 1 })),
        (CB, "spec.scalableRef.kind", json!({ "minLength": 1 })),
        (CB, "spec.scalableRef.name", json!({ "minLength": 1 })),
        (CB, "spec.replicas", json!({ "minimum": 0 })),
        (CB, "spec.percentage", json!({ "minimum": 0 })),
        (
            CB,
            "spec.limits",
            json!({ "additionalProperties": { "pattern": QUANTITY_PATTERN } }),
        ),
        (CB, "status.conditions", conditions_schema()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_crds_generate() {
        let crds = all().unwrap();
        let names: Vec<_> = crds
            .iter()
            .map(|c| c.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(
            names,
            [
                "nodepools.karpenter.sh",
                "nodeclaims.karpenter.sh",
                "ec2nodeclasses.karpenter.k8s.aws",
                "nodeoverlays.karpenter.sh",
                "capacitybuffers.autoscaling.x-k8s.io"
            ]
        );
    }

    #[test]
    fn patterns_compile() {
        for pattern in [
            DURATION_PATTERN,
            NILLABLE_DURATION_PATTERN,
            BUDGET_NODES_PATTERN,
            BUDGET_SCHEDULE_PATTERN,
            BUDGET_DURATION_PATTERN,
            LABEL_VALUE_PATTERN,
            QUALIFIED_NAME_PATTERN,
            QUANTITY_PATTERN,
            VOLUME_SIZE_PATTERN,
            EVICTION_VALUE_PATTERN,
            PRICE_ADJUSTMENT_PATTERN,
            PRICE_PATTERN,
        ] {
            regex::Regex::new(pattern).unwrap();
        }
    }
}
