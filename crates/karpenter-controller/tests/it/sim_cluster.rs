//! A whole sim cluster in one process for the lifecycle, termination and end-to-end tests: the
//! test API server, the sim provider, its kubelet and controller replicas, all on tokio's paused
//! clock.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::NodeClaim;
use karpenter_controller::provisioning::{Solver, solver::NoScheduler};
use karpenter_controller::run::{Options, RunningController};
use karpenter_controller::sim_kubelet::{SimKubelet, SimKubeletOptions};
use karpenter_controller::{Context, Settings, TokioClock};
use karpenter_core::clock::Clock;
use karpenter_core::instance_type::{InstanceType, Offering};
use karpenter_core::resources::ResourceList;
use karpenter_sim::SimCloudProvider;
use karpenter_testapi::TestApiServer;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub const EPOCH: i64 = 1_704_067_200;

fn instance_type(name: &str, cpu: &str, memory: &str, price: f64) -> InstanceType {
    InstanceType {
        name: name.into(),
        labels: [
            ("node.kubernetes.io/instance-type", name),
            ("kubernetes.io/arch", "amd64"),
            ("kubernetes.io/os", "linux"),
            ("topology.kubernetes.io/region", "us-west-2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        capacity: ResourceList::parse([("cpu", cpu), ("memory", memory), ("pods", "110")]).unwrap(),
        overhead: Default::default(),
        offerings: vec![Offering {
            zone: "us-west-2a".into(),
            capacity_type: "on-demand".into(),
            price,
            available: true,
            ..Default::default()
        }],
    }
}

pub struct SimCluster {
    pub server: TestApiServer,
    pub client: kube::Client,
    pub provider: SimCloudProvider,
    pub clock: Arc<TokioClock>,
    pub kubelet: SimKubelet,
    kubelet_stop: watch::Sender<bool>,
    kubelet_task: Option<JoinHandle<()>>,
}

impl SimCluster {
    pub async fn new() -> Self {
        let clock = Arc::new(TokioClock::starting_at(
            Timestamp::from_second(EPOCH).unwrap(),
        ));
        let server_clock = clock.clone();
        let server = TestApiServer::builder()
            .clock(move || server_clock.now())
            .build();
        for crd in karpenter_api::crd::all().unwrap() {
            server.register_crd(&crd).unwrap();
        }
        let client = server.client();
        let provider = SimCloudProvider::with_instance_types(
            "us-west-2",
            vec![
                instance_type("sim.large", "2", "8Gi", 0.1),
                instance_type("sim.xlarge", "4", "16Gi", 0.2),
            ],
            clock.clone(),
        );
        let options = SimKubeletOptions {
            emulate_node_lifecycle: true,
            ..SimKubeletOptions::default()
        };
        let kubelet = SimKubelet::new(client.clone(), provider.clone(), clock.clone(), options);
        let (kubelet_stop, rx) = watch::channel(false);
        let kubelet_task = Some(tokio::spawn(kubelet.clone().run(rx)));
        SimCluster {
            server,
            client,
            provider,
            clock,
            kubelet,
            kubelet_stop,
            kubelet_task,
        }
    }

    /// A controller replica (leader at once) with the runtime's default solver.
    pub async fn start_controller(&self) -> RunningController {
        self.start_controller_with(Arc::new(NoScheduler)).await
    }

    pub async fn start_controller_with(&self, solver: Arc<dyn Solver>) -> RunningController {
        let settings = Settings {
            disable_leader_election: true,
            ..Settings::default()
        };
        let (ctx, batcher) = Context::new(
            self.client.clone(),
            settings,
            Arc::new(self.provider.clone()),
            solver,
            self.clock.clone(),
        );
        RunningController::start(ctx, batcher, Options::default())
            .await
            .unwrap()
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub fn nodeclaim(&self, name: &str) -> Option<NodeClaim> {
        self.server.get::<NodeClaim>(None, name)
    }

    pub fn node(&self, name: &str) -> Option<Node> {
        self.server.get::<Node>(None, name)
    }

    pub fn pod(&self, name: &str) -> Option<Pod> {
        self.server.get::<Pod>(Some("default"), name)
    }

    pub async fn create_nodeclaim(&self, name: &str, extra_spec: Value) -> NodeClaim {
        let mut spec = json!({
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "resources": {"requests": {"cpu": "1", "pods": "1"}},
            "taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}]
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
            spec.extend(extra.clone());
        }
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default", "team": "a"}},
            "spec": spec
        }))
        .unwrap();
        Api::<NodeClaim>::all(self.client.clone())
            .create(&PostParams::default(), &claim)
            .await
            .unwrap()
    }

    /// Polls `check` every 100 ms of virtual time for up to `limit`; panics with `what` on timeout.
    pub async fn eventually<T>(
        &self,
        what: &str,
        limit: Duration,
        mut check: impl FnMut() -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(value) = check() {
                return value;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the NodeClaim is Ready and returns it with its Node's name.
    pub async fn ready_nodeclaim(&self, name: &str) -> (NodeClaim, String) {
        let claim = self
            .eventually(
                &format!("nodeclaim {name} Ready"),
                Duration::from_secs(60),
                || self.nodeclaim(name).filter(NodeClaim::is_ready),
            )
            .await;
        let node = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap();
        (claim, node)
    }

    /// A pod bound to `node`, created through the API (its status set by the sim kubelet).
    pub async fn bound_pod(&self, name: &str, node: &str, extra: Value) -> Pod {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": name.split('-').next().unwrap_or(name)}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "pause"}],
                     "tolerations": [{"key": "dedicated", "operator": "Exists"}]}
        });
        merge(&mut pod, extra);
        let pod: Pod = serde_json::from_value(pod).unwrap();
        Api::<Pod>::namespaced(self.client.clone(), "default")
            .create(&PostParams::default(), &pod)
            .await
            .unwrap()
    }

    pub async fn shutdown(mut self) {
        self.kubelet_stop.send_replace(true);
        if let Some(task) = self.kubelet_task.take() {
            let _ = task.await;
        }
    }
}

/// Deep-merges `extra` into `base` (objects merge, anything else replaces).
pub fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(base), Value::Object(extra)) => {
            for (k, v) in extra {
                merge(base.entry(k).or_insert(Value::Null), v);
            }
        }
        (base, extra) => *base = extra,
    }
}
