//! Shared fixtures: an API server with Karpenter's kinds, a sim cloud, a simple solver, objects.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use karpenter_api::NodePool;
use karpenter_controller::provisioning::Solver;
use karpenter_controller::run::{Options, RunningController};
use karpenter_controller::{Context, Settings, TokioClock};
use karpenter_core::clock::Clock;
use karpenter_core::instance_type::{InstanceType, Offering};
use karpenter_core::pod::Pod;
use karpenter_core::resources::ResourceList;
use karpenter_core::scheduling::{
    InstanceTypeOption, NewNodeClaim, SchedulerInput, SchedulingResults, UnschedulablePod,
};
use karpenter_sim::SimCloudProvider;
use karpenter_testapi::TestApiServer;
use serde_json::json;

pub const EPOCH_SECONDS: i64 = 1_704_067_200;

pub fn epoch() -> Timestamp {
    Timestamp::from_second(EPOCH_SECONDS).unwrap()
}

/// A test API server serving NodePool, NodeClaim and EC2NodeClass.
pub fn api_server() -> TestApiServer {
    let server = TestApiServer::builder()
        .clock(|| Timestamp::from_second(EPOCH_SECONDS).unwrap())
        .build();
    server.register_resource("karpenter.sh", "v1", "NodePool", "nodepools", false, true);
    server.register_resource("karpenter.sh", "v1", "NodeClaim", "nodeclaims", false, true);
    server.register_resource(
        "karpenter.k8s.aws",
        "v1",
        "EC2NodeClass",
        "ec2nodeclasses",
        false,
        true,
    );
    server
}

fn instance_type(name: &str, cpu: &str, memory: &str, price: f64) -> InstanceType {
    InstanceType {
        name: name.into(),
        labels: [(
            "node.kubernetes.io/instance-type".to_string(),
            name.to_string(),
        )]
        .into(),
        capacity: ResourceList::parse([("cpu", cpu), ("memory", memory), ("pods", "110")]).unwrap(),
        offerings: vec![Offering {
            zone: "test-1a".into(),
            capacity_type: "on-demand".into(),
            price,
            available: true,
            ..Offering::default()
        }],
        ..InstanceType::default()
    }
}

pub fn cloud(clock: Arc<dyn Clock>) -> Arc<SimCloudProvider> {
    let types = vec![
        instance_type("small.2x", "2", "8Gi", 0.1),
        instance_type("large.8x", "8", "32Gi", 0.4),
        instance_type("huge.16x", "16", "64Gi", 0.8),
    ];
    Arc::new(SimCloudProvider::with_instance_types("test", types, clock))
}

/// Packs pods first-fit into new NodeClaims of the first pool, each sized for the cheapest
/// instance type that fits. Stands in for the real scheduler so these tests exercise the
/// provisioner's own behaviour.
#[derive(Debug, Default)]
pub struct FirstFitSolver;

impl Solver for FirstFitSolver {
    fn solve(&self, input: SchedulerInput, pods: &[Arc<Pod>]) -> SchedulingResults {
        let mut out = SchedulingResults::default();
        let Some(pool) = input.node_pools.first() else {
            out.unschedulable = pods
                .iter()
                .enumerate()
                .map(|(pod, p)| UnschedulablePod {
                    pod,
                    namespace: p.metadata.namespace.clone().unwrap_or_default(),
                    name: p.metadata.name.clone().unwrap_or_default(),
                    explanation: "no nodepools found".into(),
                })
                .collect();
            return out;
        };
        let mut types = pool.instance_types.clone();
        types.sort_by_key(|t| std::cmp::Reverse(t.capacity.get("cpu")));
        let biggest = types[0].allocatable();
        let mut open: Vec<(Vec<usize>, ResourceList)> = Vec::new();
        for (i, pod) in pods.iter().enumerate() {
            let requests = karpenter_core::pod::effective_requests(pod).unwrap();
            let slot = open.iter_mut().find(|(_, used)| {
                let mut total = used.clone();
                total.add(&requests);
                biggest.fits(&total)
            });
            match slot {
                Some((placed, used)) => {
                    used.add(&requests);
                    placed.push(i);
                }
                None => open.push((vec![i], requests)),
            }
        }
        for (n, (placed, used)) in open.into_iter().enumerate() {
            let mut fitting: Vec<&InstanceType> = types
                .iter()
                .map(|t| &**t)
                .filter(|t| t.allocatable().fits(&used))
                .collect();
            fitting.sort_by(|a, b| a.offerings[0].price.total_cmp(&b.offerings[0].price));
            let options: Vec<InstanceTypeOption> = fitting
                .iter()
                .map(|t| InstanceTypeOption {
                    name: Arc::from(t.name.as_str()),
                    price: t.offerings[0].price,
                })
                .collect();
            out.new_node_claims.push(NewNodeClaim {
                node_pool: pool.name.clone(),
                hostname: format!("hostname-placeholder-{n}"),
                requirements: Vec::new(),
                instance_type_min_values: None,
                instance_types: Arc::from(options),
                pods: placed,
                requests: used,
                labels: Default::default(),
                taints: Vec::new(),
                startup_taints: Vec::new(),
                min_values_relaxed: false,
                overlay_applied: Default::default(),
            });
        }
        out
    }
}

pub fn settings(identity: &str) -> Settings {
    Settings {
        identity: identity.into(),
        leader_election_namespace: "kube-system".into(),
        nodepool_status_period: Duration::from_secs(5),
        ..Settings::default()
    }
}

/// Starts a replica against `server`.
pub async fn start(server: &TestApiServer, settings: Settings) -> RunningController {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::starting_at(epoch()));
    let cloud = cloud(clock.clone());
    let (ctx, batcher) = Context::new(
        server.client(),
        settings,
        cloud,
        Arc::new(FirstFitSolver),
        clock,
    );
    RunningController::start(ctx, batcher, Options::default())
        .await
        .unwrap()
}

/// A replica whose API client is tagged with its identity, so the request log says who wrote.
pub async fn start_named(server: &TestApiServer, identity: &str) -> RunningController {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::starting_at(epoch()));
    let (ctx, batcher) = Context::new(
        server.client_named(identity),
        settings(identity),
        cloud(clock.clone()),
        Arc::new(FirstFitSolver),
        clock,
    );
    RunningController::start(ctx, batcher, Options::default())
        .await
        .unwrap()
}

pub fn nodepool(name: &str) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }},
            "limits": {"cpu": "1000"}
        }
    }))
    .unwrap()
}

pub fn nodeclass(name: &str) -> karpenter_api::v1::EC2NodeClass {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "KarpenterNodeRole"}
    }))
    .unwrap()
}

pub fn pending_pod(name: &str, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .unwrap()
}

/// Lets spawned tasks run and virtual time pass.
pub async fn advance(by: Duration) {
    tokio::time::sleep(by).await;
}

/// The instances the sim ledger keeps in `namespace` (one ConfigMap each), as their JSON.
pub fn stored_sim_instances(
    server: &karpenter_testapi::TestApiServer,
    namespace: &str,
) -> Vec<String> {
    use karpenter_sim::cluster::ledger::{INSTANCE_KEY, INSTANCE_LABEL};
    server
        .list::<k8s_openapi::api::core::v1::ConfigMap>()
        .into_iter()
        .filter(|cm| cm.metadata.namespace.as_deref() == Some(namespace))
        .filter(|cm| {
            cm.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(INSTANCE_LABEL))
        })
        .filter_map(|cm| cm.data.and_then(|mut d| d.remove(INSTANCE_KEY)))
        .collect()
}
