//! Pricing a consolidation's replacements: each new NodeClaim of the simulation is restricted to
//! the options it may launch as (capacity-type rules of §4.6, the same-type cap, `minValues`)
//! and priced at the worst launch price of its cheapest option.
//!
//! Upstream accepts exactly one replacement, restricted to options strictly cheaper than the
//! candidates. Under `PackingPolicy::CostOptimal` a command may launch M ≥ 1 replacements; their
//! total must stay below the candidates' price by [`MIN_SAVINGS_FRACTION`] whatever options the
//! launches pick. One rule covers both: the money left after every replacement's cheapest option
//! and the margin (the slack) is shared out equally, each replacement keeping only options below
//! its cheapest plus its share. With one replacement and no margin (upstream) its cap is the
//! candidates' price exactly, as before.

use std::collections::{BTreeMap, BTreeSet};

use karpenter_api::v1::NodeSelectorRequirementWithMinValues;
use karpenter_api::well_known::{
    CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT,
    ZONE_LABEL,
};

use super::super::candidates::{BlockReason, Candidate};
use super::super::command::DisruptionInput;
use super::MIN_SPOT_TO_SPOT_OPTIONS;
use crate::instance_type::InstanceType;
use crate::requirements::Requirements;
use crate::scheduling::{InstanceTypeOption, NewNodeClaim, PackingPolicy};

/// Under `CostOptimal`, a command with replacements must save at least this fraction of its
/// candidates' hourly price, and as much again for every node it adds (more replacements than
/// candidates). Every command then lowers the cluster's cost by at least 2 % of its cheapest
/// node, so the loop cannot go on forever trading nodes for marginally cheaper ones (no churn),
/// and a move that saves pennies does not evict every pod of its nodes. The part per added node
/// keeps splits for the savings that pay for them: without it, upstream's basic scale-down
/// (1,000 → 700 pods) split one node into four for $0.03/h again and again, growing the
/// cluster from 177 to 226 nodes, and was still at it after 30 minutes. (Per added node, the
/// margin of an average candidate: a multi-node command owes what its candidates would apart.)
pub const MIN_SAVINGS_FRACTION: f64 = 0.02;

const SPOT: &str = CAPACITY_TYPE_SPOT;
const ON_DEMAND: &str = CAPACITY_TYPE_ON_DEMAND;
const RESERVED: &str = CAPACITY_TYPE_RESERVED;
/// The capacity type a launch falls back through, cheapest commitment first (upstream
/// `WorstLaunchPrice`).
const LAUNCH_ORDER: [&str; 3] = [RESERVED, SPOT, ON_DEMAND];

/// The replacements a command would launch, and what they cost at least.
#[derive(Debug)]
pub(super) struct Replacements {
    pub claims: Vec<NewNodeClaim>,
    /// Σ the worst launch price of each replacement's cheapest option.
    pub cheapest_total: f64,
}

/// The most replacements a command may launch, and the saving it must make, under the pass's
/// packing policy.
pub(super) struct Allowance {
    pub max_replacements: usize,
    /// Saving required beyond "strictly cheaper", USD per hour, of a command that adds no node.
    pub margin: f64,
}

impl Allowance {
    pub fn new(input: &DisruptionInput<'_>, price: f64) -> Self {
        match input.scheduler.packing_policy {
            PackingPolicy::Upstream => Allowance {
                max_replacements: 1,
                margin: 0.0,
            },
            PackingPolicy::CostOptimal => Allowance {
                max_replacements: usize::MAX,
                margin: price * MIN_SAVINGS_FRACTION,
            },
        }
    }

    /// The saving required of a command replacing `candidates` nodes by `replacements`: the
    /// margin, and for every node added the margin of an average candidate once more
    /// ([`MIN_SAVINGS_FRACTION`]). Per candidate, ten nodes split in two in one command owe
    /// what ten single-node splits owe; the margin of the whole command per added node would
    /// make a multi-node command owe ten times more, and split the nodes one command at a time.
    pub fn margin_for(&self, candidates: usize, replacements: usize) -> f64 {
        let added = replacements.saturating_sub(candidates);
        // Small counts (a command's nodes): exact in f64.
        self.margin * (1.0 + added as f64 / candidates.max(1) as f64)
    }
}

