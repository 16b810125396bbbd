//! Drift of a NodeClaim from its EC2NodeClass (reference §7), pure: the provider's
//! `is_drifted` fetches the NodeClass and the instance and asks [`drift_reason`].
//!
//! Checks in upstream's order, the first hit wins:
//! 1. `NodeClassDrift`: the static hash ([`node_class_hash`]) stamped on the NodeClaim at launch
//!    differs from the NodeClass's — only when both carry the same hash version, so a version
//!    bump (or a NodeClaim launched by Go Karpenter, whose `hashstructure` hash we do not
//!    reproduce: hence our own [`HASH_VERSION`]) never drifts a whole cluster;
//! 2. `AMIDrift`: the instance's image is no longer among `status.amis`;
//! 3. `SecurityGroupDrift`: the instance's security groups differ (as a set) from
//!    `status.securityGroups`;
//! 4. `SubnetDrift`: the instance's subnet is not among `status.subnets`;
//! 5. `CapacityReservationDrift`: a reserved instance's reservation is no longer among
//!    `status.capacityReservations` (read only once `CapacityReservationsReady` says the list
//!    is resolved: with the ReservedCapacity gate off nothing drifts this way).
//!
//! A NodeClass without a resolved status answers "not drifted" for the status checks: an empty
//! status means "not resolved yet", not "nothing selected".

use std::collections::BTreeSet;

use karpenter_api::NodeClaim;
use karpenter_api::v1::{ConditionsExt, EC2NodeClass};
use karpenter_api::well_known as wk;
use serde_json::Value;

use crate::instance::Instance;
use crate::reservations::CONDITION_CAPACITY_RESERVATIONS_READY;

pub const NODE_CLASS_DRIFT: &str = "NodeClassDrift";
pub const AMI_DRIFT: &str = "AMIDrift";
pub const SECURITY_GROUP_DRIFT: &str = "SecurityGroupDrift";
pub const SUBNET_DRIFT: &str = "SubnetDrift";
pub const CAPACITY_RESERVATION_DRIFT: &str = "CapacityReservationDrift";

/// The version of [`node_class_hash`]'s algorithm, stamped beside it
/// (`karpenter.k8s.aws/ec2nodeclass-hash-version`). Deliberately not Go Karpenter's `v5`/`v6`:
/// our hash differs from `hashstructure`'s, and a version mismatch disables static drift
/// instead of drifting every node taken over from Go Karpenter. Bump it whenever the hashed
/// fields or the encoding change.
pub const HASH_VERSION: &str = "rs-v1";

/// Spec fields left out of the static hash: they are resolved into `status` and drift through
/// the status checks instead (upstream's `hash:"ignore"` fields).
const UNHASHED_SPEC_FIELDS: [&str; 6] = [
    "subnetSelectorTerms",
    "securityGroupSelectorTerms",
    "capacityReservationSelectorTerms",
    "amiSelectorTerms",
    "amiFamily",
    "ipPrefixCount",
];

/// The static hash of an EC2NodeClass (decimal `u64`, like upstream's annotation): FNV-1a over
/// the canonical JSON of the spec without [`UNHASHED_SPEC_FIELDS`], plus the resolved AMI
/// family. Canonical as upstream's options: arrays are sets (order ignored), zero values
/// (null, "", false, 0, empty arrays/objects) are left out, object keys sorted.
pub fn node_class_hash(node_class: &EC2NodeClass) -> String {
    let mut spec = serde_json::to_value(&node_class.spec).unwrap_or(Value::Null);
    if let Value::Object(fields) = &mut spec {
        for field in UNHASHED_SPEC_FIELDS {
            fields.remove(field);
        }
    }
    let hashed = serde_json::json!({
        "spec": canonical(spec),
        "amiFamily": node_class.ami_family().unwrap_or_default(),
    });
    fnv1a(canonical(hashed).to_string().as_bytes()).to_string()
}

