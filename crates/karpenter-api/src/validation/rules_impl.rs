//! The CEL rules of [`crate::rules`], implemented in Rust over the typed objects, plus upstream's
//! runtime NodePool validation. Each check reports its rule's message at the most precise path.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Taint;

use super::{ValidationError as E, join_field, join_index, join_key};
use crate::autoscaling::CapacityBuffer;
use crate::rules::*;
use crate::v1::{
    AMI_ALIAS_FAMILIES, EC2NodeClass, NodeClaim, NodeClassReference, NodePool,
    NodeSelectorRequirementWithMinValues, parse_budget_schedule,
};
use crate::v1alpha1::NodeOverlay;
use crate::well_known::{CAPACITY_TYPE_LABEL, CAPACITY_TYPES, normalize_label_key};

/// Resources a NodeOverlay's `capacity` may not set (upstream's `WellKnownResources`).
pub const OVERLAY_RESTRICTED_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pods"];

fn label_domain(key: &str) -> &str {
    key.split('/').next().unwrap_or_default()
}

fn karpenter_domain_allowed(key: &str) -> bool {
    key == "karpenter.sh/capacity-type"
        || key == "karpenter.sh/nodepool"
        || !label_domain(key).ends_with("karpenter.sh")
}

/// CEL rules of a NodePool (creation rules only; see [`validate_nodepool_update`]).
pub fn check_nodepool(nodepool: &NodePool) -> Vec<E> {
    let mut errors = Vec::new();
    let spec = &nodepool.spec;
    if spec.replicas.is_some() {
        let limits_ok = spec
            .limits
            .as_ref()
            .is_none_or(|l| l.is_empty() || (l.len() == 1 && l.contains_key("nodes")));
        if !limits_ok {
            errors.push(E::rule("spec.limits", &STATIC_LIMITS));
        }
        if spec.weight.is_some() {
            errors.push(E::rule("spec.weight", &STATIC_WEIGHT));
        }
    }
    if let Some(budgets) = spec.disruption.as_ref().and_then(|d| d.budgets.as_ref()) {
        for (i, budget) in budgets.iter().enumerate() {
            if budget.schedule.is_some() != budget.duration.is_some() {
                let missing = if budget.schedule.is_some() {
                    "duration"
                } else {
                    "schedule"
                };
                errors.push(E::rule(
                    join_field(&join_index("spec.disruption.budgets", i), missing),
                    &BUDGET_SCHEDULE_WITH_DURATION,
                ));
            }
        }
    }
    if let Some(metadata) = &spec.template.metadata {
        for key in metadata.labels.keys() {
            let path = join_key("spec.template.metadata.labels", key);
            if !karpenter_domain_allowed(key) {
                errors.push(E::rule(&path, &LABELS_KARPENTER_DOMAIN));
            }
            if key == "karpenter.sh/nodepool" {
                errors.push(E::rule(&path, &LABELS_NODEPOOL));
            }
            if key == "kubernetes.io/hostname" {
                errors.push(E::rule(&path, &LABELS_HOSTNAME));
            }
        }
    }
    let template = &spec.template.spec;
    check_requirements(
        "spec.template.spec.requirements",
        &template.requirements,
        true,
        &mut errors,
    );
    check_node_class_ref(
        "spec.template.spec.nodeClassRef",
        &template.node_class_ref,
        &mut errors,
    );
    errors
}

fn check_requirements(
    path: &str,
    requirements: &[NodeSelectorRequirementWithMinValues],
    is_nodepool: bool,
    errors: &mut Vec<E>,
) {
    for (i, requirement) in requirements.iter().enumerate() {
        let item = join_index(path, i);
        check_requirement(
            &item,
            (
                &requirement.key,
                &requirement.operator,
                &requirement.values.to_vec(),
            ),
            RequirementRules {
                forbid_nodepool_key: is_nodepool,
                not_in_needs_values: false,
            },
            errors,
        );
        if requirement.operator == "In"
            && let Some(min) = requirement.min_values
            && (requirement.values.len() as i64) < i64::from(min)
        {
            errors.push(E::rule(
                join_field(&item, "minValues"),
                &REQ_MIN_VALUES_LE_VALUES,
            ));
        }
    }
}

