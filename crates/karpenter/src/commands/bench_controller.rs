//! `karpenter bench controller --pods N`: the controller's time and memory on N pending pods.
//!
//! The harness plays the cluster around the controller, in this process: the in-process test API
//! server on loopback TCP, and a tiny kube-scheduler that binds pending pods to initialized
//! Nodes. The controller runs as a **child process** (`karpenter controller --cloud-provider
//! sim`, its sim kubelet included), so its peak resident memory (`VmHWM` in
//! `/proc/<pid>/status`) excludes the API server's copy of every object.
//!
//! The workload is the scheduling benchmark's five kinds of pods (generic, zonal spread,
//! hostname spread, zonal self-affinity, hostname anti-affinity) as Deployments of 5–20
//! replicas, each pod written as an API server serves a ReplicaSet's pod (defaults, service
//! account volume, tolerations, managed fields), on one NodePool of c/m `2xlarge` on-demand
//! instances (≈ 190 nodes for 2,000 pods).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::well_known as wk;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::pod::Pod;
use karpenter_core::resources::{Quantity, ResourceList};
use karpenter_core::scheduling::benchmark::{CPUS, MEMORIES, Rng};
use karpenter_testapi::TestApiServer;
use kube::api::{Api, PostParams};
use serde::Serialize;
use serde_json::{Value, json};

use crate::output::Format;

/// Namespace of the controller's Lease and sim ledger.
const CONTROLLER_NAMESPACE: &str = "karpenter";
const LEADER_LEASE: &str = "karpenter-leader-election";
const POD_NAMESPACE: &str = "default";
/// How often the harness's scheduler looks for pods to bind.
const BIND_PERIOD: Duration = Duration::from_millis(250);
/// Changes the API server keeps for watches to resume from: enough that no watcher of the
/// controller falls behind into a relist (10,000 pods make ≈ 4 changes each).
const WATCH_HISTORY: usize = 1_000_000;

#[derive(Debug, clap::Args)]
pub struct ControllerArgs {
    /// Pending pods to create.
    #[arg(long, default_value_t = 2000)]
    pub pods: usize,
    /// Seed for the Deployment mix.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Give up when not every pod is bound after this many seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// The former spelling of `-o json`, kept for scripts.
    #[arg(long, hide = true, conflicts_with = "output")]
    pub json: bool,
    /// Start the controller under this command (e.g. `heaptrack -o /tmp/controller`), to see
    /// where its memory goes; the reported RSS is then the wrapper's.
    #[arg(long, hide = true)]
    pub controller_prefix: Option<String>,
}

impl ControllerArgs {
    /// `-o`, or JSON for the hidden `--json`.
    pub fn format(&self) -> Format {
        if self.json { Format::Json } else { self.output }
    }
}

/// What one run measured. `*Kib` are kibibytes of the controller process, as `/proc` reports.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerReport {
    pub pods: usize,
    pub deployments: usize,
    pub nodes: usize,
    pub node_claims: usize,
    /// From the first pod written to the last pod bound.
    pub seconds_to_all_bound: f64,
    /// Resident memory once the controller leads and has listed the empty cluster.
    pub idle_rss_kib: Option<u64>,
    /// Peak resident memory of the controller over the whole run (`VmHWM`).
    pub peak_rss_kib: Option<u64>,
    /// Resident memory when the last pod was bound.
    pub final_rss_kib: Option<u64>,
}

/// The scheduling benchmark's five kinds of pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Generic,
    ZonalSpread,
    HostnameSpread,
    ZonalAffinity,
    HostnameAntiAffinity,
}

const KINDS: [Kind; 5] = [
    Kind::Generic,
    Kind::ZonalSpread,
    Kind::HostnameSpread,
    Kind::ZonalAffinity,
    Kind::HostnameAntiAffinity,
];
const REPLICAS: [usize; 3] = [5, 10, 20];

#[derive(Clone, Debug)]
struct Deployment {
    name: String,
    kind: Kind,
    replicas: usize,
    cpu: &'static str,
    memory: &'static str,
}

