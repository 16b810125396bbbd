//! Converts legacy Karpenter manifests to v1: `karpenter.sh/v1alpha5` Provisioner,
//! `karpenter.k8s.aws/v1alpha1` AWSNodeTemplate, and `v1beta1` NodePool / EC2NodeClass / NodeClaim.
//!
//! Every field is taken out of the legacy object as it is mapped; whatever is left at the end has
//! no v1 equivalent and becomes a warning naming it, so nothing is dropped silently.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value, json};

use crate::v1::{EC2NodeClass, NodeClaim, NodePool};
use crate::validation::is_legacy;
use crate::well_known;

mod error;
mod names;

pub use error::{ConvertError, WriteError};

/// How much a [`Warning`] matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Worth knowing: the conversion kept the legacy behaviour, or the result will need attention
    /// later (e.g. a default written out, an AMI family nearing its end).
    Note,
    /// The result differs from the legacy object: a field was dropped or a placeholder written.
    Warning,
}

/// A legacy field that could not be carried over (or was carried over with a caveat).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    pub level: Level,
    /// Input file (as given on the command line).
    pub source: String,
    /// 1-based document index in that file.
    pub index: usize,
    /// `Kind/name` of the legacy object.
    pub object: String,
    /// The legacy field, e.g. `spec.kubeletConfiguration.containerRuntime`.
    pub field: String,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}: {}",
            self.source, self.index, self.object, self.field, self.message
        )
    }
}

/// A v1 object produced by conversion.
#[derive(Clone, Debug)]
pub enum V1Object {
    NodePool(Box<NodePool>),
    NodeClaim(Box<NodeClaim>),
    EC2NodeClass(Box<EC2NodeClass>),
}

impl V1Object {
    /// The object as JSON (field order of the Rust types is lost; use [`Self::to_yaml`] for output).
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        match self {
            Self::NodePool(o) => serde_json::to_value(o),
            Self::NodeClaim(o) => serde_json::to_value(o),
            Self::EC2NodeClass(o) => serde_json::to_value(o),
        }
    }

    /// YAML in the types' field order (apiVersion, kind, metadata, spec).
    pub fn to_yaml(&self) -> Result<String, WriteError> {
        let result = match self {
            Self::NodePool(o) => serde_saphyr::to_string(o),
            Self::NodeClaim(o) => serde_saphyr::to_string(o),
            Self::EC2NodeClass(o) => serde_saphyr::to_string(o),
        };
        result.map_err(WriteError::Yaml)
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> Result<String, WriteError> {
        let result = match self {
            Self::NodePool(o) => serde_json::to_string_pretty(o),
            Self::NodeClaim(o) => serde_json::to_string_pretty(o),
            Self::EC2NodeClass(o) => serde_json::to_string_pretty(o),
        };
        result.map_err(WriteError::Json)
    }
}

/// One input document.
#[derive(Clone, Debug)]
pub struct Input {
    pub source: String,
    pub index: usize,
    pub value: Value,
}

/// What became of one input document.
#[derive(Debug)]
pub enum Output {
    /// Not a legacy Karpenter object: emit the original text unchanged.
    PassThrough,
    /// The v1 objects replacing the legacy one (none for objects with no v1 equivalent).
    Converted(Vec<V1Object>),
    /// The legacy object could not be converted.
    Failed(ConvertError),
}

/// Converts a batch of documents. Kubelet settings move from NodePools/Provisioners to the
/// EC2NodeClass they reference, so the whole batch is converted together.
pub fn convert(inputs: &[Input]) -> (Vec<Output>, Vec<Warning>) {
    let mut converter = Converter::default();
    converter.collect_kubelets(inputs);
    let outputs = inputs
        .iter()
        .map(|input| converter.convert_one(input))
        .collect();
    converter.report_unplaced_kubelets();
    let outputs = names::refuse_duplicate_names(inputs, outputs);
    (outputs, converter.warnings)
}

#[derive(Default)]
struct Converter {
    /// kubelet settings keyed by the node class name that should receive them, with their origin.
    kubelets: BTreeMap<String, Vec<(Value, Origin)>>,
    /// Node class names that were converted in this batch.
    placed: Vec<String>,
    warnings: Vec<Warning>,
}

#[derive(Clone, Debug)]
struct Origin {
    source: String,
    index: usize,
    object: String,
    field: String,
}

struct Ctx<'a> {
    origin: Origin,
    warnings: &'a mut Vec<Warning>,
}

