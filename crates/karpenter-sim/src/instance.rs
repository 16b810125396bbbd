//! The simulated instances themselves: their IDs, names and addresses, and the NodeClaims
//! [`crate::SimCloudProvider`] returns for them (`create`, `get`, `list`).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::v1::NodeSelectorRequirementWithMinValues;
use karpenter_api::well_known as wk;
use karpenter_api::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
use karpenter_core::cloud_provider::{CloudError, node_resources};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::resources::ResourceList;

use crate::launch::LaunchChoice;
use crate::provider::{PROVIDER_NAME, SIM_IMAGE_ID, SimInstance, SimLedger};

pub(crate) fn same_claim(instance: &SimInstance, name: &str, uid: Option<&str>) -> bool {
    match (uid, instance.node_claim_uid.as_deref()) {
        (Some(uid), Some(known)) => uid == known,
        _ => instance.node_claim == name,
    }
}

pub(crate) fn find_by_provider_id<'a>(
    ledger: &'a SimLedger,
    provider_id: &str,
) -> Result<&'a SimInstance, CloudError> {
    let id = provider_id.rsplit('/').next().unwrap_or_default();
    ledger
        .instances
        .get(id)
        .filter(|i| i.provider_id == provider_id)
        .ok_or_else(|| {
            CloudError::NodeClaimNotFound(format!("no instance with provider ID {provider_id}"))
        })
}

/// An instance's ID from its sequence number (`i-` and 17 hex digits, like EC2's).
pub(crate) fn instance_id(seq: u64) -> String {
    format!("i-{seq:017x}")
}

/// The sequence number in an ID [`instance_id`] made.
pub(crate) fn instance_seq(id: &str) -> Option<u64> {
    u64::from_str_radix(id.strip_prefix("i-")?, 16).ok()
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn new_instance(
    region: &str,
    seq: u64,
    node_claim: &NodeClaim,
    name: &str,
    uid: Option<String>,
    choice: &LaunchChoice,
    instance_type: &InstanceType,
    requests: &ResourceList,
    now: Timestamp,
) -> SimInstance {
    let id = instance_id(seq);
    let ip = format!(
        "10.{}.{}.{}",
        (seq >> 16) & 0xff,
        (seq >> 8) & 0xff,
        seq & 0xff
    );
    let node_name = format!("ip-{}.{region}.compute.internal", ip.replace('.', "-"));
    let mut labels = instance_type.labels.clone();
    labels.insert(wk::ZONE_LABEL.to_string(), choice.zone.clone());
    labels.insert(
        wk::CAPACITY_TYPE_LABEL.to_string(),
        choice.capacity_type.clone(),
    );
    let node_class_ref = node_claim.spec.node_class_ref.clone();
    if node_class_ref.kind == "EC2NodeClass" {
        labels.insert(
            wk::AWS_EC2NODECLASS_LABEL.to_string(),
            node_class_ref.name.clone(),
        );
    }
    if let Some(own) = &node_claim.metadata.labels {
        labels.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    SimInstance {
        provider_id: format!("{PROVIDER_NAME}://{region}/{}/{id}", choice.zone),
        id,
        node_name,
        private_ip: ip,
        node_claim: name.to_string(),
        node_claim_uid: uid,
        node_class_ref,
        instance_type: choice.instance_type.clone(),
        zone: choice.zone.clone(),
        capacity_type: choice.capacity_type.clone(),
        price: choice.price,
        image_id: SIM_IMAGE_ID.to_string(),
        launched_at: now,
        labels,
        taints: node_claim.spec.taints.clone(),
        startup_taints: node_claim.spec.startup_taints.clone(),
        capacity: node_resources(&instance_type.capacity, requests),
        allocatable: node_resources(&instance_type.allocatable(), requests),
    }
}

/// The NodeClaim as `create`/`get` return it: labels, provider ID, capacity, allocatable.
pub(crate) fn hydrate(mut node_claim: NodeClaim, instance: &SimInstance) -> NodeClaim {
    node_claim
        .metadata
        .labels
        .get_or_insert_default()
        .extend(instance.labels.clone());
    let status = node_claim
        .status
        .get_or_insert_with(NodeClaimStatus::default);
    status.provider_id = Some(instance.provider_id.clone());
    status.image_id = Some(instance.image_id.clone());
    status.capacity = instance.capacity.to_k8s();
    status.allocatable = instance.allocatable.to_k8s();
    node_claim
}

/// A NodeClaim describing an instance (for `get`/`list`, which have only the instance).
pub(crate) fn node_claim_of(instance: &SimInstance) -> NodeClaim {
    let single = |key: &str, value: &str| NodeSelectorRequirementWithMinValues {
        key: key.to_string(),
        operator: "In".to_string(),
        values: [value].into(),
        min_values: None,
    };
    let mut node_claim = NodeClaim::new(
        &instance.node_claim,
        NodeClaimSpec {
            taints: instance.taints.clone(),
            startup_taints: instance.startup_taints.clone(),
            requirements: vec![
                single(wk::INSTANCE_TYPE_LABEL, &instance.instance_type),
                single(wk::ZONE_LABEL, &instance.zone),
                single(wk::CAPACITY_TYPE_LABEL, &instance.capacity_type),
            ],
            node_class_ref: instance.node_class_ref.clone(),
            ..Default::default()
        },
    );
    node_claim.metadata.uid = instance.node_claim_uid.clone();
    node_claim.metadata.creation_timestamp = Some(Time(instance.launched_at));
    hydrate(node_claim, instance)
}
