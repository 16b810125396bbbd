//! `AwsCloudProvider`: the `CloudProvider` the controllers drive (reference §4.1). `create` turns a
//! NodeClaim into one EC2 instance — found again by its NodeClaim tag when it already exists —
//! through launch templates and one CreateFleet; `get`/`list`/`delete` work on provider IDs and
//! tags.
//!
//! Two inputs come from outside: the EC2NodeClass objects ([`NodeClassSource`], the controller's
//! cache) and the instance types of a NodeClass ([`InstanceTypeSource`], built from EC2's
//! instance-type data). Without an instance-type source `create` and `instance_types` fail with
//! a clear error.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use karpenter_api::v1::{ConditionsExt, EC2NodeClass, NodeClaim, NodePool};
use karpenter_api::well_known as wk;
use karpenter_core::clock::Clock;
use karpenter_core::cloud_provider::{
    CloudError, CloudProvider, DriftReason, NodeClassKind, RepairPolicy, parse_claim,
};
use karpenter_core::instance_type::InstanceType;

use crate::fleet::{self, FleetPlan, PlanError, PlanInput, TemplateGroup};
use crate::instance::{self, Instance, LaunchError};
use crate::launch_template::{
    KnownTemplates, LaunchTemplateOptions, default_block_devices, encode_user_data,
};
use crate::reservations::{self, RESERVATION_TYPE_CAPACITY_BLOCK, ReservationAvailability};
use crate::unavailable::UnavailableOfferings;
use crate::userdata::{self, AmiFamily, BootstrapOptions};
use crate::{AwsClients, Error};

mod hydrate;
mod setup;
pub use hydrate::{INSTANCE_PROFILE_ANNOTATION, hydrate, node_claim_of, node_class_annotations};
pub use setup::{
    AwsProvider, Ec2InstanceTypes, EksCluster, StartError, StartOptions, ca_bundle_from_der,
    minor_version, start,
};

pub const PROVIDER_NAME: &str = "aws";

/// The cluster the nodes join.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterInfo {
    pub name: String,
    pub endpoint: String,
    /// Base64 PEM of the cluster CA.
    pub ca_bundle: Option<String>,
    /// Service CIDR (AL2023's nodeadm needs it).
    pub service_cidr: Option<String>,
    /// The `kube-dns` Service IP, the kubelet's `clusterDNS` unless the NodeClass sets one.
    pub dns_ip: Option<String>,
}

/// Where the provider reads EC2NodeClasses from.
#[async_trait]
pub trait NodeClassSource: Send + Sync {
    async fn node_class(&self, name: &str) -> Result<Option<EC2NodeClass>, CloudError>;
}

/// Where the provider gets the instance types (with offerings and prices) of a NodeClass.
#[async_trait]
pub trait InstanceTypeSource: Send + Sync {
    async fn instance_types(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError>;
}

pub struct AwsCloudProvider {
    clients: AwsClients,
    cluster: ClusterInfo,
    node_classes: Arc<dyn NodeClassSource>,
    instance_types: Option<Arc<dyn InstanceTypeSource>>,
    unavailable: UnavailableOfferings,
    templates: KnownTemplates,
    /// Room left in each capacity reservation (the EC2NodeClass controller syncs it).
    reservations: ReservationAvailability,
    /// The `ReservedCapacity` feature gate.
    reserved_capacity: bool,
}

/// Maps provider errors onto the kinds the controllers act on.
fn cloud_error(err: Error) -> CloudError {
    CloudError::other_from(err.to_string(), err)
}

impl AwsCloudProvider {
    pub fn new(
        clients: AwsClients,
        cluster: ClusterInfo,
        node_classes: Arc<dyn NodeClassSource>,
        instance_types: Option<Arc<dyn InstanceTypeSource>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            clients,
            cluster,
            node_classes,
            instance_types,
            unavailable: UnavailableOfferings::new(clock),
            templates: KnownTemplates::default(),
            reservations: ReservationAvailability::default(),
            reserved_capacity: true,
        }
    }

    /// Shares `availability` with the EC2NodeClass controller that syncs it; `enabled` is the
    /// `ReservedCapacity` feature gate (off: no reserved offerings, templates without a
    /// capacity reservation preference).
    pub fn with_reservations(
        mut self,
        availability: ReservationAvailability,
        enabled: bool,
    ) -> Self {
        self.reservations = availability;
        self.reserved_capacity = enabled;
        self
    }