/// Which of the shared requirement rules apply: the `karpenter.sh/nodepool` key is refused in a
/// NodePool's own requirements, and a NodeOverlay's `NotIn` needs values.
struct RequirementRules {
    forbid_nodepool_key: bool,
    not_in_needs_values: bool,
}

/// The CEL rules NodePool, NodeClaim and NodeOverlay requirements share, on the requirement
/// `(key, operator, values)` at `item`: a key outside the restricted karpenter domains and not
/// the hostname, `In` with values, a numeric operator with one non-negative integer.
fn check_requirement(
    item: &str,
    (key, operator, values): (&str, &str, &[String]),
    rules: RequirementRules,
    errors: &mut Vec<E>,
) {
    let key_path = join_field(item, "key");
    if !karpenter_domain_allowed(key) {
        errors.push(E::rule(&key_path, &REQ_KEY_KARPENTER_DOMAIN));
    }
    if rules.forbid_nodepool_key && key == "karpenter.sh/nodepool" {
        errors.push(E::rule(&key_path, &REQ_KEY_NODEPOOL));
    }
    if key == "kubernetes.io/hostname" {
        errors.push(E::rule(&key_path, &REQ_KEY_HOSTNAME));
    }
    let values_path = join_field(item, "values");
    match operator {
        "In" if values.is_empty() => errors.push(E::rule(&values_path, &REQ_IN_HAS_VALUES)),
        "NotIn" if rules.not_in_needs_values && values.is_empty() => {
            errors.push(E::rule(&values_path, &NO_REQ_NOT_IN_HAS_VALUES))
        }
        "Gt" | "Lt" | "Gte" | "Lte" => {
            let single_non_negative = matches!(values, [v]
                if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) && v.parse::<i64>().is_ok());
            if !single_non_negative {
                errors.push(E::rule(&values_path, &REQ_NUMERIC_SINGLE_VALUE));
            }
        }
        _ => {}
    }
}

fn check_node_class_ref(path: &str, reference: &NodeClassReference, errors: &mut Vec<E>) {
    for (field, value, rule) in [
        ("group", &reference.group, &NODECLASSREF_GROUP_NONEMPTY),
        ("kind", &reference.kind, &NODECLASSREF_KIND_NONEMPTY),
        ("name", &reference.name, &NODECLASSREF_NAME_NONEMPTY),
    ] {
        if value.is_empty() {
            errors.push(E::rule(join_field(path, field), rule));
        }
    }
}

/// Upstream's runtime NodePool validation (`ValidationSucceeded`): label keys and values, taint
/// uniqueness, requirement keys after alias normalisation, known capacity types, budget crons.
pub fn runtime_checks_nodepool(nodepool: &NodePool) -> Vec<E> {
    let mut errors = Vec::new();
    let spec = &nodepool.spec;
    if let Some(metadata) = &spec.template.metadata {
        for key in metadata.labels.keys() {
            if let Some(problem) = qualified_name_problem(key) {
                errors.push(E::new(
                    join_key("spec.template.metadata.labels", key),
                    format!("invalid label key {key:?}: {problem}"),
                    "use a key such as example.com/team or team",
                ));
            }
        }
    }
    let template = &spec.template.spec;
    check_taints(
        "spec.template.spec",
        &template.taints,
        &template.startup_taints,
        &mut errors,
    );
    for (i, requirement) in template.requirements.iter().enumerate() {
        let item = join_index("spec.template.spec.requirements", i);
        let key = normalize_label_key(&requirement.key);
        if key != requirement.key && key == "karpenter.sh/nodepool" {
            errors.push(E::rule(join_field(&item, "key"), &REQ_KEY_NODEPOOL));
        }
        if let Some(problem) = qualified_name_problem(&requirement.key) {
            errors.push(E::new(
                join_field(&item, "key"),
                format!("invalid requirement key {:?}: {problem}", requirement.key),
                "use a label key such as topology.kubernetes.io/zone",
            ));
        }
        if key == CAPACITY_TYPE_LABEL && requirement.operator == "In" {
            let known = requirement
                .values
                .iter()
                .filter(|v| CAPACITY_TYPES.contains(v))
                .count();
            if known == 0 {
                errors.push(E::new(
                    join_field(&item, "values"),
                    format!(
                        "no known values for {CAPACITY_TYPE_LABEL}: {:?}",
                        requirement.values
                    ),
                    format!("use one or more of {}", CAPACITY_TYPES.join(", ")),
                ));
            } else if let Some(min) = requirement.min_values
                && (known as i64) < i64::from(min)
            {
                errors.push(E::new(
                    join_field(&item, "minValues"),
                    format!("minValues {min} is more than the {known} known values of {CAPACITY_TYPE_LABEL}"),
                    "lower minValues",
                ));
            }
        }
    }
    if let Some(budgets) = spec.disruption.as_ref().and_then(|d| d.budgets.as_ref()) {
        for (i, budget) in budgets.iter().enumerate() {
            if let Some(schedule) = &budget.schedule
                && let Err(err) = parse_budget_schedule(schedule)
            {
                errors.push(E::new(
                    join_field(&join_index("spec.disruption.budgets", i), "schedule"),
                    err.to_string(),
                    "use five cron fields (minute hour day month weekday), UTC, or a macro such as @daily",
                ));
            }
        }
    }
    errors
}

