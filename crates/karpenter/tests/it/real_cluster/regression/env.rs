//! Upstream's regression environment (`test/pkg/environment/common` and `suite_test.go`'s
#![allow(dead_code)] // shared by the translated files; each uses a part
//! `BeforeEach`), on the real control plane with the sim provider: a NodeClass and a NodePool per
//! test (`default-<random>`), the NodePool with no limits ("to the moon"), a 100 % node budget,
//! `expireAfter: 30h` and `consolidateAfter: Never`, exactly as upstream's suite sets them.
//!
//! Helpers shared by the translated files live here; a file's own helpers stay in its file.

use std::time::Duration;

use karpenter_envtest::{Cluster, Karpenter, KarpenterOptions};
use kube::Client;
use serde_json::{Value, json};

use crate::real_cluster::objects::{apply, nodeclaims, nodes, pods, running};
use crate::real_cluster::{eventually, karpenter_binary};

/// upstream `test.DiscoveryLabel`: every object a test makes carries it.
pub(crate) const DISCOVERY_LABEL: &str = "testing/cluster";

/// One test's environment: the cluster (its namespace), the controller, and the names of the
/// NodeClass and NodePool `BeforeEach` made (created by [`Env::create_defaults`] or by the test).
pub(crate) struct Env {
    pub cluster: Cluster,
    pub karpenter: Karpenter,
    pub client: Client,
    pub ns: String,
    pub nodeclass: String,
    pub nodepool: String,
}

impl Env {
    /// The cluster and the controller (`options`: gates, settings), NodeClass and NodePool not yet
    /// created: tests change [`Env::default_nodepool`] first, as upstream's do before `ExpectCreated`.
    pub(crate) async fn start(test: &str, options: KarpenterOptions) -> Option<Self> {
        let cluster = crate::real_cluster::cluster(test).await?;
        let karpenter = cluster
            .start_karpenter(karpenter_binary(), &options)
            .unwrap();
        let client = cluster.client();
        let ns = cluster.namespace().to_string();
        let suffix = ns.rsplit('-').next().unwrap_or("x").to_string();
        Some(Self {
            karpenter,
            client,
            nodeclass: format!("default-{suffix}"),
            nodepool: format!("default-{suffix}"),
            ns,
            cluster,
        })
    }

    /// The NodeClass `BeforeEach` makes (the sim provider reads an EC2NodeClass like the aws one).
    pub(crate) fn default_nodeclass(&self) -> Value {
        json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": self.nodeclass, "labels": {DISCOVERY_LABEL: "unspecified"}},
            "spec": {
                "role": "KarpenterNodeRole-e2e",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "e2e"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "e2e"}}]
            }
        })
    }

    /// The NodePool `BeforeEach` makes: upstream's `default_nodepool.yaml`, no limits, a 100 %
    /// budget, `expireAfter: 30h`.
    pub(crate) fn default_nodepool(&self) -> Value {
        json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": self.nodepool, "labels": {DISCOVERY_LABEL: "unspecified"}},
            "spec": {
                "disruption": {
                    "consolidationPolicy": "WhenEmptyOrUnderutilized",
                    "consolidateAfter": "Never",
                    "budgets": [{"nodes": "100%"}]
                },
                "template": {
                    "metadata": {"labels": {DISCOVERY_LABEL: "unspecified"}},
                    "spec": {
                        "expireAfter": "30h",
                        "requirements": [
                            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                        ],
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": self.nodeclass}
                    }
                }
            }
        })
    }

    /// Applies objects (server-side, as `kubectl apply --server-side`), namespaced ones into the
    /// test's namespace.
    pub(crate) async fn apply(&self, objects: &[&Value]) {
        for object in objects {
            apply(
                &self.client,
                &self.ns,
                &serde_json::to_string(object).unwrap(),
            )
            .await;
        }
    }

    /// `ExpectCreated(nodeClass, nodePool)` with the defaults.
    pub(crate) async fn create_defaults(&self) {
        self.apply(&[&self.default_nodeclass(), &self.default_nodepool()])
            .await;
    }

    /// `EventuallyExpectHealthyPodCount(selector, n)`: `n` pods Running (bound, not terminating).
    pub(crate) async fn eventually_healthy_pods(&self, selector: &str, n: usize, limit: Duration) {
        let (client, ns) = (self.client.clone(), self.ns.clone());
        eventually(&format!("{n} healthy pods ({selector})"), limit, || {
            let (client, ns) = (client.clone(), ns.clone());
            async move {
                let pods = pods(&client, &ns, selector).await;
                (pods.iter().filter(|p| running(p)).count() == n).then_some(())
            }
        })
        .await
        .unwrap();
    }

    /// The NodeClaims' and Nodes' counts, as upstream's `ExpectCreatedNodeCount` reads them.
    pub(crate) async fn counts(&self) -> (usize, usize) {
        (
            nodeclaims(&self.client).await.len(),
            nodes(&self.client).await.len(),
        )
    }
}

/// A Deployment (upstream `test.Deployment`): `replicas` pods of the pause image with the given
/// requests, labelled `app: NAME`, in the test's namespace.
pub(crate) fn deployment(name: &str, replicas: i32, requests: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {DISCOVERY_LABEL: "owned"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, DISCOVERY_LABEL: "owned"}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "app",
                        "image": "registry.k8s.io/pause:3.9",
                        "resources": {"requests": requests}
                    }]
                }
            }
        }
    })
}