impl Ctx<'_> {
    fn warn(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.say(Level::Warning, field.into(), message.into());
    }

    fn note(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.say(Level::Note, field.into(), message.into());
    }

    fn say(&mut self, level: Level, field: String, message: String) {
        self.warnings.push(Warning {
            level,
            source: self.origin.source.clone(),
            index: self.origin.index,
            object: self.origin.object.clone(),
            field,
            message,
        });
    }

    /// Warns about every field left in `map` (under `prefix`): they have no v1 equivalent.
    fn leftovers(&mut self, prefix: &str, map: Map<String, Value>) {
        for (key, _) in map {
            self.warn(format!("{prefix}.{key}"), "has no v1 equivalent; dropped");
        }
    }
}

fn text(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Takes the object at `key` (absent or null: empty). Anything else is an error naming `path`:
/// converting it would drop it silently.
fn take_map(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Map<String, Value>, ConvertError> {
    match map.remove(key) {
        Some(Value::Object(inner)) => Ok(inner),
        None | Some(Value::Null) => Ok(Map::new()),
        Some(other) => Err(malformed(path, "an object (a map of fields)", &other)),
    }
}

/// Takes the string at `key` (absent or null: `None`); anything else is an error naming `path`.
fn take_string(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, ConvertError> {
    match map.remove(key) {
        Some(Value::String(s)) => Ok(Some(s)),
        None | Some(Value::Null) => Ok(None),
        Some(other) => Err(malformed(path, "a string", &other)),
    }
}

/// Checks that the list at `key` (if any) is a list of objects, as requirements and taints are.
fn check_object_list(map: &Map<String, Value>, key: &str, path: &str) -> Result<(), ConvertError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(items)) => match items.iter().position(|i| !i.is_object()) {
            Some(i) => Err(malformed(&format!("{path}[{i}]"), "an object", &items[i])),
            None => Ok(()),
        },
        Some(other) => Err(malformed(path, "a list of objects", other)),
    }
}

fn malformed(path: &str, expected: &'static str, found: &Value) -> ConvertError {
    ConvertError::Malformed {
        path: path.to_string(),
        expected,
        found: found.clone(),
    }
}

fn non_empty(map: Map<String, Value>) -> Option<Value> {
    if map.is_empty() {
        None
    } else {
        Some(Value::Object(map))
    }
}

/// `3600` → `1h`, `90` → `1m30s`, `0` → `0s`.
pub fn compact_duration(secs: u64) -> String {
    if secs == 0 {
        return "0s".into();
    }
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = String::new();
    for (n, unit) in [(h, 'h'), (m, 'm'), (s, 's')] {
        if n > 0 {
            out.push_str(&n.to_string());
            out.push(unit);
        }
    }
    out
}

impl Converter {
    fn collect_kubelets(&mut self, inputs: &[Input]) {
        for input in inputs {
            let (api_version, kind) = (
                text(&input.value, "/apiVersion"),
                text(&input.value, "/kind"),
            );
            let (field, class_pointer, kubelet_pointer) =
                match (api_version.as_str(), kind.as_str()) {
                    ("karpenter.sh/v1alpha5", "Provisioner") => (
                        "spec.kubeletConfiguration",
                        "/spec/providerRef/name",
                        "/spec/kubeletConfiguration",
                    ),
                    ("karpenter.sh/v1beta1", "NodePool") => (
                        "spec.template.spec.kubelet",
                        "/spec/template/spec/nodeClassRef/name",
                        "/spec/template/spec/kubelet",
                    ),
                    _ => continue,
                };
            let Some(kubelet) = input.value.pointer(kubelet_pointer).cloned() else {
                continue;
            };
            let name = text(&input.value, "/metadata/name");
            // An inline `provider` becomes an EC2NodeClass named after the Provisioner.
            let class = input
                .value
                .pointer(class_pointer)
                .and_then(Value::as_str)
                .unwrap_or(&name)
                .to_string();
            let origin = Origin {
                source: input.source.clone(),
                index: input.index,
                object: format!("{kind}/{name}"),
                field: field.into(),
            };
            self.kubelets
                .entry(class)
                .or_default()
                .push((kubelet, origin));
        }
    }

    fn report_unplaced_kubelets(&mut self) {
        for (class, entries) in &self.kubelets {
            if self.placed.contains(class) {
                continue;
            }
            for (kubelet, origin) in entries {
                self.warnings.push(Warning {
                    level: Level::Warning,
                    source: origin.source.clone(),
                    index: origin.index,
                    object: origin.object.clone(),
                    field: origin.field.clone(),
                    message: format!(
                        "kubelet settings moved to EC2NodeClass spec.kubelet in v1, but EC2NodeClass {class:?} is not in the input; add this to it: {kubelet}"
                    ),
                });
            }
        }
    }