/// `value` with zero values dropped and arrays sorted by their elements' canonical text.
fn canonical(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(k, v)| (k, canonical(v)))
                .filter(|(_, v)| !is_zero(v))
                .collect(),
        ),
        Value::Array(items) => {
            let mut items: Vec<Value> = items.into_iter().map(canonical).collect();
            items.sort_by_cached_key(Value::to_string);
            Value::Array(items)
        }
        other => other,
    }
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// 64-bit FNV-1a: stable across builds and platforms (unlike `std`'s hashers).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The annotations the NodeClass controller stamps on the EC2NodeClass and the launch copies
/// onto each NodeClaim ([`crate::provider::hydrate::node_class_annotations`]).
pub fn hash_annotations(node_class: &EC2NodeClass) -> [(&'static str, String); 2] {
    [
        (
            wk::EC2NODECLASS_HASH_ANNOTATION,
            node_class_hash(node_class),
        ),
        (
            wk::EC2NODECLASS_HASH_VERSION_ANNOTATION,
            HASH_VERSION.to_string(),
        ),
    ]
}

fn annotation<'a>(
    annotations: Option<&'a std::collections::BTreeMap<String, String>>,
    key: &str,
) -> Option<&'a str> {
    annotations?.get(key).map(String::as_str)
}

/// Static drift: both hashed under the same version, and the hashes differ.
pub fn static_drift(node_claim: &NodeClaim, node_class: &EC2NodeClass) -> bool {
    let claim = node_claim.metadata.annotations.as_ref();
    let class = node_class.metadata.annotations.as_ref();
    let versions = (
        annotation(claim, wk::EC2NODECLASS_HASH_VERSION_ANNOTATION),
        annotation(class, wk::EC2NODECLASS_HASH_VERSION_ANNOTATION),
    );
    let hashes = (
        annotation(claim, wk::EC2NODECLASS_HASH_ANNOTATION),
        annotation(class, wk::EC2NODECLASS_HASH_ANNOTATION),
    );
    matches!((versions, hashes), ((Some(a), Some(b)), (Some(x), Some(y))) if a == b && x != y)
}

