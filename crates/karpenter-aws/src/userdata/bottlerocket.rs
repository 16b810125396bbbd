//! Bottlerocket: one TOML settings document. The user's tables are kept; under
//! `settings.kubernetes` Karpenter's keys win, its labels are merged over the user's and its
//! taints replace theirs (the node must register with exactly the NodeClaim's taints).

use toml::{Table, Value};

use super::{
    AmiFamily, BootstrapOptions, UserDataError, node_labels, register_taints, taint_string,
};

/// The table at `path`, created as needed; a scalar in the way is the user's mistake.
fn table_at<'a>(root: &'a mut Table, path: &[&str]) -> Result<&'a mut Table, UserDataError> {
    let mut table = root;
    for key in path {
        table = table
            .entry((*key).to_string())
            .or_insert_with(|| Value::Table(Table::new()))
            .as_table_mut()
            .ok_or_else(|| UserDataError::Toml(format!("`{key}` must be a table")))?;
    }
    Ok(table)
}

fn string_table(map: &std::collections::BTreeMap<String, String>) -> Value {
    Value::Table(
        map.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

pub(super) fn render(options: &BootstrapOptions) -> Result<String, UserDataError> {
    let mut root: Table = match options.custom_user_data.as_deref().map(str::trim) {
        Some(text) if !text.is_empty() => {
            toml::from_str(text).map_err(|e| UserDataError::Toml(e.to_string()))?
        }
        _ => Table::new(),
    };
    let kubernetes = table_at(&mut root, &["settings", "kubernetes"])?;
    let kubelet = &options.kubelet;
    kubernetes.insert(
        "cluster-name".into(),
        Value::String(options.cluster_name.clone()),
    );
    kubernetes.insert(
        "api-server".into(),
        Value::String(options.cluster_endpoint.clone()),
    );
    if let Some(ca) = &options.ca_bundle {
        kubernetes.insert("cluster-certificate".into(), Value::String(ca.clone()));
    }
    if let Some(dns) = kubelet.cluster_dns.first() {
        kubernetes.insert("cluster-dns-ip".into(), Value::String(dns.clone()));
    }
    if let Some(max_pods) = kubelet.max_pods {
        kubernetes.insert("max-pods".into(), Value::Integer(i64::from(max_pods)));
    }
    for (key, map) in [
        ("system-reserved", &kubelet.system_reserved),
        ("kube-reserved", &kubelet.kube_reserved),
        ("eviction-hard", &kubelet.eviction_hard),
        ("eviction-soft", &kubelet.eviction_soft),
        (
            "eviction-soft-grace-period",
            &kubelet.eviction_soft_grace_period,
        ),
    ] {
        if !map.is_empty() {
            kubernetes.insert(key.into(), string_table(map));
        }
    }
    if let Some(seconds) = kubelet.eviction_max_pod_grace_period {
        kubernetes.insert(
            "eviction-max-pod-grace-period".into(),
            Value::Integer(i64::from(seconds)),
        );
    }
    if let Some(high) = kubelet.image_gc_high_threshold_percent {
        kubernetes.insert(
            "image-gc-high-threshold-percent".into(),
            Value::String(high.to_string()),
        );
    }
    if let Some(low) = kubelet.image_gc_low_threshold_percent {
        kubernetes.insert(
            "image-gc-low-threshold-percent".into(),
            Value::String(low.to_string()),
        );
    }
    if let Some(quota) = kubelet.cpu_cfs_quota {
        kubernetes.insert("cpu-cfs-quota-enforced".into(), Value::Boolean(quota));
    }
    let labels = table_at(kubernetes, &["node-labels"])?;
    for (k, v) in node_labels(options, AmiFamily::Bottlerocket) {
        labels.insert(k, Value::String(v));
    }
    // Taints are replaced, grouped by key: `key = ["value:Effect", ...]`.
    let mut taints = Table::new();
    for taint in register_taints(options) {
        let rendered = taint_string(&taint);
        let value_and_effect = rendered
            .split_once('=')
            .filter(|_| taint.value.as_deref().is_some_and(|v| !v.is_empty()))
            .map_or_else(
                || format!(":{}", taint.effect),
                |(_, rest)| rest.to_string(),
            );
        if let Value::Array(list) = taints
            .entry(taint.key.clone())
            .or_insert_with(|| Value::Array(Vec::new()))
        {
            list.push(Value::String(value_and_effect));
        }
    }
    kubernetes.insert("node-taints".into(), Value::Table(taints));
    if options.instance_store_policy.as_deref() == Some("RAID0") {
        let command = |args: &[&str]| {
            Value::Array(
                args.iter()
                    .map(|a| Value::String((*a).to_string()))
                    .collect(),
            )
        };
        let mount = table_at(
            &mut root,
            &[
                "settings",
                "bootstrap-commands",
                "000-mount-instance-storage",
            ],
        )?;
        mount.insert(
            "commands".into(),
            Value::Array(vec![
                command(&["apiclient", "ephemeral-storage", "init"]),
                command(&["apiclient", "ephemeral-storage", "bind"]),
            ]),
        );
        mount.insert("mode".into(), Value::String("always".into()));
        mount.insert("essential".into(), Value::Boolean(true));
    }
    toml::to_string(&root).map_err(|e| UserDataError::Toml(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::options;
    use super::*;

    fn parsed(options: &BootstrapOptions) -> Table {
        toml::from_str(&render(options).unwrap()).unwrap()
    }

    #[test]
    fn settings_carry_cluster_kubelet_labels_and_taints() {
        let root = parsed(&options());
        let k = root["settings"]["kubernetes"].as_table().unwrap();
        assert_eq!(k["cluster-name"].as_str(), Some("my-cluster"));
        assert_eq!(
            k["api-server"].as_str(),
            Some("https://ABC.gr7.us-west-2.eks.amazonaws.com")
        );
        assert_eq!(k["cluster-certificate"].as_str(), Some("Y2EtYnVuZGxl"));
        assert_eq!(k["cluster-dns-ip"].as_str(), Some("10.100.0.10"));
        assert_eq!(k["max-pods"].as_integer(), Some(29));
        assert_eq!(k["node-labels"]["team"].as_str(), Some("a"));
        assert_eq!(
            k["node-labels"]["karpenter.sh/do-not-sync-taints"].as_str(),
            Some("true")
        );
        assert_eq!(
            k["node-taints"]["dedicated"].as_array().unwrap(),
            &vec![Value::String("gpu:NoSchedule".into())]
        );
        assert_eq!(
            k["node-taints"]["karpenter.sh/unregistered"]
                .as_array()
                .unwrap(),
            &vec![Value::String(":NoExecute".into())]
        );
    }

    #[test]
    fn user_tables_merge_and_karpenter_wins() {
        let mut o = options();
        o.custom_user_data = Some(
            "[settings.kubernetes]\nmax-pods = 7\ncluster-name = \"theirs\"\n\
             [settings.kubernetes.node-labels]\nteam = \"b\"\nmine = \"yes\"\n\
             [settings.kubernetes.node-taints]\nold = [\"x:NoSchedule\"]\n\
             [settings.host-containers.admin]\nenabled = true\n"
                .into(),
        );
        o.kubelet.image_gc_high_threshold_percent = Some(85);
        o.instance_store_policy = Some("RAID0".into());
        let root = parsed(&o);
        let k = root["settings"]["kubernetes"].as_table().unwrap();
        assert_eq!(k["max-pods"].as_integer(), Some(29));
        assert_eq!(k["cluster-name"].as_str(), Some("my-cluster"));
        assert_eq!(k["node-labels"]["team"].as_str(), Some("a"));
        assert_eq!(k["node-labels"]["mine"].as_str(), Some("yes"));
        assert!(k["node-taints"].get("old").is_none());
        assert_eq!(k["image-gc-high-threshold-percent"].as_str(), Some("85"));
        assert_eq!(
            root["settings"]["host-containers"]["admin"]["enabled"].as_bool(),
            Some(true)
        );
        let mount = &root["settings"]["bootstrap-commands"]["000-mount-instance-storage"];
        assert_eq!(mount["mode"].as_str(), Some("always"));
        assert_eq!(mount["commands"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn invalid_toml_is_an_error() {
        let mut o = options();
        o.custom_user_data = Some("[settings\n".into());
        assert!(matches!(render(&o), Err(UserDataError::Toml(_))));
        o.custom_user_data = Some("settings = 5\n".into());
        assert!(
            render(&o)
                .unwrap_err()
                .to_string()
                .contains("`settings` must be a table")
        );
    }
}