    fn convert_one(&mut self, input: &Input) -> Output {
        let (api_version, kind) = (
            text(&input.value, "/apiVersion"),
            text(&input.value, "/kind"),
        );
        if !is_legacy(&api_version, &kind) {
            return Output::PassThrough;
        }
        let name = text(&input.value, "/metadata/name");
        let origin = Origin {
            source: input.source.clone(),
            index: input.index,
            object: format!("{kind}/{name}"),
            field: String::new(),
        };
        let Value::Object(mut object) = input.value.clone() else {
            return Output::Failed(ConvertError::NotAnObject);
        };
        object.remove("apiVersion");
        object.remove("kind");
        let (metadata, spec) = match (
            take_map(&mut object, "metadata", "metadata"),
            take_map(&mut object, "spec", "spec"),
        ) {
            (Ok(metadata), Ok(spec)) => (convert_metadata(metadata), spec),
            (Err(err), _) | (_, Err(err)) => return Output::Failed(err),
        };
        let mut warnings = std::mem::take(&mut self.warnings);
        let said_before = warnings.len();
        let mut ctx = Ctx {
            origin,
            warnings: &mut warnings,
        };
        object.remove("status");
        ctx.leftovers("", object);
        let result = match (api_version.as_str(), kind.as_str()) {
            ("karpenter.sh/v1alpha5", "Provisioner") => self.provisioner(&mut ctx, metadata, spec),
            ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate") => {
                self.aws_node_template(&mut ctx, metadata, spec, &name)
            }
            ("karpenter.sh/v1beta1", "NodePool") => nodepool_v1beta1(&mut ctx, metadata, spec),
            ("karpenter.k8s.aws/v1beta1", "EC2NodeClass") => {
                self.ec2nodeclass_v1beta1(&mut ctx, metadata, spec, &name)
            }
            ("karpenter.sh/v1beta1", "NodeClaim") => nodeclaim_v1beta1(&mut ctx, metadata, spec),
            _ => {
                ctx.warn("kind", format!("{api_version} {kind} has no v1 equivalent (Karpenter creates NodeClaims itself); dropped"));
                Ok(Vec::new())
            }
        };
        // Nothing of a failed object is written, so what its conversion said it wrote or dropped
        // would contradict the error.
        if result.is_err() {
            warnings.truncate(said_before);
        }
        self.warnings = warnings;
        match result {
            Ok(objects) => Output::Converted(objects),
            Err(err) => Output::Failed(err),
        }
    }

    fn provisioner(
        &mut self,
        ctx: &mut Ctx<'_>,
        metadata: Value,
        mut spec: Map<String, Value>,
    ) -> Result<Vec<V1Object>, ConvertError> {
        let name = text(&metadata, "/name");
        let mut template_metadata = Map::new();
        for field in ["labels", "annotations"] {
            if let Some(v) = spec.remove(field) {
                template_metadata.insert(field.into(), v);
            }
        }
        let mut template_spec = Map::new();
        for field in ["taints", "startupTaints"] {
            if let Some(v) = spec.remove(field) {
                template_spec.insert(field.into(), v);
            }
        }
        for field in ["taints", "startupTaints"] {
            check_object_list(&template_spec, field, &format!("spec.{field}"))?;
        }
        let requirements = spec.remove("requirements").unwrap_or_else(|| json!([]));
        let mut requirements = convert_requirements(ctx, "spec.requirements", requirements)?;
        default_capacity_type(ctx, &template_metadata, &mut requirements);
        template_spec.insert("requirements".into(), requirements);
        let mut objects = Vec::new();
        let provider_ref = take_map(&mut spec, "providerRef", "spec.providerRef")?;
        let provider = spec.remove("provider");
        let class_name = match (provider_ref.get("name").and_then(Value::as_str), &provider) {
            (Some(class), _) => class.to_string(),
            (None, Some(_)) => name.clone(),
            (None, None) => {
                ctx.warn(
                    "spec.providerRef",
                    "missing; pointing nodeClassRef at an EC2NodeClass named \"default\"",
                );
                "default".into()
            }
        };
        if let Some(other) = provider.as_ref().filter(|p| !p.is_object() && !p.is_null()) {
            return Err(malformed("spec.provider", "an object", other));
        }
        if let Some(Value::Object(provider)) = provider {
            // The inline provider block is an AWSNodeTemplate spec without a name.
            let class_metadata = json!({ "name": class_name });
            let mut inner = Ctx {
                origin: ctx.origin.clone(),
                warnings: &mut *ctx.warnings,
            };
            inner.origin.object = format!("{} (spec.provider)", inner.origin.object);
            let mut converted =
                self.aws_node_template(&mut inner, class_metadata, provider, &class_name)?;
            ctx.warn(
                "spec.provider",
                format!("inline provider converted to EC2NodeClass {class_name:?}"),
            );
            objects.append(&mut converted);
        }
        template_spec.insert(
            "nodeClassRef".into(),
            json!({ "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class_name }),
        );
        let mut provider_ref = provider_ref;
        provider_ref.remove("name");
        provider_ref.remove("kind");
        provider_ref.remove("apiVersion");
        ctx.leftovers("spec.providerRef", provider_ref);
        // Kubelet settings were collected up front and land on the EC2NodeClass.
        spec.remove("kubeletConfiguration");
        match spec.remove("ttlSecondsUntilExpired") {
            Some(ttl) => {
                let secs = ttl.as_u64().ok_or(ConvertError::NotASecondCount {
                    field: "spec.ttlSecondsUntilExpired",
                })?;
                template_spec.insert("expireAfter".into(), json!(compact_duration(secs)));
            }
            // v1alpha5 never expired nodes by default; keep that.
            None => {
                template_spec.insert("expireAfter".into(), json!("Never"));
            }
        }
        let mut disruption = Map::new();
        let ttl_empty = spec.remove("ttlSecondsAfterEmpty");
        let mut consolidation = take_map(&mut spec, "consolidation", "spec.consolidation")?;
        let consolidation_enabled = match consolidation.remove("enabled") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(enabled)) => enabled,
            Some(other) => {
                return Err(malformed(
                    "spec.consolidation.enabled",
                    "true or false",
                    &other,
                ));
            }
        };
        ctx.leftovers("spec.consolidation", consolidation);
        match (consolidation_enabled, ttl_empty) {
            (true, ttl) => {
                if ttl.is_some() {
                    ctx.warn(
                        "spec.ttlSecondsAfterEmpty",
                        "ignored: consolidation.enabled already removes empty nodes",
                    );
                }
                disruption.insert(
                    "consolidationPolicy".into(),
                    json!("WhenEmptyOrUnderutilized"),
                );
                disruption.insert("consolidateAfter".into(), json!("0s"));
            }
            (false, Some(ttl)) => {
                let secs = ttl.as_u64().ok_or(ConvertError::NotASecondCount {
                    field: "spec.ttlSecondsAfterEmpty",
                })?;
                disruption.insert("consolidationPolicy".into(), json!("WhenEmpty"));
                disruption.insert("consolidateAfter".into(), json!(compact_duration(secs)));
            }
            // Without either, v1alpha5 never removed nodes for being empty or underused.
            (false, None) => {
                disruption.insert(
                    "consolidationPolicy".into(),
                    json!("WhenEmptyOrUnderutilized"),
                );
                disruption.insert("consolidateAfter".into(), json!("Never"));
            }
        }
        let mut nodepool_spec = Map::new();
        let mut template = Map::new();
        if let Some(m) = non_empty(template_metadata) {
            template.insert("metadata".into(), m);
        }
        template.insert("spec".into(), Value::Object(template_spec));
        nodepool_spec.insert("template".into(), Value::Object(template));
        nodepool_spec.insert("disruption".into(), Value::Object(disruption));
        let mut limits = take_map(&mut spec, "limits", "spec.limits")?;
        if let Some(resources) = limits.remove("resources") {
            nodepool_spec.insert("limits".into(), resources);
        }
        ctx.leftovers("spec.limits", limits);
        if let Some(weight) = spec.remove("weight") {
            nodepool_spec.insert("weight".into(), weight);
        }
        ctx.leftovers("spec", spec);
        let nodepool = typed_nodepool(metadata, nodepool_spec)?;
        objects.insert(0, V1Object::NodePool(Box::new(nodepool)));
        Ok(objects)
    }

    fn aws_node_template(
        &mut self,
        ctx: &mut Ctx<'_>,
        metadata: Value,
        mut spec: Map<String, Value>,
        name: &str,
    ) -> Result<Vec<V1Object>, ConvertError> {
        let mut out = Map::new();
        let subnets = spec.remove("subnetSelector");
        out.insert(
            "subnetSelectorTerms".into(),
            selector_terms(ctx, "spec.subnetSelector", subnets, false)?,
        );
        let groups = spec.remove("securityGroupSelector");
        out.insert(
            "securityGroupSelectorTerms".into(),
            selector_terms(ctx, "spec.securityGroupSelector", groups, true)?,
        );
        let family = take_string(&mut spec, "amiFamily", "spec.amiFamily")?;
        let ami_terms = match spec.remove("amiSelector") {
            Some(Value::Object(selector)) => Some(ami_terms_v1alpha1(selector)),
            None | Some(Value::Null) => None,
            Some(other) => return Err(malformed("spec.amiSelector", "an object", &other)),
        };
        let family = match family {
            Some(f) => f,
            None => {
                ctx.warn(
                    "spec.amiFamily",
                    "not set; v1alpha1 defaulted to AL2, written as such",
                );
                "AL2".into()
            }
        };
        place_ami_selection(ctx, &mut out, family, ami_terms)?;
        match (spec.remove("instanceProfile"), spec.remove("role")) {
            (Some(profile), _) => {
                out.insert("instanceProfile".into(), profile);
            }
            (None, Some(role)) => {
                out.insert("role".into(), role);
            }
            (None, None) => {
                ctx.warn(
                    "spec.instanceProfile",
                    "not set: v1alpha1 used the aws.defaultInstanceProfile setting, which v1 removed; wrote the placeholder role KarpenterNodeRole-${CLUSTER_NAME}: replace it with your node role",
                );
                out.insert("role".into(), json!("KarpenterNodeRole-${CLUSTER_NAME}"));
            }
        }
        for field in [
            "userData",
            "tags",
            "blockDeviceMappings",
            "metadataOptions",
            "detailedMonitoring",
            "context",
        ] {
            if let Some(v) = spec.remove(field) {
                out.insert(field.into(), v);
            }
        }
        if spec.remove("launchTemplate").is_some() {
            ctx.warn("spec.launchTemplate", "launch templates are not supported in v1; express the settings as EC2NodeClass fields; dropped");
        }
        ctx.leftovers("spec", spec);
        self.attach_kubelet(ctx, &mut out, name);
        Ok(vec![V1Object::EC2NodeClass(Box::new(typed_ec2nodeclass(
            metadata, out,
        )?))])
    }

    fn ec2nodeclass_v1beta1(
        &mut self,
        ctx: &mut Ctx<'_>,
        metadata: Value,
        mut spec: Map<String, Value>,
        name: &str,
    ) -> Result<Vec<V1Object>, ConvertError> {
        let mut out = Map::new();
        let family = take_string(&mut spec, "amiFamily", "spec.amiFamily")?;
        check_object_list(&spec, "amiSelectorTerms", "spec.amiSelectorTerms")?;
        let terms = spec
            .remove("amiSelectorTerms")
            .and_then(|v| v.as_array().cloned())
            .filter(|t| !t.is_empty());
        let family = match family {
            Some(f) => f,
            None => {
                ctx.warn(
                    "spec.amiFamily",
                    "not set; v1beta1 defaulted to AL2, written as such",
                );
                "AL2".into()
            }
        };
        place_ami_selection(ctx, &mut out, family, terms)?;
        if spec.get("metadataOptions").is_none() {
            ctx.warn(
                "spec.metadataOptions",
                "not set: the v1 default httpPutResponseHopLimit is 1 (v1beta1: 2); set metadataOptions.httpPutResponseHopLimit: 2 if pods need IMDS through a hop",
            );
        }
        for field in [
            "subnetSelectorTerms",
            "securityGroupSelectorTerms",
            "role",
            "instanceProfile",
            "userData",
            "tags",
            "blockDeviceMappings",
            "instanceStorePolicy",
            "detailedMonitoring",
            "metadataOptions",
            "associatePublicIPAddress",
            "context",
        ] {
            if let Some(v) = spec.remove(field) {
                out.insert(field.into(), v);
            }
        }
        ctx.leftovers("spec", spec);
        self.attach_kubelet(ctx, &mut out, name);
        Ok(vec![V1Object::EC2NodeClass(Box::new(typed_ec2nodeclass(
            metadata, out,
        )?))])
    }

    fn attach_kubelet(&mut self, ctx: &mut Ctx<'_>, out: &mut Map<String, Value>, class: &str) {
        self.placed.push(class.to_string());
        let Some(entries) = self.kubelets.get(class) else {
            return;
        };
        let Some((first, first_origin)) = entries.first() else {
            return;
        };
        let Value::Object(mut kubelet) = first.clone() else {
            return;
        };
        if let Some(runtime) = kubelet.remove("containerRuntime") {
            ctx.warn(
                format!(
                    "{} (from {}).containerRuntime",
                    first_origin.field, first_origin.object
                ),
                format!("{runtime} has no v1 equivalent (containerd is the only runtime); dropped"),
            );
        }
        for (other, origin) in entries.iter().skip(1) {
            let mut other = other.clone();
            if let Some(o) = other.as_object_mut() {
                o.remove("containerRuntime");
            }
            if other != Value::Object(kubelet.clone()) {
                ctx.warn(
                    format!("{} (from {})", origin.field, origin.object),
                    format!("differs from the kubelet settings of {}, which were used; split the EC2NodeClass if both are needed", first_origin.object),
                );
            }
        }
        out.insert("kubelet".into(), Value::Object(kubelet));
    }
}

