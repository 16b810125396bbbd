//! Our metrics against upstream's list (`tests/data/upstream_metrics.tsv`, a copy of upstream's
//! metrics reference with each family's type and labels): every upstream name is exported with
//! the same type (and the same labels, or a documented difference), or is not applicable here
//! for a stated reason. `docs/metrics.md` repeats the reasons.

use std::collections::BTreeSet;

use super::Metrics;

const UPSTREAM: &str = include_str!("../../tests/data/upstream_metrics.tsv");

/// Upstream names with no counterpart here, and why.
pub const NOT_APPLICABLE: &[(&str, &str)] = &[
    (
        "karpenter_nodepools_cost_tracker_errors_total",
        "the cost is recomputed from the provider's catalogue at every scrape: there is no incremental tracker to fail (a node the catalogue cannot price counts 0)",
    ),
    (
        "karpenter_cloudprovider_instance_launch_failures_total",
        "the aws provider launches one instance per CreateFleet call and returns its error to the controller; launch errors are karpenter_cloudprovider_errors_total{method=\"Create\"} (no per-offering zone_id errors are surfaced)",
    ),
    (
        "karpenter_cloudprovider_instance_termination_failures_total",
        "termination errors are karpenter_cloudprovider_errors_total{method=\"Delete\"}; the aws provider does not surface the zone_id of a failed TerminateInstances",
    ),
    (
        "karpenter_cloudprovider_batcher_batch_time_seconds",
        "the aws provider does not batch EC2 calls (no batcher)",
    ),
    (
        "karpenter_cloudprovider_batcher_batch_size",
        "the aws provider does not batch EC2 calls (no batcher)",
    ),
    (
        "karpenter_interruption_instance_status_unhealthy_total",
        "the aws provider does not poll EC2 DescribeInstanceStatus; unhealthy nodes come from node repair (karpenter_nodeclaims_unhealthy_disrupted_total)",
    ),
    (
        "controller_runtime_conversion_webhook_panics_total",
        "karpenter-rs serves no conversion webhook (only the v1 API versions)",
    ),
    (
        "aws_sdk_go_request_total",
        "the aws provider uses the AWS SDK for Rust, not Go; its calls are timed per method in karpenter_cloudprovider_duration_seconds",
    ),
    (
        "aws_sdk_go_request_retry_count",
        "the AWS SDK for Rust, not Go (see aws_sdk_go_request_total)",
    ),
    (
        "aws_sdk_go_request_duration_seconds",
        "the AWS SDK for Rust, not Go (see aws_sdk_go_request_total)",
    ),
    (
        "aws_sdk_go_request_attempt_total",
        "the AWS SDK for Rust, not Go (see aws_sdk_go_request_total)",
    ),
    (
        "aws_sdk_go_request_attempt_duration_seconds",
        "the AWS SDK for Rust, not Go (see aws_sdk_go_request_total)",
    ),
    (
        "leader_election_slowpath_total",
        "client-go's slow path (a full Get and Update when its cached Lease is stale) has no counterpart: every renewal here replaces the Lease read with its resourceVersion",
    ),
];

/// Families a provider registers when its replica starts (not in [`Metrics::catalog`]).
pub const PROVIDER_FAMILIES: &[(&str, &str, &[&str], &str)] = &[
    (
        "karpenter_interruption_received_messages_total",
        "counter",
        &["message_type"],
        "aws (with INTERRUPTION_QUEUE)",
    ),
    (
        "karpenter_interruption_deleted_messages_total",
        "counter",
        &[],
        "aws (with INTERRUPTION_QUEUE)",
    ),
    (
        "karpenter_interruption_message_queue_duration_seconds",
        "histogram",
        &[],
        "aws (with INTERRUPTION_QUEUE)",
    ),
];

/// Exported families whose labels differ from upstream's, and why (none today).
pub const LABEL_DIFFERENCES: &[(&str, &str)] = &[];

#[derive(Debug)]
struct Upstream {
    name: String,
    kind: String,
    labels: BTreeSet<String>,
}

fn upstream() -> Vec<Upstream> {
    UPSTREAM
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 3, "bad line {l:?}");
            Upstream {
                name: cols[0].into(),
                kind: cols[1].into(),
                labels: if cols[2] == "-" {
                    BTreeSet::new()
                } else {
                    cols[2].split(',').map(str::to_string).collect()
                },
            }
        })
        .collect()
}

