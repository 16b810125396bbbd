//! User data per AMI family (reference §2): what a node runs at boot to join the cluster, merged
//! with the EC2NodeClass's own `userData`. Pure: the launch template base64-encodes the result.
//!
//! * AL2: MIME multipart, the user's parts first, then a shell part calling `/etc/eks/bootstrap.sh`.
//! * AL2023: MIME multipart, the user's parts first, then nodeadm's `NodeConfig` (nodeadm merges
//!   NodeConfigs in order, so Karpenter's settings win).
//! * Bottlerocket: one TOML document, the user's tables merged with Karpenter's keys winning.
//! * Windows: one PowerShell block, the user's script first, then `Start-EKSBootstrap.ps1`.
//! * Custom: the user's data unchanged.

mod al2023;
mod bottlerocket;
pub mod mime;
mod shell;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use karpenter_api::v1::KubeletConfiguration;
use karpenter_api::well_known as wk;

/// The AMI families whose nodes Karpenter knows how to bootstrap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AmiFamily {
    Al2,
    Al2023,
    Bottlerocket,
    Windows2019,
    Windows2022,
    Windows2025,
    Custom,
}

impl AmiFamily {
    /// From the EC2NodeClass's effective family (`EC2NodeClass::ami_family`).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "AL2" => Self::Al2,
            "AL2023" => Self::Al2023,
            "Bottlerocket" => Self::Bottlerocket,
            "Windows2019" => Self::Windows2019,
            "Windows2022" => Self::Windows2022,
            "Windows2025" => Self::Windows2025,
            "Custom" => Self::Custom,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Al2 => "AL2",
            Self::Al2023 => "AL2023",
            Self::Bottlerocket => "Bottlerocket",
            Self::Windows2019 => "Windows2019",
            Self::Windows2022 => "Windows2022",
            Self::Windows2025 => "Windows2025",
            Self::Custom => "Custom",
        }
    }

    pub fn is_windows(self) -> bool {
        matches!(
            self,
            Self::Windows2019 | Self::Windows2022 | Self::Windows2025
        )
    }
}

/// What every family's bootstrap needs to know (upstream's `bootstrap.Options`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BootstrapOptions {
    pub cluster_name: String,
    pub cluster_endpoint: String,
    /// Base64 PEM bundle of the cluster CA.
    pub ca_bundle: Option<String>,
    /// Service CIDR of the cluster (AL2023's nodeadm needs it).
    pub cluster_cidr: Option<String>,
    /// `spec.kubelet` with `maxPods` and `clusterDNS` already defaulted by the caller.
    pub kubelet: KubeletConfiguration,
    /// NodeClaim taints and startup taints (the unregistered taint is added here).
    pub taints: Vec<Taint>,
    /// NodeClaim labels plus the capacity type (restricted domains are dropped here).
    pub labels: BTreeMap<String, String>,
    /// The EC2NodeClass's `userData`.
    pub custom_user_data: Option<String>,
    /// `spec.instanceStorePolicy` (`RAID0`).
    pub instance_store_policy: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum UserDataError {
    #[error("malformed MIME user data: {0}")]
    Mime(String),
    #[error("Bottlerocket user data is not valid TOML: {0}")]
    Toml(String),
    #[error("{family} user data needs {what}")]
    Missing {
        family: &'static str,
        what: &'static str,
    },
    #[error("NodeConfig could not be written: {0}")]
    Yaml(String),
}

/// The user data (plain text, not yet base64) a node of `family` boots with.
pub fn render(family: AmiFamily, options: &BootstrapOptions) -> Result<String, UserDataError> {
    match family {
        AmiFamily::Al2 => shell::al2(options),
        AmiFamily::Al2023 => al2023::render(options),
        AmiFamily::Bottlerocket => bottlerocket::render(options),
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
            Ok(shell::windows(options))
        }
        AmiFamily::Custom => Ok(options.custom_user_data.clone().unwrap_or_default()),
    }
}

/// Labels the kubelet may not set on itself (NodeRestriction): `kubernetes.io`, `k8s.io` and
/// `node-restriction.kubernetes.io` and their subdomains. The kubelet sets the well-known ones itself.
fn is_restricted_label(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else {
        return false;
    };
    ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|restricted| domain == *restricted || domain.ends_with(&format!(".{restricted}")))
}