/// The v1alpha5 webhook defaulted a Provisioner that constrains neither its requirements nor its
/// labels to `karpenter.sh/capacity-type In [on-demand]`. v1 has no such default and prefers the
/// cheaper spot offerings, so a converted pool without the requirement would start launching spot
/// nodes: the default is written out.
fn default_capacity_type(ctx: &mut Ctx<'_>, labels: &Map<String, Value>, requirements: &mut Value) {
    let key = well_known::CAPACITY_TYPE_LABEL;
    let labelled = labels
        .get("labels")
        .and_then(Value::as_object)
        .is_some_and(|labels| labels.contains_key(key));
    let Value::Array(items) = requirements else {
        return;
    };
    if labelled
        || items
            .iter()
            .any(|r| r.get("key").and_then(Value::as_str) == Some(key))
    {
        return;
    }
    items.push(
        json!({ "key": key, "operator": "In", "values": [well_known::CAPACITY_TYPE_ON_DEMAND] }),
    );
    ctx.note(
        "spec.requirements",
        format!("no {key} requirement: wrote {key} In [on-demand], the v1alpha5 default (v1 would prefer spot); change it to [spot, on-demand] to allow spot"),
    );
}

fn convert_metadata(mut metadata: Map<String, Value>) -> Value {
    // Server-populated fields would make the output unappliable.
    for field in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
    ] {
        metadata.remove(field);
    }
    if let Some(Value::Object(annotations)) = metadata.get_mut("annotations") {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        if annotations.is_empty() {
            metadata.remove("annotations");
        }
    }
    Value::Object(metadata)
}

