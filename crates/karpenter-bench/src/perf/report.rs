//! What `karpenter-bench perf` prints: each phase beside upstream's thresholds.

use serde::Serialize;

use super::scenarios::Limits;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScenarioReport {
    pub scenario: String,
    pub upstream: String,
    /// The control plane's version (`kube-apiserver`).
    pub kubernetes: String,
    /// The controller's peak resident memory over the whole scenario (`VmHWM`), MiB.
    pub peak_rss_mib: Option<f64>,
    pub phases: Vec<PhaseReport>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseReport {
    /// Upstream's threshold key (`basic/scaleOut`).
    pub key: String,
    pub kind: String,
    /// Healthy pods at the end.
    pub pods: usize,
    pub nodes_before: usize,
    pub nodes_after: usize,
    /// From the phase's first write to its end: every pod Running (scale-out, drift), or the
    /// last node change before the settle window (consolidation).
    pub seconds: f64,
    /// From the phase's first write to the last pod's `PodScheduled` (scale-out: when the last
    /// pod was bound).
    pub last_bound_seconds: Option<f64>,
    /// From the phase's first write to the last pod's creation (the ReplicaSet controller's
    /// pace: what no autoscaler can shorten).
    pub last_created_seconds: Option<f64>,
    /// P95 of the controller's resident memory during the phase, MiB.
    pub memory_p95_mib: Option<f64>,
    /// The controller's average CPU during the phase, cores.
    pub cpu_avg_cores: Option<f64>,
    /// The pods' requests over the nodes' allocatable at the end.
    pub cpu_util: Option<f64>,
    pub memory_util: Option<f64>,
    pub limits: LimitsReport,
}

/// Upstream's thresholds, as numbers (`thresholds.go` defaults).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitsReport {
    pub seconds: Option<f64>,
    pub memory_mb: Option<f64>,
    pub cpu_cores: Option<f64>,
    pub cpu_util: Option<f64>,
    pub memory_util: Option<f64>,
}

impl From<Limits> for LimitsReport {
    fn from(l: Limits) -> Self {
        Self {
            seconds: l.total.map(|d| d.as_secs_f64()),
            memory_mb: l.memory_mb,
            cpu_cores: l.cpu_cores,
            cpu_util: l.cpu_util,
            memory_util: l.memory_util,
        }
    }
}

impl PhaseReport {
    /// One line for the progress output.
    pub fn summary(&self) -> String {
        format!(
            "{} pods, {} → {} nodes, {:.1} s (upstream's limit {}), memory p95 {}, CPU {}",
            self.pods,
            self.nodes_before,
            self.nodes_after,
            self.seconds,
            opt(self.limits.seconds, |s| format!("{s:.0} s")),
            opt(self.memory_p95_mib, |m| format!("{m:.0} MiB")),
            opt(self.cpu_avg_cores, |c| format!("{c:.2} cores")),
        )
    }

    /// Whether every measure is within upstream's threshold, and the duration within half of it
    /// (issue 34's target).
    pub fn verdict(&self) -> &'static str {
        let within = |ours: Option<f64>, limit: Option<f64>, fraction: f64| match (ours, limit) {
            (Some(o), Some(l)) => o <= l * fraction,
            _ => true,
        };
        let at_least = |ours: Option<f64>, limit: Option<f64>| match (ours, limit) {
            (Some(o), Some(l)) => o >= l,
            _ => true,
        };
        let memory_mb = self.memory_p95_mib.map(|m| m * 1.048_576);
        if !within(Some(self.seconds), self.limits.seconds, 1.0)
            || !within(memory_mb, self.limits.memory_mb, 1.0)
            || !within(self.cpu_avg_cores, self.limits.cpu_cores, 1.0)
            || !at_least(self.cpu_util, self.limits.cpu_util)
            || !at_least(self.memory_util, self.limits.memory_util)
        {
            "over upstream's limit"
        } else if within(Some(self.seconds), self.limits.seconds, 0.5) {
            "ok (time ≤ ½ limit)"
        } else {
            "ok"
        }
    }
}

fn opt(value: Option<f64>, show: impl Fn(f64) -> String) -> String {
    value.map_or_else(|| "—".to_string(), show)
}

