//! Instance profiles of EC2NodeClasses (reference §1.4): with `spec.role` Karpenter manages a
//! profile of its own — created tagged with the cluster's ownership tags, the role added, deleted
//! with the NodeClass; with `spec.instanceProfile` the named profile is only checked to exist.
//!
//! The managed profile's name is derived from the cluster, region and NodeClass name (upstream's
//! legacy scheme, without its random UUID), so a controller that crashed between creating the
//! profile and writing the status finds the same profile again instead of leaking one.

use std::collections::BTreeMap;

use aws_sdk_iam::types::Tag;

use crate::instance::{EKS_CLUSTER_NAME_TAG, NODECLASS_TAG, cluster_ownership_tag};
use crate::{AwsClients, Error};

/// The region tag upstream puts on managed instance profiles.
pub const REGION_TAG: &str = "topology.kubernetes.io/region";

/// The role's name as IAM wants it in `AddRoleToInstanceProfile`: a role ARN or a path is cut to
/// its last segment (`arn:aws:iam::1:role/nodes/KarpenterNodeRole` ⇒ `KarpenterNodeRole`).
pub fn role_name(role: &str) -> &str {
    role.rsplit('/').next().unwrap_or(role)
}

/// `<cluster>_<FNV-1a 64 of region and NodeClass name>`: stable across restarts, unique per
/// cluster, region and NodeClass.
pub fn managed_profile_name(cluster: &str, region: &str, node_class: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in region.bytes().chain([0u8]).chain(node_class.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{cluster}_{hash}")
}

/// The IAM path of managed profiles: `/karpenter/<region>/<cluster>/<nodeclass uid>/`.
pub fn managed_profile_path(region: &str, cluster: &str, node_class_uid: &str) -> String {
    format!("/karpenter/{region}/{cluster}/{node_class_uid}/")
}

/// Tags of a managed profile: the NodeClass's `spec.tags`, then the ownership tags (which win).
pub fn managed_profile_tags(
    spec_tags: &BTreeMap<String, String>,
    cluster: &str,
    region: &str,
    node_class: &str,
) -> BTreeMap<String, String> {
    let mut tags = spec_tags.clone();
    tags.insert(cluster_ownership_tag(cluster), "owned".into());
    tags.insert(EKS_CLUSTER_NAME_TAG.into(), cluster.into());
    tags.insert(NODECLASS_TAG.into(), node_class.into());
    tags.insert(REGION_TAG.into(), region.into());
    tags
}

/// What a managed profile must look like.
#[derive(Clone, Debug)]
pub struct ManagedProfile<'a> {
    pub name: &'a str,
    pub path: &'a str,
    pub role: &'a str,
    pub tags: &'a BTreeMap<String, String>,
}

fn is_no_such_entity(err: &Error) -> bool {
    err.code() == Some("NoSuchEntity")
}

impl AwsClients {
    /// The roles of the instance profile `name`, or `None` when it does not exist.
    pub async fn instance_profile_roles(&self, name: &str) -> Result<Option<Vec<String>>, Error> {
        match self
            .iam
            .get_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
        {
            Ok(out) => Ok(Some(
                out.instance_profile()
                    .map(|p| {
                        p.roles()
                            .iter()
                            .map(|r| r.role_name().to_string())
                            .collect()
                    })
                    .unwrap_or_default(),
            )),
            Err(err) => {
                let err = Error::from_sdk("iam:GetInstanceProfile", err);
                if is_no_such_entity(&err) {
                    Ok(None)
                } else {
                    Err(err)
                }
            }
        }
    }

