//! SDK half of EC2NodeClass resolution: runs the queries planned by [`crate::selectors`] and
//! [`crate::amis`] and writes the `status.subnets/securityGroups/amis` entries and their conditions.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::Filter as Ec2Filter;
use karpenter_api::v1::{
    AmiSelectorTerm, AmiStatus, CONDITION_FALSE, CONDITION_TRUE, ConditionsExt, EC2NodeClassSpec,
    EC2NodeClassStatus, SecurityGroupSelectorTerm, SecurityGroupStatus, SubnetSelectorTerm,
    SubnetStatus,
};

use crate::amis::{Alias, ImageInfo, alias_parameters, kubernetes_arch, select_amis};
use crate::selectors::{
    Filter, FilterSet, SubnetInfo, describe_terms, no_security_group_message, no_subnet_message,
    security_group_filter_sets, security_group_statuses, subnet_filter_sets, subnet_statuses,
    tag_filters,
};
use crate::{AwsClients, Error};

/// Condition types and reasons of upstream's EC2NodeClass status.
pub const CONDITION_SUBNETS_READY: &str = "SubnetsReady";
pub const CONDITION_SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
pub const CONDITION_AMIS_READY: &str = "AMIsReady";
pub const REASON_SUBNETS_NOT_FOUND: &str = "SubnetsNotFound";
pub const REASON_SECURITY_GROUPS_NOT_FOUND: &str = "SecurityGroupsNotFound";
pub const REASON_AMI_NOT_FOUND: &str = "AMINotFound";
pub const REASON_UNSUPPORTED_ALIAS: &str = "UnsupportedAlias";
/// Reason when the cloud could not be asked (kept distinct from "asked, nothing matched").
pub const REASON_RESOLUTION_FAILED: &str = "ResolutionFailed";

/// `ssm:GetParameters` accepts at most 10 names per call.
const SSM_GET_PARAMETERS_LIMIT: usize = 10;

fn ec2_filters(set: &FilterSet) -> Vec<Ec2Filter> {
    set.iter()
        .map(|f| {
            Ec2Filter::builder()
                .name(&f.name)
                .set_values(Some(f.values.clone()))
                .build()
        })
        .collect()
}

impl AwsClients {
    /// `subnetSelectorTerms` → status entries (most free IPs first).
    pub async fn resolve_subnets(
        &self,
        terms: &[SubnetSelectorTerm],
    ) -> Result<Vec<SubnetStatus>, Error> {
        let mut found = Vec::new();
        for set in subnet_filter_sets(terms) {
            let pages = self
                .ec2
                .describe_subnets()
                .set_filters(Some(ec2_filters(&set)))
                .max_results(500)
                .into_paginator()
                .send()
                .try_collect()
                .await
                .map_err(|e| Error::from_sdk("DescribeSubnets", e))?;
            for subnet in pages.iter().flat_map(|p| p.subnets()) {
                let (Some(id), Some(zone)) = (subnet.subnet_id(), subnet.availability_zone())
                else {
                    continue;
                };
                found.push(SubnetInfo {
                    id: id.to_string(),
                    zone: zone.to_string(),
                    zone_id: subnet.availability_zone_id().map(str::to_string),
                    available_ip_addresses: subnet.available_ip_address_count().unwrap_or(0),
                });
            }
        }
        if found.is_empty() {
            return Err(Error::NotFound {
                message: no_subnet_message(terms),
            });
        }
        Ok(subnet_statuses(found))
    }

    /// `securityGroupSelectorTerms` → status entries (sorted by ID).
    pub async fn resolve_security_groups(
        &self,
        terms: &[SecurityGroupSelectorTerm],
    ) -> Result<Vec<SecurityGroupStatus>, Error> {
        let mut found = Vec::new();
        for set in security_group_filter_sets(terms) {
            let pages = self
                .ec2
                .describe_security_groups()
                .set_filters(Some(ec2_filters(&set)))
                .max_results(500)
                .into_paginator()
                .send()
                .try_collect()
                .await
                .map_err(|e| Error::from_sdk("DescribeSecurityGroups", e))?;
            for group in pages.iter().flat_map(|p| p.security_groups()) {
                if let Some(id) = group.group_id() {
                    found.push(SecurityGroupStatus {
                        id: id.to_string(),
                        name: group.group_name().map(str::to_string),
                    });
                }
            }
        }
        if found.is_empty() {
            return Err(Error::NotFound {
                message: no_security_group_message(terms),
            });
        }
        Ok(security_group_statuses(found))
    }