/// (name, type, labels, where) of everything we export.
fn ours() -> Vec<(String, String, BTreeSet<String>, String)> {
    let m = Metrics::new();
    let mut out: Vec<_> = m
        .catalog()
        .iter()
        .map(|f| {
            (
                f.name.clone(),
                f.kind.to_string(),
                f.labels.iter().map(|l| (*l).to_string()).collect(),
                "controller".to_string(),
            )
        })
        .collect();
    for (name, kind, labels, provider) in PROVIDER_FAMILIES {
        out.push((
            (*name).into(),
            (*kind).into(),
            labels.iter().map(|l| (*l).to_string()).collect(),
            format!("provider {provider}"),
        ));
    }
    out
}

#[test]
fn every_upstream_metric_is_exported_or_not_applicable() {
    let upstream = upstream();
    assert_eq!(upstream.len(), 126, "upstream's v1.14 page lists 126 names");
    let ours = ours();
    let mut problems = Vec::new();
    let (mut exported, mut not_applicable) = (0, 0);
    println!("{:<72} {:<10} status", "upstream metric", "type");
    for u in &upstream {
        let mine = ours.iter().find(|o| o.0 == u.name);
        let na = NOT_APPLICABLE.iter().find(|(n, _)| *n == u.name);
        let status = match (mine, na) {
            (Some(_), Some(_)) => {
                problems.push(format!("{} is both exported and not applicable", u.name));
                "BOTH".to_string()
            }
            (None, None) => {
                problems.push(format!("{} is neither exported nor not applicable", u.name));
                "MISSING".to_string()
            }
            (None, Some((_, why))) => {
                not_applicable += 1;
                format!("not applicable: {why}")
            }
            (Some((_, kind, labels, source)), None) => {
                exported += 1;
                if *kind != u.kind {
                    problems.push(format!("{}: type {kind}, upstream {}", u.name, u.kind));
                }
                let difference = LABEL_DIFFERENCES.iter().find(|(n, _)| *n == u.name);
                match (labels == &u.labels, difference) {
                    (true, None) => format!("exported ({source})"),
                    (false, Some((_, why))) => format!("exported ({source}); labels differ: {why}"),
                    (true, Some(_)) => {
                        problems.push(format!(
                            "{}: listed as a label difference but equal",
                            u.name
                        ));
                        "exported".into()
                    }
                    (false, None) => {
                        problems.push(format!(
                            "{}: labels {labels:?}, upstream {:?}",
                            u.name, u.labels
                        ));
                        "exported (LABELS DIFFER)".into()
                    }
                }
            }
        };
        println!("{:<72} {:<10} {status}", u.name, u.kind);
    }
    println!(
        "{} upstream metrics: {exported} exported, {not_applicable} not applicable",
        upstream.len()
    );
    for (name, _) in NOT_APPLICABLE.iter().chain(LABEL_DIFFERENCES) {
        if !upstream.iter().any(|u| u.name == *name) {
            problems.push(format!("{name} is listed here but not on upstream's page"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_catalog_is_what_the_first_scrape_shows() {
    let m = Metrics::new();
    let text = m.encode();
    let types: BTreeSet<(String, String)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| {
            let (name, kind) = l.split_once(' ')?;
            Some((name.to_string(), kind.to_string()))
        })
        .collect();
    for family in m.catalog() {
        // OpenMetrics names a counter family without its `_total`.
        let name = if family.kind == "counter" {
            family.name.trim_end_matches("_total").to_string()
        } else {
            family.name.clone()
        };
        assert!(
            types.contains(&(name.clone(), family.kind.to_string())),
            "# TYPE {name} {} missing from the first scrape",
            family.kind
        );
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "# HELP {name} missing"
        );
    }
    assert_eq!(
        types.len(),
        m.catalog().len(),
        "a family outside the catalog"
    );
}

#[test]
fn the_docs_list_every_metric_and_every_reason() {
    let docs = include_str!("../../../../docs/metrics.md");
    for family in Metrics::new().catalog() {
        assert!(
            docs.contains(&format!("`{}`", family.name)),
            "docs/metrics.md does not list {}",
            family.name
        );
    }
    for (name, _) in NOT_APPLICABLE {
        assert!(
            docs.contains(&format!("`{name}`")),
            "docs/metrics.md does not say why {name} is not applicable"
        );
    }
}
