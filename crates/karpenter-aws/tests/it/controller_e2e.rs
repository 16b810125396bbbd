//! The aws provider through the controller, on the test API server, against moto: the
//! EC2NodeClass controller makes the class Ready (subnets, security groups, AMIs, instance
//! profile); inflate pods become NodeClaims and tagged instances whose launch template carries
//! AL2023's NodeConfig; the test plays the kubelet (a Node per instance) and binds the pods; scale
//! to zero terminates the instances; deleting the class removes its launch templates and instance
//! profile. Then: an injected insufficient-capacity error moves the launch to another offering,
//! a controller that dies between CreateFleet and the status write launches nothing new once
//! restarted, and a spot interruption message on SQS deletes the NodeClaim and a replacement
//! launches on another offering.
//!
//! Real time (the SDK's timeouts run on tokio's clock, so paused time would fire them while moto
//! answers), with short batch windows; each test takes seconds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::v1::{CONDITION_READY, ConditionsExt, EC2NodeClass, NodeClaim, NodePool};
use karpenter_api::well_known as wk;
use karpenter_aws::instance::{
    EKS_CLUSTER_NAME_TAG, NAME_TAG, NODECLAIM_TAG, NODECLASS_TAG, NODEPOOL_TAG,
};
use karpenter_aws::instance_profile::{REGION_TAG, managed_profile_name};
use karpenter_aws::interruption::consumer::{InterruptionConsumer, run_interruption_when_leading};
use karpenter_aws::nodeclass::{
    CONDITION_INSTANCE_PROFILE_READY, CONDITION_VALIDATION_SUCCEEDED, NodeClassTimings,
    TERMINATION_FINALIZER,
};
use karpenter_aws::provider::{AwsCloudProvider, StartOptions, start};
use karpenter_aws::unavailable::OfferingKey;
use karpenter_aws::{AwsClients, Settings};
use karpenter_controller::provisioning::CoreScheduler;
use karpenter_controller::run::{Options, ProviderTask, RunningController};
use karpenter_controller::{Context, TokioClock};
use karpenter_core::clock::Clock;
use karpenter_core::cloud_provider::{
    CloudError, CloudProvider, DriftReason, NodeClassKind, RepairPolicy,
};
use karpenter_core::instance_type::InstanceType;
use karpenter_core::resources::ResourceList;
use karpenter_testapi::TestApiServer;
use kube::ResourceExt;
use serde_json::json;

use crate::harness::{
    DISCOVERY_TAG, ICE_LOCK, moto_clients, seed_network, set_ice, unique_cluster,
};

pub(crate) const NODE_CLASS: &str = "default";
const KUBERNETES_VERSION: &str = "1.32";
/// moto's default service CIDR of `CreateCluster`.
const MOTO_SERVICE_CIDR: &str = "172.20.0.0/16";

