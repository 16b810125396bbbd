//! Pure parts of the EC2NodeClass controller: the instance-profile, validation and `Ready`
//! conditions (no I/O, unit-tested). The NodeClass hash lives in [`crate::drift`].

use karpenter_api::v1::{
    CONDITION_FALSE, CONDITION_READY, CONDITION_TRUE, ConditionsExt, EC2NodeClass,
    EC2NodeClassStatus,
};

use crate::instance::is_restricted_tag;
use crate::reservations::CONDITION_CAPACITY_RESERVATIONS_READY;
use crate::resolve::{
    CONDITION_AMIS_READY, CONDITION_SECURITY_GROUPS_READY, CONDITION_SUBNETS_READY,
};

pub const CONDITION_INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
pub const CONDITION_VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
pub const REASON_INSTANCE_PROFILE_NOT_FOUND: &str = "InstanceProfileNotFound";
pub const REASON_INSTANCE_PROFILE_FAILED: &str = "InstanceProfileReconcileFailed";
pub const REASON_TAG_VALIDATION_FAILED: &str = "TagValidationFailed";
pub const REASON_CLUSTER_CIDR_RESOLUTION_FAILED: &str = "ClusterCIDRResolutionFailed";
pub const REASON_NOT_READY: &str = "NotReady";

/// The conditions `Ready` is the conjunction of, plus `CapacityReservationsReady` with the
/// ReservedCapacity gate ([`ready_dependencies`]; placement groups are not modelled yet).
pub const READY_DEPENDENCIES: [&str; 5] = [
    CONDITION_AMIS_READY,
    CONDITION_SUBNETS_READY,
    CONDITION_SECURITY_GROUPS_READY,
    CONDITION_INSTANCE_PROFILE_READY,
    CONDITION_VALIDATION_SUCCEEDED,
];

/// The conditions `Ready` needs: [`READY_DEPENDENCIES`], and `CapacityReservationsReady` when
/// the ReservedCapacity gate is on.
pub fn ready_dependencies(reserved_capacity: bool) -> Vec<&'static str> {
    let mut dependencies = READY_DEPENDENCIES.to_vec();
    if reserved_capacity {
        dependencies.push(CONDITION_CAPACITY_RESERVATIONS_READY);
    }
    dependencies
}

/// `ValidationSucceeded`: `spec.tags` must not use Karpenter's own tag keys, and AL2023 needs the
/// cluster's service CIDR for nodeadm. (Upstream's dry-run CreateFleet/RunInstances checks are
/// not made.) `None` = valid, else (reason, message).
pub fn validate(
    node_class: &EC2NodeClass,
    service_cidr: Option<&str>,
) -> Option<(&'static str, String)> {
    let restricted: Vec<&str> = node_class
        .spec
        .tags
        .keys()
        .map(String::as_str)
        .filter(|k| is_restricted_tag(k))
        .collect();
    if !restricted.is_empty() {
        return Some((
            REASON_TAG_VALIDATION_FAILED,
            format!(
                "spec.tags uses keys Karpenter sets itself: {}",
                restricted.join(", ")
            ),
        ));
    }
    if node_class.ami_family() == Some("AL2023") && service_cidr.is_none() {
        return Some((
            REASON_CLUSTER_CIDR_RESOLUTION_FAILED,
            "the cluster's service CIDR is unknown (eks:DescribeCluster gave none); AL2023 nodes need it"
                .to_string(),
        ));
    }
    None
}