/// Why `key` is not a qualified name (prefix ≤ 253, name ≤ 63), or `None`.
fn qualified_name_problem(key: &str) -> Option<&'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if name.is_empty() {
        return Some("the name part is empty");
    }
    if name.len() > 63 {
        return Some("the name part must be no more than 63 characters");
    }
    let name_ok = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name
            .as_bytes()
            .first()
            .is_some_and(u8::is_ascii_alphanumeric)
        && name
            .as_bytes()
            .last()
            .is_some_and(u8::is_ascii_alphanumeric);
    if !name_ok {
        return Some(
            "the name part must be alphanumerics, '-', '_' or '.', starting and ending alphanumeric",
        );
    }
    if let Some(prefix) = prefix {
        if prefix.len() > 253 {
            return Some("the prefix must be no more than 253 characters");
        }
        if !super::is_dns_subdomain(prefix) {
            return Some("the prefix must be a lowercase DNS subdomain");
        }
    }
    None
}

fn check_taints(path: &str, taints: &[Taint], startup_taints: &[Taint], errors: &mut Vec<E>) {
    let mut seen: BTreeSet<(&str, &str)> = BTreeSet::new();
    for (field, list) in [("taints", taints), ("startupTaints", startup_taints)] {
        for (i, taint) in list.iter().enumerate() {
            let item = join_index(&join_field(path, field), i);
            if let Some(problem) = qualified_name_problem(&taint.key) {
                errors.push(E::new(
                    join_field(&item, "key"),
                    format!("invalid taint key {:?}: {problem}", taint.key),
                    "use a key such as example.com/dedicated",
                ));
            }
            if !seen.insert((&taint.key, &taint.effect)) {
                errors.push(E::new(
                    item,
                    format!(
                        "duplicate taint Key/Effect pair {}={}",
                        taint.key, taint.effect
                    ),
                    "each (key, effect) may appear once across taints and startupTaints",
                ));
            }
        }
    }
}

/// CEL rules of a NodeOverlay (upstream's v1alpha1 markers).
/// The CEL rules of a CapacityBuffer's spec (upstream's two `XValidation` markers).
pub fn check_capacitybuffer(buffer: &CapacityBuffer) -> Vec<E> {
    let mut errors = Vec::new();
    let spec = &buffer.spec;
    if spec.pod_template_ref.is_some() && spec.replicas.is_none() && spec.limits.is_none() {
        errors.push(E::rule("spec", &CB_TEMPLATE_NEEDS_SIZE));
    }
    if spec.pod_template_ref.is_some() && spec.scalable_ref.is_some() {
        errors.push(E::rule("spec", &CB_ONE_REF));
    }
    errors
}

