//! The Grafana dashboards the chart ships (`charts/karpenter/dashboards/*.json`): every panel's
//! PromQL reads only metrics the controller exports, and every panel is described in
//! `docs/metrics.md`. (A real Prometheus evaluates them in `prometheus.rs`.)

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

pub const DASHBOARDS: [&str; 3] = ["capacity", "performance", "cost"];

/// One query of one panel.
#[derive(Debug, Clone)]
pub struct PanelQuery {
    pub dashboard: String,
    pub panel: String,
    pub expr: String,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn dashboard(name: &str) -> Value {
    let path = repo().join(format!("charts/karpenter/dashboards/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every panel's every target, in dashboard order.
pub fn queries() -> Vec<PanelQuery> {
    let mut out = Vec::new();
    for name in DASHBOARDS {
        let d = dashboard(name);
        for panel in d["panels"].as_array().unwrap() {
            let title = panel["title"].as_str().unwrap().to_string();
            let targets = panel["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "{name}: panel {title} has no query");
            for target in targets {
                out.push(PanelQuery {
                    dashboard: d["title"].as_str().unwrap().to_string(),
                    panel: title.clone(),
                    expr: target["expr"].as_str().unwrap().to_string(),
                });
            }
        }
    }
    out
}

/// The query as Prometheus runs it: Grafana's variables replaced (`$__rate_interval` by 1m,
/// a `=~"$var"` matcher by "all values").
pub fn concrete(expr: &str) -> String {
    let re = regex::Regex::new(r"\$[a-z_]+").unwrap();
    re.replace_all(&expr.replace("$__rate_interval", "1m"), ".*")
        .into_owned()
}

const PROMQL_WORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "topk",
    "bottomk",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "rate",
    "increase",
    "irate",
    "histogram_quantile",
    "vector",
    "label_replace",
    "label_values",
    "clamp_min",
    "clamp_max",
    "abs",
    "time",
    "quantile",
];

/// The metric names a PromQL expression reads (label matchers, grouping labels, strings,
/// durations and function names left out).
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let strings = regex::Regex::new(r#""[^"]*""#).unwrap();
    let braces = regex::Regex::new(r"\{[^}]*\}").unwrap();
    let ranges = regex::Regex::new(r"\[[^\]]*\]").unwrap();
    let grouping =
        regex::Regex::new(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
            .unwrap();
    let ident = regex::Regex::new(r"[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?").unwrap();
    let e = strings.replace_all(expr, "\"\"");
    let e = braces.replace_all(&e, " ");
    let e = ranges.replace_all(&e, " ");
    let e = grouping.replace_all(&e, " ");
    ident
        .find_iter(&e)
        .map(|m| m.as_str())
        .filter(|m| !m.ends_with('('))
        .filter(|m| !PROMQL_WORDS.contains(m))
        .map(str::to_string)
        .collect()
}

/// The family a series name belongs to (a histogram's or summary's `_bucket`/`_sum`/`_count`).
pub fn family_of(series: &str, families: &BTreeSet<String>) -> Option<String> {
    if families.contains(series) {
        return Some(series.to_string());
    }
    ["_bucket", "_sum", "_count"]
        .iter()
        .filter_map(|suffix| series.strip_suffix(suffix))
        .find(|base| families.contains(*base))
        .map(str::to_string)
}

fn exported() -> BTreeSet<String> {
    karpenter_controller::metrics::Metrics::new()
        .catalog()
        .iter()
        .map(|f| f.name.clone())
        .collect()
}

#[test]
fn names_are_read_from_promql() {
    let names = metric_names(
        r#"sum by (nodepool) (rate(karpenter_nodes_created_total{nodepool=~"$nodepool"}[5m])) / on (nodepool) group_left () max(karpenter_nodepools_limit{resource_type="cpu"}) or vector(0)"#,
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["karpenter_nodepools_limit", "karpenter_nodes_created_total"]
    );
    let families: BTreeSet<String> = ["a_seconds".to_string()].into();
    assert_eq!(
        family_of("a_seconds_bucket", &families).as_deref(),
        Some("a_seconds")
    );
    assert_eq!(family_of("b_total", &families), None);
}

#[test]
fn every_panel_reads_only_exported_metrics() {
    let exported = exported();
    let queries = queries();
    assert!(queries.len() >= 30, "{} queries", queries.len());
    let mut problems = Vec::new();
    for q in &queries {
        let names = metric_names(&q.expr);
        if names.is_empty() {
            problems.push(format!(
                "{} / {}: no metric in {}",
                q.dashboard, q.panel, q.expr
            ));
        }
        for name in names {
            if family_of(&name, &exported).is_none() {
                problems.push(format!(
                    "{} / {}: {name} is not exported",
                    q.dashboard, q.panel
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_panel_is_described_in_the_docs() {
    let docs = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    for name in DASHBOARDS {
        let d = dashboard(name);
        assert!(docs.contains(d["title"].as_str().unwrap()), "{name}");
        for panel in d["panels"].as_array().unwrap() {
            let title = panel["title"].as_str().unwrap();
            assert!(
                docs.contains(&format!("**{title}**")),
                "docs/metrics.md does not describe panel {title:?} of {name}"
            );
        }
    }
}
