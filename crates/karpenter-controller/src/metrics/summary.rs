//! Prometheus summaries (upstream's `karpenter_pods_startup_duration_seconds` and
//! `karpenter_nodes_termination_duration_seconds` are summaries): prometheus-client has no summary
//! type, so [`Summaries`] keeps each series' recent observations and renders the families into
//! the text exposition itself (quantiles 0, 0.5, 0.9, 0.99 and 1 over the last
//! [`WINDOW`] observations, plus `_sum` and `_count` over all).

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;
use std::sync::{Arc, Mutex, PoisonError};

/// Observations a series keeps for its quantiles (bounded memory per series).
pub const WINDOW: usize = 1024;

pub const QUANTILES: [f64; 5] = [0.0, 0.5, 0.9, 0.99, 1.0];

#[derive(Debug, Default)]
struct Series {
    recent: VecDeque<f64>,
    sum: f64,
    count: u64,
}

/// One summary family: series keyed by their label pairs (`[("nodepool", "default")]`).
#[derive(Clone, Debug)]
pub struct Summary {
    pub name: &'static str,
    pub help: &'static str,
    pub labels: &'static [&'static str],
    series: Arc<Mutex<BTreeMap<Vec<String>, Series>>>,
}

impl Summary {
    pub fn new(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Self {
        Summary {
            name,
            help,
            labels,
            series: Arc::default(),
        }
    }

    /// Records `value` in the series with these label values (in `labels` order).
    pub fn observe(&self, values: &[&str], value: f64) {
        if !value.is_finite() {
            return;
        }
        let key: Vec<String> = values.iter().map(|v| (*v).to_string()).collect();
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let s = series.entry(key).or_default();
        if s.recent.len() == WINDOW {
            s.recent.pop_front();
        }
        s.recent.push_back(value);
        s.sum += value;
        s.count = s.count.saturating_add(1);
    }

    /// The family in the OpenMetrics text format (HELP and TYPE even without series).
    pub fn encode(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} summary", self.name);
        let series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        for (values, s) in series.iter() {
            let pairs: Vec<String> = self
                .labels
                .iter()
                .zip(values)
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let mut sorted: Vec<f64> = s.recent.iter().copied().collect();
            sorted.sort_by(f64::total_cmp);
            for q in QUANTILES {
                let mut with_q = pairs.clone();
                with_q.push(format!("quantile=\"{q}\""));
                let value = quantile(&sorted, q);
                let _ = writeln!(
                    out,
                    "{}{{{}}} {}",
                    self.name,
                    with_q.join(","),
                    float(value)
                );
            }
            let labels = if pairs.is_empty() {
                String::new()
            } else {
                format!("{{{}}}", pairs.join(","))
            };
            let _ = writeln!(out, "{}_sum{labels} {}", self.name, float(s.sum));
            let _ = writeln!(out, "{}_count{labels} {}", self.name, s.count);
        }
    }
}

/// The `q` quantile of `sorted` (nearest rank); NaN without observations.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let last = sorted.len() - 1;
    // q in [0, 1] and last < 2^53: the rank is exact and in range.
    let rank = ((q * last as f64).round() as usize).min(last);
    sorted[rank]
}

fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_quantiles_sum_and_count() {
        let s = Summary::new("x_seconds", "An x.", &["nodepool"]);
        let mut empty = String::new();
        s.encode(&mut empty);
        assert_eq!(empty, "# HELP x_seconds An x.\n# TYPE x_seconds summary\n");
        for v in 1..=100 {
            s.observe(&["default"], f64::from(v));
        }
        let mut out = String::new();
        s.encode(&mut out);
        for line in [
            "x_seconds{nodepool=\"default\",quantile=\"0\"} 1.0",
            "x_seconds{nodepool=\"default\",quantile=\"0.5\"} 51.0",
            "x_seconds{nodepool=\"default\",quantile=\"1\"} 100.0",
            "x_seconds_sum{nodepool=\"default\"} 5050.0",
            "x_seconds_count{nodepool=\"default\"} 100",
        ] {
            assert!(out.contains(line), "{line} in\n{out}");
        }
    }

    #[test]
    fn keeps_a_bounded_window_but_counts_everything() {
        let s = Summary::new("y", "A y.", &[]);
        for _ in 0..WINDOW + 10 {
            s.observe(&[], 2.0);
        }
        s.observe(&[], f64::NAN);
        let mut out = String::new();
        s.encode(&mut out);
        assert!(out.contains(&format!("y_count {}", WINDOW + 10)), "{out}");
        let len = s
            .series
            .lock()
            .unwrap()
            .values()
            .next()
            .unwrap()
            .recent
            .len();
        assert_eq!(len, WINDOW);
    }
}