/// The table: one row per phase, ours beside upstream's threshold in brackets.
pub fn table(reports: &[ScenarioReport]) -> String {
    let header = [
        "phase",
        "pods",
        "nodes",
        "time s [limit]",
        "last created s",
        "last bound s",
        "mem p95 MiB [MB]",
        "CPU cores [limit]",
        "CPU util [≥]",
        "mem util [≥]",
        "verdict",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    for report in reports {
        for p in &report.phases {
            let pct = |v: Option<f64>| opt(v, |x| format!("{:.0}%", x * 100.0));
            rows.push(vec![
                p.key.clone(),
                p.pods.to_string(),
                format!("{}→{}", p.nodes_before, p.nodes_after),
                format!(
                    "{:.1} [{}]",
                    p.seconds,
                    opt(p.limits.seconds, |s| format!("{s:.0}"))
                ),
                opt(p.last_created_seconds, |s| format!("{s:.0}")),
                opt(p.last_bound_seconds, |s| format!("{s:.0}")),
                format!(
                    "{} [{}]",
                    opt(p.memory_p95_mib, |m| format!("{m:.0}")),
                    opt(p.limits.memory_mb, |m| format!("{m:.0}"))
                ),
                format!(
                    "{} [{}]",
                    opt(p.cpu_avg_cores, |c| format!("{c:.2}")),
                    opt(p.limits.cpu_cores, |c| format!("{c:.2}"))
                ),
                format!("{} [{}]", pct(p.cpu_util), pct(p.limits.cpu_util)),
                format!("{} [{}]", pct(p.memory_util), pct(p.limits.memory_util)),
                p.verdict().to_string(),
            ]);
        }
    }
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w.saturating_sub(c.chars().count()))))
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(header.iter().map(|h| (*h).to_string()).collect());
    for row in rows {
        out.push_str(&line(row));
    }
    for report in reports {
        out.push_str(&format!(
            "{}: controller peak RSS {} over the scenario (Kubernetes {}; upstream: {})\n",
            report.scenario,
            opt(report.peak_rss_mib, |m| format!("{m:.1} MiB")),
            report.kubernetes,
            report.upstream
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(seconds: f64, memory: f64) -> PhaseReport {
        PhaseReport {
            key: "basic/scaleOut".into(),
            kind: "ScaleOut".into(),
            pods: 1000,
            nodes_before: 0,
            nodes_after: 101,
            seconds,
            last_bound_seconds: Some(seconds - 2.0),
            last_created_seconds: Some(seconds - 10.0),
            memory_p95_mib: Some(memory),
            cpu_avg_cores: Some(0.2),
            cpu_util: Some(0.8),
            memory_util: Some(0.9),
            limits: LimitsReport {
                seconds: Some(120.0),
                memory_mb: Some(260.0),
                cpu_cores: Some(0.5),
                cpu_util: Some(0.53),
                memory_util: Some(0.65),
            },
        }
    }

    #[test]
    fn the_verdict_compares_every_measure_with_upstreams_limit() {
        assert_eq!(phase(55.0, 70.0).verdict(), "ok (time ≤ ½ limit)");
        assert_eq!(phase(90.0, 70.0).verdict(), "ok");
        assert_eq!(phase(130.0, 70.0).verdict(), "over upstream's limit");
        assert_eq!(phase(55.0, 300.0).verdict(), "over upstream's limit");
    }

    #[test]
    fn the_table_shows_ours_beside_upstreams() {
        let report = ScenarioReport {
            scenario: "basic".into(),
            upstream: "basic_test.go".into(),
            kubernetes: "v1.36.2".into(),
            peak_rss_mib: Some(72.5),
            phases: vec![phase(55.0, 70.0)],
        };
        let table = table(&[report]);
        assert!(table.contains("55.0 [120]"), "{table}");
        assert_eq!(
            table
                .lines()
                .next()
                .map(|l| l.split("  ").filter(|c| !c.trim().is_empty()).count()),
            table
                .lines()
                .nth(1)
                .map(|l| l.split("  ").filter(|c| !c.trim().is_empty()).count()),
            "a header per column:\n{table}"
        );
        assert!(table.contains("70 [260]"), "{table}");
        assert!(table.contains("80% [53%]"), "{table}");
        assert!(
            table.contains("basic: controller peak RSS 72.5 MiB"),
            "{table}"
        );
    }
}
