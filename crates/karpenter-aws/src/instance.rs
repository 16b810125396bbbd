//! EC2 instances of NodeClaims (reference §4.5, §4.7): the launch tags, CreateFleet, and
//! get/list/delete by provider ID (`aws:///<zone>/<instance-id>`) and tags.
//!
//! Idempotency: every instance is tagged with its NodeClaim's name at launch, and
//! [`AwsClients::instance_for_node_claim`] finds it, so a controller that crashed between
//! CreateFleet and writing the NodeClaim's status finds the instance instead of launching another.
//! Safety: [`AwsClients::terminate_instance`] refuses an instance without this cluster's ownership
//! tag.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::{
    CapacityReservationPreference, DefaultTargetCapacityType, Filter,
    FleetLaunchTemplateConfigRequest, FleetLaunchTemplateOverridesRequest,
    FleetLaunchTemplateSpecificationRequest, FleetOnDemandAllocationStrategy, FleetType,
    InstanceLifecycle, InstanceLifecycleType, OnDemandOptionsRequest, ResourceType,
    SpotAllocationStrategy, SpotOptionsRequest, TagSpecification,
    TargetCapacitySpecificationRequest,
};
use jiff::{SignedDuration, Timestamp};
use karpenter_api::well_known as wk;

use crate::fleet::{FleetError, FleetOverride, FleetPlan, TemplateGroup};
use crate::launch_template::ec2_tags;
use crate::reservations::RESERVATION_TYPE_CAPACITY_BLOCK;
use crate::{AwsClients, Error};

pub const NODECLAIM_TAG: &str = "karpenter.sh/nodeclaim";
pub const NODEPOOL_TAG: &str = wk::NODEPOOL_LABEL;
pub const NODECLASS_TAG: &str = wk::AWS_EC2NODECLASS_LABEL;
pub const EKS_CLUSTER_NAME_TAG: &str = "eks:eks-cluster-name";
pub const NAME_TAG: &str = "Name";
/// States an instance of a live NodeClaim can be in (terminated ones are gone).
pub const LIVE_STATES: [&str; 5] = ["pending", "running", "stopping", "stopped", "shutting-down"];

/// `kubernetes.io/cluster/<cluster>`; its value `owned` says the cluster may terminate it.
pub fn cluster_ownership_tag(cluster_name: &str) -> String {
    format!("kubernetes.io/cluster/{cluster_name}")
}

/// Tags that belong to Karpenter; `spec.tags` may not set them (upstream's restricted tags).
pub fn is_restricted_tag(key: &str) -> bool {
    key == EKS_CLUSTER_NAME_TAG
        || key.starts_with("kubernetes.io/cluster")
        || [NODEPOOL_TAG, NODECLAIM_TAG, NODECLASS_TAG].contains(&key)
}

/// An EC2NodeClass's `spec.tags` sets a tag Karpenter sets itself.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("EC2NodeClass {node_class} tag {key:?} is restricted: Karpenter sets it")]
pub struct RestrictedTag {
    pub node_class: String,
    pub key: String,
}

/// The tags of everything launched for a NodePool through an EC2NodeClass (instances, volumes,
/// fleets, launch templates): the EC2NodeClass's `spec.tags` plus Karpenter's. Errors name a
/// restricted key in `spec.tags`.
pub fn launch_tags(
    cluster_name: &str,
    node_pool: &str,
    node_class: &str,
    spec_tags: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, RestrictedTag> {
    if let Some(key) = spec_tags.keys().find(|k| is_restricted_tag(k)) {
        return Err(RestrictedTag {
            node_class: node_class.to_string(),
            key: key.clone(),
        });
    }
    let mut tags = spec_tags.clone();
    tags.insert(cluster_ownership_tag(cluster_name), "owned".to_string());
    tags.insert(EKS_CLUSTER_NAME_TAG.to_string(), cluster_name.to_string());
    tags.insert(NODEPOOL_TAG.to_string(), node_pool.to_string());
    tags.insert(NODECLASS_TAG.to_string(), node_class.to_string());
    Ok(tags)
}

/// The per-instance tags added to the launch tags: which NodeClaim, and a `Name` for consoles.
pub fn instance_tags(
    launch_tags: &BTreeMap<String, String>,
    node_claim: &str,
) -> BTreeMap<String, String> {
    let mut tags = launch_tags.clone();
    tags.insert(NODECLAIM_TAG.to_string(), node_claim.to_string());
    tags.entry(NAME_TAG.to_string())
        .or_insert_with(|| node_claim.to_string());
    tags
}

/// `aws:///<zone>/<instance-id>`.
pub fn provider_id(zone: &str, instance_id: &str) -> String {
    format!("aws:///{zone}/{instance_id}")
}

/// The instance ID of a provider ID (`aws:///<zone>/<id>`); `None` when it is not one of ours.
pub fn parse_provider_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws:///")?;
    let (_zone, id) = rest.rsplit_once('/')?;
    (id.starts_with("i-") && id.len() > 2).then_some(id)
}

