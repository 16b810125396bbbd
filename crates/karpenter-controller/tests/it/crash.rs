//! Crash safety: controller processes killed at random instants, again during start-up, with
//! randomized user actions and cloud and API faults in between, and the invariants checked after
//! every settle (`crash_world.rs` has the world and the checks). All in one process on tokio's
//! paused clock: a "kill" aborts every task of the replica where it stands (nothing released,
//! in-flight requests dropped), and the next process restores the sim cloud from its ledger
//! ConfigMaps and waits for the dead leader's Lease to expire, as after `kill -9`.
//!
//! `CRASH_SEED=<n>` replays a campaign (the seed is printed); `CRASH_RUNS=<n>` sets the number
//! of restarts of the long campaign (ignored by default, see `docs/benchmarks.md`):
//!
//! ```sh
//! CRASH_RUNS=1000 cargo test -p karpenter-controller --test it --release crash::campaign_long -- --ignored --nocapture
//! ```
//!
//! Stays on `karpenter-testapi` (docs/testing.md): hundreds of kills at random instants with
//! injected faults, in virtual time.

use std::collections::BTreeMap;
use std::time::Duration;

use karpenter_api::NodeClaim;
use karpenter_core::cloud_provider::CloudError;
use karpenter_testapi::{ApiError, Verb};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use tokio::time::Instant;

use crate::crash_world::{self, Kubernetes, Process, Watch, ledger_instances, unsettled};
use crate::sim_cluster::{SimCluster, inflate_pod};

/// A small deterministic generator (SplitMix64): the same seed replays the same campaign.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

/// Requests a kill can be aimed inside: the fault hangs the first matching request (it is never
/// answered) and the process is killed while it hangs.
const KILL_POINTS: &[(Verb, &str, &str)] = &[
    (
        Verb::Create,
        "configmaps",
        "launch: instance created, ledger being written",
    ),
    (
        Verb::Update,
        "nodeclaims",
        "launch/registration: NodeClaim status or finalizer write",
    ),
    (
        Verb::Create,
        "nodeclaims",
        "provisioning or disruption replacement: NodeClaim create",
    ),
    (
        Verb::Update,
        "nodes",
        "registration/initialization/disruption taint: Node write",
    ),
    (Verb::Create, "pods/eviction", "drain: eviction"),
    (
        Verb::Delete,
        "nodeclaims",
        "disruption/GC/expiration: NodeClaim delete",
    ),
    (Verb::Delete, "nodes", "termination: Node delete"),
    (
        Verb::Delete,
        "configmaps",
        "termination: instance deleted, ledger being written",
    ),
];

/// How long a hung kill point may take to be reached before the process is killed anyway.
const KILL_FALLBACK: Duration = Duration::from_secs(20);
/// How long a cluster may take to settle after a restart (the dead leader's Lease expires after
/// 15 s; drift replacements, drains and garbage collection need their own minutes at most).
const SETTLE_LIMIT: Duration = Duration::from_secs(600);
/// How often the world (ReplicaSet, scheduler, pod GC) acts and the invariants are sampled.
const STEP: Duration = Duration::from_millis(500);

#[derive(Debug, Default)]
struct Report {
    seed: u64,
    restarts: usize,
    kills: usize,
    startup_kills: usize,
    kills_inside: BTreeMap<&'static str, usize>,
    nodeclaims_seen: usize,
    leaks: usize,
    double_launches: Vec<String>,
    changed_provider_ids: Vec<String>,
    foreign_touched: Vec<String>,
    /// The round and what was wrong when a restart never settled.
    unsettled: Option<(usize, Vec<String>)>,
    virtual_time: Duration,
    longest_settle: Duration,
}

impl Report {
    fn clean(&self) -> bool {
        self.leaks == 0
            && self.double_launches.is_empty()
            && self.changed_provider_ids.is_empty()
            && self.foreign_touched.is_empty()
            && self.unsettled.is_none()
    }
}

struct Campaign {
    cluster: SimCluster,
    rng: Rng,
    kube: Kubernetes,
    watch: Watch,
    report: Report,
    generation: usize,
    claims_seen: std::collections::BTreeSet<String>,
}

