//! Per-object work for the reconcile loops (NodeClaim lifecycle, node termination): each
//! object's reconcile runs as its own task, at most one per object at a time and at most
//! `concurrency` at once, and a failed object waits out its own exponential backoff
//! ([`crate::backoff`]). The loop never awaits a reconcile, so one hung call (bounded anyway by
//! [`crate::timeouts`]) never stalls the other objects, the loop's other duties or shutdown.
//!
//! A reconcile that panics is re-raised in the loop ([`Workers::finished`]), which ends the loop
//! and so the replica (see `run.rs`, supervision): a half-working replica must not keep leading.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use karpenter_kube::stopped;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinSet};

use crate::backoff::{Backoff, BackoffPolicy};
use crate::context::Context;
use crate::writes::Leader;

/// Upper bound on reconciles in flight per loop.
pub const MAX_CONCURRENT_RECONCILES: usize = 64;

/// How soon an object's reconcile should start when the loop is at its concurrency limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Urgency {
    /// The object has work to do (a NodeClaim launching, registering, initializing or being
    /// deleted): ahead of every [`Urgency::InTurn`] object. controller-runtime reconciles such
    /// an object on its watch event; a tick is the soonest here.
    Now,
    /// Steady state: a turn in round-robin order.
    InTurn,
}

/// What a finished reconcile task reports.
pub type Outcome = (String, crate::Result<()>);

/// The reconciles of one loop.
pub struct Workers {
    what: &'static str,
    concurrency: usize,
    backoff: Backoff<String>,
    in_flight: HashSet<String>,
    /// When each object last got a turn (a start counter), so that at the concurrency limit
    /// the objects that waited longest go first instead of the same first few every tick.
    last_turn: HashMap<String, u64>,
    turns: u64,
    tasks: JoinSet<Outcome>,
    /// controller-runtime's and the workqueue's families, once [`Workers::instrument`]ed.
    instruments: Option<Instruments>,
}

/// What the metrics of one reconciler loop need: the families, its controller name, when each
/// waiting object started to wait and each running reconcile started (wall time: durations).
struct Instruments {
    metrics: Arc<crate::metrics::Metrics>,
    controller: String,
    waiting_since: HashMap<String, std::time::Instant>,
    running_since: HashMap<String, std::time::Instant>,
}

impl Instruments {
    fn reconciler(&self) -> crate::metrics::ReconcilerLabels {
        crate::metrics::ReconcilerLabels {
            controller: self.controller.clone(),
        }
    }

    fn queue(&self) -> crate::metrics::WorkqueueLabels {
        crate::metrics::WorkqueueLabels {
            controller: self.controller.clone(),
            name: self.controller.clone(),
        }
    }

    fn started(&mut self, key: &str) {
        let now = std::time::Instant::now();
        let x = &self.metrics.x;
        x.workqueue_adds.get_or_create(&self.queue()).inc();
        let waited = self
            .waiting_since
            .remove(key)
            .map_or(0.0, |since| now.duration_since(since).as_secs_f64());
        x.workqueue_queue_duration
            .get_or_create(&self.queue())
            .observe(waited);
        self.running_since.insert(key.to_string(), now);
    }

    fn finished(&mut self, key: &str, result: Option<&crate::Result<()>>) {
        let x = &self.metrics.x;
        let took = self
            .running_since
            .remove(key)
            .map_or(0.0, |since| since.elapsed().as_secs_f64());
        x.workqueue_work_duration
            .get_or_create(&self.queue())
            .observe(took);
        x.reconcile_time
            .get_or_create(&self.reconciler())
            .observe(took);
        let outcome = match result {
            Some(Ok(())) => "success",
            Some(Err(err)) => {
                x.reconcile_errors.get_or_create(&self.reconciler()).inc();
                x.workqueue_retries.get_or_create(&self.queue()).inc();
                if is_timeout(err) {
                    x.reconcile_timeouts.get_or_create(&self.reconciler()).inc();
                }
                "error"
            }
            None => {
                x.reconcile_panics.get_or_create(&self.reconciler()).inc();
                "error"
            }
        };
        x.reconcile_total
            .get_or_create(&crate::metrics::ReconcileResultLabels {
                controller: self.controller.clone(),
                result: outcome.into(),
            })
            .inc();
    }

