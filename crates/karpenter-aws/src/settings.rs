//! Provider settings with upstream's names (`pkg/operator/options/options.go`). A plain struct: the
//! binary maps its flags onto it; [`Settings::from_env`] reads the environment variables upstream reads.

/// Environment variable names, exactly as upstream's chart sets them.
pub const ENV_CLUSTER_NAME: &str = "CLUSTER_NAME";
pub const ENV_CLUSTER_ENDPOINT: &str = "CLUSTER_ENDPOINT";
pub const ENV_INTERRUPTION_QUEUE: &str = "INTERRUPTION_QUEUE";
pub const ENV_VM_MEMORY_OVERHEAD_PERCENT: &str = "VM_MEMORY_OVERHEAD_PERCENT";
pub const ENV_RESERVED_ENIS: &str = "RESERVED_ENIS";
pub const ENV_ISOLATED_VPC: &str = "ISOLATED_VPC";
/// karpenter-rs, beyond upstream (docs/spot-rebalance.md).
pub const ENV_SPOT_REBALANCE_REPLACE: &str = "SPOT_REBALANCE_REPLACE";

/// Upstream's default share of memory the hypervisor keeps (`--vm-memory-overhead-percent`).
pub const DEFAULT_VM_MEMORY_OVERHEAD_PERCENT: f64 = 0.075;

#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `--cluster-name` / `CLUSTER_NAME` (required): tags, discovery and ownership checks use it.
    pub cluster_name: String,
    /// `--cluster-endpoint` / `CLUSTER_ENDPOINT`: absolute URL; when absent it is discovered later
    /// through `eks:DescribeCluster`.
    pub cluster_endpoint: Option<String>,
    /// `--interruption-queue` / `INTERRUPTION_QUEUE`: the SQS queue *name*; interruption handling is
    /// off without it.
    pub interruption_queue: Option<String>,
    /// `--vm-memory-overhead-percent` / `VM_MEMORY_OVERHEAD_PERCENT` (≥ 0, a fraction: 0.075 = 7.5 %).
    pub vm_memory_overhead_percent: f64,
    /// `--reserved-enis` / `RESERVED_ENIS` (≥ 0): ENIs kept out of the max-pods computation.
    pub reserved_enis: u32,
    /// `--isolated-vpc` / `ISOLATED_VPC`: no public endpoints (pricing falls back to embedded data).
    pub isolated_vpc: bool,
    /// `--spot-rebalance-replace` / `SPOT_REBALANCE_REPLACE` (karpenter-rs, default off): a spot
    /// rebalance recommendation replaces the node as drift does, instead of an event only.
    pub spot_rebalance_replace: bool,
    /// Core's `ReservedCapacity` feature gate (`--feature-gates`, default on): capacity
    /// reservations are resolved and offered as the `reserved` capacity type.
    pub reserved_capacity: bool,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SettingsError {
    #[error("{setting} is required (the EKS cluster name; flag --cluster-name)")]
    Missing { setting: &'static str },
    #[error("{setting}={value:?} is invalid: {reason}")]
    Invalid {
        setting: &'static str,
        value: String,
        reason: String,
    },
}

impl Settings {
    /// Settings for `cluster_name` with upstream's defaults for everything else.
    pub fn new(cluster_name: impl Into<String>) -> Self {
        Self {
            cluster_name: cluster_name.into(),
            cluster_endpoint: None,
            interruption_queue: None,
            vm_memory_overhead_percent: DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
            reserved_enis: 0,
            isolated_vpc: false,
            spot_rebalance_replace: false,
            reserved_capacity: true,
        }
    }

    /// Reads the settings through `lookup` (normally `|k| std::env::var(k).ok()`, injectable for
    /// tests) and validates them. Empty values count as unset, as with upstream's flag defaults.
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let cluster_name = get(ENV_CLUSTER_NAME).ok_or(SettingsError::Missing {
            setting: ENV_CLUSTER_NAME,
        })?;
        let mut settings = Settings::new(cluster_name);
        settings.cluster_endpoint = get(ENV_CLUSTER_ENDPOINT);
        settings.interruption_queue = get(ENV_INTERRUPTION_QUEUE);
        if let Some(raw) = get(ENV_VM_MEMORY_OVERHEAD_PERCENT) {
            settings.vm_memory_overhead_percent =
                raw.parse::<f64>().map_err(|e| SettingsError::Invalid {
                    setting: ENV_VM_MEMORY_OVERHEAD_PERCENT,
                    value: raw.clone(),
                    reason: format!("not a number ({e})"),
                })?;
        }
        if let Some(raw) = get(ENV_RESERVED_ENIS) {
            settings.reserved_enis = raw.parse::<u32>().map_err(|e| SettingsError::Invalid {
                setting: ENV_RESERVED_ENIS,
                value: raw.clone(),
                reason: format!("must be an integer >= 0 ({e})"),
            })?;
        }
        if let Some(raw) = get(ENV_ISOLATED_VPC) {
            settings.isolated_vpc = parse_bool(&raw).ok_or_else(|| SettingsError::Invalid {
                setting: ENV_ISOLATED_VPC,
                value: raw.clone(),
                reason: "must be true or false".into(),
            })?;
        }
        if let Some(raw) = get(ENV_SPOT_REBALANCE_REPLACE) {
            settings.spot_rebalance_replace =
                parse_bool(&raw).ok_or_else(|| SettingsError::Invalid {
                    setting: ENV_SPOT_REBALANCE_REPLACE,
                    value: raw.clone(),
                    reason: "must be true or false".into(),
                })?;
        }
        settings.validate()?;
        Ok(settings)
    }

    /// Upstream's `options_validation.go` rules, for settings built by hand or from flags.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.cluster_name.trim().is_empty() {
            return Err(SettingsError::Missing {
                setting: ENV_CLUSTER_NAME,
            });
        }
        if let Some(endpoint) = &self.cluster_endpoint
            && !is_absolute_url(endpoint)
        {
            return Err(SettingsError::Invalid {
                setting: ENV_CLUSTER_ENDPOINT,
                value: endpoint.clone(),
                reason:
                    "must be an absolute URL such as https://ABC.gr7.us-west-2.eks.amazonaws.com"
                        .into(),
            });
        }
        let overhead = self.vm_memory_overhead_percent;
        if !overhead.is_finite() || overhead < 0.0 {
            return Err(SettingsError::Invalid {
                setting: ENV_VM_MEMORY_OVERHEAD_PERCENT,
                value: overhead.to_string(),
                reason: "must be a number >= 0".into(),
            });
        }
        Ok(())
    }
}