/// A cluster in moto (network, EKS cluster, node role) and a test API server for it.
pub(crate) struct AwsCluster {
    pub(crate) name: String,
    pub(crate) clients: AwsClients,
    pub(crate) server: TestApiServer,
    role: String,
    /// One of these tests at a time: each discovers moto's 1,300+ instance types at start, which
    /// takes seconds of moto's single thread.
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl AwsCluster {
    pub(crate) async fn new(test: &str) -> Option<Self> {
        let clients = moto_clients().await?;
        let serial = SERIAL.lock().await;
        let name = unique_cluster(test);
        let network = seed_network(&clients, &name).await;
        clients
            .eks
            .create_cluster()
            .name(&name)
            .version(KUBERNETES_VERSION)
            .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
            .resources_vpc_config(
                aws_sdk_eks::types::VpcConfigRequest::builder()
                    .subnet_ids(&network.large_subnet)
                    .build(),
            )
            .send()
            .await
            .expect("eks:CreateCluster");
        let role = format!("KarpenterNodeRole-{name}");
        clients
            .iam
            .create_role()
            .role_name(&role)
            .assume_role_policy_document("{}")
            .send()
            .await
            .expect("iam:CreateRole");
        let server = TestApiServer::builder()
            .pods_terminate_immediately(true)
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
        Some(Self {
            name,
            clients,
            server,
            role,
            _serial: serial,
        })
    }

    /// Starts a controller replica with the aws provider as the binary wires it (the EC2NodeClass
    /// controller as its provider task), around `wrap` of the provider.
    /// With `interruption_queue` (a queue in moto), the interruption consumer runs as the
    /// binary's `interruption` task: leader only, its metrics in the controller's registry.
    pub(crate) async fn start_controller(
        &self,
        wrap: impl FnOnce(Arc<dyn CloudProvider>) -> Arc<dyn CloudProvider>,
        interruption_queue: Option<&str>,
    ) -> (RunningController, Arc<AwsCloudProvider>) {
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::wall());
        let aws = start(
            StartOptions {
                // No endpoint: discovered through eks:DescribeCluster, as the CIDR and version.
                settings: Settings::new(&self.name),
                ca_bundle: None,
                timings: NodeClassTimings::default(),
            },
            self.clients.clone(),
            self.server.client(),
            clock.clone(),
        )
        .await
        .expect("aws provider starts");
        // The API server's /version wins over EKS's (the test API server says 1.33).
        assert!(
            aws.kubernetes_version.starts_with("1."),
            "{}",
            aws.kubernetes_version
        );
        assert_eq!(aws.cluster.service_cidr.as_deref(), Some(MOTO_SERVICE_CIDR));
        assert!(aws.cluster.ca_bundle.is_some(), "CA from EKS");
        let node_classes = aws.node_classes;
        let mut tasks = vec![ProviderTask::new("ec2nodeclass controller", move |cx| {
            node_classes.run(cx.leadership, cx.shutdown)
        })];
        if let Some(queue) = interruption_queue {
            let consumer = InterruptionConsumer::new(
                &aws.clients,
                queue,
                aws.provider.unavailable_offerings().clone(),
                clock.clone(),
            )
            .await
            .expect("the interruption queue exists");
            tasks.push(ProviderTask::new("interruption", move |cx| {
                cx.metrics
                    .register_provider_metrics(|registry| consumer.metrics.register(registry));
                run_interruption_when_leading(consumer, cx.client, cx.leadership, cx.shutdown)
            }));
        }
        let settings = karpenter_controller::Settings {
            cluster_name: self.name.clone(),
            identity: "aws-e2e".into(),
            leader_election_namespace: "kube-system".into(),
            disable_leader_election: true,
            batch_idle_duration: Duration::from_millis(300),
            batch_max_duration: Duration::from_secs(2),
            ..karpenter_controller::Settings::default()
        };
        let aws_provider = aws.provider.clone();
        let provider: Arc<dyn CloudProvider> = aws.provider;
        let (ctx, batcher) = Context::new(
            self.server.client(),
            settings,
            wrap(provider),
            Arc::new(CoreScheduler),
            clock,
        );
        let running = RunningController::start(
            ctx,
            batcher,
            Options {
                provider_tasks: tasks,
                ..Options::default()
            },
        )
        .await
        .expect("controller starts");
        (running, aws_provider)
    }