    fn set_active(&self, in_flight: usize) {
        self.metrics
            .x
            .active_workers
            .get_or_create(&self.reconciler())
            .set(i64::try_from(in_flight).unwrap_or(i64::MAX));
    }

    /// The gauges of the moment: workers in use, objects waiting, how long the running ones run.
    fn refresh(&mut self, in_flight: usize, waiting: &[String]) {
        let now = std::time::Instant::now();
        let x = &self.metrics.x;
        let live: HashSet<&str> = waiting.iter().map(String::as_str).collect();
        self.waiting_since
            .retain(|key, _| live.contains(key.as_str()));
        for key in waiting {
            self.waiting_since.entry(key.clone()).or_insert(now);
        }
        self.set_active(in_flight);
        x.workqueue_depth
            .get_or_create(&crate::metrics::WorkqueueDepthLabels {
                controller: self.controller.clone(),
                name: self.controller.clone(),
                priority: String::new(),
            })
            .set(i64::try_from(waiting.len()).unwrap_or(i64::MAX));
        let running: Vec<f64> = self
            .running_since
            .values()
            .map(|since| now.duration_since(*since).as_secs_f64())
            .collect();
        x.workqueue_unfinished_work
            .get_or_create(&self.queue())
            .set(running.iter().sum());
        x.workqueue_longest_running_processor
            .get_or_create(&self.queue())
            .set(running.iter().copied().fold(0.0, f64::max));
    }
}

