//! What one policy's run measured, step by step, and the table that sets the policies side by side.

use serde::Serialize;

/// The cluster after one step converged.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepReport {
    /// 1-based.
    pub step: usize,
    /// Running pods (the step's total).
    pub pods: usize,
    pub nodes: usize,
    /// What the managed nodes cost, USD/hour (`karpenter_cluster_cost_per_hour`, summed).
    pub hourly_cost: f64,
    /// The fractional lower bound for the pods on them, USD/hour
    /// (`karpenter_cluster_cost_lower_bound_per_hour`, summed).
    pub cost_lower_bound: f64,
    /// `hourlyCost / costLowerBound` (absent when the bound is 0).
    pub ratio: Option<f64>,
    /// Nodes disrupted during the step (`karpenter_nodeclaims_disrupted_total`'s increase).
    pub disrupted_nodes: u64,
    /// Disruption commands started during the step
    /// (`karpenter_voluntary_disruption_decisions_total`'s increase).
    pub disruption_commands: u64,
    /// Pods that appeared during the step (new replicas and those re-created after a
    /// disruption): median and slowest creation → Running, seconds.
    pub new_pods: usize,
    pub to_running_p50_seconds: Option<f64>,
    pub to_running_max_seconds: Option<f64>,
    /// From the scale to convergence (pods Running, nodes and NodeClaims unchanged and none
    /// draining for the settle window), settle window excluded.
    pub converged_seconds: f64,
}

/// One policy's run.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyReport {
    pub policy: String,
    pub kubernetes: String,
    pub steps: Vec<StepReport>,
}

impl PolicyReport {
    /// The worst cost ratio after any step.
    pub fn worst_ratio(&self) -> Option<f64> {
        self.steps
            .iter()
            .filter_map(|s| s.ratio)
            .max_by(f64::total_cmp)
    }

    pub fn disrupted_nodes(&self) -> u64 {
        self.steps.iter().map(|s| s.disrupted_nodes).sum()
    }

    pub fn final_cost(&self) -> Option<f64> {
        self.steps.last().map(|s| s.hourly_cost)
    }
}

/// The sum of every sample of `name` in a Prometheus text exposition (None: no sample).
pub fn metric_sum(exposition: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        // The value follows the labels (which may hold spaces inside quotes).
        let after_labels = match rest.rfind('}') {
            Some(end) if rest.starts_with('{') => &rest[end + 1..],
            _ => rest,
        };
        if let Some(value) = after_labels
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            *found.get_or_insert(0.0) += value;
        }
    }
    found
}

/// The policies' steps side by side, then one line per policy against the target.
pub fn table(reports: &[PolicyReport]) -> String {
    let header = [
        "policy",
        "step",
        "pods",
        "nodes",
        "cost $/h",
        "bound $/h",
        "× bound",
        "disrupted",
        "commands",
        "new pods",
        "to Running p50/max s",
        "converged s",
    ];
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("—".to_string(), |v| format!("{v:.digits$}"));
    let mut rows: Vec<Vec<String>> = Vec::new();
    for report in reports {
        for s in &report.steps {
            rows.push(vec![
                report.policy.clone(),
                s.step.to_string(),
                s.pods.to_string(),
                s.nodes.to_string(),
                format!("{:.4}", s.hourly_cost),
                format!("{:.4}", s.cost_lower_bound),
                opt(s.ratio, 3),
                s.disrupted_nodes.to_string(),
                s.disruption_commands.to_string(),
                s.new_pods.to_string(),
                format!(
                    "{}/{}",
                    opt(s.to_running_p50_seconds, 0),
                    opt(s.to_running_max_seconds, 0)
                ),
                format!("{:.0}", s.converged_seconds),
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
        let worst = report.worst_ratio();
        out.push_str(&format!(
            "{}: worst {}× the bound after a step ({}), {} nodes disrupted in all, final {}/h (Kubernetes {})\n",
            report.policy,
            opt(worst, 3),
            match worst {
                Some(w) if w <= 1.10 => "within the 1.10× target",
                Some(_) => "over the 1.10× target",
                None => "no bound",
            },
            report.disrupted_nodes(),
            opt(report.final_cost(), 4).replace('—', "n/a"),
            report.kubernetes,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_summed_over_labels_and_other_names_ignored() {
        let text = "# HELP karpenter_cluster_cost_per_hour x\n\
                    karpenter_cluster_cost_per_hour{nodepool=\"a b\",capacity_type=\"on-demand\"} 1.5\n\
                    karpenter_cluster_cost_per_hour{nodepool=\"c\",capacity_type=\"spot\"} 0.25\n\
                    karpenter_cluster_cost_per_hour_other 9\n\
                    karpenter_nodeclaims_disrupted_total 3\n";
        assert_eq!(
            metric_sum(text, "karpenter_cluster_cost_per_hour"),
            Some(1.75)
        );
        assert_eq!(
            metric_sum(text, "karpenter_nodeclaims_disrupted_total"),
            Some(3.0)
        );
        assert_eq!(metric_sum(text, "karpenter_absent"), None);
    }

    fn step(ratio: f64, disrupted: u64) -> StepReport {
        StepReport {
            step: 1,
            pods: 10,
            nodes: 2,
            hourly_cost: ratio * 0.1,
            cost_lower_bound: 0.1,
            ratio: Some(ratio),
            disrupted_nodes: disrupted,
            disruption_commands: disrupted,
            new_pods: 10,
            to_running_p50_seconds: Some(4.0),
            to_running_max_seconds: Some(9.0),
            converged_seconds: 12.0,
        }
    }

    #[test]
    fn the_table_says_whether_each_policy_met_the_target() {
        let reports = [
            PolicyReport {
                policy: "CostOptimal".into(),
                kubernetes: "v1.36.2".into(),
                steps: vec![step(1.02, 0), step(1.08, 2)],
            },
            PolicyReport {
                policy: "Upstream".into(),
                kubernetes: "v1.36.2".into(),
                steps: vec![step(1.4, 1)],
            },
        ];
        let table = table(&reports);
        assert!(
            table.contains("CostOptimal: worst 1.080× the bound after a step (within the 1.10× target), 2 nodes disrupted"),
            "{table}"
        );
        assert!(table.contains("Upstream: worst 1.400×"), "{table}");
        assert!(table.contains("over the 1.10× target"), "{table}");
        assert!(table.contains("4/9"), "{table}");
        assert_eq!(table.lines().count(), 1 + 3 + 2);
    }
}
