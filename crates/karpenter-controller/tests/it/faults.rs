//! The controller under faults (issue 8): hung and failing API calls, a hung lease renewal, a
//! panicking loop, ledger conflicts and a missing namespace. All on the test API server's fault
//! injection (`inject_hang`, `inject_error`), in virtual time.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): injected faults (hung and failing calls, a hung
//! lease renewal).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use karpenter_api::v1::EC2NodeClass;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_controller::run::{
    self, Options, ProviderTask, ProviderTaskContext, RunningController,
};
use karpenter_controller::{Context, Settings};
use karpenter_core::cloud_provider::{
    CloudError, CloudProvider, DriftReason, NodeClassKind, RepairPolicy,
};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::pod::Pod;
use karpenter_sim::SimCloudProvider;
use karpenter_sim::cluster::{LEDGER_CONFIGMAP, LedgerStore};
use karpenter_testapi::{ApiError, TestApiServer, Verb};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::sim_cluster::SimCluster;
use crate::support::{advance, api_server, nodeclass, nodepool, pending_pod, start_named};

fn provider_id(cluster: &SimCluster, name: &str) -> Option<String> {
    cluster
        .nodeclaim(name)?
        .status
        .and_then(|s| s.provider_id)
        .filter(|p| !p.is_empty())
}