pub fn check_nodeoverlay(overlay: &NodeOverlay) -> Vec<E> {
    let mut errors = Vec::new();
    let spec = &overlay.spec;
    if spec.price.is_some() && spec.price_adjustment.is_some() {
        errors.push(E::rule("spec.priceAdjustment", &NO_PRICE_XOR_ADJUSTMENT));
    }
    for (i, requirement) in spec.requirements.iter().enumerate() {
        check_requirement(
            &join_index("spec.requirements", i),
            (&requirement.key, &requirement.operator, &requirement.values),
            RequirementRules {
                forbid_nodepool_key: false,
                not_in_needs_values: true,
            },
            &mut errors,
        );
    }
    for name in spec.capacity.iter().flat_map(|c| c.keys()) {
        if OVERLAY_RESTRICTED_RESOURCES.contains(&name.as_str()) {
            errors.push(E::rule(
                join_key("spec.capacity", name),
                &NO_CAPACITY_RESTRICTED,
            ));
        }
    }
    errors
}

/// Upstream's runtime NodeOverlay validation (`ValidationSucceeded=False`, reason
/// `RuntimeValidation`): requirement keys must be qualified names.
pub fn runtime_checks_nodeoverlay(overlay: &NodeOverlay) -> Vec<E> {
    let mut errors = Vec::new();
    for (i, requirement) in overlay.spec.requirements.iter().enumerate() {
        if let Some(problem) = qualified_name_problem(&requirement.key) {
            errors.push(E::new(
                join_field(&join_index("spec.requirements", i), "key"),
                format!("invalid requirement key {:?}: {problem}", requirement.key),
                "use a label key such as node.kubernetes.io/instance-type",
            ));
        }
    }
    errors
}

/// CEL rules of a NodeClaim (creation rules).
pub fn check_nodeclaim(nodeclaim: &NodeClaim) -> Vec<E> {
    let mut errors = Vec::new();
    check_requirements(
        "spec.requirements",
        &nodeclaim.spec.requirements,
        false,
        &mut errors,
    );
    check_node_class_ref(
        "spec.nodeClassRef",
        &nodeclaim.spec.node_class_ref,
        &mut errors,
    );
    check_taints(
        "spec",
        &nodeclaim.spec.taints,
        &nodeclaim.spec.startup_taints,
        &mut errors,
    );
    errors
}

fn check_selector_tags(path: &str, tags: &BTreeMap<String, String>, errors: &mut Vec<E>) {
    if tags.iter().any(|(k, v)| k.is_empty() || v.is_empty()) {
        errors.push(E::rule(
            join_field(path, "tags"),
            &EC2_SELECTOR_TAGS_NONEMPTY,
        ));
    }
}

