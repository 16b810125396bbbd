//! AL2 (`/etc/eks/bootstrap.sh` in a MIME shell part) and Windows (`Start-EKSBootstrap.ps1` in a
//! PowerShell block): both pass the kubelet its settings as command-line flags.

use super::mime::{self, Part};
use super::{
    AmiFamily, BootstrapOptions, UserDataError, joined, node_labels, register_taints, taint_string,
};

/// The kubelet flags of AL2's `--kubelet-extra-args` and Windows' `-KubeletExtraArgs`, in
/// upstream's order.
pub(super) fn kubelet_extra_args(options: &BootstrapOptions, family: AmiFamily) -> String {
    let kubelet = &options.kubelet;
    let mut args = Vec::new();
    let labels = node_labels(options, family);
    if !labels.is_empty() {
        args.push(format!("--node-labels=\"{}\"", joined(&labels, "=")));
    }
    let taints = register_taints(options);
    args.push(format!(
        "--register-with-taints=\"{}\"",
        taints
            .iter()
            .map(taint_string)
            .collect::<Vec<_>>()
            .join(",")
    ));
    if let Some(max_pods) = kubelet.max_pods {
        args.push(format!("--max-pods={max_pods}"));
    }
    if let Some(pods_per_core) = kubelet.pods_per_core {
        args.push(format!("--pods-per-core={pods_per_core}"));
    }
    for (flag, map, separator) in [
        ("--system-reserved", &kubelet.system_reserved, "="),
        ("--kube-reserved", &kubelet.kube_reserved, "="),
        ("--eviction-hard", &kubelet.eviction_hard, "<"),
        ("--eviction-soft", &kubelet.eviction_soft, "<"),
        (
            "--eviction-soft-grace-period",
            &kubelet.eviction_soft_grace_period,
            "=",
        ),
    ] {
        if !map.is_empty() {
            args.push(format!("{flag}=\"{}\"", joined(map, separator)));
        }
    }
    if let Some(seconds) = kubelet.eviction_max_pod_grace_period {
        args.push(format!("--eviction-max-pod-grace-period={seconds}"));
    }
    if let Some(high) = kubelet.image_gc_high_threshold_percent {
        args.push(format!("--image-gc-high-threshold={high}"));
    }
    if let Some(low) = kubelet.image_gc_low_threshold_percent {
        args.push(format!("--image-gc-low-threshold={low}"));
    }
    if let Some(quota) = kubelet.cpu_cfs_quota {
        args.push(format!("--cpu-cfs-quota={quota}"));
    }
    args.join(" ")
}

fn ca_bundle<'a>(
    options: &'a BootstrapOptions,
    family: &'static str,
) -> Result<&'a str, UserDataError> {
    options.ca_bundle.as_deref().ok_or(UserDataError::Missing {
        family,
        what: "the cluster CA bundle",
    })
}

/// AL2: the user's parts (or their script as one part), then Karpenter's bootstrap part.
pub(super) fn al2(options: &BootstrapOptions) -> Result<String, UserDataError> {
    let ca = ca_bundle(options, "AL2")?;
    let mut script = format!(
        "#!/bin/bash -xe\n\
         exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n\
         /etc/eks/bootstrap.sh '{}' --apiserver-endpoint '{}' --b64-cluster-ca '{ca}'",
        options.cluster_name, options.cluster_endpoint
    );
    let dns = options.kubelet.cluster_dns.first();
    if dns.is_some_and(|ip| ip.contains(':')) {
        script.push_str(" \\\n--ip-family ipv6");
    }
    if let Some(dns) = dns {
        script.push_str(&format!(" \\\n--dns-cluster-ip '{dns}'"));
    }
    if options.kubelet.max_pods.is_some() {
        script.push_str(" \\\n--use-max-pods false");
    }
    script.push_str(&format!(
        " \\\n--kubelet-extra-args '{}'",
        kubelet_extra_args(options, AmiFamily::Al2)
    ));
    if options.instance_store_policy.as_deref() == Some("RAID0") {
        script.push_str(" \\\n--local-disks raid0");
    }
    let mut parts = user_parts(options.custom_user_data.as_deref())?;
    parts.push(Part {
        content_type: mime::SHELL_SCRIPT.to_string(),
        body: script,
    });
    Ok(mime::render(&parts))
}

/// The user's data as MIME parts: its own parts when it is MIME, else one shell-script part.
fn user_parts(user_data: Option<&str>) -> Result<Vec<Part>, UserDataError> {
    match user_data.map(str::trim).filter(|u| !u.is_empty()) {
        None => Ok(Vec::new()),
        Some(text) if mime::is_mime(text) => mime::parse(text),
        Some(text) => Ok(vec![Part {
            content_type: mime::SHELL_SCRIPT.to_string(),
            body: text.to_string(),
        }]),
    }
}