/// What the provider needs to know about an instance.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub image_id: Option<String>,
    pub state: String,
    pub launch_time: Option<Timestamp>,
    pub subnet_id: Option<String>,
    pub security_group_ids: Vec<String>,
    pub tags: BTreeMap<String, String>,
    /// The capacity reservation a `reserved` instance runs in.
    pub capacity_reservation_id: Option<String>,
}

impl Instance {
    pub fn provider_id(&self) -> String {
        provider_id(&self.zone, &self.id)
    }

    pub fn node_claim(&self) -> Option<&str> {
        self.tags.get(NODECLAIM_TAG).map(String::as_str)
    }

    fn from_ec2(instance: &aws_sdk_ec2::types::Instance) -> Option<Self> {
        // Reserved as upstream decides it: in a reservation *and* launched only into
        // reservations (an on-demand launch may land in an open reservation by chance).
        let reservation = instance.capacity_reservation_id().filter(|_| {
            instance
                .capacity_reservation_specification()
                .and_then(|s| s.capacity_reservation_preference())
                == Some(&CapacityReservationPreference::CapacityReservationsOnly)
        });
        let capacity_type = if instance.instance_lifecycle() == Some(&InstanceLifecycleType::Spot)
            || instance.spot_instance_request_id().is_some()
        {
            wk::CAPACITY_TYPE_SPOT
        } else if reservation.is_some() {
            wk::CAPACITY_TYPE_RESERVED
        } else {
            wk::CAPACITY_TYPE_ON_DEMAND
        };
        Some(Self {
            id: instance.instance_id()?.to_string(),
            instance_type: instance.instance_type()?.as_str().to_string(),
            zone: instance.placement()?.availability_zone()?.to_string(),
            capacity_type: capacity_type.to_string(),
            image_id: instance.image_id().map(str::to_string),
            state: instance
                .state()
                .and_then(|s| s.name())
                .map_or_else(String::new, |n| n.as_str().to_string()),
            launch_time: instance
                .launch_time()
                .and_then(|t| Timestamp::from_second(t.secs()).ok()),
            subnet_id: instance.subnet_id().map(str::to_string),
            security_group_ids: instance
                .security_groups()
                .iter()
                .filter_map(|g| g.group_id().map(str::to_string))
                .collect(),
            tags: instance
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
                .collect(),
            capacity_reservation_id: reservation.map(str::to_string),
        })
    }
}

/// What [`AwsClients::terminate_instance`] found and did.
#[derive(Clone, Debug, PartialEq)]
pub struct Termination {
    /// The instance, `shutting-down`.
    pub instance: Instance,
    /// Whether this call asked EC2 to terminate it (false: it was shutting down already).
    pub requested: bool,
}

/// Why a launch produced no instance.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// CreateFleet answered, launched nothing, and said why (per override).
    #[error("CreateFleet launched no instance: {}", crate::fleet::describe_errors(.errors))]
    NoInstance { errors: Vec<FleetError> },
    #[error(transparent)]
    Api(#[from] Error),
}

fn filter(name: &str, values: &[&str]) -> Filter {
    Filter::builder()
        .name(name)
        .set_values(Some(values.iter().map(|v| (*v).to_string()).collect()))
        .build()
}

