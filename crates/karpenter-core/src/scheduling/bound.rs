//! The fractional lower bound on a plan's cost: the cheapest mix of instance types, allowed to
//! buy fractions of a node, whose room (allocatable less daemonset overhead) covers the pods'
//! total cpu, memory and pod count.
//!
//! That is a covering LP with one row per resource (three) and one column per instance type:
//! minimise `Σ price_t·x_t` subject to `Σ room_rt·x_t ≥ demand_r`, `x ≥ 0`. With three rows the
//! optimum mixes at most three types, so a revised simplex whose basis is a 3×3 matrix solves it
//! in a few dozen pivots of one pass over the types each: microseconds for a pool of 800 types,
//! independent of the number of pods (they only enter through the three sums). No solver crate:
//! the specialised method is 150 lines and returns the dual prices as an optimality certificate
//! (the tests check primal feasibility, dual feasibility and equal objectives).

use std::collections::BTreeMap;

use serde::Serialize;

/// The rows: cpu (millicores), memory (bytes), pods.
pub const RESOURCES: usize = 3;

/// One instance type as the bound sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// USD/hour of its cheapest offering the NodePool allows.
    pub price: f64,
    /// What it holds beyond its daemonset overhead, per row.
    pub room: [f64; RESOURCES],
}

/// The LP's optimum.
#[derive(Clone, Debug, PartialEq)]
pub struct Mix {
    /// USD/hour.
    pub cost: f64,
    /// (column index, fraction of nodes), the columns in the optimal basis with a positive amount.
    pub amounts: Vec<(usize, f64)>,
    /// The dual price of each row (USD/hour per unit): the certificate that `cost` is optimal.
    pub duals: [f64; RESOURCES],
}

/// The bound of a plan: in total and per NodePool (USD/hour).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CostLowerBound {
    pub total: f64,
    pub node_pools: BTreeMap<String, f64>,
}

/// Pivots allowed before giving up (each is one pass over the columns); far above what three
/// rows need, it only guards against a numerical loop.
const MAX_PIVOTS: usize = 500;
const EPSILON: f64 = 1e-9;

