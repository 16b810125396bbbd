//! Launch templates (reference §4.4): one per distinct set of launch options — AMI, user data
//! (which carries max pods, labels and taints), security groups, instance profile, block devices,
//! metadata options, capacity type, tags — named `karpenter.k8s.aws/<hash of the options>` so
//! equal options share one template. Created when missing (a concurrent creation's
//! `AlreadyExists` is success); deleted with their EC2NodeClass (`delete_for_node_class`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use aws_sdk_ec2::types::{
    CapacityReservationPreference, CapacityReservationTarget, Filter,
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateCapacityReservationSpecificationRequest,
    LaunchTemplateEbsBlockDeviceRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMarketOptionsRequest, LaunchTemplateInstanceMetadataEndpointState,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceMetadataTagsState,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatesMonitoringRequest,
    MarketType, RequestLaunchTemplateData, ResourceType, Tag, TagSpecification, VolumeType,
};
use base64::Engine as _;
use karpenter_api::v1::{BlockDevice, BlockDeviceMapping, MetadataOptions};
use serde::Serialize;

use crate::instance::{EKS_CLUSTER_NAME_TAG, NODECLASS_TAG};
use crate::userdata::AmiFamily;
use crate::{AwsClients, Error};

/// Prefix of every launch template Karpenter creates.
pub const NAME_PREFIX: &str = "karpenter.k8s.aws/";

/// Everything a launch template holds. Its hash is the template's name.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LaunchTemplateOptions {
    pub image_id: String,
    /// Base64 of the user data.
    pub user_data: String,
    pub security_group_ids: Vec<String>,
    pub instance_profile: Option<String>,
    pub metadata_options: MetadataOptions,
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    pub detailed_monitoring: bool,
    pub associate_public_ip_address: Option<bool>,
    pub capacity_type: String,
    /// `CapacityReservationSpecification` (with the ReservedCapacity gate, reference §4.4):
    /// `capacity-reservations-only` targeting [`Self::capacity_reservation_id`] for a reserved
    /// launch, `none` otherwise so on-demand launches never use an open reservation behind the
    /// controller's back. `None` (gate off): EC2's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_preference: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_id: Option<String>,
    /// `capacity-block` for a launch into a capacity block (its own market type).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub market_type: Option<String>,
    /// Tags of the template itself and of the network interfaces it creates; include the
    /// cluster and EC2NodeClass tags `delete_for_node_class` finds them by.
    pub tags: BTreeMap<String, String>,
}

/// FNV-1a, 64 bits: stable across processes and Rust versions (unlike `DefaultHasher`), so a
/// restarted controller finds the templates it created.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

impl LaunchTemplateOptions {
    /// `karpenter.k8s.aws/<decimal hash>`, upstream's name scheme.
    pub fn name(&self) -> String {
        // Serialising plain structs, strings and sorted maps cannot fail; an empty hash input
        // would still give a valid (if shared) name.
        let canonical = serde_json::to_vec(self).unwrap_or_default();
        format!("{NAME_PREFIX}{}", fnv1a64(&canonical))
    }

    /// Decodes `user_data` (for logs and tests).
    pub fn decoded_user_data(&self) -> Option<String> {
        decode_user_data(&self.user_data)
    }

