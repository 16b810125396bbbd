//! Upstream Karpenter's performance suite (`test/suites/performance`), as data: each test's
//! Deployments, its phases (scale-out, consolidation, drift) and the thresholds upstream asserts
//! (`thresholds.go` defaults, keyed as upstream keys them, e.g. `basic/scaleOut`).

use std::time::Duration;

/// One upstream test.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The name `--scenario` takes.
    pub name: &'static str,
    /// Upstream's file and `It`.
    pub upstream: &'static str,
    pub phases: Vec<Phase>,
}

/// One measured step: what the benchmark does, then what it waits for.
#[derive(Clone, Debug)]
pub struct Phase {
    /// Upstream's threshold key (`basic/scaleOut`).
    pub key: &'static str,
    pub kind: PhaseKind,
    /// Deployments created at the start of the phase.
    pub create: Vec<Deploy>,
    /// Deployments scaled at the start of the phase (name, replicas).
    pub scale: Vec<(String, i32)>,
    /// Healthy pods the phase ends with.
    pub expect_pods: usize,
    pub limits: Limits,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhaseKind {
    /// Pods appear; done when every one is Running.
    ScaleOut,
    /// Pods go; done when the healthy count is reached and no node has changed for the settle
    /// window (upstream waits 3 minutes of quiet).
    Consolidation,
    /// The NodePool's template changes (an annotation, as upstream's drift test); done when
    /// every NodeClaim is a replacement and the pods are healthy again.
    Drift,
}

/// Upstream's thresholds for a phase; `None` where upstream asserts none.
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    pub total: Option<Duration>,
    /// P95 of the controller's resident memory, MB.
    pub memory_mb: Option<f64>,
    /// Average CPU of the controller over the phase, cores.
    pub cpu_cores: Option<f64>,
    /// Lower bounds of the pods' requests over the nodes' allocatable.
    pub cpu_util: Option<f64>,
    pub memory_util: Option<f64>,
}

/// A Deployment as upstream's `test.CreateDeploymentOptions` makes it, with its modifiers.
#[derive(Clone, Debug)]
pub struct Deploy {
    pub name: String,
    pub replicas: i32,
    pub cpu: String,
    pub memory: String,
    /// `WithHostnameSpread`: maxSkew 1 over `kubernetes.io/hostname`, DoNotSchedule.
    pub hostname_spread: bool,
    /// A zone spread (maxSkew 1, DoNotSchedule), as every wide Deployment has.
    pub zone_spread: bool,
    /// `WithPodAntiAffinity(kubernetes.io/hostname)`: one pod per node.
    pub anti_affinity: bool,
    /// `WithDoNotDisrupt`: `karpenter.sh/do-not-disrupt: "true"` on the pods.
    pub do_not_disrupt: bool,
}

fn deploy(name: &str, replicas: i32, cpu: &str, memory: &str) -> Deploy {
    Deploy {
        name: name.into(),
        replicas,
        cpu: cpu.into(),
        memory: memory.into(),
        hostname_spread: false,
        zone_spread: false,
        anti_affinity: false,
        do_not_disrupt: false,
    }
}

fn minutes(m: u64) -> Option<Duration> {
    Some(Duration::from_secs(m * 60))
}

fn limits(
    total: Option<Duration>,
    memory_mb: f64,
    cpu_cores: f64,
    utils: Option<(f64, f64)>,
) -> Limits {
    Limits {
        total,
        memory_mb: Some(memory_mb),
        cpu_cores: Some(cpu_cores),
        cpu_util: utils.map(|u| u.0),
        memory_util: utils.map(|u| u.1),
    }
}

fn scale_out(key: &'static str, create: Vec<Deploy>, expect_pods: usize, limits: Limits) -> Phase {
    Phase {
        key,
        kind: PhaseKind::ScaleOut,
        create,
        scale: Vec::new(),
        expect_pods,
        limits,
    }
}