    /// Room left in each capacity reservation, as the provider counts it.
    pub fn reservation_availability(&self) -> &ReservationAvailability {
        &self.reservations
    }

    /// The offerings marked unavailable after capacity errors (shared with interruption handling).
    pub fn unavailable_offerings(&self) -> &UnavailableOfferings {
        &self.unavailable
    }

    pub fn clients(&self) -> &AwsClients {
        &self.clients
    }

    async fn node_class_of(&self, node_claim: &NodeClaim) -> Result<EC2NodeClass, CloudError> {
        let name = &node_claim.spec.node_class_ref.name;
        self.node_classes
            .node_class(name)
            .await?
            .ok_or_else(|| CloudError::NodeClassNotReady(format!("EC2NodeClass {name} not found")))
    }

    async fn types_of(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        let Some(source) = &self.instance_types else {
            return Err(CloudError::other(
                "the aws provider has no instance-type source yet",
            ));
        };
        let types = source.instance_types(node_class).await?;
        if !self.reserved_capacity {
            return Ok(types);
        }
        let reservations = node_class
            .status
            .as_ref()
            .map(|s| s.capacity_reservations.as_slice())
            .unwrap_or_default();
        Ok(reservations::with_reserved_offerings(
            types,
            reservations,
            &self.reservations,
        ))
    }

    /// The launch for a NodeClaim that has no instance yet.
    async fn launch(
        &self,
        node_claim: &NodeClaim,
        name: &str,
        node_class: &EC2NodeClass,
    ) -> Result<(Instance, Option<Arc<InstanceType>>), CloudError> {
        let class_name = node_class.metadata.name.clone().unwrap_or_default();
        let not_ready = |why: String| {
            CloudError::NodeClassNotReady(format!("EC2NodeClass {class_name}: {why}"))
        };
        if !node_class.is_ready() {
            let why = node_class
                .status
                .as_ref()
                .and_then(|s| s.condition(karpenter_api::v1::CONDITION_READY))
                .and_then(|c| c.message.clone())
                .filter(|m| !m.is_empty())
                .map_or_else(|| "not Ready".to_string(), |m| format!("not Ready: {m}"));
            return Err(not_ready(why));
        }
        // A status written for an older generation may not match the spec (upstream refuses too).
        let observed = node_class
            .status
            .as_ref()
            .and_then(|s| s.condition(karpenter_api::v1::CONDITION_READY))
            .and_then(|c| c.observed_generation);
        if let (Some(observed), Some(generation)) = (observed, node_class.metadata.generation)
            && observed != generation
        {
            return Err(not_ready(format!(
                "status is for generation {observed}, the spec is at {generation}"
            )));
        }
        let status = node_class.status.clone().unwrap_or_default();
        if status.subnets.is_empty() || status.security_groups.is_empty() || status.amis.is_empty()
        {
            return Err(not_ready(
                "no resolved subnets, security groups or AMIs".to_string(),
            ));
        }
        let family = node_class
            .ami_family()
            .and_then(AmiFamily::parse)
            .ok_or_else(|| not_ready("no AMI family".to_string()))?;
        let node_pool = node_claim.nodepool_name().unwrap_or_default().to_string();
        let tags = instance::launch_tags(
            &self.cluster.name,
            &node_pool,
            &class_name,
            &node_class.spec.tags,
        )
        .map_err(|restricted| not_ready(restricted.to_string()))?;
        let types = self.types_of(node_class).await?;
        let (requirements, requests) = parse_claim(node_claim)?;
        let launch_order = karpenter_core::node_overlay::launch_order(node_claim);
        let plan = fleet::plan(&PlanInput {
            instance_types: &types,
            requirements: &requirements,
            requests: &requests,
            subnets: &status.subnets,
            amis: &status.amis,
            max_pods: node_class.spec.kubelet.as_ref().and_then(|k| k.max_pods),
            unavailable: &self.unavailable,
            reservations: &status.capacity_reservations,
            launch_order: launch_order.as_deref(),
        })
        .map_err(|e| match e {
            PlanError::NoAmi => not_ready(e.to_string()),
            PlanError::NoInstanceType | PlanError::NoOffering => {
                CloudError::InsufficientCapacity(e.to_string())
            }
        })?;
        let instance_tags = instance::instance_tags(&tags, name);
        // One retry: a template deleted behind our back is recreated once.
        let mut attempt = 0;
        let (instance, errors) = loop {
            let templates = self
                .ensure_templates(node_claim, node_class, family, &plan, &tags)
                .await?;
            match self
                .clients
                .create_fleet(
                    &plan,
                    &templates,
                    &instance_tags,
                    node_class.spec.context.as_deref(),
                )
                .await
            {
                Ok(done) => break done,
                Err(LaunchError::NoInstance { errors }) => {
                    self.mark_unavailable(&plan, &errors);
                    return Err(CloudError::InsufficientCapacity(fleet::describe_errors(
                        &errors,
                    )));
                }
                Err(LaunchError::Api(e))
                    if attempt == 0
                        && e.code()
                            .is_some_and(|c| c.starts_with("InvalidLaunchTemplateName")) =>
                {
                    self.templates.forget_all();
                    attempt += 1;
                }
                Err(LaunchError::Api(e)) => return Err(cloud_error(e)),
            }
        };
        self.mark_unavailable(&plan, &errors);
        if let Some(id) = &instance.capacity_reservation_id {
            self.reservations.mark_launched(id);
        }
        let instance_type = types
            .iter()
            .find(|t| t.name == instance.instance_type)
            .cloned();
        tracing::info!(
            node_claim = name,
            instance = %instance.id,
            instance_type = %instance.instance_type,
            zone = %instance.zone,
            capacity_type = %instance.capacity_type,
            "launched instance"
        );
        Ok((instance, instance_type))
    }