/// CEL rules of an EC2NodeClass (creation rules).
pub fn check_ec2nodeclass(nodeclass: &EC2NodeClass) -> Vec<E> {
    let mut errors = Vec::new();
    let spec = &nodeclass.spec;
    if spec.role.is_some() == spec.instance_profile.is_some() {
        errors.push(E::rule("spec.role", &EC2_ROLE_XOR_INSTANCE_PROFILE));
    }
    if spec.role.as_deref() == Some("") {
        errors.push(E::rule("spec.role", &EC2_ROLE_NONEMPTY));
    }
    if spec.instance_profile.as_deref() == Some("") {
        errors.push(E::rule(
            "spec.instanceProfile",
            &EC2_INSTANCE_PROFILE_NONEMPTY,
        ));
    }
    // Selector terms.
    if spec.subnet_selector_terms.is_empty() {
        errors.push(E::rule(
            "spec.subnetSelectorTerms",
            &EC2_SUBNET_TERMS_NONEMPTY,
        ));
    }
    for (i, term) in spec.subnet_selector_terms.iter().enumerate() {
        let path = join_index("spec.subnetSelectorTerms", i);
        if term.tags.is_empty() && term.id.is_none() {
            errors.push(E::rule(&path, &EC2_SUBNET_TERM_NONEMPTY));
        }
        if term.id.is_some() && !term.tags.is_empty() {
            errors.push(E::rule(&path, &EC2_SUBNET_TERM_ID_EXCLUSIVE));
        }
        check_selector_tags(&path, &term.tags, &mut errors);
    }
    if spec.security_group_selector_terms.is_empty() {
        errors.push(E::rule(
            "spec.securityGroupSelectorTerms",
            &EC2_SG_TERMS_NONEMPTY,
        ));
    }
    for (i, term) in spec.security_group_selector_terms.iter().enumerate() {
        let path = join_index("spec.securityGroupSelectorTerms", i);
        let (tags, id, name) = (
            !term.tags.is_empty(),
            term.id.is_some(),
            term.name.is_some(),
        );
        if !tags && !id && !name {
            errors.push(E::rule(&path, &EC2_SG_TERM_NONEMPTY));
        }
        if id && (tags || name) {
            errors.push(E::rule(&path, &EC2_SG_TERM_ID_EXCLUSIVE));
        }
        if name && (tags || id) {
            errors.push(E::rule(&path, &EC2_SG_TERM_NAME_EXCLUSIVE));
        }
        check_selector_tags(&path, &term.tags, &mut errors);
    }
    for (i, term) in spec.capacity_reservation_selector_terms.iter().enumerate() {
        let path = join_index("spec.capacityReservationSelectorTerms", i);
        let (tags, id, criteria) = (
            !term.tags.is_empty(),
            term.id.is_some(),
            term.instance_match_criteria.is_some(),
        );
        if !tags && !id && !criteria {
            errors.push(E::rule(&path, &EC2_CR_TERM_NONEMPTY));
        }
        if id && (tags || criteria || term.owner_id.is_some()) {
            errors.push(E::rule(&path, &EC2_CR_TERM_ID_EXCLUSIVE));
        }
        check_selector_tags(&path, &term.tags, &mut errors);
    }
    if let Some(selector) = &spec.placement_group_selector
        && selector.name.is_some() == selector.id.is_some()
    {
        errors.push(E::rule(
            "spec.placementGroupSelector",
            &EC2_PLACEMENT_GROUP_ONE_OF,
        ));
    }
    check_ami_terms(nodeclass, &mut errors);
    check_tags(&spec.tags, &mut errors);
    if let Some(kubelet) = &spec.kubelet {
        check_kubelet(kubelet, &mut errors);
    }
    if spec
        .block_device_mappings
        .iter()
        .filter(|m| m.root_volume == Some(true))
        .count()
        > 1
    {
        errors.push(E::rule("spec.blockDeviceMappings", &EC2_ONE_ROOT_VOLUME));
    }
    for (i, mapping) in spec.block_device_mappings.iter().enumerate() {
        let Some(ebs) = &mapping.ebs else { continue };
        let path = join_field(&join_index("spec.blockDeviceMappings", i), "ebs");
        if ebs.snapshot_id.is_none() && ebs.volume_size.is_none() {
            errors.push(E::rule(&path, &EC2_EBS_SNAPSHOT_OR_SIZE));
        }
        if ebs.volume_initialization_rate.is_some() && ebs.snapshot_id.is_none() {
            errors.push(E::rule(
                join_field(&path, "volumeInitializationRate"),
                &EC2_EBS_INIT_RATE_NEEDS_SNAPSHOT,
            ));
        }
    }
    let interfaces = &spec.network_interfaces;
    if !interfaces.is_empty() {
        if !interfaces.iter().any(|x| {
            x.network_card_index == 0 && x.device_index == 0 && x.interface_type == "interface"
        }) {
            errors.push(E::rule("spec.networkInterfaces", &EC2_NETWORK_PRIMARY));
        }
        for (i, x) in interfaces.iter().enumerate() {
            let same = interfaces.iter().filter(|y| {
                y.network_card_index == x.network_card_index && y.device_index == x.device_index
            });
            if same.count() != 1 {
                errors.push(E::rule(
                    join_index("spec.networkInterfaces", i),
                    &EC2_NETWORK_UNIQUE,
                ));
            }
            let efa_on_card = interfaces
                .iter()
                .filter(|y| {
                    y.network_card_index == x.network_card_index && y.interface_type == "efa-only"
                })
                .count();
            if x.interface_type == "efa-only" && efa_on_card != 1 {
                errors.push(E::rule(
                    join_index("spec.networkInterfaces", i),
                    &EC2_NETWORK_ONE_EFA_PER_CARD,
                ));
            }
        }
    }
    if let Some(tracking) = &spec.connection_tracking
        && tracking.tcp_established_timeout.is_none()
        && tracking.udp_stream_timeout.is_none()
        && tracking.udp_timeout.is_none()
    {
        errors.push(E::rule(
            "spec.connectionTracking",
            &EC2_CONNECTION_TRACKING_NONEMPTY,
        ));
    }
    errors
}

