#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use karpenter_core::clock::FakeClock;

use super::timeline::Trace;
use super::*;

const EMPTY: &str = include_str!("../../../../examples/disruption-empty/cluster.yaml");

fn run(
    yaml: &str,
    until: SignedDuration,
    max_steps: usize,
) -> Result<DisruptionReport, DisruptionSimError> {
    run_with(yaml, until, max_steps, TimelineSettings::default())
}

fn run_with(
    yaml: &str,
    until: SignedDuration,
    max_steps: usize,
    timeline: TimelineSettings,
) -> Result<DisruptionReport, DisruptionSimError> {
    let now: Timestamp = "2026-01-30T23:00:00Z".parse().unwrap();
    let mut manifests = Manifests::new();
    manifests.load_str("cluster.yaml", yaml).unwrap();
    let provider = SimCloudProvider::new("us-east-1", Arc::new(FakeClock::new(now))).unwrap();
    let outcome = crate::plan(&manifests, &provider).unwrap();
    simulate_disruption(
        &manifests,
        &provider,
        SchedulerOptions::default(),
        &outcome,
        DisruptionSettings {
            now,
            until,
            max_steps,
            feature_gates: Default::default(),
            timeline,
        },
    )
}

#[test]
fn the_empty_node_goes_when_consolidate_after_has_passed_since_now() {
    let report = run(EMPTY, SignedDuration::from_hours(24), MAX_STEPS).unwrap();
    assert_eq!(report.commands.len(), 1);
    let command = &report.commands[0];
    // Decided at 23:10:00 when consolidateAfter ran out, started after upstream's 15 s
    // validation found the node still empty.
    assert_eq!(command.at, "2026-01-30T23:10:15Z");
    assert_eq!(command.reason, "Empty");
    assert_eq!(command.candidates[0].name, "node-b");
    // Nothing to drain; upstream's 5 s minimum drain time, then the instance takes its 60 s
    // to shut down.
    assert_eq!(
        command.completed_at.as_deref(),
        Some("2026-01-30T23:11:20Z")
    );
    assert_eq!(report.completed_at.as_deref(), Some("2026-01-30T23:11:20Z"));
    assert_eq!(report.before.nodes, 2);
    assert_eq!(report.after.nodes.len(), 1);
}