fn convert_requirements(
    ctx: &mut Ctx<'_>,
    field: &str,
    requirements: Value,
) -> Result<Value, ConvertError> {
    let items = match requirements {
        Value::Array(items) => items,
        Value::Null => return Ok(json!([])),
        other => {
            return Err(malformed(
                field,
                "a list of {key, operator, values}",
                &other,
            ));
        }
    };
    if let Some(i) = items.iter().position(|r| !r.is_object()) {
        return Err(malformed(
            &format!("{field}[{i}]"),
            "an object {key, operator, values}",
            &items[i],
        ));
    }
    let kept = items
        .into_iter()
        .filter(|r| {
            let key = r.get("key").and_then(Value::as_str).unwrap_or_default();
            if key == "karpenter.sh/provisioner-name" {
                ctx.warn(field, "requirement on karpenter.sh/provisioner-name has no v1 equivalent (use karpenter.sh/nodepool on pods); dropped");
                return false;
            }
            true
        })
        .collect();
    Ok(Value::Array(kept))
}

/// v1alpha1 selector map → v1 terms: `aws-ids` becomes id terms, `aws::name` name terms (security
/// groups), everything else one tags term.
fn selector_terms(
    ctx: &mut Ctx<'_>,
    field: &str,
    selector: Option<Value>,
    names_allowed: bool,
) -> Result<Value, ConvertError> {
    let selector = match selector {
        Some(Value::Object(selector)) => selector,
        None | Some(Value::Null) => {
            ctx.warn(field, "missing; v1 requires selector terms: wrote a karpenter.sh/discovery tag term you must adjust");
            return Ok(json!([{ "tags": { "karpenter.sh/discovery": "${CLUSTER_NAME}" } }]));
        }
        Some(other) => return Err(malformed(field, "a map of tags (or aws-ids)", &other)),
    };
    let mut terms = Vec::new();
    let mut tags = Map::new();
    for (key, value) in selector {
        let text = value
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| value.to_string());
        match key.as_str() {
            "aws-ids" | "aws::ids" => terms.extend(split_list(&text).map(|id| json!({ "id": id }))),
            "aws::name" if names_allowed => {
                terms.extend(split_list(&text).map(|n| json!({ "name": n })))
            }
            _ => {
                tags.insert(key, json!(text));
            }
        }
    }
    if !tags.is_empty() {
        terms.insert(0, json!({ "tags": tags }));
    }
    Ok(Value::Array(terms))
}

