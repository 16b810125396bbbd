//! The arrival pattern as data: the Deployments' shapes and the pod totals of each step.

use crate::perf::scenarios::Deploy;

/// Pods in all after each step (the pattern): up, up, down, up.
pub const STEPS: [usize; 5] = [10, 200, 600, 300, 900];

/// One Deployment of the mix: its requests and its share of every step's pods.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub name: &'static str,
    pub cpu: &'static str,
    pub memory: &'static str,
    /// Share of the pods, out of the shapes' total weight.
    pub weight: u32,
    /// maxSkew 1 over `topology.kubernetes.io/zone`, DoNotSchedule.
    pub zone_spread: bool,
}

/// General, cpu-heavy, memory-heavy and small, in the proportions 3:2:2:3; two spread over zones.
pub const SHAPES: [Shape; 4] = [
    Shape {
        name: "web",
        cpu: "500m",
        memory: "1Gi",
        weight: 3,
        zone_spread: true,
    },
    Shape {
        name: "batch",
        cpu: "2",
        memory: "1Gi",
        weight: 2,
        zone_spread: false,
    },
    Shape {
        name: "cache",
        cpu: "250m",
        memory: "6Gi",
        weight: 2,
        zone_spread: true,
    },
    Shape {
        name: "sidecar",
        cpu: "100m",
        memory: "256Mi",
        weight: 3,
        zone_spread: false,
    },
];

/// `STEPS` times `factor`, each rounded and at least one pod (`--scale 0.1`: 1 → 20 → 60 → 30 →
/// 90).
pub fn scaled_steps(factor: f64) -> Vec<usize> {
    STEPS
        .iter()
        .map(|&total| ((total as f64) * factor).round().max(1.0) as usize)
        .collect()
}

/// `total` pods split over [`SHAPES`] by weight (largest remainder: the replicas sum to `total`).
pub fn replicas(total: usize) -> Vec<(&'static str, usize)> {
    let weights: u64 = SHAPES.iter().map(|s| u64::from(s.weight)).sum();
    let total = total as u64;
    let mut out: Vec<(usize, u64, u64)> = SHAPES
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let share = total.saturating_mul(u64::from(s.weight));
            (i, share / weights, share % weights)
        })
        .collect();
    let assigned: u64 = out.iter().map(|(_, n, _)| n).sum();
    let mut by_remainder: Vec<usize> = (0..out.len()).collect();
    by_remainder.sort_by(|&a, &b| out[b].2.cmp(&out[a].2).then(a.cmp(&b)));
    for &i in by_remainder
        .iter()
        .take(usize::try_from(total.saturating_sub(assigned)).unwrap_or(0))
    {
        out[i].1 += 1;
    }
    out.iter()
        .map(|&(i, n, _)| (SHAPES[i].name, usize::try_from(n).unwrap_or(usize::MAX)))
        .collect()
}

/// The Deployments holding `total` pods.
pub fn deploys(total: usize) -> Vec<Deploy> {
    replicas(total)
        .into_iter()
        .zip(SHAPES)
        .map(|((name, n), shape)| Deploy {
            name: name.to_string(),
            replicas: i32::try_from(n).unwrap_or(i32::MAX),
            cpu: shape.cpu.to_string(),
            memory: shape.memory.to_string(),
            hostname_spread: false,
            zone_spread: shape.zone_spread,
            anti_affinity: false,
            do_not_disrupt: false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_splits_into_exactly_its_pods() {
        for total in [1, 2, 9, 10, 200, 600, 300, 900, 1001] {
            let split = replicas(total);
            assert_eq!(
                split.iter().map(|(_, n)| n).sum::<usize>(),
                total,
                "{split:?}"
            );
        }
        assert_eq!(
            replicas(900),
            [
                ("web", 270),
                ("batch", 180),
                ("cache", 180),
                ("sidecar", 270)
            ]
        );
        let deploys = deploys(10);
        assert_eq!(deploys.iter().map(|d| d.replicas).sum::<i32>(), 10);
        assert!(deploys.iter().any(|d| d.zone_spread));
    }

    #[test]
    fn scaling_keeps_the_shape_and_at_least_a_pod() {
        assert_eq!(scaled_steps(1.0), STEPS);
        assert_eq!(scaled_steps(0.1), [1, 20, 60, 30, 90]);
        assert_eq!(scaled_steps(0.001), [1, 1, 1, 1, 1]);
    }
}