    /// Creates the managed profile when missing and makes `role` its only role. Idempotent.
    pub async fn ensure_instance_profile(&self, profile: &ManagedProfile<'_>) -> Result<(), Error> {
        let role = role_name(profile.role);
        let roles = match self.instance_profile_roles(profile.name).await? {
            Some(roles) => roles,
            None => {
                let tags: Vec<Tag> = profile
                    .tags
                    .iter()
                    .filter_map(|(k, v)| Tag::builder().key(k).value(v).build().ok())
                    .collect();
                match self
                    .iam
                    .create_instance_profile()
                    .instance_profile_name(profile.name)
                    .path(profile.path)
                    .set_tags(Some(tags))
                    .send()
                    .await
                {
                    Ok(_) => {
                        tracing::info!(instance_profile = profile.name, "created instance profile")
                    }
                    Err(err) => {
                        let err = Error::from_sdk("iam:CreateInstanceProfile", err);
                        if err.code() != Some("EntityAlreadyExists") {
                            return Err(err);
                        }
                    }
                }
                Vec::new()
            }
        };
        if roles.iter().any(|r| r == role) {
            return Ok(());
        }
        for other in &roles {
            self.iam
                .remove_role_from_instance_profile()
                .instance_profile_name(profile.name)
                .role_name(other)
                .send()
                .await
                .map_err(|e| Error::from_sdk("iam:RemoveRoleFromInstanceProfile", e))?;
        }
        self.iam
            .add_role_to_instance_profile()
            .instance_profile_name(profile.name)
            .role_name(role)
            .send()
            .await
            .map_err(|e| Error::from_sdk("iam:AddRoleToInstanceProfile", e))?;
        Ok(())
    }

    /// Removes the profile's roles and deletes it; a missing profile is already deleted.
    pub async fn delete_instance_profile(&self, name: &str) -> Result<(), Error> {
        let Some(roles) = self.instance_profile_roles(name).await? else {
            return Ok(());
        };
        for role in &roles {
            if let Err(err) = self
                .iam
                .remove_role_from_instance_profile()
                .instance_profile_name(name)
                .role_name(role)
                .send()
                .await
            {
                let err = Error::from_sdk("iam:RemoveRoleFromInstanceProfile", err);
                if !is_no_such_entity(&err) {
                    return Err(err);
                }
            }
        }
        match self
            .iam
            .delete_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
        {
            Ok(_) => {
                tracing::info!(instance_profile = name, "deleted instance profile");
                Ok(())
            }
            Err(err) => {
                let err = Error::from_sdk("iam:DeleteInstanceProfile", err);
                if is_no_such_entity(&err) {
                    Ok(())
                } else {
                    Err(err)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_names_lose_their_path_and_arn() {
        assert_eq!(role_name("KarpenterNodeRole-c"), "KarpenterNodeRole-c");
        assert_eq!(
            role_name("arn:aws:iam::123456789012:role/nodes/KarpenterNodeRole-c"),
            "KarpenterNodeRole-c"
        );
    }

    #[test]
    fn managed_names_are_stable_and_distinct_per_node_class_and_region() {
        let a = managed_profile_name("c", "us-west-2", "default");
        assert_eq!(a, managed_profile_name("c", "us-west-2", "default"));
        assert!(a.starts_with("c_"), "{a}");
        assert_ne!(a, managed_profile_name("c", "us-west-2", "gpu"));
        assert_ne!(a, managed_profile_name("c", "us-east-1", "default"));
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(
            managed_profile_name("c", "ab", "c"),
            managed_profile_name("c", "a", "bc")
        );
    }

    #[test]
    fn ownership_tags_win_over_spec_tags() {
        let spec = BTreeMap::from([
            ("team".to_string(), "platform".to_string()),
            (EKS_CLUSTER_NAME_TAG.to_string(), "other".to_string()),
        ]);
        let tags = managed_profile_tags(&spec, "c", "us-west-2", "default");
        assert_eq!(tags["team"], "platform");
        assert_eq!(tags[EKS_CLUSTER_NAME_TAG], "c");
        assert_eq!(tags["kubernetes.io/cluster/c"], "owned");
        assert_eq!(tags[NODECLASS_TAG], "default");
        assert_eq!(tags[REGION_TAG], "us-west-2");
    }
}