/// The labels passed to the kubelet, sorted by key.
fn node_labels(options: &BootstrapOptions, family: AmiFamily) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = options
        .labels
        .iter()
        .filter(|(k, _)| !is_restricted_label(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if family != AmiFamily::Custom {
        labels.insert(
            wk::NODE_DO_NOT_SYNC_TAINTS_LABEL.to_string(),
            "true".to_string(),
        );
    }
    labels
}

/// The taints the node registers with: the NodeClaim's and `karpenter.sh/unregistered:NoExecute`.
fn register_taints(options: &BootstrapOptions) -> Vec<Taint> {
    let mut taints = options.taints.clone();
    if !taints.iter().any(|t| t.key == wk::UNREGISTERED_TAINT_KEY) {
        taints.push(Taint {
            key: wk::UNREGISTERED_TAINT_KEY.to_string(),
            effect: "NoExecute".to_string(),
            ..Taint::default()
        });
    }
    taints
}

/// `key=value:Effect` (or `key:Effect`), as the kubelet flag and Bottlerocket spell a taint.
fn taint_string(taint: &Taint) -> String {
    match taint.value.as_deref() {
        Some(value) if !value.is_empty() => format!("{}={value}:{}", taint.key, taint.effect),
        _ => format!("{}:{}", taint.key, taint.effect),
    }
}

/// `k=v,k=v` of a sorted map.
fn joined(map: &BTreeMap<String, String>, separator: &str) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}{separator}{v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// Options as a NodeClaim of the spot pool `default` would produce.
    pub fn options() -> BootstrapOptions {
        BootstrapOptions {
            cluster_name: "my-cluster".into(),
            cluster_endpoint: "https://ABC.gr7.us-west-2.eks.amazonaws.com".into(),
            ca_bundle: Some("Y2EtYnVuZGxl".into()),
            cluster_cidr: Some("10.100.0.0/16".into()),
            kubelet: KubeletConfiguration {
                cluster_dns: vec!["10.100.0.10".into()],
                max_pods: Some(29),
                ..KubeletConfiguration::default()
            },
            taints: vec![Taint {
                key: "dedicated".into(),
                value: Some("gpu".into()),
                effect: "NoSchedule".into(),
                ..Taint::default()
            }],
            labels: BTreeMap::from([
                ("karpenter.sh/capacity-type".into(), "spot".into()),
                ("karpenter.sh/nodepool".into(), "default".into()),
                ("node.kubernetes.io/instance-type".into(), "m5.large".into()),
                ("team".into(), "a".into()),
            ]),
            custom_user_data: None,
            instance_store_policy: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restricted_label_domains_are_dropped_and_do_not_sync_taints_added() {
        let labels = node_labels(&test_support::options(), AmiFamily::Al2023);
        assert!(!labels.contains_key("node.kubernetes.io/instance-type"));
        assert_eq!(labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(
            labels
                .get(wk::NODE_DO_NOT_SYNC_TAINTS_LABEL)
                .map(String::as_str),
            Some("true")
        );
        assert!(
            !node_labels(&test_support::options(), AmiFamily::Custom)
                .contains_key(wk::NODE_DO_NOT_SYNC_TAINTS_LABEL)
        );
        assert!(is_restricted_label("node-restriction.kubernetes.io/x"));
        assert!(is_restricted_label("k8s.io/x"));
        assert!(!is_restricted_label("karpenter.sh/nodepool"));
    }

    #[test]
    fn the_unregistered_taint_is_added_once() {
        let mut options = test_support::options();
        let taints = register_taints(&options);
        assert_eq!(taints.len(), 2);
        assert_eq!(
            taint_string(&taints[1]),
            "karpenter.sh/unregistered:NoExecute"
        );
        options.taints = taints;
        assert_eq!(register_taints(&options).len(), 2);
    }

    #[test]
    fn custom_passes_user_data_through() {
        let mut options = test_support::options();
        options.custom_user_data = Some("#!/bin/sh\necho mine".into());
        assert_eq!(
            render(AmiFamily::Custom, &options).unwrap(),
            "#!/bin/sh\necho mine"
        );
        assert_eq!(
            AmiFamily::parse("Windows2022"),
            Some(AmiFamily::Windows2022)
        );
        assert_eq!(
            AmiFamily::parse("AL2023").map(AmiFamily::name),
            Some("AL2023")
        );
    }
}