    fn request_data(&self) -> RequestLaunchTemplateData {
        let metadata = &self.metadata_options;
        let metadata = LaunchTemplateInstanceMetadataOptionsRequest::builder()
            .set_http_endpoint(
                metadata
                    .http_endpoint
                    .as_deref()
                    .map(LaunchTemplateInstanceMetadataEndpointState::from),
            )
            .set_http_protocol_ipv6(
                metadata
                    .http_protocol_ipv6
                    .as_deref()
                    .map(LaunchTemplateInstanceMetadataProtocolIpv6::from),
            )
            .set_http_put_response_hop_limit(
                metadata
                    .http_put_response_hop_limit
                    .and_then(|h| i32::try_from(h).ok()),
            )
            .set_http_tokens(
                metadata
                    .http_tokens
                    .as_deref()
                    .map(LaunchTemplateHttpTokensState::from),
            )
            .instance_metadata_tags(LaunchTemplateInstanceMetadataTagsState::Disabled)
            .build();
        let mut data = RequestLaunchTemplateData::builder()
            .image_id(&self.image_id)
            .user_data(&self.user_data)
            .metadata_options(metadata)
            .monitoring(
                LaunchTemplatesMonitoringRequest::builder()
                    .enabled(self.detailed_monitoring)
                    .build(),
            )
            .set_block_device_mappings(Some(
                self.block_device_mappings
                    .iter()
                    .map(block_device_request)
                    .collect(),
            ))
            .tag_specifications(
                aws_sdk_ec2::types::LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(ResourceType::NetworkInterface)
                    .set_tags(Some(ec2_tags(&self.tags)))
                    .build(),
            );
        if let Some(preference) = &self.capacity_reservation_preference {
            let mut spec = LaunchTemplateCapacityReservationSpecificationRequest::builder()
                .capacity_reservation_preference(CapacityReservationPreference::from(
                    preference.as_str(),
                ));
            if let Some(id) = &self.capacity_reservation_id {
                spec = spec.capacity_reservation_target(
                    CapacityReservationTarget::builder()
                        .capacity_reservation_id(id)
                        .build(),
                );
            }
            data = data.capacity_reservation_specification(spec.build());
        }
        if let Some(market) = &self.market_type {
            data = data.instance_market_options(
                LaunchTemplateInstanceMarketOptionsRequest::builder()
                    .market_type(MarketType::from(market.as_str()))
                    .build(),
            );
        }
        if let Some(profile) = &self.instance_profile {
            data = data.iam_instance_profile(
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(profile)
                    .build(),
            );
        }
        // A network interface is needed only to ask for a public IP; otherwise the groups go on
        // the template, where RunInstances and CreateFleet (and moto) both apply them.
        data = match self.associate_public_ip_address {
            Some(public) => data.network_interfaces(
                LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                    .device_index(0)
                    .associate_public_ip_address(public)
                    .set_groups(Some(self.security_group_ids.clone()))
                    .build(),
            ),
            None => data.set_security_group_ids(Some(self.security_group_ids.clone())),
        };
        data.build()
    }
}

fn block_device_request(mapping: &BlockDeviceMapping) -> LaunchTemplateBlockDeviceMappingRequest {
    let ebs = mapping.ebs.as_ref().map(|ebs| {
        LaunchTemplateEbsBlockDeviceRequest::builder()
            .set_delete_on_termination(ebs.delete_on_termination)
            .set_encrypted(ebs.encrypted)
            .set_iops(ebs.iops.and_then(|i| i32::try_from(i).ok()))
            .set_kms_key_id(ebs.kms_key_id.clone())
            .set_snapshot_id(ebs.snapshot_id.clone())
            .set_throughput(ebs.throughput.and_then(|t| i32::try_from(t).ok()))
            .set_volume_size(ebs.volume_size.as_deref().and_then(volume_size_gib))
            .set_volume_type(ebs.volume_type.as_deref().map(VolumeType::from))
            .build()
    });
    LaunchTemplateBlockDeviceMappingRequest::builder()
        .set_device_name(mapping.device_name.clone())
        .set_ebs(ebs)
        .build()
}

/// A volume size (`20Gi`, `100G`, `1Ti`, `2T`, plain bytes) in GiB, rounded up as EC2 wants.
pub fn volume_size_gib(size: &str) -> Option<i32> {
    const GIB: u128 = 1 << 30;
    let size = size.trim();
    let split = size
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(size.len());
    let (number, unit) = size.split_at(split);
    let number: u128 = number.parse().ok()?;
    let multiplier: u128 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => GIB,
        "Ti" => 1 << 40,
        "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return None,
    };
    let bytes = number.checked_mul(multiplier)?;
    i32::try_from(bytes.div_ceil(GIB)).ok()
}

/// The block devices of a family when the EC2NodeClass names none (reference §2).
pub fn default_block_devices(family: AmiFamily) -> Vec<BlockDeviceMapping> {
    let gp3 = |device: &str, size: &str| BlockDeviceMapping {
        device_name: Some(device.to_string()),
        ebs: Some(BlockDevice {
            encrypted: Some(true),
            volume_type: Some("gp3".to_string()),
            volume_size: Some(size.to_string()),
            ..BlockDevice::default()
        }),
        root_volume: None,
    };
    match family {
        AmiFamily::Al2 | AmiFamily::Al2023 => vec![gp3("/dev/xvda", "20Gi")],
        AmiFamily::Bottlerocket => vec![gp3("/dev/xvda", "4Gi"), gp3("/dev/xvdb", "20Gi")],
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
            vec![gp3("/dev/sda1", "50Gi")]
        }
        AmiFamily::Custom => Vec::new(),
    }
}

pub(crate) fn ec2_tags(tags: &BTreeMap<String, String>) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

pub(crate) fn decode_user_data(encoded: &str) -> Option<String> {
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
}