#[test]
fn a_loop_that_reaches_the_step_cap_fails_with_a_clear_error() {
    // One step sees node-b not yet consolidatable; the command needs a second one.
    let err = run(EMPTY, SignedDuration::from_hours(24), 1).unwrap_err();
    assert!(
        matches!(err, DisruptionSimError::StepCap { steps: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("did not settle"), "{err}");
}

#[test]
fn idle_stretches_are_skipped_not_polled() {
    // 24 h at a 10 s poll would be 8,640 steps; the run needs a handful.
    assert!(run(EMPTY, SignedDuration::from_hours(24), 10).is_ok());
}

const ROLLOUT: &str = include_str!("../../../../examples/disruption-rollout/cluster.yaml");
const DRIFTED: &str = include_str!("../../../../examples/disruption-drifted/cluster.yaml");

fn run_traced(yaml: &str) -> (DisruptionReport, Trace) {
    let now: Timestamp = "2026-01-30T23:00:00Z".parse().unwrap();
    let mut manifests = Manifests::new();
    manifests.load_str("cluster.yaml", yaml).unwrap();
    let provider = SimCloudProvider::new("us-east-1", Arc::new(FakeClock::new(now))).unwrap();
    let outcome = crate::plan(&manifests, &provider).unwrap();
    super::run(
        &manifests,
        &provider,
        SchedulerOptions::default(),
        &outcome,
        DisruptionSettings {
            now,
            until: SignedDuration::from_hours(24),
            max_steps: MAX_STEPS,
            feature_gates: Default::default(),
            timeline: TimelineSettings::default(),
        },
    )
    .unwrap()
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

#[test]
fn a_budget_of_one_serialises_a_rollout_and_every_drifted_node_is_replaced() {
    let (report, trace) = run_traced(ROLLOUT);
    let starts: Vec<&str> = report.commands.iter().map(|c| c.at.as_str()).collect();
    let ends: Vec<Option<&str>> = report
        .commands
        .iter()
        .map(|c| c.completed_at.as_deref())
        .collect();
    // Each: replacement initialized after 60 s, the pod's 30 s grace, 5 s minimum drain time,
    // 60 s of shutdown (2:35 in all); the next starts at the controller's first tick after the
    // previous candidate is gone, not before: ticks 1 s after a tick that started commands,
    // then every 10 s (+0:01, +0:11, …, +2:41).
    assert_eq!(
        starts,
        [
            "2026-01-30T23:00:00Z",
            "2026-01-30T23:02:41Z",
            "2026-01-30T23:05:22Z"
        ]
    );
    assert_eq!(
        ends,
        [
            Some("2026-01-30T23:02:35Z"),
            Some("2026-01-30T23:05:16Z"),
            Some("2026-01-30T23:07:57Z")
        ]
    );
    assert_eq!(report.completed_at.as_deref(), Some("2026-01-30T23:07:57Z"));
    assert!(report.in_flight.is_empty());
    assert!(trace.converged);
    assert!(
        trace
            .budget_checks
            .iter()
            .all(|c| c.in_flight == 1 && c.limit == Some(1)),
        "{:?}",
        trace.budget_checks
    );
    assert!(
        report
            .after
            .nodes
            .iter()
            .all(|n| !n.name.starts_with("node-"))
    );
}

#[test]
fn decisions_happen_only_at_the_controllers_ticks() {
    // The rollout's orchestration steps come at their own instants (+60 s initialized, +90 s
    // the pod gone, +95 s drained, +155 s the instance gone); the loop decides only at ticks:
    // 1 s after a tick that started a command, else 10 s after the last tick (until the
    // rollout is over; later passes come at the instants the replacements' `consolidateAfter`
    // ends, which the controller wakes for).
    let (report, trace) = run_traced(ROLLOUT);
    let started: Vec<Timestamp> = report.commands.iter().map(|c| at(&c.at)).collect();
    assert_eq!(trace.passes.first(), Some(&at("2026-01-30T23:00:00Z")));
    let rollout: Vec<Timestamp> = trace
        .passes
        .iter()
        .copied()
        .take_while(|p| *p <= at("2026-01-30T23:08:03Z"))
        .collect();
    assert_eq!(
        rollout.len(),
        10,
        "a pass at each start, a second later, at the first tick after the replacement \
         initialized, at the first tick after the old node was gone: {rollout:?}"
    );
    for pair in rollout.windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        if started.contains(&pair[0]) {
            assert_eq!(gap, AFTER_ACTION, "{:?}", trace.passes);
        } else {
            assert!(
                gap.is_positive() && gap.as_secs() % POLL.as_secs() == 0 && gap.subsec_nanos() == 0,
                "a pass {gap} after the last, not on a tick: {:?}",
                trace.passes
            );
        }
    }
}

/// The drifted example's node as an m5.2xlarge with three small pods under a PDB.
fn drifted_with_pdb() -> String {
    let mut yaml = DRIFTED
        .replace("m5.large\"]", "m5.2xlarge\"]")
        .replace("instance-type: m5.large", "instance-type: m5.2xlarge")
        .replace(
            "capacity: {cpu: \"2\", memory: 8Gi, pods: \"29\"}",
            "capacity: {cpu: \"8\", memory: 32Gi, pods: \"58\"}",
        )
        .replace(
            "allocatable: {cpu: 1930m, memory: 7Gi, pods: \"29\"}",
            "allocatable: {cpu: 7910m, memory: 30Gi, pods: \"58\"}",
        )
        .replace(
            "requests: {cpu: \"1\", memory: 2Gi}",
            "requests: {cpu: 500m, memory: 1Gi}",
        );
    let pod = &yaml[yaml.rfind("apiVersion: v1\nkind: Pod").unwrap()..].to_string();
    for name in ["web-2", "web-3"] {
        yaml.push_str("\n---\n");
        yaml.push_str(&pod.replace("web-1", name));
    }
    yaml.push_str(
        "\n---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web, namespace: default}\nspec:\n  maxUnavailable: 1\n  selector: {matchLabels: {app: web}}\n",
    );
    yaml
}

#[test]
fn a_pdb_lets_one_pod_go_at_a_time_and_the_next_waits_until_the_first_runs_again() {
    let (report, trace) = run_traced(&drifted_with_pdb());
    assert_eq!(report.commands.len(), 1, "{report:#?}");
    let times: Vec<Timestamp> = trace.evictions.iter().map(|e| e.at).collect();
    assert_eq!(times.len(), 3, "{:?}", trace.evictions);
    // The replacement initializes at +60 s; one pod per poll after that.
    assert_eq!(
        times,
        [
            at("2026-01-30T23:01:00Z"),
            at("2026-01-30T23:01:10Z"),
            at("2026-01-30T23:01:20Z")
        ]
    );
    assert!(trace.evictions.iter().all(|e| !e.forced));
    assert!(
        trace.pdb_samples.iter().all(|s| s.healthy >= s.desired),
        "{:?}",
        trace.pdb_samples
    );
    // The last pod's 30 s grace, the 5 s minimum drain time, then 60 s of shutdown.
    assert_eq!(
        report.commands[0].completed_at.as_deref(),
        Some("2026-01-30T23:02:55Z")
    );
}

#[test]
fn a_do_not_disrupt_pod_holds_the_drain_until_the_termination_grace_period_forces_it() {
    let yaml = DRIFTED
        .replace(
            "  labels: {app: web}\n",
            "  labels: {app: web}\n  annotations: {karpenter.sh/do-not-disrupt: \"true\"}\n",
        )
        .replace(
            "      expireAfter: Never\n",
            "      expireAfter: Never\n      terminationGracePeriod: 5m\n",
        )
        .replace(
            "spec:\n  expireAfter: Never\n",
            "spec:\n  expireAfter: Never\n  terminationGracePeriod: 5m\n",
        );
    let (report, trace) = run_traced(&yaml);
    assert_eq!(report.commands.len(), 1, "{report:#?}");
    let [eviction] = trace.evictions.as_slice() else {
        panic!("{:?}", trace.evictions);
    };
    assert!(eviction.do_not_disrupt && eviction.forced);
    // The pod is not reschedulable, so drift deletes without a replacement first: the drain
    // starts at 23:00:00 with its deadline at 23:05:00; a pod with a 30 s grace period is
    // forced once less than that is left, and goes by the deadline.
    let command = &report.commands[0];
    assert_eq!(command.decision, "delete");
    assert_eq!(
        command.replacements.len(),
        1,
        "its pod needed a node once evicted"
    );
    assert_eq!(eviction.forced_from, Some(at("2026-01-30T23:04:30Z")));
    assert!(eviction.at > at("2026-01-30T23:04:30Z"), "{eviction:?}");
    assert_eq!(
        report.commands[0].completed_at.as_deref(),
        Some("2026-01-30T23:06:05Z")
    );
}

#[test]
fn without_a_termination_grace_period_a_do_not_disrupt_pod_keeps_its_node() {
    let yaml = DRIFTED.replace(
        "  labels: {app: web}\n",
        "  labels: {app: web}\n  annotations: {karpenter.sh/do-not-disrupt: \"true\"}\n",
    );
    let (report, trace) = run_traced(&yaml);
    assert!(report.commands.is_empty(), "{report:#?}");
    assert!(trace.evictions.is_empty());
    assert!(
        report
            .blocked
            .iter()
            .any(|b| b.name == "node-drifted" && b.reason.contains("do-not-disrupt")),
        "{:?}",
        report.blocked
    );
}

/// The drifted example's pod with `do-not-disrupt` durations (started at the run's start), and
/// as many more pods as durations.
fn drifted_with_do_not_disrupt(durations: &[&str]) -> String {
    let pod = DRIFTED
        .split("\n---\n")
        .find(|doc| doc.contains("kind: Pod"))
        .unwrap()
        .to_string();
    let mut yaml: String = DRIFTED
        .split("\n---\n")
        .filter(|doc| !doc.contains("kind: Pod"))
        .collect::<Vec<_>>()
        .join("\n---\n");
    for (i, duration) in durations.iter().enumerate() {
        let mut annotated = pod.replace("name: web-1", &format!("name: web-{}", i + 1)).replace(
            "  labels: {app: web}\n",
            &format!("  labels: {{app: web}}\n  annotations: {{karpenter.sh/do-not-disrupt: \"{duration}\"}}\n"),
        );
        annotated.push_str("\nstatus:\n  phase: Running\n  startTime: \"2026-01-30T23:00:00Z\"\n");
        yaml.push_str("\n---\n");
        yaml.push_str(&annotated);
    }
    yaml
}

/// Issue 33: the run stopped at 00:00 while its own report said the pod frees the node at +2m.
#[test]
fn a_node_held_by_a_do_not_disrupt_duration_is_disrupted_when_it_runs_out() {
    let resources = "requests: {cpu: \"1\", memory: 2Gi}";
    let yaml = drifted_with_do_not_disrupt(&["2m"]);
    assert!(yaml.contains(resources));
    let report = run(&yaml, SignedDuration::from_hours(24), MAX_STEPS).unwrap();
    assert_eq!(report.commands.len(), 1, "{report:#?}");
    assert_eq!(report.commands[0].reason, "Drifted");
    assert_eq!(report.commands[0].at, "2026-01-30T23:02:00Z");
    assert!(report.in_flight.is_empty(), "{report:#?}");
}

/// Issue 33: pods held for 1m and 3m; the drift came at +60 min instead of +3 min.
#[test]
fn the_last_do_not_disrupt_duration_on_a_node_decides_when_it_is_disrupted() {
    let yaml = drifted_with_do_not_disrupt(&["1m", "3m"]);
    let report = run(&yaml, SignedDuration::from_hours(24), MAX_STEPS).unwrap();
    assert_eq!(report.commands.len(), 1, "{report:#?}");
    assert_eq!(report.commands[0].reason, "Drifted");
    assert_eq!(report.commands[0].at, "2026-01-30T23:03:00Z");
}

/// Issue 33: a NodePool whose `karpenter.sh/nodepool-hash` is stale (the controller would stamp
/// its template's hash at once) drifted every replacement again: 577 replacements in 24 h for a
/// 3-node pool. The drifted node is replaced once, and its replacement stays.
#[test]
fn a_stale_nodepool_hash_drifts_the_old_node_once_and_never_its_replacement() {
    let yaml = DRIFTED.replacen(
        "metadata:\n  name: default\nspec:\n  disruption:",
        "metadata:\n  name: default\n  annotations:\n    karpenter.sh/nodepool-hash: \"stale-hash\"\n    karpenter.sh/nodepool-hash-version: v3\nspec:\n  disruption:",
        1,
    );
    assert_ne!(yaml, DRIFTED);
    let report = run(&yaml, SignedDuration::from_hours(24), MAX_STEPS).unwrap();
    assert_eq!(report.commands.len(), 1, "{report:#?}");
    assert_eq!(report.commands[0].reason, "Drifted");
    assert_eq!(report.commands[0].candidates[0].name, "node-drifted");
}

/// A replacement is no candidate while its command's candidate is still in the cluster
/// (`ClusterState::mark_replacing`, applied to every pass's state by the timeline as the
/// controller's queue does): with `consolidateAfter: 0s` it is empty and consolidatable from
/// its initialization until the drifted node's pod lands on it, and emptiness must not take it.
#[test]
fn a_replacement_is_held_until_its_commands_candidate_is_gone() {
    let yaml = DRIFTED.replacen("consolidateAfter: 10m", "consolidateAfter: 0s", 1);
    assert_ne!(yaml, DRIFTED);
    let (report, trace) = run_traced(&yaml);
    assert_eq!(report.commands.len(), 1, "{report:#?}");
    let command = &report.commands[0];
    assert_eq!(command.reason, "Drifted");
    let replacement = &command.replacements[0].name;
    let started = at(&command.at);
    let done = at(command.completed_at.as_deref().unwrap());
    let held: Vec<Timestamp> = trace
        .held_replacements
        .iter()
        .filter(|(_, name)| name == replacement)
        .map(|(at, _)| *at)
        .collect();
    assert!(
        !held.is_empty(),
        "no pass saw the replacement held: {trace:?}"
    );
    assert!(
        held.iter().all(|at| *at >= started && *at <= done),
        "held outside its command: {held:?}, {started}..{done}"
    );
    assert!(
        report.after.nodes.iter().any(|n| &n.name == replacement),
        "the replacement was deleted: {report:#?}"
    );
}

/// A pool stamped by an older hash version re-stamps its NodeClaims instead of drifting them
/// (upstream `nodepool.hash`, as the controller does): nothing is replaced.
#[test]
fn a_nodepool_on_an_older_hash_version_re_stamps_its_nodeclaims_instead_of_drifting_them() {
    let yaml = DRIFTED
        .replacen(
            "metadata:\n  name: default\nspec:\n  disruption:",
            "metadata:\n  name: default\n  annotations:\n    karpenter.sh/nodepool-hash: \"older\"\n    karpenter.sh/nodepool-hash-version: v2\nspec:\n  disruption:",
            1,
        )
        .replace(
            "karpenter.sh/nodepool-hash-version: v3\nspec:\n  expireAfter",
            "karpenter.sh/nodepool-hash-version: v2\nspec:\n  expireAfter",
        );
    assert!(yaml.contains("hash-version: v2\nspec:\n  expireAfter"));
    let report = run(&yaml, SignedDuration::from_hours(24), MAX_STEPS).unwrap();
    assert!(report.commands.is_empty(), "{report:#?}");
}

/// Issue 33: the simulation had no timeout; a replacement that never initializes now rolls its
/// command back after upstream's 10 minutes, visible in the report, and the candidate stays.
#[test]
fn a_replacement_that_never_initializes_rolls_its_command_back_after_the_timeout() {
    let report = run_with(
        DRIFTED,
        SignedDuration::from_mins(15),
        MAX_STEPS,
        TimelineSettings {
            initialization: None,
            ..TimelineSettings::default()
        },
    )
    .unwrap();
    let first = &report.commands[0];
    assert_eq!(first.reason, "Drifted");
    assert_eq!(first.at, "2026-01-30T23:00:00Z");
    let rolled_back = first.rolled_back.as_ref().expect("rolled back");
    assert_eq!(rolled_back.at, "2026-01-30T23:10:00Z");
    assert!(
        rolled_back.reason.contains("not initialized within"),
        "{rolled_back:?}"
    );
    assert_eq!(first.completed_at, None);
    assert!(
        report.after.nodes.iter().any(|n| n.name == "node-drifted"),
        "the candidate stays: {report:#?}"
    );
    let json = serde_json::to_value(first).unwrap();
    assert_eq!(json["rolledBack"]["at"], "2026-01-30T23:10:00Z");
}

/// Issue 33 item 3: a replacement that cannot launch (the EC2NodeClass declares every offering
/// out of capacity, `sim.karpenter.sh/insufficient-capacity`) rolls its command back at once,
/// and the candidate is not decided again before the rollback hold (3 minutes) has passed —
/// not at the next poll, 10 s later, as before.
#[test]
fn a_replacement_that_cannot_launch_rolls_back_and_the_node_is_held_for_three_minutes() {
    let yaml = DRIFTED.replacen(
        "kind: EC2NodeClass\nmetadata:\n  name: default\n",
        "kind: EC2NodeClass\nmetadata:\n  name: default\n  annotations:\n    sim.karpenter.sh/insufficient-capacity: \"*\"\n",
        1,
    );
    assert_ne!(yaml, DRIFTED);
    let report = run(&yaml, SignedDuration::from_mins(7), MAX_STEPS).unwrap();
    let tried: Vec<(&str, Option<&str>)> = report
        .commands
        .iter()
        .map(|c| (c.at.as_str(), c.rolled_back.as_ref().map(|r| r.at.as_str())))
        .collect();
    assert_eq!(
        tried,
        [
            ("2026-01-30T23:00:00Z", Some("2026-01-30T23:00:00Z")),
            ("2026-01-30T23:03:00Z", Some("2026-01-30T23:03:00Z")),
            ("2026-01-30T23:06:00Z", Some("2026-01-30T23:06:00Z")),
        ],
        "{report:#?}"
    );
    let reason = &report.commands[0].rolled_back.as_ref().unwrap().reason;
    assert!(reason.contains("could not launch"), "{reason}");
    assert!(report.commands.iter().all(|c| c.replacements.is_empty()));
}

/// Issue 33: a node whose only pod is terminating with a finalizer stayed "on its way out"
/// forever; upstream counts a pod more than a minute past its deletion time as stuck and
/// finishes the drain.
#[test]
fn a_node_whose_only_pod_is_stuck_terminating_finishes_its_drain() {
    let yaml = DRIFTED.replace(
        "  labels: {app: web}\n",
        "  labels: {app: web}\n  deletionTimestamp: \"2026-01-30T23:00:30Z\"\n  finalizers: [example.com/hold]\n",
    );
    assert_ne!(yaml, DRIFTED);
    let report = run(&yaml, SignedDuration::from_hours(24), MAX_STEPS).unwrap();
    assert_eq!(report.commands.len(), 1, "{report:#?}");
    assert!(report.in_flight.is_empty(), "{report:#?}");
    // Stuck from 23:01:31 (a minute past its deletion time), the 5 s minimum drain time, 60 s
    // of shutdown.
    let completed: Timestamp = report.commands[0]
        .completed_at
        .as_deref()
        .expect("completed")
        .parse()
        .unwrap();
    assert!(completed <= at("2026-01-30T23:02:36Z"), "{completed}");
    assert!(completed > at("2026-01-30T23:01:30Z"), "{completed}");
}

const STEPPED: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: R
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {k: v}}]
  securityGroupSelectorTerms: [{tags: {k: v}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s}
  template:
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: karpenter.k8s.aws/instance-cpu, operator: Lt, values: ["32"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations: {simulate.karpenter-rs.dev/scale-steps: "10m=12, 20m=2"}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: app
          image: pause
          resources: {requests: {cpu: "1", memory: 2Gi}}
"#;

#[test]
fn scale_steps_add_and_remove_replicas_in_virtual_time_and_each_period_is_reported() {
    let report = run(STEPPED, SignedDuration::from_hours(2), MAX_STEPS).unwrap();
    let periods: Vec<(&str, usize)> = report
        .steps
        .iter()
        .map(|s| (s.at.as_str(), s.pods))
        .collect();
    assert_eq!(
        periods,
        [
            ("2026-01-30T23:00:00Z", 2),
            ("2026-01-30T23:10:00Z", 12),
            ("2026-01-30T23:20:00Z", 2)
        ]
    );
    for step in &report.steps {
        // The bound is over on-demand types below 32 vCPUs: what the pool can launch.
        assert!(step.ratio.is_some_and(|r| r >= 0.999), "{step:?}");
    }
    // Up: more capacity; down: consolidation gives it back.
    assert!(report.steps[1].hourly_cost > report.steps[0].hourly_cost);
    assert!(report.steps[2].commands >= 1, "{:?}", report.steps[2]);
    assert!(report.steps[2].hourly_cost < report.steps[1].hourly_cost);
    // The replicas kept are the oldest (a ReplicaSet deletes its newest first).
    let pods: Vec<&String> = report.after.nodes.iter().flat_map(|n| &n.pods).collect();
    assert_eq!(pods, ["default/web-0", "default/web-1"], "{pods:?}");
}

#[test]
fn scale_steps_that_do_not_parse_name_the_annotation() {
    let bad = STEPPED.replace("10m=12, 20m=2", "20m=12, 10m=2");
    let err = Manifests::new()
        .load_str("cluster.yaml", &bad)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Deployment/web")
            && err.contains("metadata.annotations[simulate.karpenter-rs.dev/scale-steps]")
            && err.contains("forward in time"),
        "{err}"
    );
    // Without steps the run reports no periods (the JSON keeps its shape).
    let plain = STEPPED.replace(
        "  annotations: {simulate.karpenter-rs.dev/scale-steps: \"10m=12, 20m=2\"}\n",
        "",
    );
    let report = run(&plain, SignedDuration::from_hours(1), MAX_STEPS).unwrap();
    assert!(report.steps.is_empty());
    assert!(
        !serde_json::to_string(&report)
            .unwrap()
            .contains("\"steps\""),
        "no steps key without steps"
    );
}