fn consolidation(
    key: &'static str,
    scale: &[(&str, i32)],
    expect_pods: usize,
    limits: Limits,
) -> Phase {
    Phase {
        key,
        kind: PhaseKind::Consolidation,
        create: Vec::new(),
        scale: scale.iter().map(|(n, r)| ((*n).to_string(), *r)).collect(),
        expect_pods,
        limits,
    }
}

const SMALL: (&str, &str) = ("900m", "3100Mi");
const LARGE: (&str, &str) = ("3500m", "28Gi");

/// Every scenario of upstream's suite, in its files' order.
pub fn all() -> Vec<Scenario> {
    vec![
        basic(),
        do_not_disrupt(),
        drift(),
        hostname_spreading(),
        hostname_spreading_xl(),
        wide_deployments(),
        interference(),
    ]
}

/// `basic_test.go`: "should efficiently scale two deployments with different resource profiles".
fn basic() -> Scenario {
    Scenario {
        name: "basic",
        upstream: "basic_test.go: should efficiently scale two deployments with different resource profiles",
        phases: vec![
            scale_out(
                "basic/scaleOut",
                vec![
                    deploy("small-resource-app", 500, SMALL.0, SMALL.1),
                    deploy("large-resource-app", 500, LARGE.0, LARGE.1),
                ],
                1000,
                limits(minutes(2), 260.0, 0.50, Some((0.53, 0.65))),
            ),
            consolidation(
                "basic/consolidation",
                &[("small-resource-app", 350), ("large-resource-app", 350)],
                700,
                limits(minutes(20), 260.0, 0.25, None),
            ),
        ],
    }
}

/// `do_no_disrupt_test.go`: "should efficiently scale three deployments and test disruption
/// protection".
fn do_not_disrupt() -> Scenario {
    let mut small = deploy("small-resource-app", 500, SMALL.0, SMALL.1);
    small.hostname_spread = true;
    let mut protected = deploy("do-not-disrupt-app", 100, "900m", "450Mi");
    protected.do_not_disrupt = true;
    Scenario {
        name: "do-not-disrupt",
        upstream: "do_no_disrupt_test.go: should efficiently scale three deployments and test disruption protection",
        phases: vec![
            scale_out(
                "doNotDisrupt/scaleOut",
                vec![
                    small,
                    deploy("large-resource-app", 500, LARGE.0, LARGE.1),
                    protected,
                ],
                1100,
                limits(minutes(4), 645.0, 1.10, Some((0.38, 0.40))),
            ),
            consolidation(
                "doNotDisrupt/consolidation",
                &[("small-resource-app", 250), ("large-resource-app", 250)],
                600,
                limits(minutes(35), 585.0, 0.80, Some((0.38, 0.40))),
            ),
        ],
    }
}

/// `drift_performance_test.go`: "should efficiently handle drift replacement of pods with
/// topology constraints".
fn drift() -> Scenario {
    let mut spread = deploy("hostname-spread-app", 300, SMALL.0, SMALL.1);
    spread.hostname_spread = true;
    Scenario {
        name: "drift",
        upstream: "drift_performance_test.go: should efficiently handle drift replacement of pods with topology constraints",
        phases: vec![
            scale_out(
                "drift/initial",
                vec![spread, deploy("standard-app", 300, LARGE.0, LARGE.1)],
                600,
                limits(minutes(5), 425.0, 0.70, None),
            ),
            Phase {
                key: "drift/drift",
                kind: PhaseKind::Drift,
                create: Vec::new(),
                scale: Vec::new(),
                expect_pods: 600,
                limits: limits(minutes(50), 470.0, 1.05, None),
            },
        ],
    }
}