    /// `amiSelectorTerms` → status entries, newest per requirement set. `k8s_version` is the
    /// control plane's `1.<minor>`; `now` decides which AMIs count as deprecated.
    pub async fn resolve_amis(
        &self,
        terms: &[AmiSelectorTerm],
        k8s_version: &str,
        now: jiff::Timestamp,
    ) -> Result<Vec<AmiStatus>, Error> {
        let mut images = Vec::new();
        let mut ids: Vec<String> = terms.iter().filter_map(|t| t.id.clone()).collect();
        for term in terms {
            if let Some(alias) = &term.alias {
                images.extend(self.alias_images(alias, k8s_version).await?);
            }
            if let Some(parameter) = &term.ssm_parameter {
                match self
                    .ssm_values(std::slice::from_ref(parameter))
                    .await?
                    .get(parameter)
                {
                    Some(value) if value.starts_with("ami-") => ids.push(value.clone()),
                    other => tracing::warn!(
                        parameter,
                        value = ?other,
                        "ssmParameter does not name an AMI; skipping it"
                    ),
                }
            }
            if term.alias.is_none()
                && term.id.is_none()
                && term.ssm_parameter.is_none()
                && (term.name.is_some() || term.owner.is_some() || !term.tags.is_empty())
            {
                let mut set = tag_filters(&term.tags);
                if let Some(name) = &term.name {
                    set.push(Filter::new("name", vec![name.clone()]));
                }
                let owners = match (&term.owner, &term.name) {
                    (Some(owner), _) => vec![owner.clone()],
                    (None, Some(_)) => vec!["self".to_string(), "amazon".to_string()],
                    (None, None) => Vec::new(),
                };
                images.extend(self.describe_images(set, owners).await?.into_values().map(
                    |(image, arch)| ImageInfo {
                        requirements: crate::amis::arch_requirements(arch),
                        ..image
                    },
                ));
            }
        }
        if !ids.is_empty() {
            let set = vec![Filter::new("image-id", ids)];
            images.extend(
                self.describe_images(set, Vec::new())
                    .await?
                    .into_values()
                    .map(|(image, arch)| ImageInfo {
                        requirements: crate::amis::arch_requirements(arch),
                        ..image
                    }),
            );
        }
        let amis = select_amis(images, now);
        if amis.is_empty() {
            return Err(Error::NotFound {
                message: format!("no AMI matches {}", describe_ami_terms(terms)),
            });
        }
        Ok(amis)
    }