/// Deployments of 5–20 replicas, kinds in turn, sizes from the scheduling benchmark, `pods` in all.
fn deployments(pods: usize, seed: u64) -> Vec<Deployment> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let mut left = pods;
    while left > 0 {
        let index = out.len();
        let replicas = REPLICAS[rng.below(REPLICAS.len())].min(left);
        out.push(Deployment {
            name: format!("bench-{index}"),
            kind: KINDS[index % KINDS.len()],
            replicas,
            cpu: rng.pick(&CPUS),
            memory: rng.pick(&MEMORIES),
        });
        left -= replicas;
    }
    out
}

fn template_hash(index: usize) -> String {
    format!("5d{:08x}", index.wrapping_mul(0x9E37_79B9) & 0xffff_ffff)
}

/// The scheduling constraint of a Deployment's kind, on its own pods (`app=<name>`).
fn placement(deployment: &Deployment) -> Value {
    let selector = json!({"matchLabels": {"app": deployment.name}});
    let spread = |key: &str| {
        json!({"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": selector
        }]})
    };
    let term = |key: &str| json!([{"topologyKey": key, "labelSelector": selector}]);
    match deployment.kind {
        Kind::Generic => json!({}),
        Kind::ZonalSpread => spread(wk::ZONE_LABEL),
        Kind::HostnameSpread => spread(wk::HOSTNAME_LABEL),
        Kind::ZonalAffinity => json!({"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": term(wk::ZONE_LABEL)
        }}}),
        Kind::HostnameAntiAffinity => json!({"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": term(wk::HOSTNAME_LABEL)
        }}}),
    }
}

/// Replica `replica` of deployment number `index` as the API server serves it once
/// kube-scheduler found no node: ReplicaSet owner, admission defaults, managed fields,
/// `PodScheduled=False/Unschedulable`.
fn pod_manifest(index: usize, deployment: &Deployment, replica: usize, now: &str) -> Value {
    let hash = template_hash(index);
    let replica_set = format!("{}-{hash}", deployment.name);
    let token_volume = format!("kube-api-access-{:05x}", replica & 0xfffff);
    // Admission's defaults and the service account token volume, over the template.
    let mut spec = pod_template_spec(deployment);
    let defaults = json!({
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": true,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        ],
        "volumes": [{"name": token_volume, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
        ]}}]
    });
    let container_defaults = json!({
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [{"name": token_volume, "readOnly": true,
                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
    });
    if let (Some(spec), Value::Object(defaults)) = (spec.as_object_mut(), defaults) {
        spec.extend(defaults);
    }
    if let (Some(container), Value::Object(defaults)) = (
        spec.pointer_mut("/containers/0")
            .and_then(Value::as_object_mut),
        container_defaults,
    ) {
        container.extend(defaults);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{replica_set}-{replica:05x}"),
            "generateName": format!("{replica_set}-"),
            "namespace": POD_NAMESPACE,
            "labels": {"app": deployment.name, "pod-template-hash": hash},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replica_set,
                                 "uid": format!("00000000-0000-4000-8000-{index:012x}"),
                                 "controller": true, "blockOwnerDeletion": true}],
            "managedFields": managed_fields(now)
        },
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "Burstable", "conditions": [{
            "type": "PodScheduled", "status": "False", "lastProbeTime": null,
            "lastTransitionTime": now, "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        }]}
    })
}

/// What kube-controller-manager and kube-scheduler record in a ReplicaSet pod's managedFields.
fn managed_fields(now: &str) -> Value {
    json!([
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": now,
         "fieldsType": "FieldsV1", "fieldsV1": {
            "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                           "f:ownerReferences": {".": {}, "k:{\"uid\":\"00000000-0000-4000-8000-000000000000\"}": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:imagePullPolicy": {},
                        "f:name": {}, "f:resources": {".": {}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                        "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
                       "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {},
                       "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}}}},
        {"manager": "kube-scheduler", "operation": "Update", "apiVersion": "v1", "time": now,
         "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {
            "f:status": {"f:conditions": {".": {}, "k:{\"type\":\"PodScheduled\"}": {".": {}, "f:lastProbeTime": {},
                          "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}}}}}}
    ])
}

/// The pod template of a Deployment: what its pods carry before admission adds its defaults.
fn pod_template_spec(deployment: &Deployment) -> Value {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 0,
        "containers": [{
            "name": "app",
            "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
            "resources": {"requests": {"cpu": deployment.cpu, "memory": deployment.memory}}
        }]
    });
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), placement(deployment)) {
        spec.extend(extra);
    }
    spec
}

/// `bench workload`: the same mix as Deployment manifests, with the NodePool and EC2NodeClass,
/// for `karpenter simulate`.
pub fn workload_manifests(pods: usize, seed: u64) -> Vec<Value> {
    let mut out = vec![node_class(), node_pool()];
    out.extend(deployments(pods, seed).iter().map(|d| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": d.name, "namespace": POD_NAMESPACE},
            "spec": {
                "replicas": d.replicas,
                "selector": {"matchLabels": {"app": d.name}},
                "template": {"metadata": {"labels": {"app": d.name}}, "spec": pod_template_spec(d)}
            }
        })
    }));
    out
}