fn split_list(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

fn ami_terms_v1alpha1(selector: Map<String, Value>) -> Vec<Value> {
    let mut terms = Vec::new();
    let mut tags = Map::new();
    let mut name = None;
    let mut owners = Vec::new();
    for (key, value) in selector {
        let text = value
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| value.to_string());
        match key.as_str() {
            "aws-ids" | "aws::ids" => terms.extend(split_list(&text).map(|id| json!({ "id": id }))),
            "aws::name" => name = Some(text),
            "aws::owners" => owners.extend(split_list(&text)),
            _ => {
                tags.insert(key, json!(text));
            }
        }
    }
    if name.is_some() || !tags.is_empty() {
        let mut base = Map::new();
        if let Some(name) = name {
            base.insert("name".into(), json!(name));
        }
        if !tags.is_empty() {
            base.insert("tags".into(), Value::Object(tags));
        }
        if owners.is_empty() {
            terms.push(Value::Object(base));
        } else {
            for owner in &owners {
                let mut term = base.clone();
                term.insert("owner".into(), json!(owner));
                terms.push(Value::Object(term));
            }
        }
    }
    terms
}

/// v1 requires amiSelectorTerms: without legacy terms, an alias `<family>@latest` selects what the
/// legacy family selected; with terms, they are kept and amiFamily stays (it decides bootstrap).
fn place_ami_selection(
    ctx: &mut Ctx<'_>,
    out: &mut Map<String, Value>,
    family: String,
    terms: Option<Vec<Value>>,
) -> Result<(), ConvertError> {
    if family == "AL2" {
        ctx.note(
            "spec.amiFamily",
            "AL2 has no AMIs for Kubernetes 1.33 and later (EKS stopped publishing them); move to AL2023 (alias al2023@latest) before upgrading the cluster to 1.33",
        );
    }
    match terms {
        Some(terms) if !terms.is_empty() => {
            out.insert("amiFamily".into(), json!(family));
            out.insert("amiSelectorTerms".into(), Value::Array(terms));
        }
        _ => {
            if family == "Custom" {
                return Err(ConvertError::CustomAmiWithoutSelector);
            }
            let alias = format!("{}@latest", family.to_lowercase());
            ctx.warn("spec.amiFamily", format!("v1 requires amiSelectorTerms: selecting the latest AMIs with alias {alias}; pin a version (e.g. {}@v20240807) for production", family.to_lowercase()));
            out.insert("amiSelectorTerms".into(), json!([{ "alias": alias }]));
        }
    }
    Ok(())
}