/// Whether a reconcile failed because a call got no answer in time.
fn is_timeout(err: &crate::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if e.downcast_ref::<crate::timeouts::TimedOut>().is_some() {
            return true;
        }
        cause = e.source();
    }
    false
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("what", &self.what)
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl Workers {
    /// `what` names the objects in logs (`nodeclaim`, `node`).
    pub fn new(what: &'static str, policy: BackoffPolicy, concurrency: usize) -> Self {
        Workers {
            what,
            concurrency: concurrency.max(1),
            backoff: Backoff::new(policy),
            in_flight: HashSet::new(),
            last_turn: HashMap::new(),
            turns: 0,
            tasks: JoinSet::new(),
            instruments: None,
        }
    }

    /// Records controller-runtime's `controller_runtime_*` and the `workqueue_*` families for
    /// this loop under `controller` (upstream's controller name, e.g. `nodeclaim.lifecycle`).
    pub fn instrument(&mut self, metrics: Arc<crate::metrics::Metrics>, controller: &str) {
        let labels = crate::metrics::ReconcilerLabels {
            controller: controller.into(),
        };
        metrics
            .x
            .max_concurrent_reconciles
            .get_or_create(&labels)
            .set(i64::try_from(self.concurrency).unwrap_or(i64::MAX));
        // Upstream never has terminal errors here either: every failure is retried.
        let _ = metrics.x.terminal_reconcile_errors.get_or_create(&labels);
        // controller-runtime exports these from the start, at 0.
        let _ = metrics.x.reconcile_errors.get_or_create(&labels);
        let _ = metrics.x.reconcile_panics.get_or_create(&labels);
        let _ = metrics.x.reconcile_timeouts.get_or_create(&labels);
        let mut instruments = Instruments {
            metrics,
            controller: controller.into(),
            waiting_since: HashMap::new(),
            running_since: HashMap::new(),
        };
        instruments.refresh(0, &[]);
        self.instruments = Some(instruments);
    }

    /// Starts `reconcile` for `key` unless one is already running for it, it is backing off, or
    /// the loop is at its concurrency limit (it is then picked up on a later tick). Returns
    /// whether it started.
    /// Not in flight, not backing off, and a slot is free.
    fn startable(&self, key: &str, now: Timestamp) -> bool {
        !self.in_flight.contains(key)
            && self.backoff.ready(key, now)
            && self.in_flight.len() < self.concurrency
    }

    pub fn start(
        &mut self,
        key: String,
        now: Timestamp,
        reconcile: impl Future<Output = crate::Result<()>> + Send + 'static,
    ) -> bool {
        if !self.startable(&key, now) {
            return false;
        }
        self.turns = self.turns.saturating_add(1);
        self.last_turn.insert(key.clone(), self.turns);
        self.in_flight.insert(key.clone());
        if let Some(instruments) = self.instruments.as_mut() {
            instruments.started(&key);
        }
        self.tasks.spawn(async move { (key, reconcile.await) });
        true
    }

    /// One tick of a loop: forgets objects no longer in `candidates`, then starts a reconcile
    /// for each candidate (see [`Workers::start`]): the [`Urgency::Now`] ones first, then
    /// those that waited longest for a turn. Without the turn order a loop at its concurrency
    /// limit would serve the same first objects every tick and starve the rest (seen with 182
    /// NodeClaims and 64 slots); without urgency first, an object with work to do waits its
    /// turn behind every idle one (at 326 NodeClaims a deleted one could wait ~5 ticks before
    /// its Node was deleted, delaying the drain of each consolidation command).
    ///
    /// `make` builds a candidate's reconcile only when it starts (`None`: the object is gone):
    /// a tick of a thousand objects with 64 slots builds at most 64 futures and copies at most
    /// 64 objects, not a thousand.
    pub fn start_in_turn<F>(
        &mut self,
        now: Timestamp,
        candidates: Vec<(String, Urgency)>,
        mut make: impl FnMut(&str) -> Option<F>,
    ) where
        F: Future<Output = crate::Result<()>> + Send + 'static,
    {
        let live: HashSet<String> = candidates.iter().map(|(key, _)| key.clone()).collect();
        self.backoff.retain(|key| live.contains(key));
        self.last_turn.retain(|key, _| live.contains(key));
        let mut candidates = candidates;
        candidates.sort_by_key(|(key, urgency)| {
            (*urgency, self.last_turn.get(key).copied().unwrap_or(0))
        });
        for (key, _) in candidates {
            if self.in_flight.len() >= self.concurrency {
                break;
            }
            if !self.startable(&key, now) {
                continue;
            }
            if let Some(reconcile) = make(&key) {
                self.start(key, now, reconcile);
            }
        }
        if self.instruments.is_some() {
            let waiting: Vec<String> = live
                .into_iter()
                .filter(|key| !self.in_flight.contains(key))
                .collect();
            let in_flight = self.in_flight.len();
            if let Some(instruments) = self.instruments.as_mut() {
                instruments.refresh(in_flight, &waiting);
            }
        }
    }

    pub async fn next_finished(&mut self) -> Result<Outcome, JoinError> {
        match self.tasks.join_next().await {
            Some(done) => done,
            None => std::future::pending().await,
        }
    }

    /// Books a finished reconcile: success resets the object's backoff, an error backs it off
    /// (logged), a panic is re-raised here.
    pub fn finished(&mut self, done: Result<Outcome, JoinError>, now: Timestamp) {
        match done {
            Ok((key, result)) => {
                self.in_flight.remove(&key);
                if let Some(instruments) = self.instruments.as_mut() {
                    instruments.finished(&key, Some(&result));
                    instruments.set_active(self.in_flight.len());
                }
                match result {
                    Ok(()) => self.backoff.succeeded(&key),
                    Err(err) => {
                        let delay = self.backoff.failed(key.clone(), now);
                        tracing::warn!(
                            object = %format!("{}/{key}", self.what),
                            error = %err,
                            retry_in = ?delay,
                            "reconcile failed; backing off"
                        );
                    }
                }
            }
            Err(err) if err.is_panic() => {
                if let Some(instruments) = self.instruments.as_mut() {
                    instruments.finished("", None);
                }
                std::panic::resume_unwind(err.into_panic())
            }
            // Cancelled: only `stop` aborts tasks.
            Err(_) => {}
        }
    }

    /// Keys with a reconcile in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Consecutive failures of `key`.
    pub fn failures(&self, key: &str) -> u32 {
        self.backoff.failures(&key.to_string())
    }

    /// Aborts every running reconcile (shutdown; their API calls are dropped unanswered).
    pub fn stop(&mut self) {
        self.tasks.abort_all();
        self.in_flight.clear();
    }
}