    /// Capacity errors make offerings unavailable for a while; for a reserved launch they say
    /// the reservation is full instead (upstream marks the reservation, not the offering).
    fn mark_unavailable(&self, plan: &FleetPlan, errors: &[fleet::FleetError]) {
        if plan.capacity_type == wk::CAPACITY_TYPE_RESERVED {
            for id in fleet::full_reservations(plan, errors) {
                tracing::info!(reservation = %id, "capacity reservation is full");
                self.reservations.mark_unavailable(&id);
            }
            return;
        }
        for key in fleet::unavailable_offerings(&plan.capacity_type, errors) {
            self.unavailable.mark(key);
        }
    }

    /// One launch template per (AMI, max pods) group of the plan.
    async fn ensure_templates(
        &self,
        node_claim: &NodeClaim,
        node_class: &EC2NodeClass,
        family: AmiFamily,
        plan: &FleetPlan,
        tags: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<TemplateGroup, String>, CloudError> {
        let mut groups: Vec<TemplateGroup> = plan.overrides.iter().map(|o| o.group()).collect();
        groups.sort();
        groups.dedup();
        let mut names = BTreeMap::new();
        for group in groups {
            let options =
                self.template_options(node_claim, node_class, family, plan, &group, tags)?;
            let name = self
                .clients
                .ensure_launch_template(&options, &self.templates)
                .await
                .map_err(cloud_error)?;
            names.insert(group, name);
        }
        Ok(names)
    }

    #[allow(clippy::too_many_arguments)]
    fn template_options(
        &self,
        node_claim: &NodeClaim,
        node_class: &EC2NodeClass,
        family: AmiFamily,
        plan: &FleetPlan,
        (image_id, max_pods, reservation_id): &TemplateGroup,
        tags: &BTreeMap<String, String>,
    ) -> Result<LaunchTemplateOptions, CloudError> {
        let max_pods = *max_pods;
        let status = node_class.status.clone().unwrap_or_default();
        let mut kubelet = node_class.spec.kubelet.clone().unwrap_or_default();
        kubelet.max_pods = Some(i32::try_from(max_pods).unwrap_or(i32::MAX));
        if kubelet.cluster_dns.is_empty() {
            kubelet.cluster_dns.extend(self.cluster.dns_ip.clone());
        }
        let mut labels = node_claim.metadata.labels.clone().unwrap_or_default();
        labels.insert(
            wk::CAPACITY_TYPE_LABEL.to_string(),
            plan.capacity_type.clone(),
        );
        if let Some(id) = reservation_id {
            labels.extend(reservation_labels(id, &status.capacity_reservations));
        }
        let mut taints = node_claim.spec.taints.clone();
        taints.extend(node_claim.spec.startup_taints.iter().cloned());
        let bootstrap = BootstrapOptions {
            cluster_name: self.cluster.name.clone(),
            cluster_endpoint: self.cluster.endpoint.clone(),
            ca_bundle: self.cluster.ca_bundle.clone(),
            cluster_cidr: self.cluster.service_cidr.clone(),
            kubelet,
            taints,
            labels,
            custom_user_data: node_class.spec.user_data.clone(),
            instance_store_policy: node_class.spec.instance_store_policy.clone(),
        };
        let user_data = userdata::render(family, &bootstrap).map_err(|e| {
            CloudError::NodeClassNotReady(format!(
                "EC2NodeClass {}: {e}",
                node_class.metadata.name.as_deref().unwrap_or_default()
            ))
        })?;
        let block_device_mappings = if node_class.spec.block_device_mappings.is_empty() {
            default_block_devices(family)
        } else {
            node_class.spec.block_device_mappings.clone()
        };
        Ok(LaunchTemplateOptions {
            image_id: image_id.to_string(),
            user_data: encode_user_data(&user_data),
            security_group_ids: status
                .security_groups
                .iter()
                .map(|g| g.id.clone())
                .collect(),
            instance_profile: status
                .instance_profile
                .clone()
                .or_else(|| node_class.spec.instance_profile.clone()),
            metadata_options: node_class.metadata_options(),
            block_device_mappings,
            detailed_monitoring: node_class.spec.detailed_monitoring.unwrap_or(false),
            associate_public_ip_address: node_class.spec.associate_public_ip_address,
            capacity_type: plan.capacity_type.clone(),
            capacity_reservation_preference: self.reserved_capacity.then(|| {
                if reservation_id.is_some() {
                    "capacity-reservations-only".to_string()
                } else {
                    "none".to_string()
                }
            }),
            capacity_reservation_id: reservation_id.clone(),
            market_type: (reservation_id.is_some()
                && plan.reservation_type.as_deref() == Some(RESERVATION_TYPE_CAPACITY_BLOCK))
            .then(|| RESERVATION_TYPE_CAPACITY_BLOCK.to_string()),
            tags: tags.clone(),
        })
    }
}

/// The labels of a node in capacity reservation `id` (reference §3.4): its ID, and its type and
/// interruptibility when the NodeClass still lists it.
pub fn reservation_labels(
    id: &str,
    reservations: &[karpenter_api::v1::CapacityReservationStatus],
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([(
        wk::AWS_CAPACITY_RESERVATION_ID_LABEL.to_string(),
        id.to_string(),
    )]);
    if let Some(r) = reservations::reservation(reservations, id) {
        labels.insert(
            wk::AWS_CAPACITY_RESERVATION_TYPE_LABEL.to_string(),
            fleet::reservation_type_of(r),
        );
        labels.insert(
            wk::AWS_CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL.to_string(),
            r.interruptible.unwrap_or(false).to_string(),
        );
    }
    labels
}

fn add_reservation_labels(
    node_claim: &mut NodeClaim,
    instance: &Instance,
    node_class: &EC2NodeClass,
) {
    let Some(id) = &instance.capacity_reservation_id else {
        return;
    };
    let reservations = node_class
        .status
        .as_ref()
        .map(|s| s.capacity_reservations.as_slice())
        .unwrap_or_default();
    node_claim
        .metadata
        .labels
        .get_or_insert_default()
        .extend(reservation_labels(id, reservations));
}

#[async_trait]
impl CloudProvider for AwsCloudProvider {
    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
        let name = node_claim
            .metadata
            .name
            .clone()
            .ok_or_else(|| CloudError::Create {
                reason: "InvalidNodeClaim".to_string(),
                message: "the NodeClaim has no name".to_string(),
            })?;
        let node_class = self.node_class_of(node_claim).await?;
        let zone_id = |zone: &str| {
            node_class
                .status
                .as_ref()
                .and_then(|s| s.subnets.iter().find(|s| s.zone == zone))
                .and_then(|s| s.zone_id.clone())
        };
        // Idempotent: an instance tagged with this NodeClaim (launched before a crash, or by a
        // create whose answer was lost) is the NodeClaim's instance.
        if let Some(existing) = self
            .clients
            .instance_for_node_claim(&self.cluster.name, &name)
            .await
            .map_err(cloud_error)?
        {
            tracing::info!(node_claim = %name, instance = %existing.id, "found the NodeClaim's instance; not launching another");
            let instance_type = match self.types_of(&node_class).await {
                Ok(types) => types.into_iter().find(|t| t.name == existing.instance_type),
                Err(_) => None,
            };
            let zone_id = zone_id(&existing.zone);
            let mut found = hydrate(
                node_claim.clone(),
                &existing,
                instance_type.as_deref(),
                zone_id.as_deref(),
            );
            add_reservation_labels(&mut found, &existing, &node_class);
            return Ok(found);
        }
        let (instance, instance_type) = self.launch(node_claim, &name, &node_class).await?;
        let zone_id = zone_id(&instance.zone);
        let mut launched = hydrate(
            node_claim.clone(),
            &instance,
            instance_type.as_deref(),
            zone_id.as_deref(),
        );
        add_reservation_labels(&mut launched, &instance, &node_class);
        launched
            .metadata
            .annotations
            .get_or_insert_default()
            .extend(node_class_annotations(&node_class));
        Ok(launched)
    }

    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudError> {
        let provider_id = match node_claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
        {
            Some(id) => id,
            // No provider ID: the status write may have been lost after the launch; the tag
            // still finds the instance.
            None => {
                let name = node_claim.metadata.name.clone().unwrap_or_default();
                match self
                    .clients
                    .instance_for_node_claim(&self.cluster.name, &name)
                    .await
                    .map_err(cloud_error)?
                {
                    Some(instance) => instance.provider_id(),
                    None => {
                        return Err(CloudError::NodeClaimNotFound(format!(
                            "no instance for NodeClaim {name}"
                        )));
                    }
                }
            }
        };
        match self
            .clients
            .terminate_instance(&self.cluster.name, &provider_id)
            .await
        {
            Ok(Some(termination)) => {
                // Its reservation gets the slot back (EC2's next answer confirms it).
                if termination.requested
                    && let Some(id) = &termination.instance.capacity_reservation_id
                {
                    self.reservations.mark_terminated(id);
                }
                Ok(())
            }
            Ok(None) => Err(CloudError::NodeClaimNotFound(format!(
                "instance {provider_id} is terminated"
            ))),
            Err(e) => Err(cloud_error(e)),
        }
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError> {
        match self.clients.instance(provider_id).await {
            Ok(Some(instance)) => Ok(node_claim_of(&instance)),
            Ok(None) | Err(Error::NotFound { .. }) => Err(CloudError::NodeClaimNotFound(format!(
                "no instance with provider ID {provider_id}"
            ))),
            Err(e) => Err(cloud_error(e)),
        }
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudError> {
        Ok(self
            .clients
            .cluster_instances(&self.cluster.name)
            .await
            .map_err(cloud_error)?
            .iter()
            .map(node_claim_of)
            .collect())
    }

    async fn instance_types(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        // The caller's copy of the NodeClass (its cluster state) when it has one; else ask ours.
        let looked_up;
        let node_class = match node_class {
            Some(node_class) => node_class,
            None => {
                let name = &node_pool.spec.template.spec.node_class_ref.name;
                looked_up = self.node_classes.node_class(name).await?.ok_or_else(|| {
                    CloudError::NodeClassNotReady(format!("EC2NodeClass {name} not found"))
                })?;
                &looked_up
            }
        };
        let types = self.types_of(node_class).await?;
        // Offerings that just failed with insufficient capacity are unavailable to the scheduler
        // too, so it plans around them.
        Ok(types
            .into_iter()
            .map(|it| {
                let marked = it.offerings.iter().any(|o| {
                    self.unavailable
                        .is_unavailable(&crate::unavailable::OfferingKey::new(
                            &o.capacity_type,
                            &it.name,
                            &o.zone,
                        ))
                });
                if !marked {
                    return it;
                }
                let mut copy = (*it).clone();
                for o in &mut copy.offerings {
                    if self
                        .unavailable
                        .is_unavailable(&crate::unavailable::OfferingKey::new(
                            &o.capacity_type,
                            &copy.name,
                            &o.zone,
                        ))
                    {
                        o.available = false;
                    }
                }
                Arc::new(copy)
            })
            .collect())
    }

    async fn is_drifted(&self, node_claim: &NodeClaim) -> Result<Option<DriftReason>, CloudError> {
        // Not launched yet: nothing to compare.
        let Some(provider_id) = node_claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
        else {
            return Ok(None);
        };
        let node_class = self.node_class_of(node_claim).await?;
        let instance = match self.clients.instance(provider_id).await {
            Ok(Some(instance)) => instance,
            Ok(None) | Err(Error::NotFound { .. }) => {
                return Err(CloudError::NodeClaimNotFound(format!(
                    "no instance with provider ID {provider_id}"
                )));
            }
            Err(e) => return Err(cloud_error(e)),
        };
        Ok(crate::drift::drift_reason(node_claim, &node_class, &instance).map(str::to_string))
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        karpenter_core::cloud_provider::node_not_ready_repair_policies()
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        vec![karpenter_core::cloud_provider::ec2_node_class_kind()]
    }
}

#[cfg(test)]
mod tests;