/// The simulation's new NodeClaims restricted as the module describes, or the reason the
/// command cannot replace the candidates (`price` is their total).
pub(super) fn cheaper_replacements(
    input: &DisruptionInput<'_>,
    candidates: &[&Candidate<'_>],
    claims: &[NewNodeClaim],
    price: f64,
    single: bool,
) -> Result<Replacements, BlockReason> {
    let allowance = Allowance::new(input, price);
    let refused = match restrict_to_allowance(input, candidates, claims, price, single, &allowance)
    {
        Ok(replacements) => return Ok(replacements),
        Err(refused) => refused,
    };
    // The guard (issue 35): whatever the policy, a command upstream's rule accepts (one
    // replacement strictly cheaper than the candidates) is not refused for the margin, or the
    // default would end a consolidation dearer than `Upstream` does.
    if allowance.margin > 0.0 && claims.len() == 1 {
        let upstream = Allowance {
            max_replacements: 1,
            margin: 0.0,
        };
        if let Ok(replacements) =
            restrict_to_allowance(input, candidates, claims, price, single, &upstream)
        {
            return Ok(replacements);
        }
    }
    Err(refused)
}

/// [`cheaper_replacements`] under one allowance.
fn restrict_to_allowance(
    input: &DisruptionInput<'_>,
    candidates: &[&Candidate<'_>],
    claims: &[NewNodeClaim],
    price: f64,
    single: bool,
    allowance: &Allowance,
) -> Result<Replacements, BlockReason> {
    if claims.len() > allowance.max_replacements {
        return Err(BlockReason::TooManyReplacements(claims.len()));
    }
    let mut priced = Vec::with_capacity(claims.len());
    for claim in claims {
        priced.push(PricedClaim::new(input, candidates, claim, price)?);
    }
    // The cheapest option of each below its own same-type cap.
    let mut cheapest = Vec::with_capacity(priced.len());
    for claim in &priced {
        match claim.options.iter().find(|(_, p)| *p < claim.same_type_cap) {
            Some((_, p)) => cheapest.push(*p),
            None => {
                return Err(BlockReason::NoCheaperReplacement {
                    cheapest: claim.options.first().map(|(_, p)| *p),
                    price: claim.same_type_cap,
                });
            }
        }
    }
    let cheapest_total: f64 = cheapest.iter().sum();
    let margin = allowance.margin_for(candidates.len(), claims.len());
    let budget = price - margin;
    let slack = budget - cheapest_total;
    if slack <= 0.0 {
        return Err(BlockReason::ReplacementsNotCheaper {
            replacements: claims.len(),
            cost: cheapest_total,
            price,
            margin,
        });
    }
    let count = priced.len() as f64;
    let mut out = Vec::with_capacity(priced.len());
    for (i, claim) in priced.into_iter().enumerate() {
        // cap_i = cheapest_i + slack / M, written so that one replacement's cap is `budget`
        // exactly (Σ of the others is 0, and so is their share of the slack).
        let others = cheapest_total - cheapest[i];
        let others_share = slack * (count - 1.0) / count;
        let cap = (budget - others - others_share).min(claim.same_type_cap);
        out.push(claim.restrict(cap, single)?);
    }
    Ok(Replacements {
        claims: out,
        cheapest_total,
    })
}

/// One new NodeClaim with every option priced at its worst launch price, cheapest first.
struct PricedClaim {
    claim: NewNodeClaim,
    options: Vec<(InstanceTypeOption, f64)>,
    /// Options must be strictly below this: the candidates' total, or a candidate of the same
    /// instance type's price ([`same_type_price_cap`]).
    same_type_cap: f64,
    spot_to_spot: bool,
    /// The capacity type the replacement must launch as, when its pricing assumed one.
    pinned: Option<&'static str>,
}

impl PricedClaim {
    /// The capacity-type rules of §4.6: reserved capacity first, spot-to-spot behind its gate.
    fn new(
        input: &DisruptionInput<'_>,
        candidates: &[&Candidate<'_>],
        claim: &NewNodeClaim,
        price: f64,
    ) -> Result<Self, BlockReason> {
        let requirements = Requirements::from_node_selector_with_min_values(&claim.requirements)
            .unwrap_or_default();
        let capacity_types = requirements.get(&CAPACITY_TYPE_LABEL.to_string());
        let allows = |ct: &str| capacity_types.is_none_or(|r| r.has(&ct.to_string()));
        let zones = requirements.get(&ZONE_LABEL.to_string());
        let catalog: BTreeMap<&str, &InstanceType> = input
            .instance_types
            .get(&claim.node_pool)
            .map(|types| {
                types
                    .iter()
                    .map(|t| (t.name.as_str(), t.as_ref()))
                    .collect()
            })
            .unwrap_or_default();
        let offers = |option: &InstanceTypeOption, ct: &str| -> Vec<f64> {
            catalog
                .get(option.name.as_ref())
                .map(|it| {
                    it.available_offerings()
                        .filter(|o| zones.is_none_or(|z| z.has(&o.zone)))
                        .filter(|o| o.capacity_type == ct)
                        .map(|o| o.price)
                        .collect()
                })
                .unwrap_or_default()
        };
        // A launch takes reserved capacity whenever one of the options offers it (as the
        // provisioner's launches do), so such a replacement is priced, and pinned, as reserved
        // only (upstream's scheduler restricts a NodeClaim holding reservations to them).
        let reserved_only = allows(RESERVED)
            && claim
                .instance_types
                .iter()
                .any(|o| !offers(o, RESERVED).is_empty());
        let all_spot = candidates.iter().all(|c| c.capacity_type == Some(SPOT));
        let spot_to_spot = !reserved_only && all_spot && allows(SPOT);
        if spot_to_spot && !input.options.spot_to_spot_consolidation {
            return Err(BlockReason::SpotToSpotDisabled);
        }
        // Prices are judged as spot whenever spot is allowed, so the replacement must launch as
        // spot: falling back to on-demand could cost more than the candidates.
        let restrict_to_spot =
            !reserved_only && allows(SPOT) && (spot_to_spot || allows(ON_DEMAND));
        let launch_order: &[&str] = if reserved_only {
            &[RESERVED]
        } else if restrict_to_spot {
            &[SPOT]
        } else {
            &LAUNCH_ORDER
        };
        let worst_price = |option: &InstanceTypeOption| -> Option<f64> {
            launch_order
                .iter()
                .filter(|ct| allows(ct))
                .find_map(|ct| offers(option, ct).into_iter().max_by(f64::total_cmp))
        };
        let mut options: Vec<(InstanceTypeOption, f64)> = claim
            .instance_types
            .iter()
            .filter_map(|o| Some((o.clone(), worst_price(o)?)))
            .collect();
        options.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.name.cmp(&b.0.name)));
        let pinned = if reserved_only {
            Some(RESERVED)
        } else if restrict_to_spot {
            Some(SPOT)
        } else {
            None
        };
        Ok(PricedClaim {
            same_type_cap: same_type_price_cap(candidates, claim, price),
            claim: claim.clone(),
            options,
            spot_to_spot,
            pinned,
        })
    }

    /// The claim with only its options strictly below `cap`, still meeting `minValues` and, for
    /// single-node spot-to-spot, keeping 15 of them; its capacity type pinned when pricing
    /// assumed one.
    fn restrict(self, cap: f64, single: bool) -> Result<NewNodeClaim, BlockReason> {
        let PricedClaim {
            claim,
            options,
            spot_to_spot,
            pinned,
            ..
        } = self;
        let cheapest_any = options.first().map(|(_, p)| *p);
        let mut kept: Vec<(InstanceTypeOption, f64)> =
            options.into_iter().filter(|(_, p)| *p < cap).collect();
        if kept.is_empty() {
            return Err(BlockReason::NoCheaperReplacement {
                cheapest: cheapest_any,
                price: cap,
            });
        }
        let min_values = claim.instance_type_min_values.unwrap_or(0);
        let needed = usize::try_from(min_values).unwrap_or(0);
        if kept.len() < needed {
            return Err(BlockReason::MinValuesAfterPriceFilter {
                kept: kept.len(),
                min_values,
            });
        }
        if spot_to_spot && single {
            if kept.len() < MIN_SPOT_TO_SPOT_OPTIONS {
                return Err(BlockReason::SpotToSpotTooFewOptions(kept.len()));
            }
            // Launching any of the 15 cheapest cannot itself be consolidated right away.
            kept.truncate(MIN_SPOT_TO_SPOT_OPTIONS.max(needed));
        }
        let mut replacement = claim;
        replacement.instance_types = kept.into_iter().map(|(o, _)| o).collect::<Vec<_>>().into();
        if let Some(capacity_type) = pinned {
            replacement
                .requirements
                .retain(|r| r.key != CAPACITY_TYPE_LABEL);
            replacement
                .requirements
                .push(NodeSelectorRequirementWithMinValues {
                    key: CAPACITY_TYPE_LABEL.to_string(),
                    operator: "In".to_string(),
                    values: [capacity_type].into(),
                    min_values: None,
                });
            replacement.requirements.sort_by(|a, b| a.key.cmp(&b.key));
        }
        Ok(replacement)
    }
}

/// The price every replacement option must be strictly below: the candidates' total, and, when
/// an option is the instance type of a candidate, that candidate's price (the cheapest such).
/// Replacing several nodes by one of their own type is deleting all but one of them with more
/// pods moved, so only a strictly cheaper option is a real replacement (upstream
/// `filterOutSameInstanceType`); otherwise the search falls back to fewer candidates.
fn same_type_price_cap(candidates: &[&Candidate<'_>], claim: &NewNodeClaim, price: f64) -> f64 {
    let options: BTreeSet<&str> = claim
        .instance_types
        .iter()
        .map(|o| o.name.as_ref())
        .collect();
    candidates
        .iter()
        .filter(|c| c.instance_type.is_some_and(|t| options.contains(t)))
        .filter_map(|c| c.price)
        .fold(price, f64::min)
}
