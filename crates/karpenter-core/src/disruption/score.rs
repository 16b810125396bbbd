//! The `Balanced` policy's score and the verdict it gives a move (see [`super::balanced`] for
//! the formula and how a pass computes it). The vocabulary lives here, below both the
//! candidates' block reasons and the commands that carry the verdicts, so neither has to import
//! the policy that computes them.

/// Upstream's `k`: a move must recover at least 1/k of the cost share it disrupts.
pub const BALANCED_K: f64 = 2.0;

/// The score a move needs: 1/k.
pub const BALANCED_THRESHOLD: f64 = 1.0 / BALANCED_K;

/// A NodePool's hourly cost and disruption cost, over all its nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PoolTotals {
    pub cost: f64,
    pub disruption: f64,
}

/// The Balanced score of a move (see [`super::balanced`]).
pub fn score(savings: f64, pool_cost: f64, move_disruption: f64, pool_disruption: f64) -> f64 {
    if savings.is_nan() || savings <= 0.0 || pool_cost.is_nan() || pool_cost <= 0.0 {
        return 0.0;
    }
    if move_disruption.is_nan() || move_disruption <= 0.0 {
        return f64::INFINITY;
    }
    if pool_disruption.is_nan() || pool_disruption <= 0.0 {
        return 0.0;
    }
    (savings / pool_cost) / (move_disruption / pool_disruption)
}

/// One Balanced pool's verdict on a move: the score and the shares behind it (what upstream's
/// `ConsolidationApproved` events and `consolidation_score` metric report).
#[derive(Clone, Debug, PartialEq)]
pub struct PoolScore {
    pub nodepool: String,
    pub score: f64,
    /// The move's savings attributed to this pool, per hour.
    pub savings: f64,
    pub pool_cost: f64,
    pub move_disruption: f64,
    pub pool_disruption: f64,
}

impl PoolScore {
    pub(super) fn new(
        nodepool: String,
        savings: f64,
        pool_cost: f64,
        move_disruption: f64,
        totals: PoolTotals,
    ) -> Self {
        PoolScore {
            score: score(savings, pool_cost, move_disruption, totals.disruption),
            nodepool,
            savings,
            pool_cost,
            move_disruption,
            pool_disruption: totals.disruption,
        }
    }

    /// Whether the score reaches [`BALANCED_THRESHOLD`].
    pub fn approved(&self) -> bool {
        self.score >= BALANCED_THRESHOLD
    }

    /// The share of the pool's cost the move saves, in percent.
    pub fn savings_percent(&self) -> f64 {
        percent(self.savings, self.pool_cost)
    }

    /// The share of the pool's disruption cost the move disrupts, in percent.
    pub fn disruption_percent(&self) -> f64 {
        percent(self.move_disruption, self.pool_disruption)
    }

    /// Upstream's event wording: `score 1.00 >= threshold 0.50 (savings 50.0%, disruption 50.0%)`.
    /// The figures behind the score, for a rejection: `what` is the move (`saving` or `even
    /// deleting the node (saving`), the caller closes any parenthesis it opened.
    pub fn rejection(&self, what: &str) -> String {
        format!(
            "NodePool {:?} has consolidation policy Balanced: {what} ${:.4}/h of ${:.4}/h for disruption {:.1} of {:.1}",
            self.nodepool, self.savings, self.pool_cost, self.move_disruption, self.pool_disruption,
        )
    }

    pub fn summary(&self) -> String {
        let relation = if self.approved() { ">=" } else { "<" };
        format!(
            "score {:.2} {relation} threshold {:.2} (savings {:.1}%, disruption {:.1}%)",
            self.score,
            BALANCED_THRESHOLD,
            self.savings_percent(),
            self.disruption_percent()
        )
    }
}

fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole * 100.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_score_is_the_savings_share_over_the_disruption_share() {
        // 10 nodes at $1/h, 5 pods each: cost 10, disruption 10 × (1 + 5) = 60.
        let delete_one = score(1.0, 10.0, 6.0, 60.0);
        assert!((delete_one - 1.0).abs() < 1e-12);
        let cheaper_by_20_cents = score(0.2, 10.0, 6.0, 60.0);
        assert!((cheaper_by_20_cents - 0.2).abs() < 1e-12);
        assert!(delete_one >= BALANCED_THRESHOLD && cheaper_by_20_cents < BALANCED_THRESHOLD);
        // Exactly 1/k passes: savings of half the disrupted share.
        assert!((score(0.5, 10.0, 6.0, 60.0) - BALANCED_THRESHOLD).abs() < 1e-12);
        assert_eq!(score(0.0, 10.0, 6.0, 60.0), 0.0);
        assert_eq!(score(-1.0, 10.0, 6.0, 60.0), 0.0);
        assert_eq!(score(1.0, 10.0, 0.0, 60.0), f64::INFINITY);
        assert_eq!(score(f64::NAN, 10.0, 6.0, 60.0), 0.0);
    }
}