/// The loop of a per-object reconciler (NodeClaim lifecycle, node termination), until
/// `shutdown` turns true: every `period`, and at once when the replica starts to work (a new
/// leader resumes what its predecessor left), `start` starts reconciles under the [`Leader`] of
/// the term; finished ones are booked as they end; a replica that stops leading drops its
/// in-flight reconciles (their writes) at once.
pub async fn run_reconciler(
    ctx: Arc<Context>,
    mut shutdown: watch::Receiver<bool>,
    mut workers: Workers,
    period: Duration,
    start: impl Fn(&Leader, &mut Workers),
) {
    let controller = match workers.what {
        "nodeclaim" => "nodeclaim.lifecycle",
        "node" => "node.termination",
        other => other,
    };
    workers.instrument(ctx.metrics.clone(), controller);
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leadership = ctx.leadership();
    let mut starts = ctx.work_starts();
    loop {
        tokio::select! {
            () = stopped(&mut shutdown) => break,
            done = workers.next_finished() => workers.finished(done, ctx.now()),
            () = starts.next() => {
                if let Some(leader) = ctx.leader() {
                    start(&leader, &mut workers);
                }
            }
            Ok(()) = leadership.changed() => {
                if !ctx.is_leader() {
                    workers.stop();
                }
            }
            _ = ticker.tick() => {
                if let Some(leader) = ctx.working() {
                    start(&leader, &mut workers);
                }
            }
        }
    }
    workers.stop();
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;
    use std::time::Duration;

    fn t0() -> Timestamp {
        Timestamp::from_second(1_704_067_200).unwrap()
    }

    fn in_turn(keys: &[&str]) -> Vec<(String, Urgency)> {
        keys.iter()
            .map(|k| (k.to_string(), Urgency::InTurn))
            .collect()
    }

    /// Drains the loop's reconciles; the keys in the order they finished.
    async fn finish_all(workers: &mut Workers) -> Vec<String> {
        let mut served = Vec::new();
        while workers.in_flight() > 0 {
            let done = workers.next_finished().await;
            if let Ok((key, _)) = &done {
                served.push(key.clone());
            }
            workers.finished(done, t0());
        }
        served
    }

    #[tokio::test(start_paused = true)]
    async fn instrumented_workers_count_reconciles_as_controller_runtime_does() {
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let mut workers = Workers::new("node", BackoffPolicy::RECONCILE, 2);
        workers.instrument(metrics.clone(), "node.termination");
        let make = |key: &str| {
            let fails = key == "bad";
            Some(async move {
                if fails {
                    Err(crate::Error::Settings {
                        name: "X",
                        message: "boom".into(),
                    })
                } else {
                    Ok(())
                }
            })
        };
        // Three objects, two slots: one waits in the queue.
        workers.start_in_turn(t0(), in_turn(&["good", "bad", "later"]), make);
        let text = metrics.encode();
        for line in [
            r#"controller_runtime_active_workers{controller="node.termination"} 2"#,
            r#"controller_runtime_max_concurrent_reconciles{controller="node.termination"} 2"#,
            r#"workqueue_depth{controller="node.termination",name="node.termination",priority=""} 1"#,
            r#"workqueue_adds_total{controller="node.termination",name="node.termination"} 2"#,
            r#"controller_runtime_reconcile_errors_total{controller="node.termination"} 0"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        for _ in 0..2 {
            let done = workers.next_finished().await;
            workers.finished(done, t0());
        }
        let text = metrics.encode();
        for line in [
            r#"controller_runtime_reconcile_total{controller="node.termination",result="success"} 1"#,
            r#"controller_runtime_reconcile_total{controller="node.termination",result="error"} 1"#,
            r#"controller_runtime_reconcile_errors_total{controller="node.termination"} 1"#,
            r#"workqueue_retries_total{controller="node.termination",name="node.termination"} 1"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="node.termination"} 2"#,
            r#"workqueue_queue_duration_seconds_count{controller="node.termination",name="node.termination"} 2"#,
            r#"controller_runtime_active_workers{controller="node.termination"} 0"#,
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_object_does_not_block_others_and_failures_back_off() {
        let mut workers = Workers::new("nodeclaim", BackoffPolicy::RECONCILE, 8);
        assert!(workers.start("hung".into(), t0(), std::future::pending()));
        assert!(
            !workers.start("hung".into(), t0(), async { Ok(()) }),
            "one reconcile per object at a time"
        );
        assert!(workers.start("bad".into(), t0(), async {
            Err(crate::Error::Settings {
                name: "X",
                message: "boom".into(),
            })
        }));
        let done = workers.next_finished().await;
        workers.finished(done, t0());
        assert_eq!(workers.failures("bad"), 1);
        assert!(
            !workers.start("bad".into(), t0(), async { Ok(()) }),
            "backing off"
        );
        let later = t0().checked_add(SignedDuration::from_secs(1)).unwrap();
        assert!(workers.start("bad".into(), later, async { Ok(()) }));
        let done = tokio::time::timeout(Duration::from_secs(1), workers.next_finished())
            .await
            .unwrap();
        workers.finished(done, later);
        assert_eq!(workers.failures("bad"), 0, "success resets");
        assert_eq!(workers.in_flight(), 1, "only the hung one is left");
        workers.stop();
        assert_eq!(workers.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_concurrency_limit_every_object_gets_its_turn() {
        let mut workers = Workers::new("nodeclaim", BackoffPolicy::RECONCILE, 2);
        let keys = ["a", "b", "c", "d", "e"];
        let mut served = Vec::new();
        for _ in 0..3 {
            workers.start_in_turn(t0(), in_turn(&keys), |_| Some(async { Ok(()) }));
            served.extend(finish_all(&mut workers).await);
        }
        served.sort();
        served.dedup();
        assert_eq!(
            served, keys,
            "three ticks of two slots reach all five objects"
        );
    }

    /// A NodeClaim that was just deleted (or is launching) must not wait for its turn behind
    /// every idle one: its Node's drain, and with it each consolidation command, waited on it.
    #[tokio::test(start_paused = true)]
    async fn an_object_with_work_to_do_starts_before_the_idle_ones_in_turn() {
        let mut workers = Workers::new("nodeclaim", BackoffPolicy::RECONCILE, 2);
        let keys = ["a", "b", "c", "d", "e"];
        // First tick: `a` and `b` get their turn; `c`, `d`, `e` have waited longer since.
        workers.start_in_turn(t0(), in_turn(&keys), |_| Some(async { Ok(()) }));
        assert_eq!(finish_all(&mut workers).await.len(), 2);
        // `a` is deleted now: it has work, and goes ahead of `c` and `d`.
        let mut candidates = in_turn(&keys);
        candidates[0].1 = Urgency::Now;
        let mut started = Vec::new();
        workers.start_in_turn(t0(), candidates, |key| {
            started.push(key.to_string());
            Some(async { Ok(()) })
        });
        assert_eq!(started, ["a", "c"]);
        workers.stop();
    }

    #[tokio::test(start_paused = true)]
    async fn a_tick_builds_reconciles_only_for_the_objects_it_starts() {
        let mut workers = Workers::new("nodeclaim", BackoffPolicy::RECONCILE, 3);
        let candidates: Vec<(String, Urgency)> = (0..100)
            .map(|i| (format!("claim-{i}"), Urgency::InTurn))
            .collect();
        let mut built = Vec::new();
        workers.start_in_turn(t0(), candidates.clone(), |key| {
            built.push(key.to_string());
            Some(std::future::pending())
        });
        assert_eq!(
            built.len(),
            3,
            "three slots, three reconciles built: {built:?}"
        );
        assert_eq!(workers.in_flight(), 3);
        // The next tick: every slot busy, nothing is built.
        built.clear();
        workers.start_in_turn(t0(), candidates, |key| {
            built.push(key.to_string());
            Some(std::future::pending())
        });
        assert!(built.is_empty(), "{built:?}");
        // An object gone by the time its turn comes (`None`) takes no slot.
        let mut workers = Workers::new("nodeclaim", BackoffPolicy::RECONCILE, 2);
        workers.start_in_turn(t0(), in_turn(&["gone", "a", "b"]), |key| {
            (key != "gone").then_some(async { Ok(()) })
        });
        assert_eq!(workers.in_flight(), 2);
        workers.stop();
    }

    #[tokio::test]
    #[should_panic(expected = "reconcile bug")]
    async fn a_panicking_reconcile_is_re_raised_in_the_loop() {
        let mut workers = Workers::new("node", BackoffPolicy::RECONCILE, 1);
        workers.start("n".into(), t0(), async { panic!("reconcile bug") });
        let done = workers.next_finished().await;
        workers.finished(done, t0());
    }
}
