//! Plain objects for unit tests.
#![allow(clippy::unwrap_used)] // test fixtures may panic

use crate::pod::Pod;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::{NodeClaim, NodePool};
use serde_json::json;

pub fn pending_pod(name: &str, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .unwrap()
}

pub fn bound_pod(name: &str, node: &str, cpu: &str) -> Pod {
    let mut pod = pending_pod(name, cpu);
    pod.spec.as_mut().unwrap().node_name = Some(node.into());
    pod.status = serde_json::from_value(json!({"phase": "Running"})).unwrap();
    pod
}

pub fn nodepool(name: &str) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1},
        "spec": {"template": {
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "startup", "effect": "NoSchedule"}],
                "expireAfter": "720h"
            }
        }}
    }))
    .unwrap()
}

pub fn nodeclaim(name: &str, pool: &str, provider_id: Option<&str>, cpu: &str) -> NodeClaim {
    let mut status = json!({"capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                            "allocatable": {"cpu": cpu, "memory": "7Gi", "pods": "110"}});
    if let Some(id) = provider_id {
        status["providerID"] = json!(id);
    }
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}},
        "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
        "status": status
    }))
    .unwrap()
}

pub fn node(name: &str, pool: Option<&str>, provider_id: &str, cpu: &str) -> Node {
    let labels = match pool {
        Some(pool) => json!({"karpenter.sh/nodepool": pool, "karpenter.sh/initialized": "true"}),
        None => json!({}),
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": provider_id},
        "status": {"capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                   "allocatable": {"cpu": cpu, "memory": "7Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}