/// `host_name_spreading_test.go`: "should efficiently scale two deployments with host name
/// topology spreading".
fn hostname_spreading() -> Scenario {
    let mut small = deploy("small-resource-app", 500, SMALL.0, SMALL.1);
    small.hostname_spread = true;
    Scenario {
        name: "hostname-spreading",
        upstream: "host_name_spreading_test.go: should efficiently scale two deployments with host name topology spreading",
        phases: vec![
            scale_out(
                "hostNameSpreading/scaleOut",
                vec![small, deploy("large-resource-app", 500, LARGE.0, LARGE.1)],
                1000,
                limits(minutes(5), 680.0, 1.15, Some((0.38, 0.40))),
            ),
            consolidation(
                "hostNameSpreading/consolidation",
                &[("small-resource-app", 350), ("large-resource-app", 350)],
                700,
                limits(None, 575.0, 1.00, Some((0.38, 0.40))),
            ),
        ],
    }
}

/// `host_name_spreading_xl_test.go`: the same at 2,000 pods.
fn hostname_spreading_xl() -> Scenario {
    let mut small = deploy("small-resource-app", 1000, SMALL.0, SMALL.1);
    small.hostname_spread = true;
    Scenario {
        name: "hostname-spreading-xl",
        upstream: "host_name_spreading_xl_test.go: should efficiently scale two deployments with host name topology spreading at XL scale",
        phases: vec![
            scale_out(
                "hostNameSpreadingXL/scaleOut",
                vec![small, deploy("large-resource-app", 1000, LARGE.0, LARGE.1)],
                2000,
                limits(minutes(35), 1330.0, 1.40, Some((0.38, 0.40))),
            ),
            consolidation(
                "hostNameSpreadingXL/consolidation",
                &[("small-resource-app", 700), ("large-resource-app", 700)],
                1400,
                limits(minutes(35), 1200.0, 1.70, Some((0.38, 0.40))),
            ),
        ],
    }
}

/// `wide_deployments_test.go`: "should efficiently scale 30 deployments with varied resources
/// and topology constraints" (upstream's fixed table: every Deployment zone-spread, 1–3 with
/// hostname anti-affinity, 4–6 hostname-spread).
fn wide_deployments() -> Scenario {
    const CPU: [&str; 30] = [
        "240m", "450m", "650m", "900m", "1400m", "1900m", "2400m", "2800m", "3300m", "3700m",
        "2300m", "900m", "1300m", "2800m", "1800m", "1850m", "3300m", "3800m", "225m", "450m",
        "700m", "900m", "1300m", "1800m", "2400m", "2800m", "3400m", "3800m", "3300m", "2800m",
    ];
    const MEMORY: [&str; 30] = [
        "300Mi", "400Mi", "700Mi", "1Gi", "2Gi", "4Gi", "8Gi", "4Gi", "16Gi", "10Gi", "64Gi",
        "30Gi", "32Gi", "32Gi", "30Gi", "20Gi", "30Gi", "300Mi", "500Mi", "750Mi", "1Gi", "2Gi",
        "4Gi", "8Gi", "16Gi", "32Gi", "28Gi", "64Gi", "13Gi", "24Gi",
    ];
    let mut create = Vec::new();
    let mut scale = Vec::new();
    for (i, (cpu, memory)) in CPU.iter().zip(MEMORY).enumerate() {
        let name = format!("wide-deployment-{}", i + 1);
        let (initial, scale_in) = if i < 20 { (35, 25) } else { (30, 20) };
        let mut d = deploy(&name, initial, cpu, memory);
        d.zone_spread = true;
        d.anti_affinity = i < 3;
        d.hostname_spread = (3..6).contains(&i);
        create.push(d);
        scale.push((name, scale_in));
    }
    let scale_refs: Vec<(&str, i32)> = scale.iter().map(|(n, r)| (n.as_str(), *r)).collect();
    Scenario {
        name: "wide-deployments",
        upstream: "wide_deployments_test.go: should efficiently scale 30 deployments with varied resources and topology constraints",
        phases: vec![
            scale_out(
                "wideDeployments/scaleOut",
                create,
                1000,
                limits(minutes(5), 370.0, 0.70, Some((0.20, 0.20))),
            ),
            consolidation(
                "wideDeployments/consolidation",
                &scale_refs,
                700,
                limits(minutes(40), 340.0, 0.30, Some((0.20, 0.20))),
            ),
        ],
    }
}

