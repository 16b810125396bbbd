//! The workload of `karpenter-bench controller` and `karpenter-bench workload`: the scheduling
//! benchmark's five kinds of pods (generic, zonal spread, hostname spread, zonal self-affinity,
//! hostname anti-affinity) as Deployments of 5–20 replicas, each pod written as an API server
//! serves a ReplicaSet's pod (defaults, service account volume, tolerations, managed fields), on
//! one NodePool of c/m `2xlarge` on-demand instances (≈ 190 nodes for 2,000 pods).

use karpenter_api::well_known as wk;
use karpenter_core::scheduling::benchmark::{CPUS, MEMORIES, Rng};
use serde_json::{Value, json};

/// Namespace of the workload's pods and Deployments.
pub const POD_NAMESPACE: &str = "default";

/// The scheduling benchmark's five kinds of pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Generic,
    ZonalSpread,
    HostnameSpread,
    ZonalAffinity,
    HostnameAntiAffinity,
}

pub const KINDS: [Kind; 5] = [
    Kind::Generic,
    Kind::ZonalSpread,
    Kind::HostnameSpread,
    Kind::ZonalAffinity,
    Kind::HostnameAntiAffinity,
];
const REPLICAS: [usize; 3] = [5, 10, 20];

/// One Deployment of the mix.
#[derive(Clone, Debug)]
pub struct Deployment {
    pub name: String,
    pub kind: Kind,
    pub replicas: usize,
    pub cpu: &'static str,
    pub memory: &'static str,
}

/// Deployments of 5–20 replicas, kinds in turn, sizes from the scheduling benchmark, `pods` in all.
pub fn deployments(pods: usize, seed: u64) -> Vec<Deployment> {
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
pub fn pod_manifest(index: usize, deployment: &Deployment, replica: usize, now: &str) -> Value {
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

/// `karpenter-bench workload`: the same mix as Deployment manifests, with the NodePool and EC2NodeClass,
/// for `karpenter simulate`.
pub fn workload_manifests(pods: usize, seed: u64) -> Vec<Value> {
    let mut out = vec![node_class(), node_pool()];
    out.extend(deployments(pods, seed).iter().map(|d| {
        let mut manifest = deployment_manifest(d);
        manifest["metadata"]["namespace"] = json!(POD_NAMESPACE);
        manifest
    }));
    out
}

/// One Deployment of the mix as a manifest, without a namespace.
pub fn deployment_manifest(deployment: &Deployment) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": deployment.name},
        "spec": {
            "replicas": deployment.replicas,
            "selector": {"matchLabels": {"app": deployment.name}},
            "template": {
                "metadata": {"labels": {"app": deployment.name}},
                "spec": pod_template_spec(deployment)
            }
        }
    })
}

/// Manifests as one YAML stream, each document after a `---` line (what `karpenter convert`
/// prints).
pub fn to_yaml_documents(manifests: &[Value]) -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for manifest in manifests {
        let doc = serde_saphyr::to_string(manifest)?;
        out.push_str("---\n");
        out.push_str(&doc);
        if !doc.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// Manifests as one JSON `kind: List` (what `karpenter convert -o json` prints).
pub fn to_json_list(manifests: Vec<Value>) -> Value {
    json!({ "apiVersion": "v1", "kind": "List", "items": manifests })
}

/// The benchmark's one NodePool: c/m `2xlarge`, amd64, on-demand.
pub fn node_pool() -> Value {
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

/// The EC2NodeClass the NodePool names (the sim provider reads only its name).
pub fn node_class() -> Value {
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

#[cfg(test)]
mod tests {
    use karpenter_core::pod::Pod;

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
            .and_then(|a| a.pod_anti_affinity.clone())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution)
            .unwrap();
        assert_eq!(terms[0].topology_key, wk::HOSTNAME_LABEL);
        assert_eq!(pod.metadata.managed_fields.map(|m| m.len()), Some(2));
    }

    #[test]
    fn the_json_list_holds_every_replica_asked_for() {
        let list = to_json_list(workload_manifests(12, 42));
        assert_eq!(list["kind"], "List");
        let replicas: i64 = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["kind"] == "Deployment")
            .map(|d| d["spec"]["replicas"].as_i64().unwrap())
            .sum();
        assert_eq!(replicas, 12);
    }

    #[test]
    fn the_yaml_stream_has_one_document_per_manifest() {
        let manifests = workload_manifests(12, 42);
        let yaml = to_yaml_documents(&manifests).unwrap();
        assert!(
            yaml.starts_with("---\napiVersion: karpenter.k8s.aws/v1\n"),
            "{yaml}"
        );
        assert_eq!(
            yaml.lines().filter(|l| *l == "---").count(),
            manifests.len()
        );
    }
}