impl Campaign {
    async fn new(seed: u64) -> Campaign {
        let mut cluster = SimCluster::new().await;
        // Each process runs its own kubelet over the ledger it restored.
        cluster.stop_kubelet().await;
        cluster.put_default_nodepool();
        crash_world::put_foreign_capacity(&cluster).await;
        Campaign {
            cluster,
            rng: Rng(seed),
            kube: Kubernetes::default(),
            watch: Watch::default(),
            report: Report {
                seed,
                ..Report::default()
            },
            generation: 0,
            claims_seen: Default::default(),
        }
    }

    async fn start_process(&mut self) -> Process {
        self.generation += 1;
        Process::start(&self.cluster, &format!("replica-{}", self.generation)).await
    }

    /// Lets the world run for `duration` (or until `until` holds), one step at a time.
    async fn run_for(&mut self, duration: Duration, mut until: impl FnMut(&SimCluster) -> bool) {
        let deadline = Instant::now() + duration;
        while Instant::now() < deadline && !until(&self.cluster) {
            tokio::time::sleep(STEP.min(deadline - Instant::now())).await;
            self.kube.step(&self.cluster);
            self.watch.observe(&self.cluster);
            for claim in self.cluster.server.list::<NodeClaim>() {
                if let Some(uid) = claim.uid() {
                    self.claims_seen.insert(uid);
                }
            }
        }
    }

    /// A scale (so something happens: launches, or drains and consolidation) and up to two
    /// more random user actions or faults.
    async fn act(&mut self, process: &Process) {
        let desired = self.kube.desired;
        while self.kube.desired == desired {
            self.kube.desired = usize::try_from(self.rng.below(9)).unwrap_or(0);
        }
        for _ in 0..self.rng.below(3) {
            match self.rng.below(8) {
                0 | 1 => self.drift(),
                3 => {
                    let claims = self.cluster.server.list::<NodeClaim>();
                    if !claims.is_empty() {
                        let pick = &claims[self.pick(claims.len())];
                        let api: Api<NodeClaim> = Api::all(self.cluster.client.clone());
                        let _ = api.delete(&pick.name_any(), &DeleteParams::default()).await;
                    }
                }
                4 => {
                    let nodes: Vec<_> = self
                        .cluster
                        .server
                        .list::<k8s_openapi::api::core::v1::Node>()
                        .into_iter()
                        .filter(|n| {
                            n.labels()
                                .contains_key(karpenter_api::well_known::NODEPOOL_LABEL)
                        })
                        .collect();
                    if !nodes.is_empty() {
                        let pick = &nodes[self.pick(nodes.len())];
                        let api: Api<k8s_openapi::api::core::v1::Node> =
                            Api::all(self.cluster.client.clone());
                        let _ = api.delete(&pick.name_any(), &DeleteParams::default()).await;
                    }
                }
                5 => process.sim.fail_next_creates(
                    1 + usize::try_from(self.rng.below(3)).unwrap_or(0),
                    CloudError::Create {
                        reason: "RequestLimitExceeded".into(),
                        message: "Request limit exceeded.".into(),
                    },
                ),
                6 => process.sim.fail_next_creates(
                    1,
                    CloudError::InsufficientCapacity("no capacity for the offerings".into()),
                ),
                7 => process
                    .cloud
                    .slow_creates
                    .store(1, std::sync::atomic::Ordering::SeqCst),
                _ => self.cluster.server.inject_error(
                    Some(Verb::Update),
                    "nodeclaims",
                    ApiError::internal("etcdserver: request timed out"),
                    1 + usize::try_from(self.rng.below(3)).unwrap_or(0),
                ),
            }
        }
    }

    fn pick(&mut self, len: usize) -> usize {
        usize::try_from(self.rng.below(len as u64)).unwrap_or(0)
    }

