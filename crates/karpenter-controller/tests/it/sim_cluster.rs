//! A whole sim cluster in one process for the lifecycle, termination and end-to-end tests: the
//! test API server, the sim provider, its kubelet and controller replicas, all on tokio's paused
//! clock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::well_known as wk;
use karpenter_controller::provisioning::{Solver, solver::NoScheduler};
use karpenter_controller::run::{Options, RunningController};
use karpenter_controller::{Context, Settings, TokioClock};
use karpenter_core::clock::Clock;
use karpenter_core::instance_type::{InstanceType, Offering};
use karpenter_core::pod::Pod;
use karpenter_core::pod::effective_requests as pod_requests;
use karpenter_core::pod::node_name;
use karpenter_core::resources::ResourceList;
use karpenter_sim::SimCloudProvider;
use karpenter_sim::cluster::{SimKubelet, SimKubeletOptions};
use karpenter_testapi::TestApiServer;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub const EPOCH: i64 = 1_704_067_200;

/// The name the sim kubelet's requests carry in the test API server's request log.
pub const SIM_KUBELET_CLIENT: &str = "sim-kubelet";

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
        ..Default::default()
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
    /// Two small custom instance types in us-west-2.
    pub async fn new() -> Self {
        Self::with_provider(|clock| {
            SimCloudProvider::with_instance_types(
                "us-west-2",
                vec![
                    instance_type("sim.large", "2", "8Gi", 0.1),
                    instance_type("sim.xlarge", "4", "16Gi", 0.2),
                ],
                clock,
            )
        })
        .await
    }

    /// The sim provider over its embedded AWS catalogue for `region`.
    pub async fn with_catalogue(region: &str) -> Self {
        Self::with_provider(|clock| SimCloudProvider::new(region, clock).unwrap()).await
    }

    pub async fn with_provider(
        make_provider: impl FnOnce(Arc<dyn Clock>) -> SimCloudProvider,
    ) -> Self {
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
        let provider = make_provider(clock.clone());
        let options = SimKubeletOptions {
            emulate_node_lifecycle: true,
            ..SimKubeletOptions::default()
        };
        // Named, so tests can tell its requests from the controller's.
        let kubelet = SimKubelet::new(
            server.client_named(SIM_KUBELET_CLIENT),
            provider.clone(),
            clock.clone(),
            options,
        );
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
        self.start_controller_with_settings(solver, Settings::default())
            .await
    }

    /// A controller replica (leader at once) with these settings (e.g. feature gates).
    pub async fn start_controller_with_settings(
        &self,
        solver: Arc<dyn Solver>,
        settings: Settings,
    ) -> RunningController {
        let settings = Settings {
            disable_leader_election: true,
            ..settings
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

    /// The seed guide's `default` EC2NodeClass and an on-demand `default` NodePool.
    /// The sim cloud of another controller process: the same catalogue and clock, no instances
    /// until it restores the ledger.
    pub fn another_process_cloud(&self) -> SimCloudProvider {
        SimCloudProvider::with_instance_types(
            "us-west-2",
            self.provider
                .catalog_types()
                .map(|t| (**t).clone())
                .collect(),
            self.clock.clone(),
        )
    }

    pub fn put_default_nodepool(&self) {
        self.put_default_nodeclass();
        self.server.put_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default", "uid": "pool-uid", "generation": 1},
            "spec": {"template": {"spec": {
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "expireAfter": "720h"
            }}}
        })).unwrap();
    }

    /// The seed guide's `default` EC2NodeClass.
    pub fn put_default_nodeclass(&self) {
        self.server
            .put_value(json!({
                "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                "metadata": {"name": "default"},
                // What the seed guide applies; the test API server validates it as a real one does.
                "spec": {
                    "role": "KarpenterNodeRole-my-cluster",
                    "amiSelectorTerms": [{"alias": "al2023@latest"}],
                    "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
                    "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}]
                }
            }))
            .unwrap();
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

    /// Stops the cluster's own kubelet (for tests whose controllers run the kubelet of their
    /// own sim cloud: two kubelets over different ledgers would fight over the Nodes).
    pub async fn stop_kubelet(&mut self) {
        self.kubelet_stop.send_replace(true);
        if let Some(task) = self.kubelet_task.take() {
            let _ = task.await;
        }
    }

    pub async fn shutdown(mut self) {
        self.stop_kubelet().await;
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

fn cpu_millis(pod: &Pod) -> i64 {
    pod_requests(pod)
        .map(|r| r.get("cpu").millis())
        .unwrap_or(0)
}

/// The test's kube-scheduler: binds each pending pod to an initialized, schedulable Karpenter
/// node with room for it.
pub(crate) fn bind_pending(cluster: &SimCluster) {
    let nodes: Vec<Node> = cluster
        .server
        .list::<Node>()
        .into_iter()
        .filter(|n| {
            n.labels()
                .get(wk::NODE_INITIALIZED_LABEL)
                .is_some_and(|v| v == "true")
        })
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .collect();
    let pods = cluster.server.list::<Pod>();
    let mut used: BTreeMap<String, i64> = BTreeMap::new();
    for pod in &pods {
        if let Some(node) = node_name(pod) {
            *used.entry(node.to_string()).or_default() += cpu_millis(pod);
        }
    }
    for pod in pods
        .iter()
        .filter(|p| node_name(p).is_none() && p.metadata.deletion_timestamp.is_none())
    {
        let need = cpu_millis(pod);
        let target = nodes.iter().find(|n| {
            let allocatable = n
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| ResourceList::from_k8s(a).ok());
            let free = allocatable.map(|a| a.get("cpu").millis()).unwrap_or(0)
                - used.get(&n.name_any()).copied().unwrap_or(0);
            free >= need
        });
        if let Some(node) = target {
            let mut bound = pod.clone();
            bound.spec.get_or_insert_default().node_name = Some(node.name_any());
            cluster.server.put(&bound).unwrap();
            *used.entry(node.name_any()).or_default() += need;
        }
    }
}

/// The seed guide's `inflate` pod: pause with 1 cpu, pending as kube-scheduler leaves it.
pub(crate) fn inflate_pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("inflate-{i}"), "namespace": "default", "uid": format!("inflate-uid-{i}"), "labels": {"app": "inflate"}},
        "spec": {"terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "inflate", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                 "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .unwrap()
}