/// `interference_test.go`: "should efficiently scale two deployments with self anti-affinity".
fn interference() -> Scenario {
    let mut small = deploy("small-resource-app", 500, SMALL.0, SMALL.1);
    small.anti_affinity = true;
    let mut large = deploy("large-resource-app", 500, LARGE.0, LARGE.1);
    large.anti_affinity = true;
    let mut second = scale_out(
        "interference/interference",
        vec![large],
        750,
        limits(minutes(10), 1205.0, 1.30, Some((0.38, 0.40))),
    );
    second.scale = vec![("small-resource-app".into(), 250)];
    Scenario {
        name: "interference",
        upstream: "interference_test.go: should efficiently scale two deployments with self anti-affinity",
        phases: vec![
            scale_out(
                "interference/scaleOut",
                vec![small],
                500,
                limits(minutes(5), 620.0, 0.90, Some((0.38, 0.40))),
            ),
            second,
            consolidation(
                "interference/consolidation",
                &[("small-resource-app", 400), ("large-resource-app", 200)],
                600,
                limits(minutes(25), 820.0, 0.80, Some((0.38, 0.40))),
            ),
        ],
    }
}

/// Scales every replica count and expected pod count by `factor` (rounded, at least 1 where
/// upstream has any): `--scale 0.05` runs the suite's shape in a minute, `--scale 10` the
/// 10,000-pod run.
pub fn scaled(mut scenario: Scenario, factor: f64) -> Scenario {
    let apply = |n: f64| -> f64 {
        if n <= 0.0 {
            0.0
        } else {
            (n * factor).round().max(1.0)
        }
    };
    for phase in &mut scenario.phases {
        for d in &mut phase.create {
            d.replicas = apply(f64::from(d.replicas)) as i32;
        }
        for (_, r) in &mut phase.scale {
            *r = apply(f64::from(*r)) as i32;
        }
    }
    // The expected counts follow from the Deployments' replicas, phase after phase.
    let mut replicas: Vec<(String, i32)> = Vec::new();
    for phase in &mut scenario.phases {
        for d in &phase.create {
            replicas.push((d.name.clone(), d.replicas));
        }
        for (name, r) in &phase.scale {
            if let Some(entry) = replicas.iter_mut().find(|(n, _)| n == name) {
                entry.1 = *r;
            }
        }
        phase.expect_pods = replicas
            .iter()
            .map(|(_, r)| usize::try_from(*r).unwrap_or(0))
            .sum();
    }
    scenario
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The expected pod counts are upstream's, and they follow from the replicas.
    #[test]
    fn every_phase_expects_what_its_deployments_hold() {
        for scenario in all() {
            let expected: Vec<usize> = scenario.phases.iter().map(|p| p.expect_pods).collect();
            let derived: Vec<usize> = scaled(scenario.clone(), 1.0)
                .phases
                .iter()
                .map(|p| p.expect_pods)
                .collect();
            assert_eq!(expected, derived, "{}", scenario.name);
        }
        let names: Vec<&str> = all().iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "basic",
                "do-not-disrupt",
                "drift",
                "hostname-spreading",
                "hostname-spreading-xl",
                "wide-deployments",
                "interference"
            ]
        );
    }

    #[test]
    fn scaling_keeps_every_deployment_and_its_ratio() {
        let small = scaled(basic(), 0.05);
        assert_eq!(small.phases[0].expect_pods, 50);
        assert_eq!(small.phases[1].expect_pods, 36, "round(17.5) twice");
        let big = scaled(basic(), 10.0);
        assert_eq!(big.phases[0].expect_pods, 10_000);
        let tiny = scaled(wide_deployments(), 0.001);
        assert!(tiny.phases[0].create.iter().all(|d| d.replicas == 1));
    }
}