/// Sets `Ready` from [`ready_dependencies`]: `True` when all are, else `False` naming each one
/// that is not, with its message (`SubnetsReady=False: no subnet matches tags ...`).
pub fn set_ready(
    status: &mut EC2NodeClassStatus,
    now_rfc3339: &str,
    generation: Option<i64>,
    reserved_capacity: bool,
) {
    let unready: Vec<String> = ready_dependencies(reserved_capacity)
        .iter()
        .filter(|type_| !status.is_condition_true(type_))
        .map(|type_| match status.condition(type_) {
            Some(c) => match c.message.as_deref().filter(|m| !m.is_empty()) {
                Some(message) => format!("{type_}={}: {message}", c.status),
                None => format!("{type_}={}", c.status),
            },
            None => format!("{type_}=Unknown"),
        })
        .collect();
    if unready.is_empty() {
        status.set_condition(
            CONDITION_READY,
            CONDITION_TRUE,
            CONDITION_READY,
            "",
            now_rfc3339,
            generation,
        );
    } else {
        status.set_condition(
            CONDITION_READY,
            CONDITION_FALSE,
            REASON_NOT_READY,
            &unready.join("; "),
            now_rfc3339,
            generation,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use karpenter_api::v1::{AmiSelectorTerm, EC2NodeClassSpec};

    use super::*;

    const NOW: &str = "2026-01-01T00:00:00Z";

    fn al2023() -> EC2NodeClass {
        EC2NodeClass::new(
            "default",
            EC2NodeClassSpec {
                ami_selector_terms: vec![AmiSelectorTerm {
                    alias: Some("al2023@latest".into()),
                    ..Default::default()
                }],
                role: Some("KarpenterNodeRole-c".into()),
                ..Default::default()
            },
        )
    }

    #[test]
    fn restricted_tags_and_a_missing_cidr_fail_validation() {
        let mut nc = al2023();
        assert_eq!(validate(&nc, Some("10.100.0.0/16")), None);
        let (reason, message) = validate(&nc, None).unwrap();
        assert_eq!(reason, REASON_CLUSTER_CIDR_RESOLUTION_FAILED);
        assert!(message.contains("service CIDR"), "{message}");
        nc.spec.tags = BTreeMap::from([("karpenter.sh/nodepool".to_string(), "x".to_string())]);
        let (reason, message) = validate(&nc, Some("10.100.0.0/16")).unwrap();
        assert_eq!(reason, REASON_TAG_VALIDATION_FAILED);
        assert!(message.contains("karpenter.sh/nodepool"), "{message}");
    }

    #[test]
    fn ready_names_every_condition_that_is_not() {
        let mut status = EC2NodeClassStatus::default();
        for type_ in READY_DEPENDENCIES {
            status.set_condition(type_, CONDITION_TRUE, type_, "", NOW, Some(2));
        }
        set_ready(&mut status, NOW, Some(2), false);
        let ready = status.condition(CONDITION_READY).unwrap();
        assert_eq!(ready.status, CONDITION_TRUE);
        assert_eq!(ready.observed_generation, Some(2));
        // With the ReservedCapacity gate, capacity reservations must be resolved too.
        set_ready(&mut status, NOW, Some(2), true);
        let ready = status.condition(CONDITION_READY).unwrap();
        assert_eq!(ready.status, CONDITION_FALSE);
        assert_eq!(
            ready.message.as_deref(),
            Some("CapacityReservationsReady=Unknown")
        );
        status.set_condition(
            CONDITION_CAPACITY_RESERVATIONS_READY,
            CONDITION_TRUE,
            CONDITION_CAPACITY_RESERVATIONS_READY,
            "",
            NOW,
            Some(2),
        );
        set_ready(&mut status, NOW, Some(2), true);
        assert!(status.is_condition_true(CONDITION_READY));

        status.set_condition(
            CONDITION_SUBNETS_READY,
            CONDITION_FALSE,
            "SubnetsNotFound",
            "no subnet matches tags karpenter.sh/discovery=my-cluster",
            NOW,
            Some(2),
        );
        status
            .conditions
            .retain(|c| c.type_ != CONDITION_VALIDATION_SUCCEEDED);
        set_ready(&mut status, NOW, Some(2), false);
        let ready = status.condition(CONDITION_READY).unwrap();
        assert_eq!(ready.status, CONDITION_FALSE);
        assert_eq!(
            ready.message.as_deref(),
            Some(
                "SubnetsReady=False: no subnet matches tags karpenter.sh/discovery=my-cluster; \
                 ValidationSucceeded=Unknown"
            )
        );
    }
}