    pub(crate) fn node_class(&self) -> EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": NODE_CLASS},
            "spec": {
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {DISCOVERY_TAG: self.name}}],
                "securityGroupSelectorTerms": [{"tags": {DISCOVERY_TAG: self.name}}],
                "role": self.role,
                "tags": {"team": "platform"}
            }
        }))
        .unwrap()
    }

    fn node_pool(&self, instance_types: &[&str]) -> NodePool {
        self.node_pool_of(&[wk::CAPACITY_TYPE_ON_DEMAND], instance_types)
    }

    pub(crate) fn node_pool_of(
        &self,
        capacity_types: &[&str],
        instance_types: &[&str],
    ) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general"},
            "spec": {
                "template": {"spec": {
                    "requirements": [
                        {"key": wk::CAPACITY_TYPE_LABEL, "operator": "In", "values": capacity_types},
                        {"key": wk::INSTANCE_TYPE_LABEL, "operator": "In", "values": instance_types},
                    ],
                    "nodeClassRef": {"group": wk::AWS_GROUP, "kind": "EC2NodeClass", "name": NODE_CLASS}
                }},
                "limits": {"cpu": "1000"}
            }
        }))
        .unwrap()
    }

    /// Polls `check` every 100 ms for up to `limit`.
    pub(crate) async fn eventually<T>(
        &self,
        what: &str,
        limit: Duration,
        mut check: impl AsyncFnMut() -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn ready_node_class(&self) -> EC2NodeClass {
        self.server.put(&self.node_class()).unwrap();
        self.eventually("EC2NodeClass Ready", Duration::from_secs(30), async || {
            self.server
                .get::<EC2NodeClass>(None, NODE_CLASS)
                .filter(EC2NodeClass::is_ready)
        })
        .await
    }

    /// The test's kubelet: a Node for each launched NodeClaim (not being deleted), registered
    /// with its provider ID, the NodeClaim's labels and resources, Ready.
    pub(crate) fn register_nodes(&self) {
        let nodes: BTreeSet<String> = self
            .server
            .list::<Node>()
            .iter()
            .filter_map(|n| n.spec.as_ref()?.provider_id.clone())
            .collect();
        for claim in self.server.list::<NodeClaim>() {
            let Some(status) = claim.status.as_ref() else {
                continue;
            };
            let Some(provider_id) = status.provider_id.clone() else {
                continue;
            };
            if nodes.contains(&provider_id) || claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let instance_id = provider_id.rsplit('/').next().unwrap().to_string();
            let mut labels = claim.labels().clone();
            labels.insert(wk::HOSTNAME_LABEL.into(), instance_id.clone());
            let now = Time(jiff::Timestamp::now());
            let node: Node = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": instance_id, "labels": labels},
                "spec": {
                    "providerID": provider_id,
                    "taints": [{"key": wk::UNREGISTERED_TAINT_KEY, "effect": "NoExecute"}]
                },
                "status": {
                    "capacity": status.capacity,
                    "allocatable": status.allocatable,
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                    "lastHeartbeatTime": now, "lastTransitionTime": now}]
                }
            }))
            .unwrap();
            self.server.put(&node).unwrap();
        }
    }

    /// kube-scheduler's part: binds pending pods to initialized Nodes with room (by CPU) that
    /// are neither being deleted nor tainted (the pods tolerate nothing: a draining node carries
    /// `karpenter.sh/disrupted:NoSchedule`, and a pod bound to it would be lost with it).
    pub(crate) fn bind_pending(&self) {
        let cpu = |pod: &Pod| {
            karpenter_core::pod::effective_requests(&pod.clone().into())
                .map(|r| r.get("cpu").millis())
                .unwrap_or(0)
        };
        let nodes: Vec<Node> = self
            .server
            .list::<Node>()
            .into_iter()
            .filter(|n| {
                n.labels()
                    .get(wk::NODE_INITIALIZED_LABEL)
                    .is_some_and(|v| v == "true")
                    && n.metadata.deletion_timestamp.is_none()
                    && n.spec
                        .as_ref()
                        .and_then(|s| s.taints.as_ref())
                        .is_none_or(|t| t.iter().all(|t| t.effect == "PreferNoSchedule"))
            })
            .collect();
        let pods = self.server.list::<Pod>();
        let mut used: BTreeMap<String, i64> = BTreeMap::new();
        for pod in &pods {
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                *used.entry(node).or_default() += cpu(pod);
            }
        }
        for pod in pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
        {
            let target = nodes.iter().find(|n| {
                let allocatable = n
                    .status
                    .as_ref()
                    .and_then(|s| s.allocatable.as_ref())
                    .and_then(|a| ResourceList::from_k8s(a).ok())
                    .map(|a| a.get("cpu").millis())
                    .unwrap_or(0);
                allocatable - used.get(&n.name_any()).copied().unwrap_or(0) >= cpu(pod)
            });
            if let Some(node) = target {
                let mut bound = pod.clone();
                bound.spec.get_or_insert_default().node_name = Some(node.name_any());
                self.server.put(&bound).unwrap();
                *used.entry(node.name_any()).or_default() += cpu(pod);
            }
        }
    }

    pub(crate) fn launched_claims(&self) -> Vec<NodeClaim> {
        self.server
            .list::<NodeClaim>()
            .into_iter()
            .filter(|c| c.status.as_ref().is_some_and(|s| s.provider_id.is_some()))
            .collect()
    }
}