fn check_ami_terms(nodeclass: &EC2NodeClass, errors: &mut Vec<E>) {
    let spec = &nodeclass.spec;
    let terms = &spec.ami_selector_terms;
    let has_alias = terms.iter().any(|t| t.alias.is_some());
    if has_alias && terms.len() != 1 {
        errors.push(E::rule("spec.amiSelectorTerms", &EC2_ALIAS_ALONE));
    }
    if !terms.is_empty() && !has_alias && spec.ami_family.is_none() {
        errors.push(E::rule("spec.amiFamily", &EC2_AMI_FAMILY_REQUIRED));
    }
    if let Some(family) = &spec.ami_family
        && has_alias
        && family != "Custom"
        && !terms
            .iter()
            .filter_map(|t| t.alias.as_deref())
            .any(|alias| {
                alias
                    .split('@')
                    .next()
                    .unwrap_or_default()
                    .eq_ignore_ascii_case(family)
            })
    {
        errors.push(E::rule("spec.amiFamily", &EC2_AMI_FAMILY_MATCHES_ALIAS));
    }
    for (i, term) in terms.iter().enumerate() {
        let path = join_index("spec.amiSelectorTerms", i);
        let (tags, name, id, owner, ssm) = (
            !term.tags.is_empty(),
            term.name.is_some(),
            term.id.is_some(),
            term.owner.is_some(),
            term.ssm_parameter.is_some(),
        );
        let alias = term.alias.is_some();
        if !alias && !tags && !name && !id && !ssm {
            errors.push(E::rule(&path, &EC2_AMI_TERM_NONEMPTY));
        }
        if id && (alias || tags || name || owner) {
            errors.push(E::rule(&path, &EC2_AMI_TERM_ID_EXCLUSIVE));
        }
        if alias && (id || tags || name || owner || ssm) {
            errors.push(E::rule(&path, &EC2_AMI_TERM_ALIAS_EXCLUSIVE));
        }
        check_selector_tags(&path, &term.tags, errors);
        if let Some(alias) = &term.alias {
            let alias_path = join_field(&path, "alias");
            let family = alias.split('@').next().unwrap_or_default();
            let version = alias.rsplit('@').next().unwrap_or_default();
            if !AMI_ALIAS_FAMILIES.iter().any(|(f, _)| *f == family) {
                errors.push(E::rule(&alias_path, &EC2_ALIAS_FAMILY));
            }
            if family.starts_with("windows") && version != "latest" {
                errors.push(E::rule(&alias_path, &EC2_ALIAS_WINDOWS_LATEST));
            }
        }
    }
}

fn check_tags(tags: &BTreeMap<String, String>, errors: &mut Vec<E>) {
    for key in tags.keys() {
        let path = join_key("spec.tags", key);
        let rule = match key.as_str() {
            "" => &EC2_TAGS_EMPTY_KEY,
            "eks:eks-cluster-name" => &EC2_TAGS_CLUSTER_NAME,
            k if k.starts_with("kubernetes.io/cluster") => &EC2_TAGS_KUBERNETES_CLUSTER,
            "karpenter.sh/nodepool" => &EC2_TAGS_NODEPOOL,
            "karpenter.sh/nodeclaim" => &EC2_TAGS_NODECLAIM,
            "karpenter.k8s.aws/ec2nodeclass" => &EC2_TAGS_EC2NODECLASS,
            _ => continue,
        };
        errors.push(E::rule(path, rule));
    }
}

const RESERVED_KEYS: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pid"];
const EVICTION_SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