pub(crate) fn encode_user_data(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Names of templates known to exist, so a launch does not ask EC2 again for each of them.
/// Dropped when a CreateFleet says the template is gone (deleted behind our back).
#[derive(Debug, Default)]
pub struct KnownTemplates(Mutex<BTreeSet<String>>);

impl KnownTemplates {
    fn names(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.names().contains(name)
    }

    pub fn insert(&self, name: String) {
        self.names().insert(name);
    }

    pub fn forget_all(&self) {
        self.names().clear();
    }
}

impl AwsClients {
    /// Creates the template for `options` unless it exists; returns its name.
    pub async fn ensure_launch_template(
        &self,
        options: &LaunchTemplateOptions,
        known: &KnownTemplates,
    ) -> Result<String, Error> {
        let name = options.name();
        if known.contains(&name) {
            return Ok(name);
        }
        let created = self
            .ec2
            .create_launch_template()
            .launch_template_name(&name)
            .launch_template_data(options.request_data())
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::LaunchTemplate)
                    .set_tags(Some(ec2_tags(&options.tags)))
                    .build(),
            )
            .send()
            .await;
        match created {
            Ok(_) => {
                tracing::info!(launch_template = %name, image = %options.image_id, "created launch template")
            }
            Err(e) => {
                let err = Error::from_sdk("CreateLaunchTemplate", e);
                // Another replica or an earlier run created it: same name, same options.
                if err.code() != Some("InvalidLaunchTemplateName.AlreadyExistsException") {
                    return Err(err);
                }
            }
        }
        known.insert(name.clone());
        Ok(name)
    }

    /// Names and IDs of this cluster's templates for `node_class`.
    pub async fn launch_templates_for_node_class(
        &self,
        cluster_name: &str,
        node_class: &str,
    ) -> Result<Vec<(String, String)>, Error> {
        let pages = self
            .ec2
            .describe_launch_templates()
            .filters(
                Filter::builder()
                    .name(format!("tag:{EKS_CLUSTER_NAME_TAG}"))
                    .values(cluster_name)
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name(format!("tag:{NODECLASS_TAG}"))
                    .values(node_class)
                    .build(),
            )
            .max_results(200)
            .into_paginator()
            .send()
            .try_collect()
            .await
            .map_err(|e| Error::from_sdk("DescribeLaunchTemplates", e))?;
        Ok(pages
            .iter()
            .flat_map(|p| p.launch_templates())
            .filter_map(|t| {
                Some((
                    t.launch_template_name()?.to_string(),
                    t.launch_template_id()?.to_string(),
                ))
            })
            .collect())
    }

    /// Deletes every template of `node_class` (the EC2NodeClass finalizer); returns their names.
    /// A template already gone counts as deleted.
    pub async fn delete_launch_templates_for_node_class(
        &self,
        cluster_name: &str,
        node_class: &str,
    ) -> Result<Vec<String>, Error> {
        let mut deleted = Vec::new();
        for (name, id) in self
            .launch_templates_for_node_class(cluster_name, node_class)
            .await?
        {
            match self
                .ec2
                .delete_launch_template()
                .launch_template_id(&id)
                .send()
                .await
            {
                Ok(_) => {}
                Err(e) => {
                    let err = Error::from_sdk("DeleteLaunchTemplate", e);
                    if !err
                        .code()
                        .is_some_and(|c| c.starts_with("InvalidLaunchTemplate"))
                    {
                        return Err(err);
                    }
                }
            }
            tracing::info!(launch_template = %name, node_class, "deleted launch template");
            deleted.push(name);
        }
        Ok(deleted)
    }

    /// The decoded user data of the template's latest version.
    pub async fn launch_template_user_data(&self, name: &str) -> Result<Option<String>, Error> {
        let versions = self
            .ec2
            .describe_launch_template_versions()
            .launch_template_name(name)
            .versions("$Latest")
            .send()
            .await
            .map_err(|e| Error::from_sdk("DescribeLaunchTemplateVersions", e))?;
        Ok(versions
            .launch_template_versions()
            .first()
            .and_then(|v| v.launch_template_data())
            .and_then(|d| d.user_data())
            .and_then(decode_user_data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> LaunchTemplateOptions {
        LaunchTemplateOptions {
            image_id: "ami-123".into(),
            user_data: encode_user_data("#!/bin/bash"),
            security_group_ids: vec!["sg-1".into()],
            instance_profile: Some("profile".into()),
            metadata_options: MetadataOptions::crd_default(),
            block_device_mappings: default_block_devices(AmiFamily::Al2023),
            detailed_monitoring: false,
            associate_public_ip_address: None,
            capacity_type: "spot".into(),
            capacity_reservation_preference: None,
            capacity_reservation_id: None,
            market_type: None,
            tags: BTreeMap::from([(NODECLASS_TAG.to_string(), "default".to_string())]),
        }
    }

    #[test]
    fn reserved_templates_target_their_reservation_and_others_opt_out() {
        let plain = options().request_data();
        assert!(plain.capacity_reservation_specification().is_none());
        assert!(plain.instance_market_options().is_none());

        let mut none = options();
        none.capacity_reservation_preference = Some("none".into());
        let data = none.request_data();
        let spec = data.capacity_reservation_specification().unwrap();
        assert_eq!(
            spec.capacity_reservation_preference(),
            Some(&CapacityReservationPreference::None)
        );
        assert!(spec.capacity_reservation_target().is_none());
        assert_ne!(none.name(), options().name());

        let mut reserved = options();
        reserved.capacity_type = "reserved".into();
        reserved.capacity_reservation_preference = Some("capacity-reservations-only".into());
        reserved.capacity_reservation_id = Some("cr-1".into());
        reserved.market_type = Some("capacity-block".into());
        let data = reserved.request_data();
        let spec = data.capacity_reservation_specification().unwrap();
        assert_eq!(
            spec.capacity_reservation_preference(),
            Some(&CapacityReservationPreference::CapacityReservationsOnly)
        );
        assert_eq!(
            spec.capacity_reservation_target()
                .and_then(|t| t.capacity_reservation_id()),
            Some("cr-1")
        );
        assert_eq!(
            data.instance_market_options().and_then(|m| m.market_type()),
            Some(&MarketType::CapacityBlock)
        );
        let mut other = reserved.clone();
        other.capacity_reservation_id = Some("cr-2".into());
        assert_ne!(
            reserved.name(),
            other.name(),
            "one template per reservation"
        );
    }

    #[test]
    fn equal_options_share_a_name_and_any_change_gives_another() {
        let a = options();
        assert_eq!(a.name(), options().name());
        assert!(a.name().starts_with(NAME_PREFIX));
        assert!(a.name()[NAME_PREFIX.len()..].parse::<u64>().is_ok());
        let mut b = options();
        b.capacity_type = "on-demand".into();
        assert_ne!(a.name(), b.name());
        let mut c = options();
        c.user_data = encode_user_data("#!/bin/bash\n--max-pods=58");
        assert_ne!(a.name(), c.name());
        assert_eq!(a.decoded_user_data().as_deref(), Some("#!/bin/bash"));
    }

    #[test]
    fn the_name_is_stable_across_builds() {
        // Pinned: a change here renames every template and leaks the old ones until their
        // NodeClass is deleted. Change only on purpose.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn volume_sizes_round_up_to_gib() {
        assert_eq!(volume_size_gib("20Gi"), Some(20));
        assert_eq!(volume_size_gib("100G"), Some(94));
        assert_eq!(volume_size_gib("1Ti"), Some(1024));
        assert_eq!(volume_size_gib("1"), Some(1));
        assert_eq!(volume_size_gib("20Xi"), None);
        assert_eq!(
            volume_size_gib("99999999999999999999999999999999999999Ti"),
            None
        );
    }

    #[test]
    fn family_default_block_devices() {
        assert_eq!(default_block_devices(AmiFamily::Bottlerocket).len(), 2);
        assert_eq!(
            default_block_devices(AmiFamily::Windows2022)[0]
                .device_name
                .as_deref(),
            Some("/dev/sda1")
        );
        assert!(default_block_devices(AmiFamily::Custom).is_empty());
    }

    #[test]
    fn request_data_carries_groups_profile_and_metadata() {
        let data = options().request_data();
        assert_eq!(data.security_group_ids(), ["sg-1"]);
        assert!(data.network_interfaces().is_empty());
        assert_eq!(
            data.iam_instance_profile().and_then(|p| p.name()),
            Some("profile")
        );
        let metadata = data.metadata_options().unwrap();
        assert_eq!(
            metadata.http_tokens(),
            Some(&LaunchTemplateHttpTokensState::Required)
        );
        assert_eq!(metadata.http_put_response_hop_limit(), Some(1));
        assert_eq!(
            data.block_device_mappings()[0]
                .ebs()
                .and_then(|e| e.volume_size()),
            Some(20)
        );
        let mut public = options();
        public.associate_public_ip_address = Some(true);
        let data = public.request_data();
        assert!(data.security_group_ids().is_empty());
        assert_eq!(data.network_interfaces()[0].groups(), ["sg-1"]);
    }
}