    /// The images behind an alias's public SSM parameters, each with its variant's requirements.
    async fn alias_images(&self, alias: &str, k8s_version: &str) -> Result<Vec<ImageInfo>, Error> {
        let params = alias_parameters(&Alias::parse(alias)?, k8s_version)?;
        let paths: Vec<String> = params
            .iter()
            .map(|p| p.path.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let values = self.ssm_values(&paths).await?;
        let image_ids: Vec<String> = values
            .values()
            .filter(|v| v.starts_with("ami-"))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let described = if image_ids.is_empty() {
            BTreeMap::new()
        } else {
            self.describe_images(vec![Filter::new("image-id", image_ids)], Vec::new())
                .await?
        };
        let images: Vec<ImageInfo> = params
            .into_iter()
            .filter_map(|param| {
                let (image, _) = described.get(values.get(&param.path)?)?;
                Some(ImageInfo {
                    requirements: param.requirements,
                    ..image.clone()
                })
            })
            .collect();
        if images.is_empty() {
            return Err(Error::NotFound {
                message: format!(
                    "failed to discover any AMIs for alias {alias} (kubernetes {k8s_version})"
                ),
            });
        }
        Ok(images)
    }

    /// Values of the SSM parameters that exist among `names`; missing ones are left out.
    async fn ssm_values(&self, names: &[String]) -> Result<BTreeMap<String, String>, Error> {
        let mut values = BTreeMap::new();
        for chunk in names.chunks(SSM_GET_PARAMETERS_LIMIT) {
            let output = self
                .ssm
                .get_parameters()
                .set_names(Some(chunk.to_vec()))
                .send()
                .await
                .map_err(|e| Error::from_sdk("GetParameters", e))?;
            for parameter in output.parameters() {
                if let (Some(name), Some(value)) = (parameter.name(), parameter.value()) {
                    values.insert(name.to_string(), value.to_string());
                }
            }
        }
        Ok(values)
    }

    /// Available images matching `set` (any owner when `owners` is empty), by ID with their
    /// Kubernetes architecture; images of other architectures are dropped as upstream does.
    async fn describe_images(
        &self,
        mut set: FilterSet,
        owners: Vec<String>,
    ) -> Result<BTreeMap<String, (ImageInfo, &'static str)>, Error> {
        set.push(Filter::new("state", vec!["available".into()]));
        let pages = self
            .ec2
            .describe_images()
            .set_filters(Some(ec2_filters(&set)))
            .set_owners((!owners.is_empty()).then_some(owners))
            .include_deprecated(true)
            .max_results(1000)
            .into_paginator()
            .send()
            .try_collect()
            .await
            .map_err(|e| Error::from_sdk("DescribeImages", e))?;
        let mut images = BTreeMap::new();
        for image in pages.iter().flat_map(|p| p.images()) {
            let Some(id) = image.image_id() else { continue };
            let Some(arch) = image
                .architecture()
                .and_then(|a| kubernetes_arch(a.as_str()))
            else {
                continue;
            };
            images.insert(
                id.to_string(),
                (
                    ImageInfo {
                        id: id.to_string(),
                        name: image.name().map(str::to_string),
                        creation_date: image.creation_date().map(str::to_string),
                        deprecation_time: image.deprecation_time().map(str::to_string),
                        requirements: Vec::new(),
                    },
                    arch,
                ),
            );
        }
        Ok(images)
    }

    /// Resolves subnets, security groups and AMIs of `spec` independently (one failing does not
    /// hide the others' results), as the EC2NodeClass controller's sub-reconcilers do.
    pub async fn resolve_node_class(
        &self,
        spec: &EC2NodeClassSpec,
        k8s_version: &str,
        now: jiff::Timestamp,
    ) -> NodeClassResolution {
        NodeClassResolution {
            amis: self
                .resolve_amis(&spec.ami_selector_terms, k8s_version, now)
                .await,
            subnets: self.resolve_subnets(&spec.subnet_selector_terms).await,
            security_groups: self
                .resolve_security_groups(&spec.security_group_selector_terms)
                .await,
        }
    }
}

/// Text for `amiSelectorTerms` in messages: `alias al2023@latest`, `name my-ami-* and owner self`.
fn describe_ami_terms(terms: &[AmiSelectorTerm]) -> String {
    let parts: Vec<String> = terms
        .iter()
        .map(|t| {
            let mut words = Vec::new();
            if let Some(alias) = &t.alias {
                words.push(format!("alias {alias}"));
            }
            if let Some(parameter) = &t.ssm_parameter {
                words.push(format!("ssmParameter {parameter}"));
            }
            if let Some(owner) = &t.owner {
                words.push(format!("owner {owner}"));
            }
            let rest = describe_terms([(&t.tags, t.id.as_deref(), t.name.as_deref())]);
            if !t.tags.is_empty() || t.id.is_some() || t.name.is_some() {
                words.insert(0, rest);
            }
            words.join(" and ")
        })
        .collect();
    if parts.is_empty() {
        "no selector terms".into()
    } else {
        parts.join(" or ")
    }
}

/// The outcome of resolving one EC2NodeClass.
#[derive(Debug)]
pub struct NodeClassResolution {
    pub subnets: Result<Vec<SubnetStatus>, Error>,
    pub security_groups: Result<Vec<SecurityGroupStatus>, Error>,
    pub amis: Result<Vec<AmiStatus>, Error>,
}

impl NodeClassResolution {
    /// Writes the resolved entries and the `SubnetsReady`, `SecurityGroupsReady` and `AMIsReady`
    /// conditions. A failed resolution clears its entries (upstream does the same) and says why.
    pub fn apply(
        &self,
        status: &mut EC2NodeClassStatus,
        now_rfc3339: &str,
        generation: Option<i64>,
    ) {
        let conditions = [
            (
                CONDITION_SUBNETS_READY,
                self.subnets.as_ref().map(|_| ()),
                REASON_SUBNETS_NOT_FOUND,
            ),
            (
                CONDITION_SECURITY_GROUPS_READY,
                self.security_groups.as_ref().map(|_| ()),
                REASON_SECURITY_GROUPS_NOT_FOUND,
            ),
            (
                CONDITION_AMIS_READY,
                self.amis.as_ref().map(|_| ()),
                REASON_AMI_NOT_FOUND,
            ),
        ];
        for (type_, result, not_found_reason) in conditions {
            let (state, reason, message) = match result {
                Ok(()) => (CONDITION_TRUE, type_, String::new()),
                Err(err @ Error::UnsupportedAlias { .. }) => {
                    (CONDITION_FALSE, REASON_UNSUPPORTED_ALIAS, err.to_string())
                }
                Err(err @ Error::NotFound { .. }) => {
                    (CONDITION_FALSE, not_found_reason, err.to_string())
                }
                Err(err) => (CONDITION_FALSE, REASON_RESOLUTION_FAILED, err.to_string()),
            };
            status.set_condition(type_, state, reason, &message, now_rfc3339, generation);
        }
        status.subnets = self.subnets.as_ref().cloned().unwrap_or_default();
        status.security_groups = self.security_groups.as_ref().cloned().unwrap_or_default();
        status.amis = self.amis.as_ref().cloned().unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ami_terms_are_described_for_messages() {
        let terms = vec![
            AmiSelectorTerm {
                alias: Some("al2023@latest".into()),
                ..Default::default()
            },
            AmiSelectorTerm {
                name: Some("my-ami-*".into()),
                owner: Some("self".into()),
                ..Default::default()
            },
        ];
        assert_eq!(
            describe_ami_terms(&terms),
            "alias al2023@latest or name my-ami-* and owner self"
        );
    }

    #[test]
    fn apply_writes_entries_and_conditions_with_reasons() {
        let resolution = NodeClassResolution {
            subnets: Ok(vec![SubnetStatus {
                id: "subnet-1".into(),
                zone: "us-west-2a".into(),
                zone_id: None,
            }]),
            security_groups: Err(Error::NotFound {
                message: "no security group matches tags a=b".into(),
            }),
            amis: Err(Error::UnsupportedAlias {
                message: "alias al2@latest is not supported".into(),
            }),
        };
        let mut status = EC2NodeClassStatus::default();
        resolution.apply(&mut status, "2025-01-01T00:00:00Z", Some(3));
        assert_eq!(status.subnets.len(), 1);
        assert!(status.security_groups.is_empty());
        assert!(status.is_condition_true(CONDITION_SUBNETS_READY));
        let sg = status.condition(CONDITION_SECURITY_GROUPS_READY).unwrap();
        assert_eq!(sg.status, CONDITION_FALSE);
        assert_eq!(sg.reason.as_deref(), Some(REASON_SECURITY_GROUPS_NOT_FOUND));
        assert_eq!(
            sg.message.as_deref(),
            Some("no security group matches tags a=b")
        );
        assert_eq!(sg.observed_generation, Some(3));
        let amis = status.condition(CONDITION_AMIS_READY).unwrap();
        assert_eq!(amis.reason.as_deref(), Some(REASON_UNSUPPORTED_ALIAS));
    }
}