fn live_state_filter() -> Filter {
    filter("instance-state-name", &LIVE_STATES)
}

/// CreateFleet's spot and on-demand allocation strategies (reference §4.5): by EC2's prices, or,
/// for a NodeClaim planned with NodeOverlay prices, by the overrides' priorities.
pub fn allocation_strategies(
    prioritized: bool,
) -> (SpotAllocationStrategy, FleetOnDemandAllocationStrategy) {
    if prioritized {
        (
            SpotAllocationStrategy::CapacityOptimizedPrioritized,
            FleetOnDemandAllocationStrategy::Prioritized,
        )
    } else {
        (
            SpotAllocationStrategy::PriceCapacityOptimized,
            FleetOnDemandAllocationStrategy::LowestPrice,
        )
    }
}

impl AwsClients {
    async fn describe_instances(
        &self,
        ids: Option<Vec<String>>,
        filters: Vec<Filter>,
    ) -> Result<Vec<Instance>, Error> {
        let pages = self
            .ec2
            .describe_instances()
            .set_instance_ids(ids)
            .set_filters(Some(filters))
            .into_paginator()
            .send()
            .try_collect()
            .await
            .map_err(|e| Error::from_sdk("DescribeInstances", e))?;
        Ok(pages
            .iter()
            .flat_map(|p| p.reservations())
            .flat_map(|r| r.instances())
            .filter_map(Instance::from_ec2)
            .collect())
    }

    /// The live instance launched for NodeClaim `node_claim` of `cluster_name`, if any.
    pub async fn instance_for_node_claim(
        &self,
        cluster_name: &str,
        node_claim: &str,
    ) -> Result<Option<Instance>, Error> {
        let mut found = self
            .describe_instances(
                None,
                vec![
                    filter(&format!("tag:{NODECLAIM_TAG}"), &[node_claim]),
                    filter(&format!("tag:{EKS_CLUSTER_NAME_TAG}"), &[cluster_name]),
                    live_state_filter(),
                ],
            )
            .await?;
        // Oldest first: should two ever exist, the NodeClaim keeps the first.
        found.sort_by_key(|i| (i.launch_time, i.id.clone()));
        Ok(found.into_iter().find(|i| i.state != "shutting-down"))
    }