/// Windows: one PowerShell block running the user's script, then the EKS bootstrap script.
pub(super) fn windows(options: &BootstrapOptions) -> String {
    let mut script = String::from("<powershell>\n");
    if let Some(user) = options.custom_user_data.as_deref().map(str::trim) {
        // A user script may come wrapped in its own tags; the block is ours.
        let user = user
            .trim_start_matches("<powershell>")
            .trim_end_matches("</powershell>")
            .trim();
        if !user.is_empty() {
            script.push_str(user);
            script.push('\n');
        }
    }
    script.push_str(
        "[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n",
    );
    script.push_str(&format!(
        "& $EKSBootstrapScriptFile -EKSClusterName '{}' -APIServerEndpoint '{}'",
        options.cluster_name, options.cluster_endpoint
    ));
    if let Some(ca) = &options.ca_bundle {
        script.push_str(&format!(" -Base64ClusterCA '{ca}'"));
    }
    script.push_str(&format!(
        " -KubeletExtraArgs '{}'",
        kubelet_extra_args(options, AmiFamily::Windows2022)
    ));
    if let Some(dns) = options.kubelet.cluster_dns.first() {
        script.push_str(&format!(" -DNSClusterIP '{dns}'"));
    }
    script.push_str("\n</powershell>");
    script
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::test_support::options;
    use super::*;

    #[test]
    fn al2_calls_bootstrap_with_cluster_dns_max_pods_labels_and_taints() {
        let text = al2(&options()).unwrap();
        let parts = mime::parse(&text).unwrap();
        assert_eq!(parts.len(), 1);
        let script = &parts[0].body;
        assert_eq!(parts[0].content_type, mime::SHELL_SCRIPT);
        assert!(script.starts_with("#!/bin/bash -xe\n"));
        assert!(script.contains(
            "/etc/eks/bootstrap.sh 'my-cluster' --apiserver-endpoint \
             'https://ABC.gr7.us-west-2.eks.amazonaws.com' --b64-cluster-ca 'Y2EtYnVuZGxl'"
        ));
        assert!(script.contains("--dns-cluster-ip '10.100.0.10'"));
        assert!(script.contains("--use-max-pods false"));
        assert!(script.contains(
            "--kubelet-extra-args '--node-labels=\"karpenter.sh/capacity-type=spot,\
             karpenter.sh/do-not-sync-taints=true,karpenter.sh/nodepool=default,team=a\" \
             --register-with-taints=\"dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute\" \
             --max-pods=29'"
        ));
        assert!(!script.contains("ipv6"));
    }

    #[test]
    fn al2_keeps_user_parts_first_and_wraps_a_bare_script() {
        let mut o = options();
        o.custom_user_data = Some("#!/bin/bash\necho mine".into());
        let parts = mime::parse(&al2(&o).unwrap()).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].body, "#!/bin/bash\necho mine");
        assert!(parts[1].body.contains("/etc/eks/bootstrap.sh"));

        o.custom_user_data = Some(mime::render(&[
            Part {
                content_type: "text/cloud-config".into(),
                body: "#cloud-config\npackages: [jq]".into(),
            },
            Part {
                content_type: mime::SHELL_SCRIPT.into(),
                body: "echo two".into(),
            },
        ]));
        let parts = mime::parse(&al2(&o).unwrap()).unwrap();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].content_type, "text/cloud-config");
        assert_eq!(parts[1].body, "echo two");
    }

    #[test]
    fn kubelet_flags_follow_upstream_order() {
        let mut o = options();
        o.kubelet.pods_per_core = Some(4);
        o.kubelet.system_reserved = BTreeMap::from([("cpu".into(), "100m".into())]);
        o.kubelet.kube_reserved = BTreeMap::from([("memory".into(), "1Gi".into())]);
        o.kubelet.eviction_hard = BTreeMap::from([("memory.available".into(), "5%".into())]);
        o.kubelet.eviction_max_pod_grace_period = Some(30);
        o.kubelet.image_gc_high_threshold_percent = Some(85);
        o.kubelet.image_gc_low_threshold_percent = Some(80);
        o.kubelet.cpu_cfs_quota = Some(false);
        let args = kubelet_extra_args(&o, AmiFamily::Al2);
        let tail = args.split_once("--max-pods=29 ").unwrap().1;
        assert_eq!(
            tail,
            "--pods-per-core=4 --system-reserved=\"cpu=100m\" --kube-reserved=\"memory=1Gi\" \
             --eviction-hard=\"memory.available<5%\" --eviction-max-pod-grace-period=30 \
             --image-gc-high-threshold=85 --image-gc-low-threshold=80 --cpu-cfs-quota=false"
        );
    }

    #[test]
    fn al2_ipv6_dns_and_raid0() {
        let mut o = options();
        o.kubelet.cluster_dns = vec!["fd00::a".into()];
        o.instance_store_policy = Some("RAID0".into());
        let text = al2(&o).unwrap();
        assert!(text.contains("--ip-family ipv6"));
        assert!(text.contains("--local-disks raid0"));
        o.ca_bundle = None;
        assert!(al2(&o).unwrap_err().to_string().contains("CA bundle"));
    }

    #[test]
    fn windows_runs_the_user_script_then_the_bootstrap() {
        let mut o = options();
        o.custom_user_data = Some("<powershell>\nWrite-Host hi\n</powershell>".into());
        let text = windows(&o);
        assert!(text.starts_with("<powershell>\nWrite-Host hi\n[string]$EKSBootstrapScriptFile"));
        assert!(text.ends_with("-DNSClusterIP '10.100.0.10'\n</powershell>"));
        assert_eq!(text.matches("<powershell>").count(), 1);
        assert!(text.contains("-EKSClusterName 'my-cluster'"));
        assert!(text.contains("-Base64ClusterCA 'Y2EtYnVuZGxl'"));
        assert!(text.contains("-KubeletExtraArgs '--node-labels="));
    }
}