/// Why `node_claim` (running as `instance`) drifted from `node_class`, or `None`.
pub fn drift_reason(
    node_claim: &NodeClaim,
    node_class: &EC2NodeClass,
    instance: &Instance,
) -> Option<&'static str> {
    if static_drift(node_claim, node_class) {
        return Some(NODE_CLASS_DRIFT);
    }
    let status = node_class.status.as_ref()?;
    let image = node_claim
        .status
        .as_ref()
        .and_then(|s| s.image_id.as_deref())
        .or(instance.image_id.as_deref());
    if let Some(image) = image
        && !status.amis.is_empty()
        && !status.amis.iter().any(|ami| ami.id == image)
    {
        return Some(AMI_DRIFT);
    }
    if !status.security_groups.is_empty() {
        let wanted: BTreeSet<&str> = status
            .security_groups
            .iter()
            .map(|g| g.id.as_str())
            .collect();
        let actual: BTreeSet<&str> = instance
            .security_group_ids
            .iter()
            .map(String::as_str)
            .collect();
        if wanted != actual {
            return Some(SECURITY_GROUP_DRIFT);
        }
    }
    if let Some(subnet) = &instance.subnet_id
        && !status.subnets.is_empty()
        && !status.subnets.iter().any(|s| &s.id == subnet)
    {
        return Some(SUBNET_DRIFT);
    }
    if instance.capacity_type == wk::CAPACITY_TYPE_RESERVED
        && let Some(reservation) = &instance.capacity_reservation_id
        && status.is_condition_true(CONDITION_CAPACITY_RESERVATIONS_READY)
        && !status
            .capacity_reservations
            .iter()
            .any(|r| &r.id == reservation)
    {
        return Some(CAPACITY_RESERVATION_DRIFT);
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use karpenter_api::v1::{
        AmiSelectorTerm, AmiStatus, EC2NodeClassSpec, EC2NodeClassStatus, KubeletConfiguration,
        SecurityGroupStatus, SubnetSelectorTerm, SubnetStatus,
    };

    use super::*;

    fn node_class() -> EC2NodeClass {
        let mut class = EC2NodeClass::new(
            "default",
            EC2NodeClassSpec {
                ami_selector_terms: vec![AmiSelectorTerm {
                    alias: Some("al2023@latest".into()),
                    ..Default::default()
                }],
                role: Some("KarpenterNodeRole-c1".into()),
                tags: BTreeMap::from([("team".into(), "a".into()), ("env".into(), "b".into())]),
                ..Default::default()
            },
        );
        class.status = Some(EC2NodeClassStatus {
            subnets: vec![SubnetStatus {
                id: "subnet-a".into(),
                zone: "us-west-2a".into(),
                ..Default::default()
            }],
            security_groups: vec![
                SecurityGroupStatus {
                    id: "sg-1".into(),
                    ..Default::default()
                },
                SecurityGroupStatus {
                    id: "sg-2".into(),
                    ..Default::default()
                },
            ],
            amis: vec![AmiStatus {
                id: "ami-new".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        stamp(&mut class);
        class
    }

    fn stamp(class: &mut EC2NodeClass) {
        let annotations = hash_annotations(class);
        let map = class.metadata.annotations.get_or_insert_default();
        for (k, v) in annotations {
            map.insert(k.to_string(), v);
        }
    }

    /// A NodeClaim launched from `class` as it is now, running as [`instance`].
    fn node_claim(class: &EC2NodeClass) -> NodeClaim {
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abc"},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
            "status": {"imageID": "ami-new", "providerID": "aws:///us-west-2a/i-1"}
        }))
        .unwrap();
        let annotations = claim.metadata.annotations.get_or_insert_default();
        for key in [
            wk::EC2NODECLASS_HASH_ANNOTATION,
            wk::EC2NODECLASS_HASH_VERSION_ANNOTATION,
        ] {
            annotations.insert(
                key.into(),
                class.metadata.annotations.as_ref().unwrap()[key].clone(),
            );
        }
        claim
    }

    fn instance() -> Instance {
        Instance {
            id: "i-1".into(),
            instance_type: "m5.large".into(),
            zone: "us-west-2a".into(),
            capacity_type: "on-demand".into(),
            image_id: Some("ami-new".into()),
            state: "running".into(),
            launch_time: None,
            subnet_id: Some("subnet-a".into()),
            security_group_ids: vec!["sg-2".into(), "sg-1".into()],
            tags: BTreeMap::new(),
            capacity_reservation_id: None,
        }
    }

    #[test]
    fn a_node_launched_from_the_current_class_has_not_drifted() {
        let class = node_class();
        assert_eq!(drift_reason(&node_claim(&class), &class, &instance()), None);
    }

    #[test]
    fn changing_a_static_field_drifts_with_node_class_drift() {
        let class = node_class();
        let claim = node_claim(&class);
        let mut changed = class.clone();
        changed.spec.kubelet = Some(KubeletConfiguration {
            max_pods: Some(110),
            ..Default::default()
        });
        stamp(&mut changed);
        assert_eq!(
            drift_reason(&claim, &changed, &instance()),
            Some(NODE_CLASS_DRIFT)
        );
        // user data too
        let mut changed = class.clone();
        changed.spec.user_data = Some("echo hi".into());
        stamp(&mut changed);
        assert_eq!(
            drift_reason(&claim, &changed, &instance()),
            Some(NODE_CLASS_DRIFT)
        );
    }

    #[test]
    fn the_hash_ignores_selectors_order_and_zero_values() {
        let class = node_class();
        let hash = node_class_hash(&class);
        assert_eq!(hash, node_class_hash(&class), "deterministic");
        let mut selectors = class.clone();
        selectors.spec.subnet_selector_terms = vec![SubnetSelectorTerm {
            id: Some("subnet-z".into()),
            ..Default::default()
        }];
        selectors.spec.ami_family = Some("AL2023".into());
        selectors.spec.ip_prefix_count = Some(2);
        assert_eq!(node_class_hash(&selectors), hash);
        let mut empty_tags = class.clone();
        empty_tags.spec.tags.clear();
        assert_ne!(node_class_hash(&empty_tags), hash);
        let mut zero = empty_tags.clone();
        zero.spec.user_data = Some(String::new());
        assert_eq!(node_class_hash(&zero), node_class_hash(&empty_tags));
        // the family resolved from the alias is hashed
        let mut bottlerocket = class.clone();
        bottlerocket.spec.ami_selector_terms[0].alias = Some("bottlerocket@latest".into());
        assert_ne!(node_class_hash(&bottlerocket), hash);
        assert!(hash.parse::<u64>().is_ok(), "{hash}");
    }

    #[test]
    fn different_hash_versions_never_drift() {
        let class = node_class();
        let mut claim = node_claim(&class);
        let annotations = claim.metadata.annotations.as_mut().unwrap();
        annotations.insert(wk::EC2NODECLASS_HASH_ANNOTATION.into(), "123".into());
        annotations.insert(wk::EC2NODECLASS_HASH_VERSION_ANNOTATION.into(), "v5".into());
        assert_eq!(drift_reason(&claim, &class, &instance()), None);
        let annotations = claim.metadata.annotations.as_mut().unwrap();
        annotations.remove(wk::EC2NODECLASS_HASH_VERSION_ANNOTATION);
        assert_eq!(drift_reason(&claim, &class, &instance()), None);
        let annotations = claim.metadata.annotations.as_mut().unwrap();
        annotations.insert(
            wk::EC2NODECLASS_HASH_VERSION_ANNOTATION.into(),
            HASH_VERSION.into(),
        );
        assert_eq!(
            drift_reason(&claim, &class, &instance()),
            Some(NODE_CLASS_DRIFT)
        );
    }

    #[test]
    fn an_image_no_longer_resolved_drifts_with_ami_drift() {
        let mut class = node_class();
        class.status.as_mut().unwrap().amis[0].id = "ami-newer".into();
        assert_eq!(
            drift_reason(&node_claim(&class), &class, &instance()),
            Some(AMI_DRIFT)
        );
    }

    #[test]
    fn changed_security_groups_drift_with_security_group_drift() {
        let class = node_class();
        let claim = node_claim(&class);
        let mut fewer = instance();
        fewer.security_group_ids.pop();
        assert_eq!(
            drift_reason(&claim, &class, &fewer),
            Some(SECURITY_GROUP_DRIFT)
        );
        let mut more = instance();
        more.security_group_ids.push("sg-3".into());
        assert_eq!(
            drift_reason(&claim, &class, &more),
            Some(SECURITY_GROUP_DRIFT)
        );
    }

    #[test]
    fn a_subnet_no_longer_selected_drifts_with_subnet_drift() {
        let class = node_class();
        let mut moved = instance();
        moved.subnet_id = Some("subnet-b".into());
        assert_eq!(
            drift_reason(&node_claim(&class), &class, &moved),
            Some(SUBNET_DRIFT)
        );
    }

    #[test]
    fn an_unresolved_status_is_not_drift() {
        let mut class = node_class();
        class.status = None;
        let mut moved = instance();
        moved.subnet_id = Some("subnet-b".into());
        assert_eq!(
            drift_reason(&node_claim(&node_class()), &class, &moved),
            None
        );
    }

    #[test]
    fn a_reserved_instance_whose_reservation_left_the_status_drifts() {
        let mut class = node_class();
        let mut reserved = instance();
        reserved.capacity_type = wk::CAPACITY_TYPE_RESERVED.into();
        reserved.capacity_reservation_id = Some("cr-1".into());
        let claim = node_claim(&class);
        // Not resolved yet (no CapacityReservationsReady): no drift.
        assert_eq!(drift_reason(&claim, &class, &reserved), None);
        let status = class.status.as_mut().unwrap();
        status.set_condition(
            CONDITION_CAPACITY_RESERVATIONS_READY,
            karpenter_api::v1::CONDITION_TRUE,
            CONDITION_CAPACITY_RESERVATIONS_READY,
            "",
            "2026-01-01T00:00:00Z",
            None,
        );
        status.capacity_reservations = vec![karpenter_api::v1::CapacityReservationStatus {
            id: "cr-1".into(),
            ..Default::default()
        }];
        assert_eq!(drift_reason(&claim, &class, &reserved), None);
        class.status.as_mut().unwrap().capacity_reservations[0].id = "cr-2".into();
        assert_eq!(
            drift_reason(&claim, &class, &reserved),
            Some(CAPACITY_RESERVATION_DRIFT)
        );
        // An on-demand instance has no reservation to lose.
        assert_eq!(drift_reason(&claim, &class, &instance()), None);
    }
}