    /// One CreateFleet (`instant`, one instance) over the plan's overrides; `templates` maps
    /// each override group (AMI, max pods, reservation) to its launch template's name. Capacity
    /// errors are returned alongside the instance so the caller can mark those offerings
    /// unavailable.
    pub async fn create_fleet(
        &self,
        plan: &FleetPlan,
        templates: &BTreeMap<TemplateGroup, String>,
        tags: &BTreeMap<String, String>,
        context: Option<&str>,
    ) -> Result<(Instance, Vec<FleetError>), LaunchError> {
        let mut configs: BTreeMap<&str, Vec<&FleetOverride>> = BTreeMap::new();
        for o in &plan.overrides {
            if let Some(name) = templates.get(&o.group()) {
                configs.entry(name.as_str()).or_default().push(o);
            }
        }
        // Templates in the order of their first override, so "first override" (moto) is the
        // one of highest priority overall.
        let mut ordered: Vec<(&str, Vec<&FleetOverride>)> = configs.into_iter().collect();
        ordered.sort_by(|a, b| {
            let first = |v: &Vec<&FleetOverride>| v.first().map_or(f64::MAX, |o| o.priority);
            first(&a.1).total_cmp(&first(&b.1))
        });
        let spot = plan.capacity_type == wk::CAPACITY_TYPE_SPOT;
        let reserved = plan.capacity_type == wk::CAPACITY_TYPE_RESERVED;
        // Reference §4.5: reserved launches are on-demand launches into the reservation their
        // template targets; a capacity block has its own market type.
        let target_type = if spot {
            DefaultTargetCapacityType::Spot
        } else if reserved
            && plan.reservation_type.as_deref() == Some(RESERVATION_TYPE_CAPACITY_BLOCK)
        {
            DefaultTargetCapacityType::CapacityBlock
        } else {
            DefaultTargetCapacityType::OnDemand
        };
        let tag_specs = [
            ResourceType::Instance,
            ResourceType::Volume,
            ResourceType::Fleet,
        ]
        .into_iter()
        .map(|resource| {
            TagSpecification::builder()
                .resource_type(resource)
                .set_tags(Some(ec2_tags(tags)))
                .build()
        })
        .collect();
        let mut request = self
            .ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .target_capacity_specification(
                TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(1)
                    .default_target_capacity_type(target_type)
                    .build(),
            )
            .set_launch_template_configs(Some(
                ordered
                    .iter()
                    .map(|(name, overrides)| {
                        FleetLaunchTemplateConfigRequest::builder()
                            .launch_template_specification(
                                FleetLaunchTemplateSpecificationRequest::builder()
                                    .launch_template_name(*name)
                                    .version("$Latest")
                                    .build(),
                            )
                            .set_overrides(Some(
                                overrides
                                    .iter()
                                    .map(|o| {
                                        FleetLaunchTemplateOverridesRequest::builder()
                                            .instance_type(o.instance_type.as_str().into())
                                            .subnet_id(&o.subnet_id)
                                            .availability_zone(&o.zone)
                                            .image_id(&o.image_id)
                                            .priority(o.priority)
                                            .build()
                                    })
                                    .collect(),
                            ))
                            .build()
                    })
                    .collect(),
            ))
            .set_tag_specifications(Some(tag_specs))
            .set_context(context.map(str::to_string));
        let (spot_strategy, on_demand_strategy) = allocation_strategies(plan.prioritized);
        request = if spot {
            request.spot_options(
                SpotOptionsRequest::builder()
                    .allocation_strategy(spot_strategy)
                    .build(),
            )
        } else {
            request.on_demand_options(
                OnDemandOptionsRequest::builder()
                    .allocation_strategy(on_demand_strategy)
                    .build(),
            )
        };
        let output = request
            .send()
            .await
            .map_err(|e| Error::from_sdk("CreateFleet", e))?;
        let errors: Vec<FleetError> = output
            .errors()
            .iter()
            .map(|e| {
                let overrides = e
                    .launch_template_and_overrides()
                    .and_then(|l| l.overrides());
                FleetError {
                    code: e.error_code().unwrap_or("Unknown").to_string(),
                    message: e.error_message().unwrap_or_default().to_string(),
                    instance_type: overrides
                        .and_then(|o| o.instance_type())
                        .map(|t| t.as_str().to_string()),
                    zone: overrides
                        .and_then(|o| o.availability_zone())
                        .map(str::to_string),
                }
            })
            .collect();
        let launched = output.instances().iter().find_map(|fleet_instance| {
            let id = fleet_instance.instance_ids().first()?;
            let overrides = fleet_instance
                .launch_template_and_overrides()
                .and_then(|l| l.overrides());
            let instance_type = fleet_instance
                .instance_type()
                .map(|t| t.as_str().to_string())
                .or_else(|| {
                    overrides
                        .and_then(|o| o.instance_type())
                        .map(|t| t.as_str().to_string())
                })?;
            let zone = overrides
                .and_then(|o| o.availability_zone())
                .map(str::to_string)
                .or_else(|| fleet_instance.availability_zone().map(str::to_string))
                .or_else(|| {
                    // The subnet of the override decides the zone when EC2 does not echo it.
                    let subnet = overrides.and_then(|o| o.subnet_id())?;
                    plan.overrides
                        .iter()
                        .find(|o| o.subnet_id == subnet)
                        .map(|o| o.zone.clone())
                })?;
            let image_id = overrides
                .and_then(|o| o.image_id())
                .map(str::to_string)
                .or_else(|| {
                    plan.overrides
                        .iter()
                        .find(|o| o.instance_type == instance_type && o.zone == zone)
                        .map(|o| o.image_id.clone())
                });
            // A reserved launch is an on-demand one for EC2; its reservation is the override's.
            let reservation = plan
                .overrides
                .iter()
                .find(|o| o.instance_type == instance_type && o.zone == zone)
                .and_then(|o| o.reservation_id.clone());
            let capacity_type = match fleet_instance.lifecycle() {
                _ if reserved => wk::CAPACITY_TYPE_RESERVED,
                Some(InstanceLifecycle::Spot) => wk::CAPACITY_TYPE_SPOT,
                Some(InstanceLifecycle::OnDemand) => wk::CAPACITY_TYPE_ON_DEMAND,
                _ => plan.capacity_type.as_str(),
            };
            Some(Instance {
                id: id.clone(),
                instance_type,
                zone,
                capacity_type: capacity_type.to_string(),
                image_id,
                state: "pending".to_string(),
                launch_time: None,
                subnet_id: overrides.and_then(|o| o.subnet_id()).map(str::to_string),
                security_group_ids: Vec::new(),
                tags: tags.clone(),
                capacity_reservation_id: reservation.filter(|_| reserved),
            })
        });
        match launched {
            Some(instance) => Ok((instance, errors)),
            None => Err(LaunchError::NoInstance { errors }),
        }
    }