/// Go's `strconv.ParseBool` spellings, which upstream's env parsing accepts.
fn parse_bool(raw: &str) -> Option<bool> {
    match raw {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// `scheme://host...` with a non-empty scheme and host, like Go's `url.ParseRequestURI` + `IsAbs`.
fn is_absolute_url(raw: &str) -> bool {
    match raw.split_once("://") {
        Some((scheme, rest)) => {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
                && !rest.is_empty()
                && !rest.starts_with('/')
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        let env: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_env(|k| env.get(k).cloned())
    }

    #[test]
    fn cluster_name_is_required_and_named_in_the_error() {
        let err = from(&[]).unwrap_err();
        assert_eq!(
            err,
            SettingsError::Missing {
                setting: "CLUSTER_NAME"
            }
        );
        assert!(err.to_string().contains("CLUSTER_NAME is required"));
        assert!(from(&[("CLUSTER_NAME", "  ")]).is_err());
    }

    #[test]
    fn defaults_match_upstream() {
        let s = from(&[("CLUSTER_NAME", "my-cluster")]).unwrap();
        assert_eq!(s, Settings::new("my-cluster"));
        assert_eq!(s.vm_memory_overhead_percent, 0.075);
        assert_eq!(s.reserved_enis, 0);
        assert!(!s.isolated_vpc);
        assert!(!s.spot_rebalance_replace, "off by default");
        assert_eq!(s.cluster_endpoint, None);
        assert_eq!(s.interruption_queue, None);
    }

    #[test]
    fn every_setting_is_read() {
        let s = from(&[
            ("CLUSTER_NAME", "c"),
            ("CLUSTER_ENDPOINT", "https://abc.eks.amazonaws.com"),
            ("INTERRUPTION_QUEUE", "c-queue"),
            ("VM_MEMORY_OVERHEAD_PERCENT", "0"),
            ("RESERVED_ENIS", "1"),
            ("ISOLATED_VPC", "true"),
            ("SPOT_REBALANCE_REPLACE", "true"),
        ])
        .unwrap();
        assert_eq!(
            s.cluster_endpoint.as_deref(),
            Some("https://abc.eks.amazonaws.com")
        );
        assert_eq!(s.interruption_queue.as_deref(), Some("c-queue"));
        assert_eq!(s.vm_memory_overhead_percent, 0.0);
        assert_eq!(s.reserved_enis, 1);
        assert!(s.isolated_vpc);
        assert!(s.spot_rebalance_replace);
    }

    #[test]
    fn invalid_values_name_the_setting() {
        for (key, value) in [
            ("VM_MEMORY_OVERHEAD_PERCENT", "-0.1"),
            ("VM_MEMORY_OVERHEAD_PERCENT", "lots"),
            ("VM_MEMORY_OVERHEAD_PERCENT", "NaN"),
            ("RESERVED_ENIS", "-1"),
            ("ISOLATED_VPC", "yes"),
            ("SPOT_REBALANCE_REPLACE", "on"),
            ("CLUSTER_ENDPOINT", "abc.eks.amazonaws.com"),
        ] {
            let err = from(&[("CLUSTER_NAME", "c"), (key, value)]).unwrap_err();
            assert!(
                err.to_string().starts_with(key),
                "{key}={value}: error {err} does not name the setting"
            );
        }
    }
}