/// The cheapest fractional mix of `columns` covering `demand`; `None` when no mix covers it (a
/// demanded resource no column offers). A zero demand costs nothing.
pub fn cheapest_mix(columns: &[Column], demand: [f64; RESOURCES]) -> Option<Mix> {
    // Rows with demand, scaled so every demand is 1 (keeps the pivots well conditioned whether a
    // row counts bytes or pods).
    let rows: Vec<usize> = (0..RESOURCES).filter(|&r| demand[r] > EPSILON).collect();
    let m = rows.len();
    if m == 0 {
        return Some(Mix {
            cost: 0.0,
            amounts: Vec::new(),
            duals: [0.0; RESOURCES],
        });
    }
    let scaled: Vec<[f64; RESOURCES]> = columns
        .iter()
        .map(|c| {
            let mut a = [0.0; RESOURCES];
            for (i, &r) in rows.iter().enumerate() {
                a[i] = c.room[r].max(0.0) / demand[r];
            }
            a
        })
        .collect();
    // Big-M: a row's dual price never exceeds its cheapest column's price per unit of that row,
    // so an artificial costing more than every such price leaves the basis when a mix exists.
    let mut big_m = 1.0_f64;
    for i in 0..m {
        let cheapest = columns
            .iter()
            .zip(&scaled)
            .filter(|(_, a)| a[i] > EPSILON)
            .map(|(c, a)| c.price.max(0.0) / a[i])
            .fold(f64::INFINITY, f64::min);
        if !cheapest.is_finite() {
            return None;
        }
        big_m = big_m.max(2.0 * cheapest + 1.0);
    }
    // Variables: the columns, then one surplus per row (−e_i, cost 0), then one artificial per
    // row (e_i, cost big_m).
    let n = columns.len();
    let cost_of = |j: usize| -> f64 {
        if j < n {
            columns[j].price.max(0.0)
        } else if j < n + m {
            0.0
        } else {
            big_m
        }
    };
    let entry = |j: usize, i: usize| -> f64 {
        if j < n {
            scaled[j][i]
        } else if j < n + m {
            if j - n == i { -1.0 } else { 0.0 }
        } else if j - n - m == i {
            1.0
        } else {
            0.0
        }
    };
    let mut basis: Vec<usize> = (0..m).map(|i| n + m + i).collect();
    let mut values = vec![1.0; m];
    for pivot in 0..MAX_PIVOTS {
        let inverse = invert(&basis, m, &entry)?;
        // Duals: c_B · B⁻¹.
        let mut duals = [0.0; RESOURCES];
        for (i, dual) in duals.iter_mut().enumerate().take(m) {
            *dual = (0..m).map(|k| cost_of(basis[k]) * inverse[k][i]).sum();
        }
        // Entering variable: most negative reduced cost (Dantzig); past half the pivots the
        // first negative one (Bland), which cannot cycle.
        let bland = pivot > MAX_PIVOTS / 2;
        let mut entering: Option<(usize, f64)> = None;
        for j in 0..n + 2 * m {
            if basis.contains(&j) {
                continue;
            }
            let reduced = cost_of(j) - (0..m).map(|i| duals[i] * entry(j, i)).sum::<f64>();
            if reduced < -EPSILON * (1.0 + cost_of(j)) && entering.is_none_or(|(_, r)| reduced < r)
            {
                entering = Some((j, reduced));
                if bland {
                    break;
                }
            }
        }
        let Some((j, _)) = entering else {
            if basis
                .iter()
                .zip(&values)
                .any(|(&b, &v)| b >= n + m && v > 1e-7)
            {
                return None;
            }
            let mut amounts: Vec<(usize, f64)> = basis
                .iter()
                .zip(&values)
                .filter(|(b, v)| **b < n && **v > EPSILON)
                .map(|(&b, &v)| (b, v))
                .collect();
            amounts.sort_by_key(|a| a.0);
            let cost = amounts.iter().map(|&(b, v)| cost_of(b) * v).sum();
            let mut row_duals = [0.0; RESOURCES];
            for (i, &r) in rows.iter().enumerate() {
                row_duals[r] = duals[i].max(0.0) / demand[r];
            }
            return Some(Mix {
                cost,
                amounts,
                duals: row_duals,
            });
        };
        // Ratio test on the direction B⁻¹·a_j.
        let direction: Vec<f64> = (0..m)
            .map(|k| (0..m).map(|i| inverse[k][i] * entry(j, i)).sum())
            .collect();
        let mut leaving: Option<(usize, f64)> = None;
        for k in 0..m {
            if direction[k] > EPSILON {
                let ratio = values[k] / direction[k];
                if leaving.is_none_or(|(l, best)| {
                    ratio < best - EPSILON || (ratio <= best + EPSILON && basis[k] < basis[l])
                }) {
                    leaving = Some((k, ratio));
                }
            }
        }
        // Costs are non-negative, so the LP is bounded: no leaving row means numerical trouble.
        let (k, step) = leaving?;
        for (value, d) in values.iter_mut().zip(&direction) {
            *value = (*value - step * d).max(0.0);
        }
        values[k] = step;
        basis[k] = j;
    }
    None
}