    /// The instance with `provider_id` unless it is terminated; `Ok(None)` when EC2 does not
    /// know it (any more).
    pub async fn instance(&self, provider_id: &str) -> Result<Option<Instance>, Error> {
        let Some(id) = parse_provider_id(provider_id) else {
            return Err(Error::NotFound {
                message: format!(
                    "{provider_id:?} is not an aws:///<zone>/<instance-id> provider ID"
                ),
            });
        };
        match self
            .describe_instances(Some(vec![id.to_string()]), vec![live_state_filter()])
            .await
        {
            Ok(found) => Ok(found.into_iter().find(|i| i.id == id)),
            Err(e) if e.code() == Some("InvalidInstanceID.NotFound") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every live instance Karpenter launched for `cluster_name` (upstream's List filters).
    pub async fn cluster_instances(&self, cluster_name: &str) -> Result<Vec<Instance>, Error> {
        self.describe_instances(
            None,
            vec![
                filter("tag-key", &[NODEPOOL_TAG]),
                filter("tag-key", &[NODECLASS_TAG]),
                filter(&format!("tag:{EKS_CLUSTER_NAME_TAG}"), &[cluster_name]),
                live_state_filter(),
            ],
        )
        .await
    }

    /// Terminates the instance of `provider_id` if this cluster owns it. `Ok(None)`: gone
    /// already (or terminated); `Ok(Some(_))`: termination asked for now or under way.
    pub async fn terminate_instance(
        &self,
        cluster_name: &str,
        provider_id: &str,
    ) -> Result<Option<Termination>, Error> {
        let Some(instance) = self.instance(provider_id).await? else {
            return Ok(None);
        };
        let owner_tag = cluster_ownership_tag(cluster_name);
        if instance.tags.get(&owner_tag).map(String::as_str) != Some("owned") {
            return Err(Error::NotOwned {
                message: format!(
                    "refusing to terminate {}: it has no {owner_tag}=owned tag, so cluster \
                     {cluster_name} does not own it",
                    instance.id
                ),
            });
        }
        if instance.state == "shutting-down" {
            return Ok(Some(Termination {
                instance,
                requested: false,
            }));
        }
        match self
            .ec2
            .terminate_instances()
            .instance_ids(&instance.id)
            .send()
            .await
        {
            Ok(_) => {
                tracing::info!(instance = %instance.id, "terminating instance");
                Ok(Some(Termination {
                    instance: Instance {
                        state: "shutting-down".to_string(),
                        ..instance
                    },
                    requested: true,
                }))
            }
            Err(e) => {
                let err = Error::from_sdk("TerminateInstances", e);
                if err.code() == Some("InvalidInstanceID.NotFound") {
                    Ok(None)
                } else {
                    Err(err)
                }
            }
        }
    }

    /// Instances of this cluster whose NodeClaim no longer exists (its name is not in
    /// `node_claims`) and that are older than `grace` at `now`: garbage for the GC.
    pub async fn leaked_instances(
        &self,
        cluster_name: &str,
        node_claims: &BTreeSet<String>,
        now: Timestamp,
        grace: SignedDuration,
    ) -> Result<Vec<Instance>, Error> {
        Ok(self
            .cluster_instances(cluster_name)
            .await?
            .into_iter()
            .filter(|i| is_leaked(i, node_claims, now, grace))
            .collect())
    }
}

/// Pure half of [`AwsClients::leaked_instances`].
pub fn is_leaked(
    instance: &Instance,
    node_claims: &BTreeSet<String>,
    now: Timestamp,
    grace: SignedDuration,
) -> bool {
    let claimed = instance
        .node_claim()
        .is_some_and(|n| node_claims.contains(n));
    let old_enough = instance
        .launch_time
        .is_some_and(|t| now.duration_since(t) >= grace);
    !claimed && old_enough && instance.state != "shutting-down"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_round_trip_and_foreign_ones_are_refused() {
        let id = provider_id("us-west-2a", "i-0123456789abcdef0");
        assert_eq!(id, "aws:///us-west-2a/i-0123456789abcdef0");
        assert_eq!(parse_provider_id(&id), Some("i-0123456789abcdef0"));
        assert_eq!(parse_provider_id("sim://us-west-2/us-west-2a/i-1"), None);
        assert_eq!(parse_provider_id("aws:///us-west-2a/"), None);
        assert_eq!(parse_provider_id("aws:///us-west-2a/vol-1"), None);
    }

    #[test]
    fn launch_tags_add_karpenters_and_refuse_restricted_spec_tags() {
        let spec = BTreeMap::from([("team".to_string(), "a".to_string())]);
        let tags = launch_tags("c1", "default", "nc", &spec).unwrap();
        assert_eq!(tags["kubernetes.io/cluster/c1"], "owned");
        assert_eq!(tags[EKS_CLUSTER_NAME_TAG], "c1");
        assert_eq!(tags[NODEPOOL_TAG], "default");
        assert_eq!(tags[NODECLASS_TAG], "nc");
        assert_eq!(tags["team"], "a");
        let with_claim = instance_tags(&tags, "default-abc");
        assert_eq!(with_claim[NODECLAIM_TAG], "default-abc");
        assert_eq!(with_claim[NAME_TAG], "default-abc");
        for key in [
            "eks:eks-cluster-name",
            "kubernetes.io/cluster/other",
            "karpenter.sh/nodepool",
            "karpenter.sh/nodeclaim",
            "karpenter.k8s.aws/ec2nodeclass",
        ] {
            let spec = BTreeMap::from([(key.to_string(), "x".to_string())]);
            let err = launch_tags("c1", "default", "nc", &spec)
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{err}");
        }
    }

    #[test]
    fn leaked_means_unclaimed_and_older_than_the_grace_period() {
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let instance = Instance {
            id: "i-1".into(),
            instance_type: "m5.large".into(),
            zone: "us-west-2a".into(),
            capacity_type: "spot".into(),
            image_id: None,
            state: "running".into(),
            launch_time: Some(t0),
            subnet_id: None,
            security_group_ids: vec![],
            tags: BTreeMap::from([(NODECLAIM_TAG.to_string(), "gone".to_string())]),
            capacity_reservation_id: None,
        };
        let grace = SignedDuration::from_secs(30);
        let later = t0.checked_add(SignedDuration::from_secs(31)).unwrap();
        let claims = BTreeSet::from(["alive".to_string()]);
        assert!(is_leaked(&instance, &claims, later, grace));
        assert!(!is_leaked(&instance, &claims, t0, grace));
        let claimed = BTreeSet::from(["gone".to_string()]);
        assert!(!is_leaked(&instance, &claimed, later, grace));
    }

    #[test]
    fn overlaid_launches_ask_for_prioritized_allocation() {
        assert_eq!(
            allocation_strategies(false),
            (
                SpotAllocationStrategy::PriceCapacityOptimized,
                FleetOnDemandAllocationStrategy::LowestPrice
            )
        );
        assert_eq!(
            allocation_strategies(true),
            (
                SpotAllocationStrategy::CapacityOptimizedPrioritized,
                FleetOnDemandAllocationStrategy::Prioritized
            )
        );
    }
}
