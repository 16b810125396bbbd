//! NodePool limits (`spec.limits`) while NodeClaims are in flight.
//!
//! Upstream reserves the *largest* option of every new NodeClaim against the pool's limits
//! (`subtractMax`), although the launch picks the cheapest option that is available; with wide
//! option lists a pool far from its limit runs out of headroom on paper (10,000 claims whose
//! largest option has 400 cpu exhaust a 4M-cpu limit while needing a fraction of it). Here a claim
//! holds only the capacity of its *cheapest* option, re-reserved whenever a placement narrows its
//! options, and every option a claim takes on must fit what is left plus what the claim already
//! holds. Safety is restored at finalisation: what remains of the limits after every claim's
//! reservation is handed out in creation order, and a claim keeps only the options whose
//! capacity beyond its reserved one fits what is left, which it then uses up. Whatever option
//! each claim launches, the pool's total never exceeds its limit; when limits are far away no
//! option is dropped and the result is upstream's. See `docs/scheduling.md`.

use std::borrow::Cow;

use super::{Bits, Claim, Engine, Pool};

impl Pool {
    /// Whether type `t`'s capacity fits the remaining limits for a claim that already holds the
    /// capacity of `reserved` (`None`: a new claim).
    pub(super) fn fits_limits(&self, t: usize, reserved: Option<usize>) -> bool {
        let capacity = &self.types[t].capacity;
        let held = reserved.map(|r| &self.types[r].capacity);
        self.limits.iter().all(|l| {
            let headroom = l
                .remaining
                .saturating_add(held.map_or(0, |h| h.get(l.resource)));
            capacity.get(l.resource) <= headroom
        })
    }
}

/// What is left of each pool's limits (aligned with `Pool::limits`), handed out at finalisation.
pub(super) struct LimitBudget(Vec<Vec<i64>>);

impl Engine {
    /// Makes claim `ci` hold its cheapest option's capacity against its pool's limits instead of
    /// what it held before. Its options were filtered with [`Pool::fits_limits`], so the remaining
    /// limits never go below zero.
    pub(super) fn reserve_limits(&mut self, ci: usize) {
        let claim = &self.claims[ci];
        let pool = &self.pools[claim.pool];
        if pool.limits.is_empty() {
            return;
        }
        let cheapest = pool
            .price_order(&claim.reqs, &self.keys)
            .iter()
            .map(|&(_, t)| t)
            .find(|&t| claim.types.get(t))
            .or_else(|| claim.types.iter().next());
        let previous = claim.reserved;
        let pool = &mut self.pools[claim.pool];
        for l in &mut pool.limits {
            let held = previous.map_or(0, |t| pool.types[t].capacity.get(l.resource));
            let needed = cheapest.map_or(0, |t| pool.types[t].capacity.get(l.resource));
            l.remaining = l.remaining.saturating_add(held).saturating_sub(needed);
        }
        self.claims[ci].reserved = cheapest;
    }

    /// What is left of every pool's limits once each claim holds its reserved option.
    pub(super) fn limit_budget(&self) -> LimitBudget {
        LimitBudget(
            self.pools
                .iter()
                .map(|p| p.limits.iter().map(|l| l.remaining.max(0)).collect())
                .collect(),
        )
    }

    /// The claim's options that may launch without exceeding its pool's limits: those whose
    /// capacity beyond the claim's reserved option fits `budget`; the largest such excess is taken
    /// from `budget`. All of them (borrowed) when the budget covers them.
    pub(super) fn launchable_types<'c>(
        &self,
        claim: &'c Claim,
        budget: &mut LimitBudget,
    ) -> Cow<'c, Bits> {
        let pool = &self.pools[claim.pool];
        let (Some(reserved), Some(left)) = (claim.reserved, budget.0.get_mut(claim.pool)) else {
            return Cow::Borrowed(&claim.types);
        };
        let held = &pool.types[reserved].capacity;
        let excess = |t: usize, resource: usize| {
            pool.types[t]
                .capacity
                .get(resource)
                .saturating_sub(held.get(resource))
        };
        let mut kept = Bits::new(pool.types.len());
        let mut taken = vec![0i64; pool.limits.len()];
        let mut dropped = false;
        for t in claim.types.iter() {
            let fits = pool
                .limits
                .iter()
                .zip(left.iter())
                .all(|(l, available)| excess(t, l.resource) <= *available);
            if !fits {
                dropped = true;
                continue;
            }
            kept.set(t);
            for (l, most) in pool.limits.iter().zip(taken.iter_mut()) {
                *most = (*most).max(excess(t, l.resource));
            }
        }
        for (available, most) in left.iter_mut().zip(&taken) {
            *available = available.saturating_sub(*most);
        }
        if dropped {
            Cow::Owned(kept)
        } else {
            Cow::Borrowed(&claim.types)
        }
    }
}