fn node_class_ref_v1beta1(
    ctx: &mut Ctx<'_>,
    field: &str,
    mut reference: Map<String, Value>,
) -> Value {
    let name = reference.remove("name").unwrap_or_else(|| json!(""));
    let group = reference
        .remove("apiVersion")
        .and_then(|v| {
            v.as_str()
                .map(|s| s.split('/').next().unwrap_or_default().to_string())
        })
        .filter(|g| !g.is_empty())
        .unwrap_or_else(|| "karpenter.k8s.aws".into());
    let kind = reference
        .remove("kind")
        .unwrap_or_else(|| json!("EC2NodeClass"));
    ctx.leftovers(field, reference);
    json!({ "group": group, "kind": kind, "name": name })
}

fn nodepool_v1beta1(
    ctx: &mut Ctx<'_>,
    metadata: Value,
    mut spec: Map<String, Value>,
) -> Result<Vec<V1Object>, ConvertError> {
    let mut template = take_map(&mut spec, "template", "spec.template")?;
    let mut template_spec = take_map(&mut template, "spec", "spec.template.spec")?;
    for field in ["requirements", "taints", "startupTaints"] {
        check_object_list(
            &template_spec,
            field,
            &format!("spec.template.spec.{field}"),
        )?;
    }
    let reference = take_map(
        &mut template_spec,
        "nodeClassRef",
        "spec.template.spec.nodeClassRef",
    )?;
    template_spec.insert(
        "nodeClassRef".into(),
        node_class_ref_v1beta1(ctx, "spec.template.spec.nodeClassRef", reference),
    );
    // Collected up front and moved to the EC2NodeClass.
    template_spec.remove("kubelet");
    if template_spec.remove("resources").is_some() {
        ctx.warn(
            "spec.template.spec.resources",
            "removed from the NodePool template in v1; dropped",
        );
    }
    let mut disruption = take_map(&mut spec, "disruption", "spec.disruption")?;
    if let Some(expire) = disruption.remove("expireAfter") {
        template_spec.insert("expireAfter".into(), expire);
    }
    let policy = take_string(
        &mut disruption,
        "consolidationPolicy",
        "spec.disruption.consolidationPolicy",
    )?;
    match policy.as_deref() {
        None | Some("WhenUnderutilized") => {
            disruption.insert(
                "consolidationPolicy".into(),
                json!("WhenEmptyOrUnderutilized"),
            );
            if disruption.get("consolidateAfter").is_none() {
                disruption.insert("consolidateAfter".into(), json!("0s"));
            }
        }
        Some(other) => {
            disruption.insert("consolidationPolicy".into(), json!(other));
            if disruption.get("consolidateAfter").is_none() {
                disruption.insert("consolidateAfter".into(), json!("0s"));
            }
        }
    }
    let known = ["consolidationPolicy", "consolidateAfter", "budgets"];
    let unknown: Map<String, Value> = disruption
        .iter()
        .filter(|(k, _)| !known.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    disruption.retain(|k, _| known.contains(&k.as_str()));
    ctx.leftovers("spec.disruption", unknown);
    let mut template_out = Map::new();
    if let Some(m) = template.remove("metadata") {
        template_out.insert("metadata".into(), m);
    }
    ctx.leftovers("spec.template", template);
    let known_template = [
        "taints",
        "startupTaints",
        "requirements",
        "nodeClassRef",
        "expireAfter",
        "terminationGracePeriod",
    ];
    let unknown: Map<String, Value> = template_spec
        .iter()
        .filter(|(k, _)| !known_template.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    template_spec.retain(|k, _| known_template.contains(&k.as_str()));
    ctx.leftovers("spec.template.spec", unknown);
    template_spec
        .entry("requirements")
        .or_insert_with(|| json!([]));
    template_out.insert("spec".into(), Value::Object(template_spec));
    let mut out = Map::new();
    out.insert("template".into(), Value::Object(template_out));
    out.insert("disruption".into(), Value::Object(disruption));
    for field in ["limits", "weight"] {
        if let Some(v) = spec.remove(field) {
            out.insert(field.into(), v);
        }
    }
    ctx.leftovers("spec", spec);
    Ok(vec![V1Object::NodePool(Box::new(typed_nodepool(
        metadata, out,
    )?))])
}

fn nodeclaim_v1beta1(
    ctx: &mut Ctx<'_>,
    metadata: Value,
    mut spec: Map<String, Value>,
) -> Result<Vec<V1Object>, ConvertError> {
    let reference = take_map(&mut spec, "nodeClassRef", "spec.nodeClassRef")?;
    for field in ["requirements", "taints", "startupTaints"] {
        check_object_list(&spec, field, &format!("spec.{field}"))?;
    }
    let mut out = Map::new();
    out.insert(
        "nodeClassRef".into(),
        node_class_ref_v1beta1(ctx, "spec.nodeClassRef", reference),
    );
    if spec.remove("kubelet").is_some() {
        ctx.warn(
            "spec.kubelet",
            "kubelet settings live on the EC2NodeClass in v1; dropped from the NodeClaim",
        );
    }
    for field in ["taints", "startupTaints", "requirements", "resources"] {
        if let Some(v) = spec.remove(field) {
            out.insert(field.into(), v);
        }
    }
    out.entry("requirements").or_insert_with(|| json!([]));
    ctx.leftovers("spec", spec);
    let value = json!({ "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": metadata, "spec": out });
    let nodeclaim: NodeClaim =
        serde_json::from_value(value).map_err(|error| ConvertError::NotValidV1 {
            kind: "NodeClaim",
            error,
        })?;
    Ok(vec![V1Object::NodeClaim(Box::new(nodeclaim))])
}

fn typed_nodepool(metadata: Value, spec: Map<String, Value>) -> Result<NodePool, ConvertError> {
    let value = json!({ "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": metadata, "spec": spec });
    serde_json::from_value(value).map_err(|error| ConvertError::NotValidV1 {
        kind: "NodePool",
        error,
    })
}

fn typed_ec2nodeclass(
    metadata: Value,
    spec: Map<String, Value>,
) -> Result<EC2NodeClass, ConvertError> {
    let value = json!({ "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": metadata, "spec": spec });
    serde_json::from_value(value).map_err(|error| ConvertError::NotValidV1 {
        kind: "EC2NodeClass",
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_durations() {
        assert_eq!(compact_duration(0), "0s");
        assert_eq!(compact_duration(30), "30s");
        assert_eq!(compact_duration(2_592_000), "720h");
        assert_eq!(compact_duration(5400), "1h30m");
    }

    fn convert_yaml(yaml: &str) -> Output {
        let value: Value = serde_saphyr::from_str(yaml).unwrap();
        let input = Input {
            source: "f".into(),
            index: 1,
            value,
        };
        convert(std::slice::from_ref(&input)).0.remove(0)
    }

    #[test]
    fn malformed_legacy_values_are_errors_naming_the_field() {
        let cases = [
            (
                "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\nspec: {requirements: spot}\n",
                "spec.requirements",
            ),
            (
                "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\nspec: {consolidation: {enabled: yes please}}\n",
                "spec.consolidation.enabled",
            ),
            (
                "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\nspec: {providerRef: default}\n",
                "spec.providerRef",
            ),
            (
                "apiVersion: karpenter.k8s.aws/v1alpha1\nkind: AWSNodeTemplate\nmetadata: {name: n}\nspec: {subnetSelector: subnet-1}\n",
                "spec.subnetSelector",
            ),
            (
                "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: p}\nspec: {template: {spec: {requirements: [spot]}}}\n",
                "spec.template.spec.requirements[0]",
            ),
            (
                "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: p}\nspec: {disruption: on}\n",
                "spec.disruption",
            ),
            (
                "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: p}\nspec: []\n",
                "spec",
            ),
        ];
        for (yaml, field) in cases {
            match convert_yaml(yaml) {
                Output::Failed(reason) => {
                    let reason = reason.to_string();
                    assert!(
                        reason.starts_with(&format!("{field}: ")),
                        "{field}: {reason}"
                    )
                }
                other => panic!("{field}: expected an error, got {other:?}"),
            }
        }
    }
}