fn check_kubelet(kubelet: &crate::v1::KubeletConfiguration, errors: &mut Vec<E>) {
    if let (Some(high), Some(low)) = (
        kubelet.image_gc_high_threshold_percent,
        kubelet.image_gc_low_threshold_percent,
    ) && high <= low
    {
        errors.push(E::rule(
            "spec.kubelet.imageGCHighThresholdPercent",
            &KUBELET_IMAGE_GC_THRESHOLDS,
        ));
    }
    for key in kubelet.eviction_soft.keys() {
        if !kubelet.eviction_soft_grace_period.contains_key(key) {
            errors.push(E::rule(
                join_key("spec.kubelet.evictionSoft", key),
                &KUBELET_EVICTION_SOFT_HAS_GRACE,
            ));
        }
    }
    for key in kubelet.eviction_soft_grace_period.keys() {
        if !kubelet.eviction_soft.contains_key(key) {
            errors.push(E::rule(
                join_key("spec.kubelet.evictionSoftGracePeriod", key),
                &KUBELET_GRACE_HAS_EVICTION_SOFT,
            ));
        }
    }
    for (field, map) in [
        ("kubeReserved", &kubelet.kube_reserved),
        ("systemReserved", &kubelet.system_reserved),
    ] {
        for (key, value) in map {
            let path = join_key(&join_field("spec.kubelet", field), key);
            if !RESERVED_KEYS.contains(&key.as_str()) {
                errors.push(E::rule(&path, &KUBELET_RESERVED_KEYS));
            }
            if value.starts_with('-') {
                errors.push(E::rule(&path, &KUBELET_RESERVED_NOT_NEGATIVE));
            }
        }
    }
    for (field, map) in [
        ("evictionHard", &kubelet.eviction_hard),
        ("evictionSoft", &kubelet.eviction_soft),
        (
            "evictionSoftGracePeriod",
            &kubelet.eviction_soft_grace_period,
        ),
    ] {
        for key in map.keys() {
            if !EVICTION_SIGNALS.contains(&key.as_str()) {
                errors.push(E::rule(
                    join_key(&join_field("spec.kubelet", field), key),
                    &KUBELET_EVICTION_KEYS,
                ));
            }
        }
    }
}

/// Transition rules of a NodePool update (`oldSelf`).
pub fn validate_nodepool_update(old: &NodePool, new: &NodePool) -> Vec<E> {
    let mut errors = Vec::new();
    if old.spec.replicas.is_some() != new.spec.replicas.is_some() {
        errors.push(E::rule("spec.replicas", &STATIC_TRANSITION));
    }
    let (old_ref, new_ref) = (
        &old.spec.template.spec.node_class_ref,
        &new.spec.template.spec.node_class_ref,
    );
    if old_ref.group != new_ref.group {
        errors.push(E::rule(
            "spec.template.spec.nodeClassRef.group",
            &NODECLASSREF_GROUP_IMMUTABLE,
        ));
    }
    if old_ref.kind != new_ref.kind {
        errors.push(E::rule(
            "spec.template.spec.nodeClassRef.kind",
            &NODECLASSREF_KIND_IMMUTABLE,
        ));
    }
    errors
}

/// Transition rules of a NodeClaim update: the spec is immutable.
pub fn validate_nodeclaim_update(old: &NodeClaim, new: &NodeClaim) -> Vec<E> {
    if old.spec == new.spec {
        Vec::new()
    } else {
        vec![E::rule("spec", &NODECLAIM_SPEC_IMMUTABLE)]
    }
}

/// Transition rules of an EC2NodeClass update: no switching between role and instanceProfile.
pub fn validate_ec2nodeclass_update(old: &EC2NodeClass, new: &EC2NodeClass) -> Vec<E> {
    let mut errors = Vec::new();
    if old.spec.role.is_some() && new.spec.role.is_none() {
        errors.push(E::rule("spec.role", &EC2_ROLE_TO_INSTANCE_PROFILE));
    }
    if old.spec.instance_profile.is_some() && new.spec.instance_profile.is_none() {
        errors.push(E::rule(
            "spec.instanceProfile",
            &EC2_INSTANCE_PROFILE_TO_ROLE,
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        assert_eq!(qualified_name_problem("example.com/team"), None);
        assert_eq!(qualified_name_problem("team"), None);
        assert!(qualified_name_problem("Example.com/team").is_some());
        assert!(qualified_name_problem("team-").is_some());
        assert!(qualified_name_problem(&"a".repeat(64)).is_some());
    }
}
