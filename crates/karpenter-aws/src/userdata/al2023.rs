//! AL2023: nodeadm reads `NodeConfig` documents from the MIME parts of the user data and merges
//! them in order; Karpenter's goes last so its cluster and kubelet settings win.

use std::collections::BTreeMap;

use serde::Serialize;

use super::mime::{self, Part};
use super::{AmiFamily, BootstrapOptions, UserDataError, joined, node_labels, register_taints};

/// First line of Karpenter's part, as upstream writes it (and users grep for).
pub const HEADER: &str = "# Karpenter Generated NodeConfig";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeConfig {
    api_version: &'static str,
    kind: &'static str,
    spec: NodeConfigSpec,
}

#[derive(Serialize)]
struct NodeConfigSpec {
    cluster: ClusterDetails,
    #[serde(skip_serializing_if = "Option::is_none")]
    instance: Option<InstanceOptions>,
    kubelet: KubeletOptions,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClusterDetails {
    name: String,
    api_server_endpoint: String,
    certificate_authority: String,
    cidr: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InstanceOptions {
    local_storage: LocalStorage,
}

#[derive(Serialize)]
struct LocalStorage {
    strategy: String,
}

#[derive(Serialize)]
struct KubeletOptions {
    config: serde_json::Map<String, serde_json::Value>,
    flags: Vec<String>,
}

fn node_config(options: &BootstrapOptions) -> Result<NodeConfig, UserDataError> {
    let missing = |what| UserDataError::Missing {
        family: "AL2023",
        what,
    };
    // The kubelet section is the typed configuration as camelCase JSON plus the taints.
    let mut config = match serde_json::to_value(&options.kubelet) {
        Ok(serde_json::Value::Object(map)) => map,
        Ok(_) => serde_json::Map::new(),
        Err(e) => return Err(UserDataError::Yaml(e.to_string())),
    };
    let taints: Vec<serde_json::Value> = register_taints(options)
        .iter()
        .map(|t| {
            let mut taint = serde_json::Map::new();
            taint.insert("key".into(), t.key.clone().into());
            if let Some(value) = t.value.as_ref().filter(|v| !v.is_empty()) {
                taint.insert("value".into(), value.clone().into());
            }
            taint.insert("effect".into(), t.effect.clone().into());
            serde_json::Value::Object(taint)
        })
        .collect();
    config.insert(
        "registerWithTaints".into(),
        serde_json::Value::Array(taints),
    );
    let labels: BTreeMap<String, String> = node_labels(options, AmiFamily::Al2023);
    Ok(NodeConfig {
        api_version: "node.eks.aws/v1alpha1",
        kind: "NodeConfig",
        spec: NodeConfigSpec {
            cluster: ClusterDetails {
                name: options.cluster_name.clone(),
                api_server_endpoint: options.cluster_endpoint.clone(),
                certificate_authority: options
                    .ca_bundle
                    .clone()
                    .ok_or_else(|| missing("the cluster CA bundle"))?,
                cidr: options
                    .cluster_cidr
                    .clone()
                    .ok_or_else(|| missing("the cluster's service CIDR"))?,
            },
            instance: options
                .instance_store_policy
                .as_ref()
                .filter(|p| p.as_str() == "RAID0")
                .map(|p| InstanceOptions {
                    local_storage: LocalStorage {
                        strategy: p.clone(),
                    },
                }),
            kubelet: KubeletOptions {
                config,
                flags: vec![format!("--node-labels={}", joined(&labels, "="))],
            },
        },
    })
}

/// The user's parts (a bare document becomes one part: a NodeConfig when it parses as YAML, else
/// a shell script), then Karpenter's NodeConfig.
pub(super) fn render(options: &BootstrapOptions) -> Result<String, UserDataError> {
    let yaml = serde_saphyr::to_string(&node_config(options)?)
        .map_err(|e| UserDataError::Yaml(e.to_string()))?;
    let mut parts = match options
        .custom_user_data
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        None => Vec::new(),
        Some(text) if mime::is_mime(text) => mime::parse(text)?,
        Some(text) => {
            let is_yaml_mapping = !text.starts_with("#!")
                && serde_saphyr::from_str::<BTreeMap<String, serde_json::Value>>(text).is_ok();
            vec![Part {
                content_type: if is_yaml_mapping {
                    mime::NODE_CONFIG.to_string()
                } else {
                    mime::SHELL_SCRIPT.to_string()
                },
                body: text.to_string(),
            }]
        }
    };
    parts.push(Part {
        content_type: mime::NODE_CONFIG.to_string(),
        body: format!("{HEADER}\n{}", yaml.trim_end()),
    });
    Ok(mime::render(&parts))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::options;
    use super::*;

    fn karpenter_node_config(text: &str) -> serde_json::Value {
        let parts = mime::parse(text).unwrap();
        let last = parts.last().unwrap();
        assert_eq!(last.content_type, mime::NODE_CONFIG);
        assert!(last.body.starts_with(HEADER));
        serde_saphyr::from_str(&last.body).unwrap()
    }

    #[test]
    fn node_config_carries_cluster_kubelet_labels_and_taints() {
        let config = karpenter_node_config(&render(&options()).unwrap());
        assert_eq!(config["apiVersion"], "node.eks.aws/v1alpha1");
        assert_eq!(config["kind"], "NodeConfig");
        let cluster = &config["spec"]["cluster"];
        assert_eq!(cluster["name"], "my-cluster");
        assert_eq!(
            cluster["apiServerEndpoint"],
            "https://ABC.gr7.us-west-2.eks.amazonaws.com"
        );
        assert_eq!(cluster["certificateAuthority"], "Y2EtYnVuZGxl");
        assert_eq!(cluster["cidr"], "10.100.0.0/16");
        let kubelet = &config["spec"]["kubelet"];
        assert_eq!(kubelet["config"]["maxPods"], 29);
        assert_eq!(kubelet["config"]["clusterDNS"][0], "10.100.0.10");
        assert_eq!(
            kubelet["config"]["registerWithTaints"],
            serde_json::json!([
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}
            ])
        );
        assert_eq!(
            kubelet["flags"][0],
            "--node-labels=karpenter.sh/capacity-type=spot,karpenter.sh/do-not-sync-taints=true,\
             karpenter.sh/nodepool=default,team=a"
        );
        assert!(config["spec"].get("instance").is_none());
    }

    #[test]
    fn user_node_config_comes_first_and_a_script_stays_a_script() {
        let mut o = options();
        o.custom_user_data = Some(
            "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      maxPods: 5"
                .into(),
        );
        o.instance_store_policy = Some("RAID0".into());
        let text = render(&o).unwrap();
        let parts = mime::parse(&text).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].content_type, mime::NODE_CONFIG);
        assert!(parts[0].body.contains("maxPods: 5"));
        let config = karpenter_node_config(&text);
        assert_eq!(
            config["spec"]["instance"]["localStorage"]["strategy"],
            "RAID0"
        );

        o.custom_user_data = Some("#!/bin/bash\necho hi".into());
        let parts = mime::parse(&render(&o).unwrap()).unwrap();
        assert_eq!(parts[0].content_type, mime::SHELL_SCRIPT);
    }

    #[test]
    fn missing_cidr_is_an_error() {
        let mut o = options();
        o.cluster_cidr = None;
        assert!(render(&o).unwrap_err().to_string().contains("service CIDR"));
    }
}