fn inflate_pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("inflate-{i}"), "namespace": "default", "labels": {"app": "inflate"}},
        "spec": {"terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "inflate", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                 "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inflate_on_moto_through_the_controller() {
    let Some(cluster) = AwsCluster::new("e2e-inflate").await else {
        return;
    };
    let clients = &cluster.clients;
    let (controller, _) = cluster.start_controller(|p| p, None).await;

    // The EC2NodeClass controller resolves everything and holds its finalizer.
    let node_class = cluster.ready_node_class().await;
    let status = node_class.status.clone().unwrap();
    assert_eq!(status.subnets.len(), 2, "{status:#?}");
    assert_eq!(status.security_groups.len(), 1, "{status:#?}");
    assert!(!status.amis.is_empty(), "{status:#?}");
    let profile = managed_profile_name(&cluster.name, &clients.region, NODE_CLASS);
    assert_eq!(status.instance_profile.as_deref(), Some(profile.as_str()));
    for condition in [
        "SubnetsReady",
        "SecurityGroupsReady",
        "AMIsReady",
        CONDITION_INSTANCE_PROFILE_READY,
        CONDITION_VALIDATION_SUCCEEDED,
        CONDITION_READY,
    ] {
        assert!(
            status.is_condition_true(condition),
            "{condition}: {status:#?}"
        );
    }
    assert!(
        node_class
            .finalizers()
            .iter()
            .any(|f| f == TERMINATION_FINALIZER)
    );
    let roles = clients.instance_profile_roles(&profile).await.unwrap();
    assert_eq!(roles, Some(vec![cluster.role.clone()]));
    let iam_profile = clients
        .iam
        .get_instance_profile()
        .instance_profile_name(&profile)
        .send()
        .await
        .unwrap();
    let iam_profile = iam_profile.instance_profile().unwrap();
    let profile_tags: BTreeMap<&str, &str> = iam_profile
        .tags()
        .iter()
        .map(|t| (t.key(), t.value()))
        .collect();
    assert_eq!(
        profile_tags.get(format!("kubernetes.io/cluster/{}", cluster.name).as_str()),
        Some(&"owned")
    );
    assert_eq!(profile_tags.get(NODECLASS_TAG), Some(&NODE_CLASS));
    assert_eq!(profile_tags.get(REGION_TAG), Some(&"us-west-2"));
    let hash_version = cluster
        .eventually("hash annotations", Duration::from_secs(10), async || {
            cluster
                .server
                .get::<EC2NodeClass>(None, NODE_CLASS)?
                .annotations()
                .get(wk::EC2NODECLASS_HASH_VERSION_ANNOTATION)
                .cloned()
        })
        .await;
    assert_eq!(hash_version, karpenter_aws::drift::HASH_VERSION);

    // 10 inflate pods → NodeClaims → instances.
    cluster
        .server
        .put(&cluster.node_pool(&["m5.large", "m5.xlarge", "m5.2xlarge"]))
        .unwrap();
    for i in 0..10 {
        cluster.server.put(&inflate_pod(i)).unwrap();
    }
    let claims = cluster
        .eventually("NodeClaims launched", Duration::from_secs(30), async || {
            let claims = cluster.server.list::<NodeClaim>();
            let launched = cluster.launched_claims();
            (!claims.is_empty() && launched.len() == claims.len()).then_some(launched)
        })
        .await;
    let instances = clients.cluster_instances(&cluster.name).await.unwrap();
    assert_eq!(instances.len(), claims.len(), "one instance per NodeClaim");
    for claim in &claims {
        let name = claim.name_any();
        let instance = instances
            .iter()
            .find(|i| i.tags.get(NODECLAIM_TAG) == Some(&name))
            .unwrap_or_else(|| panic!("no instance tagged for {name}"));
        let provider_id = claim.status.as_ref().unwrap().provider_id.clone().unwrap();
        assert_eq!(
            provider_id,
            format!("aws:///{}/{}", instance.zone, instance.id)
        );
        for (key, value) in [
            (NODEPOOL_TAG.to_string(), "general".to_string()),
            (NODECLASS_TAG.to_string(), NODE_CLASS.to_string()),
            (
                format!("kubernetes.io/cluster/{}", cluster.name),
                "owned".to_string(),
            ),
            (EKS_CLUSTER_NAME_TAG.to_string(), cluster.name.clone()),
            (NAME_TAG.to_string(), name.clone()),
            ("team".to_string(), "platform".to_string()),
        ] {
            assert_eq!(instance.tags.get(&key), Some(&value), "tag {key} of {name}");
        }
    }
    let templates = clients
        .launch_templates_for_node_class(&cluster.name, NODE_CLASS)
        .await
        .unwrap();
    assert!(!templates.is_empty());
    for (template, _) in &templates {
        let user_data = clients
            .launch_template_user_data(template)
            .await
            .unwrap()
            .unwrap();
        assert!(user_data.contains("MIME-Version: 1.0"), "{user_data}");
        assert!(
            user_data.contains("application/node.eks.aws"),
            "{user_data}"
        );
        assert!(user_data.contains("kind: NodeConfig"), "{user_data}");
        assert!(user_data.contains(&cluster.name), "{user_data}");
        assert!(user_data.contains(MOTO_SERVICE_CIDR), "{user_data}");
    }

    // The test's kubelet registers the Nodes; the controller initializes them; pods bind.
    cluster
        .eventually("pods bound", Duration::from_secs(60), async || {
            cluster.register_nodes();
            cluster.bind_pending();
            let pods = cluster.server.list::<Pod>();
            pods.iter()
                .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .then_some(())
        })
        .await;
    assert!(
        cluster
            .server
            .list::<NodeClaim>()
            .iter()
            .all(NodeClaim::is_ready)
    );
    assert_eq!(
        cluster.server.count::<NodeClaim>(),
        claims.len(),
        "no extra NodeClaims"
    );

    // Scale to zero and delete the NodeClaims: instances terminated, templates kept.
    for i in 0..10 {
        cluster
            .server
            .delete::<Pod>(Some("default"), &format!("inflate-{i}"))
            .unwrap();
    }
    for claim in &claims {
        cluster
            .server
            .delete::<NodeClaim>(None, &claim.name_any())
            .unwrap();
    }
    cluster
        .eventually(
            "instances terminated",
            Duration::from_secs(60),
            async || {
                let none_left = cluster.server.count::<NodeClaim>() == 0
                    && clients
                        .cluster_instances(&cluster.name)
                        .await
                        .ok()?
                        .is_empty();
                none_left.then_some(())
            },
        )
        .await;
    let templates_after = clients
        .launch_templates_for_node_class(&cluster.name, NODE_CLASS)
        .await
        .unwrap();
    assert_eq!(templates_after.len(), templates.len(), "templates kept");

    // Deleting the class removes its templates and instance profile, then the class.
    cluster
        .server
        .delete::<EC2NodeClass>(None, NODE_CLASS)
        .unwrap();
    cluster
        .eventually("EC2NodeClass gone", Duration::from_secs(30), async || {
            cluster
                .server
                .get::<EC2NodeClass>(None, NODE_CLASS)
                .is_none()
                .then_some(())
        })
        .await;
    assert!(
        clients
            .launch_templates_for_node_class(&cluster.name, NODE_CLASS)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        clients.instance_profile_roles(&profile).await.unwrap(),
        None
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_class_without_matching_subnets_is_not_ready_and_says_why() {
    let Some(cluster) = AwsCluster::new("e2e-notready").await else {
        return;
    };
    let (controller, _) = cluster.start_controller(|p| p, None).await;
    let mut node_class = cluster.node_class();
    node_class.spec.subnet_selector_terms[0].tags =
        BTreeMap::from([(DISCOVERY_TAG.to_string(), "no-such-cluster".to_string())]);
    cluster.server.put(&node_class).unwrap();
    let ready = cluster
        .eventually("Ready=False", Duration::from_secs(30), async || {
            let nc = cluster.server.get::<EC2NodeClass>(None, NODE_CLASS)?;
            nc.status?.condition(CONDITION_READY).cloned()
        })
        .await;
    assert_eq!(ready.status, "False");
    let message = ready.message.unwrap_or_default();
    assert!(
        message.contains("no subnet matches tags karpenter.sh/discovery=no-such-cluster"),
        "{message}"
    );
    // Its NodeClaims are not launched: the pod's NodeClaim is refused as NodeClassNotReady.
    cluster
        .server
        .put(&cluster.node_pool(&["m5.large"]))
        .unwrap();
    cluster.server.put(&inflate_pod(0)).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(cluster.launched_claims().is_empty());
    assert!(
        cluster
            .clients
            .cluster_instances(&cluster.name)
            .await
            .unwrap()
            .is_empty()
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insufficient_capacity_moves_the_nodeclaim_to_another_offering() {
    let Some(cluster) = AwsCluster::new("e2e-ice").await else {
        return;
    };
    let _ice = ICE_LOCK.lock().await;
    // Types no other test launches (the injection is global to the launcher); r5a.large is the
    // cheaper one, so the first launch goes there.
    set_ice(&cluster.clients, &["on-demand:r5a.large:*"]).await;
    let (controller, provider) = cluster.start_controller(|p| p, None).await;
    cluster.ready_node_class().await;
    cluster
        .server
        .put(&cluster.node_pool(&["r5a.large", "r5.large"]))
        .unwrap();
    cluster.server.put(&inflate_pod(0)).unwrap();
    let claim = cluster
        .eventually(
            "a NodeClaim launched",
            Duration::from_secs(30),
            // The launch writes the provider ID, then the labels: wait for both.
            async || {
                cluster
                    .launched_claims()
                    .into_iter()
                    .find(|c| c.labels().contains_key(wk::INSTANCE_TYPE_LABEL))
            },
        )
        .await;
    set_ice(&cluster.clients, &[]).await;
    assert_eq!(
        claim
            .labels()
            .get(wk::INSTANCE_TYPE_LABEL)
            .map(String::as_str),
        Some("r5.large")
    );
    let instances = cluster
        .clients
        .cluster_instances(&cluster.name)
        .await
        .unwrap();
    assert_eq!(instances.len(), 1, "{instances:?}");
    assert_eq!(instances[0].instance_type, "r5.large");
    // The fleet reported the cheaper type's capacity error: its offering is marked unavailable
    // (for the scheduler too) for 3 minutes.
    let marked = provider.unavailable_offerings().marked();
    assert!(
        marked
            .iter()
            .any(|key| *key == OfferingKey::new("on-demand", "r5a.large", "us-west-2a")),
        "{marked:?}"
    );
    controller.stop().await;
}

fn spot_interruption_warning(instance_id: &str, zone: &str) -> String {
    json!({
        "version": "0",
        "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": "2026-11-23T08:00:00Z",
        "region": "us-west-2",
        "resources": [format!("arn:aws:ec2:{zone}:instance/{instance_id}")],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"}
    })
    .to_string()
}

fn offering_of(claim: &NodeClaim) -> OfferingKey {
    let label = |key: &str| claim.labels().get(key).cloned().unwrap_or_default();
    OfferingKey::new(
        &label(wk::CAPACITY_TYPE_LABEL),
        &label(wk::INSTANCE_TYPE_LABEL),
        &label(wk::ZONE_LABEL),
    )
}

fn instance_id_of(claim: &NodeClaim) -> String {
    let provider_id = claim.status.as_ref().unwrap().provider_id.as_ref().unwrap();
    provider_id.rsplit('/').next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_interruption_on_sqs_deletes_the_nodeclaim_and_a_replacement_launches() {
    let Some(cluster) = AwsCluster::new("e2e-interrupt").await else {
        return;
    };
    let clients = &cluster.clients;
    let queue_url = clients
        .sqs
        .create_queue()
        .queue_name(&cluster.name)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let (controller, provider) = cluster
        .start_controller(|p| p, Some(cluster.name.as_str()))
        .await;
    cluster.ready_node_class().await;
    cluster
        .server
        .put(&cluster.node_pool_of(&[wk::CAPACITY_TYPE_SPOT], &["m5.large", "m5.xlarge"]))
        .unwrap();
    cluster.server.put(&inflate_pod(0)).unwrap();
    let interrupted = cluster
        .eventually("a spot NodeClaim", Duration::from_secs(30), async || {
            cluster.launched_claims().into_iter().next()
        })
        .await;
    let interrupted_offering = offering_of(&interrupted);
    assert_eq!(
        interrupted_offering.capacity_type,
        wk::CAPACITY_TYPE_SPOT,
        "{interrupted_offering:?}"
    );
    let interrupted_instance = instance_id_of(&interrupted);
    cluster
        .eventually("the pod bound", Duration::from_secs(30), async || {
            cluster.register_nodes();
            cluster.bind_pending();
            let pod = cluster.server.get::<Pod>(Some("default"), "inflate-0")?;
            pod.spec?.node_name.filter(|n| *n == interrupted_instance)
        })
        .await;

    // EC2 warns through EventBridge → SQS; the controller deletes (drains) the NodeClaim.
    clients
        .sqs
        .send_message()
        .queue_url(&queue_url)
        .message_body(spot_interruption_warning(
            &interrupted_instance,
            &interrupted_offering.zone,
        ))
        .send()
        .await
        .unwrap();
    // The test plays the ReplicaSet (a pod for each evicted one), the kubelet and kube-scheduler.
    let mut replicas = 1;
    let replacement = cluster
        .eventually(
            "the NodeClaim replaced and the pod bound again",
            // Drain, termination and a new launch: 20 s alone, more beside the other tests.
            Duration::from_secs(60),
            async || {
                let pods = cluster.server.list::<Pod>();
                if pods.iter().all(|p| p.metadata.deletion_timestamp.is_some()) {
                    cluster.server.put(&inflate_pod(replicas)).unwrap();
                    replicas += 1;
                }
                cluster.register_nodes();
                cluster.bind_pending();
                let claims = cluster.server.list::<NodeClaim>();
                let [replacement] = claims.as_slice() else {
                    return None;
                };
                let replacement_instance = replacement.status.as_ref()?.provider_id.as_ref()?;
                let pods = cluster.server.list::<Pod>();
                let all_bound = pods.iter().all(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                        == replacement_instance.rsplit('/').next()
                });
                (replacement.name_any() != interrupted.name_any() && all_bound)
                    .then(|| replacement.clone())
            },
        )
        .await;
    assert!(replicas > 1, "the interrupted node's pod was evicted");
    // The interrupted spot offering is unavailable: the replacement launched elsewhere.
    let marked = provider.unavailable_offerings().marked();
    assert!(marked.contains(&interrupted_offering), "{marked:?}");
    let replacement_offering = offering_of(&replacement);
    assert_ne!(replacement_offering, interrupted_offering);
    let instances = clients.cluster_instances(&cluster.name).await.unwrap();
    let ids: Vec<&str> = instances.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(
        ids,
        vec![instance_id_of(&replacement)],
        "the interrupted instance is terminated"
    );
    // The message is gone from the queue (neither waiting nor in flight) and counted.
    let attributes = clients
        .sqs
        .get_queue_attributes()
        .queue_url(&queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let attributes = attributes.attributes().unwrap();
    for attribute in [
        aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages,
        aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
    ] {
        assert_eq!(
            attributes.get(&attribute).map(String::as_str),
            Some("0"),
            "{attribute:?}"
        );
    }
    let metrics = controller.ctx.metrics.encode();
    for line in [
        "karpenter_interruption_received_messages_total{message_type=\"spot_interrupted\"} 1",
        "karpenter_interruption_deleted_messages_total 1",
        "karpenter_interruption_message_queue_duration_seconds_count 1",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    controller.stop().await;
}

/// A provider whose first `create` launches and then never answers: the replica dies (is
/// aborted) between CreateFleet and the NodeClaim's status write.
struct DiesAfterLaunch {
    inner: Arc<dyn CloudProvider>,
    launched: Arc<AtomicBool>,
}

#[async_trait]
impl CloudProvider for DiesAfterLaunch {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
        let launched = self.inner.create(node_claim).await?;
        self.launched.store(true, Ordering::SeqCst);
        drop(launched);
        std::future::pending().await
    }
    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudError> {
        self.inner.delete(node_claim).await
    }
    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError> {
        self.inner.get(provider_id).await
    }
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudError> {
        self.inner.list().await
    }
    async fn instance_types(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        self.inner.instance_types(node_pool, node_class).await
    }
    async fn is_drifted(&self, node_claim: &NodeClaim) -> Result<Option<DriftReason>, CloudError> {
        self.inner.is_drifted(node_claim).await
    }
    fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.inner.repair_policies()
    }
    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        self.inner.supported_node_classes()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_create_fleet_and_the_status_write_launches_nothing_new() {
    let Some(cluster) = AwsCluster::new("e2e-crash").await else {
        return;
    };
    let launched = Arc::new(AtomicBool::new(false));
    let flag = launched.clone();
    let (first, _) = cluster
        .start_controller(
            move |inner| {
                Arc::new(DiesAfterLaunch {
                    inner,
                    launched: flag,
                })
            },
            None,
        )
        .await;
    cluster.ready_node_class().await;
    cluster
        .server
        .put(&cluster.node_pool(&["m5.large"]))
        .unwrap();
    cluster.server.put(&inflate_pod(0)).unwrap();
    cluster
        .eventually("the fleet launched", Duration::from_secs(30), async || {
            launched.load(Ordering::SeqCst).then_some(())
        })
        .await;
    first.abort();
    let claims = cluster.server.list::<NodeClaim>();
    assert_eq!(claims.len(), 1);
    assert!(
        claims[0]
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_ref())
            .is_none(),
        "the status was never written"
    );
    let claim_name = claims[0].name_any();
    let before = cluster
        .clients
        .cluster_instances(&cluster.name)
        .await
        .unwrap();
    assert_eq!(before.len(), 1);

    // A new replica (fresh provider, fresh caches) finds the instance by its NodeClaim tag.
    let (second, _) = cluster.start_controller(|p| p, None).await;
    let claim = cluster
        .eventually(
            "the NodeClaim launched",
            Duration::from_secs(30),
            async || cluster.launched_claims().into_iter().next(),
        )
        .await;
    assert_eq!(claim.name_any(), claim_name);
    let after = cluster
        .clients
        .cluster_instances(&cluster.name)
        .await
        .unwrap();
    assert_eq!(after.len(), 1, "one instance per NodeClaim: {after:?}");
    assert_eq!(after[0].id, before[0].id);
    assert_eq!(
        claim.status.unwrap().provider_id,
        Some(format!("aws:///{}/{}", after[0].zone, after[0].id))
    );
    second.stop().await;
}