fn node_pool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "requirements": [
                {"key": wk::ARCH_LABEL, "operator": "In", "values": ["amd64"]},
                {"key": wk::CAPACITY_TYPE_LABEL, "operator": "In", "values": ["on-demand"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]},
                {"key": "karpenter.k8s.aws/instance-size", "operator": "In", "values": ["2xlarge"]}
            ],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "expireAfter": "720h"
        }}}
    })
}

fn node_class() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-bench",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}]
        }
    })
}

/// `VmHWM` and `VmRSS` (KiB) of a process, from `/proc/<pid>/status` (Linux only).
pub(super) fn memory_kib(pid: u32) -> (Option<u64>, Option<u64>) {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return (None, None);
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// The controller child process: killed on drop, its log kept in the work directory.
struct ControllerProcess {
    child: Child,
    log: PathBuf,
}

impl ControllerProcess {
    fn spawn(kubeconfig: &Path, dir: &Path, prefix: Option<&str>) -> anyhow::Result<Self> {
        let log = dir.join("controller.log");
        let file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let exe = std::env::current_exe().context("locating the karpenter binary")?;
        let mut prefix = prefix.unwrap_or_default().split_whitespace();
        let mut command = match prefix.next() {
            Some(wrapper) => {
                let mut command = Command::new(wrapper);
                command.args(prefix).arg(exe);
                command
            }
            None => Command::new(exe),
        };
        let child = command
            .args(["controller", "--cloud-provider", "sim", "--kubeconfig"])
            .arg(kubeconfig)
            .args(["--log-format", "text", "--log-level", "info"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("METRICS_PORT", free_port()?.to_string())
            .env("HEALTH_PROBE_PORT", free_port()?.to_string())
            .env("POD_NAMESPACE", CONTROLLER_NAMESPACE)
            .env("POD_NAME", "karpenter-bench")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .context("starting `karpenter controller`")?;
        Ok(ControllerProcess { child, log })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails when the controller has exited, naming its log.
    fn check_alive(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait()? {
            Some(status) => bail!(
                "the controller exited ({status}); its log: {}",
                self.log.display()
            ),
            None => Ok(()),
        }
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Requests or free room: millicores, bytes (in millis, as [`Quantity`]) and pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Room {
    cpu: i64,
    memory: i64,
    pods: i64,
}

impl Room {
    fn from_list(list: &ResourceList) -> Self {
        Room {
            cpu: list.get("cpu").millis(),
            memory: list.get("memory").millis(),
            pods: list.get("pods").units_ceil(),
        }
    }

    fn fits(&self, requests: &Room) -> bool {
        requests.cpu <= self.cpu && requests.memory <= self.memory && requests.pods <= self.pods
    }

    fn take(&mut self, requests: &Room) {
        self.cpu = self.cpu.saturating_sub(requests.cpu);
        self.memory = self.memory.saturating_sub(requests.memory);
        self.pods = self.pods.saturating_sub(requests.pods);
    }
}

/// One pod as the harness's scheduler sees it.
struct BenchPod {
    name: String,
    deployment: usize,
    requests: Room,
    node: Option<String>,
}

/// An initialized, schedulable Node and what the harness bound to it.
struct BenchNode {
    zone: String,
    free: Room,
    /// Pods per deployment.
    pods_of: BTreeMap<usize, usize>,
}

impl BenchNode {
    fn count(&self, deployment: usize) -> usize {
        self.pods_of.get(&deployment).copied().unwrap_or(0)
    }
}

fn node_is_schedulable(node: &Node) -> bool {
    let initialized = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(wk::NODE_INITIALIZED_LABEL))
        .is_some_and(|v| v == "true");
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.effect != "PreferNoSchedule"));
    initialized && !tainted && node.metadata.deletion_timestamp.is_none()
}

/// Where one deployment's next pod may go, worked out once per pod rather than per node.
enum Allowed {
    Anywhere,
    /// At most this many pods of the deployment already on the node.
    AtMostHere(usize),
    InZones(BTreeSet<String>),
}

/// kube-scheduler, as far as this workload needs: resources, the five kinds' constraints
/// (maxSkew 1 over the domains of the known nodes), best fit by cpu.
struct Binder {
    deployments: Vec<Deployment>,
    pods: Vec<BenchPod>,
    nodes: BTreeMap<String, BenchNode>,
    /// The zone a zonal-affinity deployment landed in.
    affinity_zone: BTreeMap<usize, String>,
    unbound: usize,
}

impl Binder {
    fn new(deployments: Vec<Deployment>, pods: Vec<BenchPod>) -> Self {
        let unbound = pods.len();
        Binder {
            deployments,
            pods,
            nodes: BTreeMap::new(),
            affinity_zone: BTreeMap::new(),
            unbound,
        }
    }

    /// Adds Nodes that became schedulable; true when there are new ones.
    fn refresh_nodes(&mut self, nodes: Vec<Node>) -> bool {
        let mut added = false;
        for node in nodes.into_iter().filter(node_is_schedulable) {
            let Some(name) = node.metadata.name.clone() else {
                continue;
            };
            if self.nodes.contains_key(&name) {
                continue;
            }
            let zone = node
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(wk::ZONE_LABEL))
                .cloned()
                .unwrap_or_default();
            let Some(free) = node
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| ResourceList::from_k8s(a).ok())
            else {
                continue;
            };
            self.nodes.insert(
                name,
                BenchNode {
                    zone,
                    free: Room::from_list(&free),
                    pods_of: BTreeMap::new(),
                },
            );
            added = true;
        }
        added
    }

    #[cfg(test)]
    fn count_in_zone(&self, deployment: usize, zone: &str) -> usize {
        self.nodes
            .values()
            .filter(|n| n.zone == zone)
            .map(|n| n.count(deployment))
            .sum()
    }

    fn allowed(&self, deployment: usize) -> Allowed {
        match self.deployments[deployment].kind {
            Kind::Generic => Allowed::Anywhere,
            Kind::HostnameAntiAffinity => Allowed::AtMostHere(0),
            Kind::ZonalAffinity => match self.affinity_zone.get(&deployment) {
                Some(zone) => Allowed::InZones(BTreeSet::from([zone.clone()])),
                None => Allowed::Anywhere,
            },
            Kind::HostnameSpread => Allowed::AtMostHere(
                self.nodes
                    .values()
                    .map(|n| n.count(deployment))
                    .min()
                    .unwrap_or(0),
            ),
            Kind::ZonalSpread => {
                let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
                for node in self.nodes.values() {
                    *per_zone.entry(node.zone.as_str()).or_default() += node.count(deployment);
                }
                let min = per_zone.values().copied().min().unwrap_or(0);
                Allowed::InZones(
                    per_zone
                        .into_iter()
                        .filter(|(_, count)| *count <= min)
                        .map(|(zone, _)| zone.to_string())
                        .collect(),
                )
            }
        }
    }

    /// Chooses nodes for unbound pods (constrained deployments first, then the largest);
    /// returns (pod, node) for each pod placed.
    fn plan(&mut self) -> Vec<(usize, String)> {
        let mut order: Vec<usize> = (0..self.pods.len())
            .filter(|&i| self.pods[i].node.is_none())
            .collect();
        order.sort_by_key(|&i| {
            let kind = self.deployments[self.pods[i].deployment].kind;
            (
                kind == Kind::Generic,
                std::cmp::Reverse(self.pods[i].requests.cpu),
            )
        });
        let mut chosen = Vec::new();
        // Nodes only fill up during a plan: a deployment's pod that found no node means its
        // next replicas (same requests, same constraint) will not either.
        let mut stuck = BTreeSet::new();
        for i in order {
            let (d, requests) = (self.pods[i].deployment, self.pods[i].requests);
            if stuck.contains(&d) {
                continue;
            }
            let allowed = self.allowed(d);
            let best = self
                .nodes
                .iter()
                .filter(|(_, node)| {
                    node.free.fits(&requests)
                        && match &allowed {
                            Allowed::Anywhere => true,
                            Allowed::AtMostHere(max) => node.count(d) <= *max,
                            Allowed::InZones(zones) => zones.contains(&node.zone),
                        }
                })
                .min_by_key(|(_, node)| node.free.cpu)
                .map(|(name, _)| name.clone());
            let Some(name) = best else {
                stuck.insert(d);
                continue;
            };
            if let Some(node) = self.nodes.get_mut(&name) {
                node.free.take(&requests);
                *node.pods_of.entry(d).or_default() += 1;
                if self.deployments[d].kind == Kind::ZonalAffinity {
                    self.affinity_zone
                        .entry(d)
                        .or_insert_with(|| node.zone.clone());
                }
            }
            self.pods[i].node = Some(name.clone());
            self.unbound -= 1;
            chosen.push((i, name));
        }
        chosen
    }
}

fn requests(deployment: &Deployment) -> anyhow::Result<Room> {
    Ok(Room {
        cpu: Quantity::parse(deployment.cpu)?.millis(),
        memory: Quantity::parse(deployment.memory)?.millis(),
        pods: 1,
    })
}

/// Runs the benchmark; the caller prints the report.
pub async fn measure(args: &ControllerArgs) -> anyhow::Result<ControllerReport> {
    let server = TestApiServer::builder()
        .history_limit(WATCH_HISTORY)
        .build();
    let tcp = server
        .serve_tcp()
        .await
        .context("serving the test API server")?;
    let dir =
        std::env::temp_dir().join(format!("karpenter-bench-controller-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let kubeconfig = dir.join("kubeconfig");
    tcp.write_kubeconfig(&kubeconfig)?;
    for crd in karpenter_api::crd::all()? {
        server
            .register_crd(&crd)
            .map_err(|e| anyhow::anyhow!("registering CRD: {e}"))?;
    }
    let client = server.client();
    let pp = PostParams::default();
    Api::<karpenter_api::v1::EC2NodeClass>::all(client.clone())
        .create(&pp, &serde_json::from_value(node_class())?)
        .await
        .context("creating the EC2NodeClass")?;
    Api::<NodePool>::all(client.clone())
        .create(&pp, &serde_json::from_value(node_pool())?)
        .await
        .context("creating the NodePool")?;

    let mut controller =
        ControllerProcess::spawn(&kubeconfig, &dir, args.controller_prefix.as_deref())?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    // Leading (its Lease held) means started, listed and running every loop.
    loop {
        controller.check_alive()?;
        let held = server
            .get::<Lease>(Some(CONTROLLER_NAMESPACE), LEADER_LEASE)
            .and_then(|l| l.spec?.holder_identity)
            .is_some();
        if held {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "the controller did not take the leader Lease; its log: {}",
                controller.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, idle_rss_kib) = memory_kib(controller.pid());

    let deployments = deployments(args.pods, args.seed);
    let now = jiff::Timestamp::now().to_string();
    let started = Instant::now();
    let mut pods = Vec::with_capacity(args.pods);
    for (index, deployment) in deployments.iter().enumerate() {
        let requests = requests(deployment)?;
        for replica in 0..deployment.replicas {
            let manifest = pod_manifest(index, deployment, replica, &now);
            let name = manifest
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            server
                .put_value(manifest)
                .map_err(|e| anyhow::anyhow!("creating pod {name}: {e}"))?;
            pods.push(BenchPod {
                name,
                deployment: index,
                requests,
                node: None,
            });
        }
    }
    let deployment_count = deployments.len();
    let mut binder = Binder::new(deployments, pods);
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), POD_NAMESPACE);
    while binder.unbound > 0 {
        controller.check_alive()?;
        if Instant::now() > deadline {
            bail!(
                "{} of {} pods still unbound after {} s ({} NodeClaims, {} schedulable nodes); the controller's log: {}",
                binder.unbound,
                args.pods,
                args.timeout,
                server.count::<NodeClaim>(),
                binder.nodes.len(),
                controller.log.display()
            );
        }
        if binder.refresh_nodes(server.list::<Node>()) {
            for (pod, node) in binder.plan() {
                let binding = json!({
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": binder.pods[pod].name, "namespace": POD_NAMESPACE},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}
                });
                pods_api
                    .create_subresource::<Value, Value>(
                        "binding",
                        &binder.pods[pod].name,
                        &pp,
                        &binding,
                    )
                    .await
                    .with_context(|| format!("binding {} to {node}", binder.pods[pod].name))?;
            }
        }
        if binder.unbound > 0 {
            tokio::time::sleep(BIND_PERIOD).await;
        }
    }
    let seconds_to_all_bound = started.elapsed().as_secs_f64();
    let (peak_rss_kib, final_rss_kib) = memory_kib(controller.pid());
    let report = ControllerReport {
        pods: args.pods,
        deployments: deployment_count,
        nodes: server.count::<Node>(),
        node_claims: server.count::<NodeClaim>(),
        seconds_to_all_bound,
        idle_rss_kib,
        peak_rss_kib,
        final_rss_kib,
    };
    drop(controller);
    drop(tcp);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_has_every_kind_and_exactly_the_pods_asked_for() {
        let mix = deployments(2000, 42);
        assert_eq!(mix.iter().map(|d| d.replicas).sum::<usize>(), 2000);
        for kind in KINDS {
            assert!(mix.iter().any(|d| d.kind == kind), "no {kind:?}");
        }
        assert!(mix.iter().all(|d| (1..=20).contains(&d.replicas)));
        assert_eq!(deployments(3, 1).len(), 1);
        assert!(deployments(0, 1).is_empty());
    }

    #[test]
    fn pods_decode_and_carry_their_kind_of_constraint() {
        let mix = deployments(50, 7);
        let anti = mix
            .iter()
            .position(|d| d.kind == Kind::HostnameAntiAffinity)
            .unwrap();
        let pod: Pod =
            serde_json::from_value(pod_manifest(anti, &mix[anti], 0, "2026-01-01T00:00:00Z"))
                .unwrap();
        let spec = pod.spec.unwrap();
        let terms = spec
            .affinity
            .and_then(|a| a.pod_anti_affinity)
            .and_then(|a| a.required_during_scheduling_ignored_during_execution)
            .unwrap();
        assert_eq!(terms[0].topology_key, wk::HOSTNAME_LABEL);
        assert_eq!(pod.metadata.managed_fields.map(|m| m.len()), Some(2));
    }

    fn node(zone: &str, cpu: i64) -> BenchNode {
        BenchNode {
            zone: zone.to_string(),
            free: Room {
                cpu: cpu * 1000,
                memory: Quantity::from_gibibytes(64).millis(),
                pods: 100,
            },
            pods_of: BTreeMap::new(),
        }
    }

    fn binder(kind: Kind, replicas: usize) -> Binder {
        let deployment = Deployment {
            name: "d".into(),
            kind,
            replicas,
            cpu: "1",
            memory: "1Gi",
        };
        let requests = requests(&deployment).unwrap();
        let pods = (0..replicas)
            .map(|i| BenchPod {
                name: format!("p{i}"),
                deployment: 0,
                requests,
                node: None,
            })
            .collect();
        let mut binder = Binder::new(vec![deployment], pods);
        for (name, zone) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
            binder.nodes.insert(name.into(), node(zone, 8));
        }
        binder
    }

    #[test]
    fn the_binder_keeps_each_kinds_constraint() {
        let mut anti = binder(Kind::HostnameAntiAffinity, 4);
        let placed = anti.plan();
        let nodes: BTreeSet<&str> = placed.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!((placed.len(), nodes.len(), anti.unbound), (3, 3, 1));

        let mut affinity = binder(Kind::ZonalAffinity, 6);
        let placed = affinity.plan();
        let zones: BTreeSet<String> = placed
            .iter()
            .map(|(_, n)| affinity.nodes[n].zone.clone())
            .collect();
        assert_eq!(zones.len(), 1);
        assert_eq!(placed.len(), 6);

        let mut spread = binder(Kind::ZonalSpread, 4);
        spread.plan();
        assert_eq!(spread.count_in_zone(0, "a"), 2);
        assert_eq!(spread.count_in_zone(0, "b"), 2);
    }

    #[test]
    fn memory_is_read_from_proc() {
        let (peak, rss) = memory_kib(std::process::id());
        if cfg!(target_os = "linux") {
            assert!(peak.unwrap() >= rss.unwrap() && rss.unwrap() > 0);
        }
    }
}