/// B⁻¹ for the basis columns (m ≤ 3) by Gauss–Jordan with partial pivoting.
fn invert(basis: &[usize], m: usize, entry: &dyn Fn(usize, usize) -> f64) -> Option<Vec<Vec<f64>>> {
    let mut a: Vec<Vec<f64>> = (0..m)
        .map(|i| (0..m).map(|k| entry(basis[k], i)).collect())
        .collect();
    let mut inverse: Vec<Vec<f64>> = (0..m)
        .map(|i| (0..m).map(|k| if i == k { 1.0 } else { 0.0 }).collect())
        .collect();
    for col in 0..m {
        let pivot = (col..m).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        inverse.swap(col, pivot);
        let p = a[col][col];
        for k in 0..m {
            a[col][k] /= p;
            inverse[col][k] /= p;
        }
        for row in 0..m {
            if row != col {
                let f = a[row][col];
                if f != 0.0 {
                    for k in 0..m {
                        a[row][k] -= f * a[col][k];
                        inverse[row][k] -= f * inverse[col][k];
                    }
                }
            }
        }
    }
    Some(inverse)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn column(price: f64, cpu: f64, memory: f64, pods: f64) -> Column {
        Column {
            price,
            room: [cpu, memory, pods],
        }
    }

    /// The certificate: x covers the demand, the duals price no column below its cost, and both
    /// objectives agree, so no mix is cheaper.
    fn assert_optimal(columns: &[Column], demand: [f64; 3], mix: &Mix) {
        for (r, &wanted) in demand.iter().enumerate() {
            let covered: f64 = mix
                .amounts
                .iter()
                .map(|&(j, x)| columns[j].room[r] * x)
                .sum();
            assert!(
                covered >= wanted * (1.0 - 1e-7),
                "row {r}: {covered} < {wanted}"
            );
        }
        for c in columns {
            let priced: f64 = (0..RESOURCES)
                .map(|r| mix.duals[r] * c.room[r].max(0.0))
                .sum();
            assert!(
                priced <= c.price * (1.0 + 1e-7) + 1e-9,
                "{priced} > {}",
                c.price
            );
        }
        let dual_objective: f64 = (0..RESOURCES).map(|r| mix.duals[r] * demand[r]).sum();
        assert!(
            (dual_objective - mix.cost).abs() <= 1e-6 * (1.0 + mix.cost),
            "dual {dual_objective} vs primal {}",
            mix.cost
        );
    }

    #[test]
    fn mixes_a_cpu_type_and_a_memory_type_when_the_demand_sits_between() {
        // c: 2 GiB per cpu, r: 8 GiB per cpu, m: 4 GiB per cpu but dearer than half c half r.
        let columns = [
            column(0.68, 16.0, 32.0, 100.0),
            column(1.01, 16.0, 128.0, 100.0),
            column(0.90, 16.0, 64.0, 100.0),
        ];
        let demand = [32.0, 160.0, 10.0];
        let mix = cheapest_mix(&columns, demand).unwrap();
        assert_optimal(&columns, demand, &mix);
        // 1 c + 1 r covers 32 cpu and 160 GiB for 1.69; 2 m only 128 GiB, 2.5 m cost 2.25.
        assert!((mix.cost - 1.69).abs() < 1e-9, "{mix:?}");
        assert_eq!(
            mix.amounts.iter().map(|a| a.0).collect::<Vec<_>>(),
            vec![0, 1]
        );
    }

    #[test]
    fn pod_count_can_be_the_binding_row() {
        let columns = [column(1.0, 64.0, 256.0, 10.0), column(0.3, 2.0, 8.0, 8.0)];
        let mix = cheapest_mix(&columns, [1.0, 1.0, 80.0]).unwrap();
        assert_optimal(&columns, [1.0, 1.0, 80.0], &mix);
        assert!((mix.cost - 3.0).abs() < 1e-9, "ten small nodes: {mix:?}");
    }

    #[test]
    fn no_demand_costs_nothing_and_an_uncovered_resource_has_no_mix() {
        let columns = [column(1.0, 4.0, 0.0, 10.0)];
        assert_eq!(cheapest_mix(&columns, [0.0; 3]).map(|m| m.cost), Some(0.0));
        assert_eq!(cheapest_mix(&columns, [1.0, 1.0, 1.0]), None);
        assert_eq!(cheapest_mix(&[], [1.0, 0.0, 0.0]), None);
    }

    fn columns_strategy() -> impl Strategy<Value = Vec<Column>> {
        prop::collection::vec(
            (0.01f64..20.0, 0.0f64..192.0, 0.0f64..1536.0, 0.0f64..737.0)
                .prop_map(|(p, c, m, n)| column(p, c, m, n)),
            1..60,
        )
    }

    proptest! {
        #[test]
        fn the_mix_is_optimal_by_its_own_certificate(
            columns in columns_strategy(),
            demand in (0.0f64..5000.0, 0.0f64..20000.0, 0.0f64..20000.0),
        ) {
            let demand = [demand.0, demand.1, demand.2];
            match cheapest_mix(&columns, demand) {
                Some(mix) => assert_optimal(&columns, demand, &mix),
                None => prop_assert!((0..RESOURCES).any(|r| demand[r] > EPSILON
                    && columns.iter().all(|c| c.room[r] <= 0.0))),
            }
        }

        #[test]
        fn no_whole_node_plan_of_one_type_is_cheaper(
            columns in columns_strategy(),
            demand in (1.0f64..5000.0, 1.0f64..20000.0, 1.0f64..20000.0),
        ) {
            let demand = [demand.0, demand.1, demand.2];
            if let Some(mix) = cheapest_mix(&columns, demand) {
                for c in &columns {
                    let nodes = (0..RESOURCES)
                        .map(|r| (demand[r] / c.room[r]).ceil())
                        .fold(0.0f64, f64::max);
                    if nodes.is_finite() {
                        prop_assert!(mix.cost <= nodes * c.price * (1.0 + 1e-7) + 1e-9);
                    }
                }
            }
        }
    }
}