#[tokio::test(start_paused = true)]
async fn a_hung_status_write_stalls_neither_other_nodeclaims_nor_shutdown() {
    let cluster = SimCluster::new().await;
    let controller = cluster.start_controller().await;
    // The first NodeClaim status write (the launch record of `stuck`) is never answered.
    cluster
        .server
        .inject_hang(Some(Verb::Update), "nodeclaims/status", 1);
    cluster.create_nodeclaim("stuck", json!({})).await;
    cluster
        .eventually("the hung launch record", Duration::from_secs(5), || {
            (!cluster.server.hung_requests().is_empty()).then_some(())
        })
        .await;
    let hung = cluster.server.hung_requests();
    assert_eq!(hung[0].name.as_deref(), Some("stuck"));

    // Another NodeClaim launches meanwhile, well before the hung call times out (10 s).
    let started = tokio::time::Instant::now();
    cluster.create_nodeclaim("free", json!({})).await;
    cluster
        .eventually("free launched", Duration::from_secs(5), || {
            provider_id(&cluster, "free")
        })
        .await;
    assert!(provider_id(&cluster, "stuck").is_none(), "still hung");
    assert!(started.elapsed() < Duration::from_secs(5));

    // The hung call times out; `stuck` retries (same instance: create is idempotent).
    cluster
        .eventually(
            "stuck launched after the timeout",
            Duration::from_secs(30),
            || provider_id(&cluster, "stuck"),
        )
        .await;
    assert_eq!(cluster.provider.instances().len(), 2);

    // Shutdown is prompt even with a call hanging.
    cluster
        .server
        .inject_hang(Some(Verb::Update), "nodeclaims/status", 100);
    cluster.create_nodeclaim("late", json!({})).await;
    advance(Duration::from_secs(2)).await;
    tokio::time::timeout(Duration::from_secs(1), controller.stop())
        .await
        .expect("stop did not wait for the hung call");
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn failing_writes_back_off_exponentially_per_nodeclaim() {
    let cluster = SimCluster::new().await;
    let controller = cluster.start_controller().await;
    cluster.server.inject_error(
        Some(Verb::Update),
        "nodeclaims/status",
        ApiError::new(500, "InternalError", "etcd is sad"),
        5,
    );
    let started = tokio::time::Instant::now();
    cluster.create_nodeclaim("flaky", json!({})).await;
    cluster
        .eventually("flaky launched", Duration::from_secs(60), || {
            provider_id(&cluster, "flaky")
        })
        .await;
    let failures = cluster
        .server
        .requests()
        .iter()
        .filter(|r| r.code == 500)
        .count();
    assert_eq!(failures, 5);
    // 1 + 2 + 4 + 8 + 16 s of backoff between the six attempts (a fixed 1 s loop: ~5 s).
    assert!(
        started.elapsed() >= Duration::from_secs(31),
        "retried too fast: {:?}",
        started.elapsed()
    );
    controller.stop().await;
    cluster.shutdown().await;
}

fn successful_writes(server: &TestApiServer) -> Vec<(usize, String, String)> {
    server
        .requests()
        .into_iter()
        .enumerate()
        .filter(|(_, r)| r.verb.is_write() && r.code < 300)
        .map(|(i, r)| (i, r.client.unwrap_or_default(), r.resource))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_hung_lease_renewal_makes_the_leader_stop_writing_before_anyone_takes_over() {
    let server = api_server();
    server.put(&nodepool("default")).unwrap();
    server.put(&nodeclass("default")).unwrap();
    let a = start_named(&server, "replica-a").await;
    advance(Duration::from_millis(500)).await;
    let b = start_named(&server, "replica-b").await;
    advance(Duration::from_secs(5)).await;
    assert!(a.ctx.is_leader() && !b.ctx.is_leader());

    // Replica A's lease calls hang from now on (a half-partitioned API server); everything
    // else it sends is served, and it has work to write: pending pods.
    server.inject_hang_for_client("replica-a", None, "leases", usize::MAX);
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    for i in 0..3 {
        pods.create(&PostParams::default(), &pending_pod(&format!("p-{i}"), "1"))
            .await
            .unwrap();
    }
    let mut a_stepped_down = None;
    let started = tokio::time::Instant::now();
    while !b.ctx.is_leader() {
        assert!(
            !(a.ctx.is_leader() && b.ctx.is_leader()),
            "two leaders at once"
        );
        if a_stepped_down.is_none() && !a.ctx.is_leader() {
            a_stepped_down = Some(started.elapsed());
        }
        assert!(started.elapsed() < Duration::from_secs(40), "no takeover");
        advance(Duration::from_millis(100)).await;
    }
    let a_stepped_down = a_stepped_down.expect("A stepped down before B took over");
    assert!(
        a_stepped_down <= Duration::from_secs(10),
        "{a_stepped_down:?}"
    );
    assert!(!a.ctx.is_leader());
    assert!(server.count::<NodeClaim>() >= 1, "A wrote while it led");
    advance(Duration::from_secs(5)).await;

    // The request log: B's first lease write comes after A's last write of anything.
    let writes = successful_writes(&server);
    let b_took_over = writes
        .iter()
        .find(|(_, client, resource)| client == "replica-b" && resource == "leases")
        .map(|(i, _, _)| *i)
        .expect("B wrote the lease");
    let a_last = writes
        .iter()
        .filter(|(_, client, _)| client == "replica-a")
        .map(|(i, _, _)| *i)
        .max()
        .unwrap();
    assert!(
        a_last < b_took_over,
        "A wrote after B took over: {writes:?}"
    );
    let lease: Lease = server
        .get(Some("kube-system"), "karpenter-leader-election")
        .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("replica-b")
    );
    a.abort();
    b.stop().await;
}

/// The sim provider, except that `create` hits a bug.
#[derive(Debug)]
struct PanickingCloud(SimCloudProvider);

#[async_trait]
impl CloudProvider for PanickingCloud {
    fn name(&self) -> &str {
        self.0.name()
    }
    async fn create(&self, _: &NodeClaim) -> Result<NodeClaim, CloudError> {
        panic!("injected bug in create");
    }
    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        self.0.delete(claim).await
    }
    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError> {
        self.0.get(provider_id).await
    }
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudError> {
        self.0.list().await
    }
    async fn instance_types(
        &self,
        pool: &NodePool,
        class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        self.0.instance_types(pool, class).await
    }
    async fn is_drifted(&self, claim: &NodeClaim) -> Result<Option<DriftReason>, CloudError> {
        self.0.is_drifted(claim).await
    }
    fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.0.repair_policies()
    }
    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        self.0.supported_node_classes()
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_loop_fails_the_replica_and_releases_the_lease() {
    let cluster = SimCluster::new().await;
    let settings = Settings {
        identity: "replica-a".into(),
        ..Settings::default()
    };
    let (ctx, batcher) = Context::new(
        cluster.client.clone(),
        settings,
        Arc::new(PanickingCloud(cluster.provider.clone())),
        Arc::new(karpenter_controller::provisioning::solver::NoScheduler),
        cluster.clock.clone(),
    );
    let running = RunningController::start(ctx.clone(), batcher, Options::default())
        .await
        .unwrap();
    let supervised = tokio::spawn(run::run_until(running, std::future::pending()));
    cluster
        .eventually("leader", Duration::from_secs(5), || {
            ctx.is_leader().then_some(())
        })
        .await;
    assert!(ctx.failure().is_none());

    cluster.create_nodeclaim("boom", json!({})).await;
    let result = tokio::time::timeout(Duration::from_secs(30), supervised)
        .await
        .expect("run_until returned")
        .unwrap();
    let err = result.unwrap_err().to_string();
    assert!(err.contains("nodeclaim lifecycle panicked"), "{err}");
    assert!(err.contains("injected bug in create"), "{err}");
    assert!(ctx.failure().is_some(), "/healthz fails");
    assert!(!ctx.is_leader());
    let lease: Lease = cluster
        .server
        .get(Some("kube-system"), "karpenter-leader-election")
        .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity,
        None,
        "released for the other replica"
    );
    cluster.shutdown().await;
}

fn sim_claim(name: &str) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
    }))
    .unwrap()
}