    /// NodePool drift: a new template label changes the pool's hash.
    fn drift(&mut self) {
        let Some(mut pool) =
            self.cluster
                .server
                .get_value("karpenter.sh/v1", "NodePool", None, "default")
        else {
            return;
        };
        pool["spec"]["template"]["metadata"]["labels"]["crash/drift"] =
            serde_json::json!(self.rng.below(1_000_000).to_string());
        if let Some(meta) = pool["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        let _ = self.cluster.server.put_value(pool);
    }

    /// Runs until the kill point is reached (or a while), then kills the process.
    async fn kill_somewhere(&mut self, process: Process) {
        let aimed = self.rng.below(10) >= 3;
        let hung_before = self.cluster.server.hung_requests().len();
        let mut inside = None;
        if aimed {
            let (verb, resource, label) = KILL_POINTS[self.pick(KILL_POINTS.len())];
            self.cluster.server.inject_hang(Some(verb), resource, 1);
            self.run_for(KILL_FALLBACK, |c| {
                c.server.hung_requests().len() > hung_before
            })
            .await;
            if self.cluster.server.hung_requests().len() > hung_before {
                inside = Some(label);
            }
        } else {
            let after = Duration::from_millis(self.rng.below(15_000));
            self.run_for(after, |_| false).await;
        }
        process.kill();
        self.cluster.server.clear_faults();
        self.report.kills += 1;
        *self
            .report
            .kills_inside
            .entry(inside.unwrap_or("a random instant"))
            .or_default() += 1;
    }

    /// One round: actions, a kill, sometimes a second kill 0–3 s after the next process took
    /// the lease, a restart, then the settle and its invariants.
    async fn round(&mut self, round: usize, process: Process) -> Option<Process> {
        self.act(&process).await;
        self.kill_somewhere(process).await;
        if self.rng.chance(3) {
            let starting = self.start_process().await;
            self.report.restarts += 1;
            let leads = starting.running.ctx.clone();
            self.run_for(Duration::from_secs(30), |_| leads.is_leader())
                .await;
            let after = Duration::from_millis(self.rng.below(3_000));
            self.run_for(after, |_| false).await;
            starting.kill();
            self.cluster.server.clear_faults();
            self.report.kills += 1;
            self.report.startup_kills += 1;
        }
        let process = self.start_process().await;
        self.report.restarts += 1;
        let started = Instant::now();
        let mut wrong = Vec::new();
        let deadline = started + SETTLE_LIMIT;
        while Instant::now() < deadline {
            self.run_for(Duration::from_secs(1), |_| false).await;
            wrong = unsettled(&self.cluster, &self.kube);
            if wrong.is_empty() {
                break;
            }
        }
        self.report.longest_settle = self.report.longest_settle.max(started.elapsed());
        if !wrong.is_empty() {
            self.report.leaks += wrong.iter().filter(|w| w.starts_with("leak")).count();
            self.report.unsettled = Some((round, wrong));
            process.kill();
            return None;
        }
        Some(process)
    }

    async fn run(mut self, restarts: usize) -> Report {
        let began = Instant::now();
        let mut process = Some(self.start_process().await);
        let mut round = 0;
        while self.report.restarts < restarts {
            let Some(current) = process.take() else { break };
            round += 1;
            let before = self.report.restarts;
            process = self.round(round, current).await;
            if self.report.restarts / 50 > before / 50 {
                eprintln!(
                    "crash campaign: {} restarts, {} kills, {} NodeClaims, {:.0} s virtual",
                    self.report.restarts,
                    self.report.kills,
                    self.claims_seen.len(),
                    began.elapsed().as_secs_f64()
                );
            }
        }
        if let Some(process) = process {
            process.running.stop().await;
        }
        self.report.double_launches = std::mem::take(&mut self.watch.double_launches);
        self.report.changed_provider_ids = std::mem::take(&mut self.watch.changed_provider_ids);
        self.report.foreign_touched = std::mem::take(&mut self.watch.foreign_touched);
        self.report.nodeclaims_seen = self.claims_seen.len();
        self.report.virtual_time = began.elapsed();
        self.report
    }
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

async fn campaign(default_seed: u64, default_restarts: usize) -> Report {
    let seed = env_number("CRASH_SEED").unwrap_or(default_seed);
    let restarts = env_number("CRASH_RUNS")
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(default_restarts);
    eprintln!("crash campaign: seed {seed}, {restarts} restarts (replay with CRASH_SEED={seed})");
    let wall = std::time::Instant::now();
    let report = Campaign::new(seed).await.run(restarts).await;
    eprintln!(
        "crash campaign: seed {} → {} restarts, {} kills ({} during start-up), {} NodeClaims, \
         {} leaks, {} double launches, {} changed provider IDs, foreign touched {}, \
         unsettled {:?}; {:.0} s virtual (longest settle {:.0} s), {:.1} s wall; kills inside {:?}",
        report.seed,
        report.restarts,
        report.kills,
        report.startup_kills,
        report.nodeclaims_seen,
        report.leaks,
        report.double_launches.len(),
        report.changed_provider_ids.len(),
        report.foreign_touched.len(),
        report.unsettled,
        report.virtual_time.as_secs_f64(),
        report.longest_settle.as_secs_f64(),
        wall.elapsed().as_secs_f64(),
        report.kills_inside,
    );
    report
}

fn assert_clean(report: &Report) {
    assert!(
        report.clean(),
        "crash campaign seed {} failed (replay with CRASH_SEED={}): {report:#?}",
        report.seed,
        report.seed
    );
}

/// The short campaign `cargo test` runs.
#[tokio::test(start_paused = true)]
async fn campaign_short() {
    let report = campaign(20_261_126, 10).await;
    assert_clean(&report);
    assert!(report.kills >= 10);
    assert!(report.nodeclaims_seen > 0, "the campaign launched nothing");
}

/// The long campaign (`CRASH_RUNS`, default 1,000 restarts); see `docs/benchmarks.md`.
#[tokio::test(start_paused = true)]
#[ignore = "long: run with --ignored (CRASH_RUNS, CRASH_SEED)"]
async fn campaign_long() {
    let default_seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(1);
    let report = campaign(default_seed, 1_000).await;
    assert_clean(&report);
}

/// Pods that became pending while the leader was dead are provisioned the moment the new
/// leader holds the lease with synced caches, not at its next 10 s re-trigger.
#[tokio::test(start_paused = true)]
async fn pods_pending_at_a_leadership_change_are_provisioned_at_once() {
    let mut cluster = SimCluster::new().await;
    cluster.stop_kubelet().await;
    cluster.put_default_nodepool();
    let a = Process::start(&cluster, "replica-a").await;
    let a_ctx = a.running.ctx.clone();
    cluster
        .eventually("replica-a leads", Duration::from_secs(10), || {
            a_ctx.is_leader().then_some(())
        })
        .await;
    let b = Process::start(&cluster, "replica-b").await;
    // Killed so that the take-over falls midway between two of the follower's 10 s
    // re-triggers, which alone would provision the pods ~5 s late.
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(!b.running.ctx.is_leader());
    assert!(
        b.running.ctx.state.read().synced(),
        "the follower is synced"
    );
    a.kill();
    for i in 0..3 {
        cluster.server.put(&inflate_pod(i)).unwrap();
    }
    let b_ctx = b.running.ctx.clone();
    cluster
        .eventually("replica-b takes over", Duration::from_secs(20), || {
            b_ctx.is_leader().then_some(())
        })
        .await;
    let took_over = Instant::now();
    cluster
        .eventually(
            "NodeClaims for the pending pods",
            Duration::from_secs(15),
            || (cluster.server.count::<NodeClaim>() > 0).then_some(()),
        )
        .await;
    let waited = took_over.elapsed();
    assert!(
        waited <= Duration::from_secs(1),
        "provisioned {waited:?} after the new leader took over"
    );
    b.kill();
}

/// An instance whose NodeClaim went while no controller ran is collected as soon as a
/// controller leads again, not a garbage-collection period (2 min) later.
#[tokio::test(start_paused = true)]
async fn an_orphaned_instance_is_collected_right_after_a_restart() {
    let mut cluster = SimCluster::new().await;
    cluster.stop_kubelet().await;
    cluster.put_default_nodepool();
    let first = Process::start(&cluster, "replica-a").await;
    cluster
        .create_nodeclaim("claim-0", serde_json::json!({}))
        .await;
    cluster
        .eventually("claim-0 launched", Duration::from_secs(30), || {
            cluster
                .nodeclaim("claim-0")
                .and_then(|c| c.status?.provider_id)
                .filter(|_| !ledger_instances(&cluster).is_empty())
        })
        .await;
    first.kill();
    // Someone removes the NodeClaim by hand while no controller runs.
    let mut claim = cluster.nodeclaim("claim-0").unwrap();
    claim.metadata.finalizers = None;
    cluster.server.put(&claim).unwrap();
    cluster.server.delete::<NodeClaim>(None, "claim-0").unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(ledger_instances(&cluster).len(), 1, "the orphan");

    // The dead leader's Lease: a new replica waits 15 s from when it first sees it (client-go).
    let second = Process::start(&cluster, "replica-b").await;
    let ctx = second.running.ctx.clone();
    cluster
        .eventually("replica-b leads", Duration::from_secs(20), || {
            (ctx.is_leader() && ctx.state.read().synced()).then_some(())
        })
        .await;
    let working = Instant::now();
    cluster
        .eventually("the orphan collected", Duration::from_secs(130), || {
            ledger_instances(&cluster).is_empty().then_some(())
        })
        .await;
    let waited = working.elapsed();
    assert!(
        waited <= Duration::from_secs(2),
        "collected {waited:?} after the restart"
    );
    second.kill();
}

/// Every create, update and patch karpenter-rs sends names field manager `karpenter`, and the
/// API server records it in the objects' `managedFields`.
#[tokio::test(start_paused = true)]
async fn every_write_names_the_field_manager() {
    let mut cluster = SimCluster::new().await;
    cluster.stop_kubelet().await;
    cluster.put_default_nodepool();
    let process = Process::start(&cluster, "replica-a").await;
    for i in 0..2 {
        cluster.server.put(&inflate_pod(i)).unwrap();
    }
    let claim = cluster
        .eventually("a NodeClaim Ready", Duration::from_secs(60), || {
            cluster
                .server
                .list::<NodeClaim>()
                .into_iter()
                .find(NodeClaim::is_ready)
        })
        .await;
    let node = cluster
        .server
        .list::<k8s_openapi::api::core::v1::Node>()
        .into_iter()
        .next();
    let recorded = claim
        .metadata
        .managed_fields
        .clone()
        .into_iter()
        .chain(node.and_then(|n| n.metadata.managed_fields))
        .flatten()
        .collect::<Vec<_>>();
    assert!(!recorded.is_empty());
    assert!(
        recorded
            .iter()
            .all(|entry| entry.manager.as_deref() == Some("karpenter")),
        "{recorded:?}"
    );
    assert!(
        recorded
            .iter()
            .any(|entry| entry.subresource.as_deref() == Some("status")
                && entry.operation.as_deref() == Some("Update")),
        "status writes are recorded with their subresource: {recorded:?}"
    );
    let api: Api<NodeClaim> = Api::all(cluster.client.clone());
    api.delete(&claim.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    cluster
        .eventually("the NodeClaim gone", Duration::from_secs(60), || {
            cluster.nodeclaim(&claim.name_any()).is_none().then_some(())
        })
        .await;
    let writes: Vec<_> = cluster
        .server
        .requests()
        .into_iter()
        .filter(|r| r.client.as_deref() == Some("replica-a"))
        .filter(|r| matches!(r.verb, Verb::Create | Verb::Update | Verb::Patch))
        .collect();
    assert!(writes.len() > 10, "{writes:?}");
    let unnamed: Vec<_> = writes
        .iter()
        .filter(|r| r.field_manager.as_deref() != Some("karpenter"))
        .collect();
    assert!(
        unnamed.is_empty(),
        "writes without the field manager: {unnamed:?}"
    );
    for resource in ["nodeclaims", "nodes", "leases", "events", "configmaps"] {
        assert!(
            writes.iter().any(|r| r.resource == resource),
            "no {resource} write seen"
        );
    }
    process.kill();
}