fn stored_ledger(server: &TestApiServer) -> String {
    let cm: ConfigMap = server.get(Some("karpenter"), LEDGER_CONFIGMAP).unwrap();
    cm.data.unwrap()["ledger.json"].clone()
}

#[tokio::test(start_paused = true)]
async fn ledger_save_retries_a_conflict_and_reports_a_missing_namespace() {
    let cluster = SimCluster::new().await;
    let store = LedgerStore::new(cluster.client.clone(), "karpenter");
    store.save(&cluster.provider).await.unwrap();

    // Someone else wrote in between: 409. The save re-reads and writes, or it would be lost.
    cluster.provider.create(&sim_claim("a")).await.unwrap();
    cluster.server.inject_error(
        Some(Verb::Update),
        "configmaps",
        ApiError::new(409, "Conflict", "the object has been modified"),
        2,
    );
    store.save(&cluster.provider).await.unwrap();
    assert_eq!(
        stored_ledger(&cluster.server),
        cluster.provider.snapshot_head().unwrap()
    );
    let instances = crate::support::stored_sim_instances(&cluster.server, "karpenter");
    assert_eq!(instances.len(), 1);
    assert!(instances[0].contains("uid-a"));

    // Conflicts that never end: an error, not a silent success.
    cluster.provider.create(&sim_claim("b")).await.unwrap();
    cluster.server.inject_error(
        Some(Verb::Update),
        "configmaps",
        ApiError::new(409, "Conflict", "the object has been modified"),
        100,
    );
    assert!(store.save(&cluster.provider).await.is_err());
    cluster.server.clear_faults();

    // A namespace that does not exist: create answers 404.
    let missing = LedgerStore::new(cluster.client.clone(), "nowhere");
    cluster.server.inject_error(
        Some(Verb::Create),
        "configmaps",
        ApiError::new(404, "NotFound", "namespaces \"nowhere\" not found"),
        1,
    );
    let err = missing.save(&cluster.provider).await.unwrap_err();
    assert!(err.to_string().contains("nowhere"), "{err}");
    cluster.shutdown().await;
}

fn sim_context(
    cluster: &SimCluster,
) -> (Arc<Context>, karpenter_controller::provisioning::Batcher) {
    Context::new(
        cluster.client.clone(),
        Settings {
            identity: "replica-a".into(),
            ..Settings::default()
        },
        Arc::new(cluster.provider.clone()),
        Arc::new(karpenter_controller::provisioning::solver::NoScheduler),
        cluster.clock.clone(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_provider_task_follows_leadership_and_stops_on_shutdown() {
    let cluster = SimCluster::new().await;
    let (ctx, batcher) = sim_context(&cluster);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let task_seen = seen.clone();
    let task = ProviderTask::new("test provider", move |cx: ProviderTaskContext| {
        // Subscribed before the election starts: the first change it sees is gaining the lead.
        let mut leadership = cx.leadership;
        let mut shutdown = cx.shutdown;
        let leading = *leadership.borrow();
        task_seen
            .lock()
            .unwrap()
            .push(format!("leading: {leading}"));
        async move {
            loop {
                tokio::select! {
                    () = karpenter_kube::stopped(&mut shutdown) => break,
                    Ok(()) = leadership.changed() => {
                        let leading = *leadership.borrow_and_update();
                        task_seen.lock().unwrap().push(format!("leading: {leading}"));
                    }
                }
            }
            task_seen.lock().unwrap().push("stopped".to_string());
        }
    });
    let running = RunningController::start(
        ctx.clone(),
        batcher,
        Options {
            provider_tasks: vec![task],
            ..Options::default()
        },
    )
    .await
    .unwrap();
    cluster
        .eventually("leader", Duration::from_secs(5), || {
            ctx.is_leader().then_some(())
        })
        .await;
    assert_eq!(*seen.lock().unwrap(), ["leading: false", "leading: true"]);
    running.stop().await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.last().map(String::as_str),
        Some("stopped"),
        "the task ran to its end on shutdown: {seen:?}"
    );
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_provider_task_that_panics_fails_the_replica() {
    let cluster = SimCluster::new().await;
    let (ctx, batcher) = sim_context(&cluster);
    let task = ProviderTask::new("test provider", |cx: ProviderTaskContext| async move {
        let mut leadership = cx.leadership;
        let _ = leadership.wait_for(|leading| *leading).await;
        panic!("injected provider bug");
    });
    let running = RunningController::start(
        ctx.clone(),
        batcher,
        Options {
            provider_tasks: vec![task],
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        run::run_until(running, std::future::pending()),
    )
    .await
    .expect("run_until returned");
    let err = result.unwrap_err().to_string();
    assert!(
        err.contains("test provider panicked: injected provider bug"),
        "{err}"
    );
    assert!(ctx.failure().is_some(), "/healthz fails");
    assert!(!ctx.is_leader());
    cluster.shutdown().await;
}
