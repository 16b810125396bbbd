//! Upstream `test/suites/regression/nodeclaim_test.go`: `NodeClaim` / `StandaloneNodeClaim`,
//! NodeClaims created directly (no NodePool), launched by the sim provider on the real control
//! plane.
//!
//! Upstream adds an instance-type requirement only for its KWOK NodeClass; the sim provider
//! reads an EC2NodeClass, so the requirements are the default NodePool's, as upstream's are off
//! KWOK.
//!
//! The helpers at the end (upstream's `EventuallyExpect...` of `test/pkg/environment/common`)
//! serve `staticcapacity.rs` too.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use super::env::{DISCOVERY_LABEL, Env};
use crate::real_cluster::objects::condition_true;
use crate::real_cluster::{DISRUPT, LAUNCH, SOON, eventually};

/// `test.NodeClaim` with the default NodePool's requirements and the test's NodeClass;
/// `extra_spec` and `extra_metadata` are merged over it.
fn nodeclaim(env: &Env, name: &str, extra_metadata: Value, extra_spec: Value) -> Value {
    let pool = env.default_nodepool();
    let mut claim = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {DISCOVERY_LABEL: "unspecified"}},
        "spec": {
            "requirements": pool["spec"]["template"]["spec"]["requirements"],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": env.nodeclass}
        }
    });
    merge(&mut claim["metadata"], extra_metadata);
    merge(&mut claim["spec"], extra_spec);
    claim
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                merge(into.entry(key).or_insert(Value::Null), value);
            }
        }
        (into, from) => *into = from,
    }
}

fn claim_name(env: &Env) -> String {
    format!("standalone-{}", env.ns.rsplit('-').next().unwrap_or("x"))
}

/// "should create a standard NodeClaim"
#[tokio::test]
async fn should_create_a_standard_nodeclaim() {
    let Some(env) = Env::start("nc-standard", crate::real_cluster::options()).await else {
        return;
    };
    let claim = nodeclaim(&env, &claim_name(&env), json!({}), json!({}));
    env.apply(&[&env.default_nodeclass(), &claim]).await;
    let node = eventually_initialized_nodes(&env.client, 1, LAUNCH)
        .await
        .remove(0);
    let claim = eventually_nodeclaims(&env.client, 1, SOON).await.remove(0);
    assert_eq!(
        node.labels()
            .get("karpenter.sh/capacity-type")
            .map(String::as_str),
        Some("on-demand")
    );
    eventually_nodeclaims_ready(&env.client, &[claim.name_any()], SOON).await;
}

/// "should create a standard NodeClaim based on resource requests"
#[tokio::test]
async fn should_create_a_standard_nodeclaim_based_on_resource_requests() {
    let Some(env) = Env::start("nc-requests", crate::real_cluster::options()).await else {
        return;
    };
    let claim = nodeclaim(
        &env,
        &claim_name(&env),
        json!({}),
        json!({"resources": {"requests": {"cpu": "3", "memory": "11Gi"}}}),
    );
    env.apply(&[&env.default_nodeclass(), &claim]).await;
    let node = eventually_initialized_nodes(&env.client, 1, LAUNCH)
        .await
        .remove(0);
    let claim = eventually_nodeclaims(&env.client, 1, SOON).await.remove(0);
    let allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.clone())
        .unwrap();
    let fits = |resource: &str, requested: &str| {
        let have = karpenter_core::resources::Quantity::parse(&allocatable[resource].0).unwrap();
        let want = karpenter_core::resources::Quantity::parse(requested).unwrap();
        assert!(
            have >= want,
            "{resource}: allocatable {have} < requested {want}"
        );
    };
    fits("cpu", "3");
    fits("memory", "11Gi");
    eventually_nodeclaims_ready(&env.client, &[claim.name_any()], SOON).await;
}

/// "should create a NodeClaim propagating all the NodeClaim spec details"
#[tokio::test]
async fn should_create_a_nodeclaim_propagating_all_the_nodeclaim_spec_details() {
    let Some(env) = Env::start("nc-propagate", crate::real_cluster::options()).await else {
        return;
    };
    let claim = nodeclaim(
        &env,
        &claim_name(&env),
        json!({
            "annotations": {"custom-annotation": "custom-value"},
            "labels": {"custom-label": "custom-value"}
        }),
        json!({
            "taints": [
                {"key": "custom-taint", "effect": "NoSchedule", "value": "custom-value"},
                {"key": "other-custom-taint", "effect": "NoExecute", "value": "other-custom-value"}
            ],
            "resources": {"requests": {"cpu": "3", "memory": "16Gi"}}
        }),
    );
    env.apply(&[&env.default_nodeclass(), &claim]).await;
    let node = eventually_initialized_nodes(&env.client, 1, LAUNCH)
        .await
        .remove(0);
    let claim = Api::<NodeClaim>::all(env.client.clone())
        .get(&claim_name(&env))
        .await
        .unwrap();
    expect_template_details_on_node(&node);
    let owner = node
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "NodeClaim")
        .unwrap_or_else(|| panic!("no NodeClaim owner on {:?}", node.metadata));
    assert_eq!(owner.api_version, "karpenter.sh/v1");
    assert_eq!(owner.name, claim.name_any());
    assert_eq!(Some(&owner.uid), claim.metadata.uid.as_ref());
    assert_eq!(owner.block_owner_deletion, Some(true));
    eventually_nodeclaims(&env.client, 1, SOON).await;
    eventually_nodeclaims_ready(&env.client, &[claim.name_any()], SOON).await;
}

/// The annotation, label and taints upstream's propagation tests put on the NodeClaim (or the
/// NodePool's template), found on the Node.
pub(super) fn expect_template_details_on_node(node: &Node) {
    assert_eq!(
        node.annotations()
            .get("custom-annotation")
            .map(String::as_str),
        Some("custom-value"),
        "{:?}",
        node.metadata.annotations
    );
    assert_eq!(
        node.labels().get("custom-label").map(String::as_str),
        Some("custom-value")
    );
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    for (key, effect, value) in [
        ("custom-taint", "NoSchedule", "custom-value"),
        ("other-custom-taint", "NoExecute", "other-custom-value"),
    ] {
        assert!(
            taints
                .iter()
                .any(|t| t.key == key && t.effect == effect && t.value.as_deref() == Some(value)),
            "{key}={value}:{effect} not among {taints:?}"
        );
    }
}

/// "should remove the cloudProvider NodeClaim when the cluster NodeClaim is deleted"
#[tokio::test]
async fn should_remove_the_cloudprovider_nodeclaim_when_the_cluster_nodeclaim_is_deleted() {
    let Some(env) = Env::start("nc-delete-claim", crate::real_cluster::options()).await else {
        return;
    };
    let claim = nodeclaim(&env, &claim_name(&env), json!({}), json!({}));
    env.apply(&[&env.default_nodeclass(), &claim]).await;
    let node = eventually_initialized_nodes(&env.client, 1, LAUNCH)
        .await
        .remove(0);
    let claim = eventually_nodeclaims(&env.client, 1, SOON).await.remove(0);
    Api::<NodeClaim>::all(env.client.clone())
        .delete(&claim.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    eventually_not_found(&env.client, &[claim.name_any()], &[node.name_any()], SOON).await;
}

/// "should delete a NodeClaim from the node termination finalizer"
#[tokio::test]
async fn should_delete_a_nodeclaim_from_the_node_termination_finalizer() {
    let Some(env) = Env::start("nc-delete-node", crate::real_cluster::options()).await else {
        return;
    };
    let claim = nodeclaim(&env, &claim_name(&env), json!({}), json!({}));
    env.apply(&[&env.default_nodeclass(), &claim]).await;
    let node = eventually_initialized_nodes(&env.client, 1, LAUNCH)
        .await
        .remove(0);
    let claim = eventually_nodeclaims(&env.client, 1, SOON).await.remove(0);
    Api::<Node>::all(env.client.clone())
        .delete(&node.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    eventually_not_found(&env.client, &[claim.name_any()], &[node.name_any()], SOON).await;
}

/// "should delete a NodeClaim after the registration timeout when the node doesn't register"
///
/// Upstream waits out the fixed 15-minute registration TTL (up to 17 minutes); here the
/// controller's hidden `REGISTRATION_TTL` (docs/controller.md) is 20 s, waited for up to 60 s.
#[tokio::test]
async fn should_delete_a_nodeclaim_after_the_registration_timeout_when_the_node_doesnt_register() {
    let options = crate::real_cluster::options().env("REGISTRATION_TTL", "20s");
    let Some(env) = Env::start("nc-registration-ttl", options).await else {
        return;
    };
    block_node_registration(&env.client).await;
    let claim = nodeclaim(
        &env,
        &claim_name(&env),
        json!({"labels": {"registration": "fail"}}),
        json!({}),
    );
    env.apply(&[&env.default_nodeclass(), &claim]).await;
    let claim = eventually_nodeclaims(&env.client, 1, SOON).await.remove(0);
    let api = Api::<NodeClaim>::all(env.client.clone());
    // upstream `EventuallyExpectLaunchedNodeClaimCount`: launched first (the status is written
    // a moment after the NodeClaim is created).
    let name = claim.name_any();
    crate::real_cluster::eventually("the NodeClaim Launched", SOON, || {
        let (api, name) = (api.clone(), name.clone());
        async move {
            let current = api.get(&name).await.ok()?;
            crate::real_cluster::objects::condition_true(&current, "Launched").then_some(())
        }
    })
    .await
    .unwrap();
    // Consistently (gomega's default: 2 s): launched, neither registered nor initialized.
    for _ in 0..20 {
        let current = api.get(&claim.name_any()).await.unwrap();
        assert!(
            condition_unknown(&current, "Registered"),
            "{:?}",
            current.status
        );
        assert!(
            condition_unknown(&current, "Initialized"),
            "{:?}",
            current.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually_not_found(
        &env.client,
        &[claim.name_any()],
        &[],
        Duration::from_secs(60),
    )
    .await;
}

/// "should delete a NodeClaim if it references a NodeClass that doesn't exist"
#[tokio::test]
async fn should_delete_a_nodeclaim_if_it_references_a_nodeclass_that_doesnt_exist() {
    let Some(env) = Env::start("nc-no-nodeclass", crate::real_cluster::options()).await else {
        return;
    };
    let claim = nodeclaim(&env, &claim_name(&env), json!({}), json!({}));
    // No NodeClass: the launch fails and the NodeClaim is deleted.
    env.apply(&[&claim]).await;
    eventually_not_found(&env.client, &[claim_name(&env)], &[], SOON).await;
}

/// "should delete a NodeClaim if it references a NodeClass that isn't Ready"
#[tokio::test]
async fn should_delete_a_nodeclaim_if_it_references_a_nodeclass_that_isnt_ready() {
    let Some(env) = Env::start("nc-nodeclass-not-ready", crate::real_cluster::options()).await
    else {
        return;
    };
    env.apply(&[&env.default_nodeclass()]).await;
    let classes = Api::<karpenter_api::v1::EC2NodeClass>::all(env.client.clone());
    // "Validating the NodeClass status condition has been reconciled" (upstream: within 5 s).
    eventually(
        "the NodeClass's status.conditions",
        Duration::from_secs(5),
        || {
            let classes = classes.clone();
            let name = env.nodeclass.clone();
            async move {
                let class = classes.get(&name).await.ok()?;
                class
                    .status
                    .filter(|s| !s.conditions.is_empty())
                    .map(|_| ())
            }
        },
    )
    .await
    .unwrap();
    block_nodeclass_status(&env.client, &env.nodeclass).await;
    // `ExpectReplaceNodeClassCondition` + `ExpectStatusUpdated`: Ready=False for the current
    // generation, the other conditions kept.
    let class = classes.get(&env.nodeclass).await.unwrap();
    let mut replaced = class.clone();
    let status = replaced.status.get_or_insert_default();
    status.conditions.retain(|c| c.type_ != "Ready");
    status.conditions.insert(
        0,
        karpenter_api::v1::Condition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: Some("TestingNotReady".into()),
            message: Some("NodeClass is not ready".into()),
            last_transition_time: Some(
                jiff::Timestamp::now()
                    .round(jiff::Unit::Second)
                    .unwrap()
                    .to_string(),
            ),
            observed_generation: class.metadata.generation,
        },
    );
    classes
        .replace_status(&env.nodeclass, &PostParams::default(), &replaced)
        .await
        .unwrap();

    let claim = nodeclaim(&env, &claim_name(&env), json!({}), json!({}));
    env.apply(&[&claim]).await;
    eventually_not_found(&env.client, &[claim_name(&env)], &[], SOON).await;
}

/// "should succeed to garbage collect an Instance that was launched by a NodeClaim but has no
/// Instance mapping"
#[tokio::test]
async fn should_succeed_to_garbage_collect_an_instance_that_was_launched_by_a_nodeclaim_but_has_no_instance_mapping()
 {
    let Some(env) = Env::start("nc-gc", crate::real_cluster::options()).await else {
        return;
    };
    block_node_registration(&env.client).await;
    let claim = nodeclaim(
        &env,
        &claim_name(&env),
        json!({"labels": {"registration": "fail"}}),
        json!({}),
    );
    env.apply(&[&env.default_nodeclass(), &claim]).await;
    let api = Api::<NodeClaim>::all(env.client.clone());
    let name = claim_name(&env);
    // "Updated NodeClaim Status": an instance the provider never launched.
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap()
        .to_string();
    let condition = |type_: &str| {
        json!({"type": type_, "status": "True", "reason": type_, "message": "",
               "lastTransitionTime": now, "observedGeneration": 1})
    };
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "providerID": "Provider:///AZ/i-01234567890123456",
            "nodeName": "test-node-name",
            "conditions": [condition("Launched"), condition("Registered"), condition("Initialized")]
        }})),
    )
    .await
    .unwrap();
    // The garbage collector looks every 2 minutes (upstream's period), counted from the leader's
    // start: a disruption wait on top of it, not instead of it.
    eventually_not_found(
        &env.client,
        &[name],
        &[],
        DISRUPT + std::time::Duration::from_secs(60),
    )
    .await;
}

fn condition_unknown(claim: &NodeClaim, type_: &str) -> bool {
    claim.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "Unknown")
    })
}

/// `ExpectBlockNodeRegistration`: a ValidatingAdmissionPolicy refusing Nodes labelled
/// `registration: fail`, active once a dry-run create of such a Node is refused. (The harness's
/// clean-up removes it before the next test.)
pub(super) async fn block_node_registration(client: &Client) {
    admission_policy(
        client,
        json!({"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["nodes"]}),
        "has(object.metadata.labels.registration) ? object.metadata.labels['registration'] != 'fail' : true",
    )
    .await;
    let probe: Node = serde_json::from_value(json!({
        "metadata": {"name": "test-name", "labels": {"registration": "fail"}},
        "spec": {"providerID": "test-provider"}
    }))
    .unwrap();
    let nodes = Api::<Node>::all(client.clone());
    eventually(
        "the registration-blocking policy to be active",
        SOON,
        || {
            let (nodes, probe) = (nodes.clone(), probe.clone());
            async move {
                let dry_run = PostParams {
                    dry_run: true,
                    ..PostParams::default()
                };
                nodes.create(&dry_run, &probe).await.is_err().then_some(())
            }
        },
    )
    .await
    .unwrap();
}

/// `ExpectBlockNodeClassStatus`: a ValidatingAdmissionPolicy refusing EC2NodeClass status writes
/// whose `Ready` condition lacks reason `TestingNotReady` (so the controller's writes are refused
/// and the test's go through), active once a dry-run write with another reason is refused.
async fn block_nodeclass_status(client: &Client, nodeclass: &str) {
    admission_policy(
        client,
        json!({"operations": ["UPDATE"], "apiGroups": ["karpenter.k8s.aws"], "apiVersions": ["v1"],
               "resources": ["ec2nodeclasses/status"]}),
        "object.status.conditions.filter(c, c.type == 'Ready').all(c, c.reason == 'TestingNotReady')",
    )
    .await;
    let classes = Api::<karpenter_api::v1::EC2NodeClass>::all(client.clone());
    let name = nodeclass.to_string();
    eventually(
        "the NodeClass-status-blocking policy to be active",
        SOON,
        || {
            let (classes, name) = (classes.clone(), name.clone());
            async move {
                let mut class = classes.get(&name).await.ok()?;
                let status = class.status.get_or_insert_default();
                status.conditions.retain(|c| c.type_ != "Ready");
                status.conditions.push(karpenter_api::v1::Condition {
                    type_: "Ready".into(),
                    status: "False".into(),
                    reason: Some("NotReady".into()),
                    message: Some("NotReady".into()),
                    last_transition_time: Some(
                        jiff::Timestamp::now()
                            .round(jiff::Unit::Second)
                            .ok()?
                            .to_string(),
                    ),
                    observed_generation: class.metadata.generation,
                });
                let dry_run = PostParams {
                    dry_run: true,
                    ..PostParams::default()
                };
                classes
                    .replace_status(&name, &dry_run, &class)
                    .await
                    .is_err()
                    .then_some(())
            }
        },
    )
    .await
    .unwrap();
}

/// Upstream's `admission-policy` and its binding (`Deny`, failure policy `Fail`).
async fn admission_policy(client: &Client, rule: Value, expression: &str) {
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "admission-policy", "labels": {DISCOVERY_LABEL: "unspecified"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [rule]},
            "validations": [{"expression": expression}]
        }
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "admission-policy-binding", "labels": {DISCOVERY_LABEL: "unspecified"}},
        "spec": {"policyName": "admission-policy", "validationActions": ["Deny"]}
    });
    for object in [policy, binding] {
        crate::real_cluster::objects::apply(
            client,
            "default",
            &serde_json::to_string(&object).unwrap(),
        )
        .await;
    }
}

// Upstream's `EventuallyExpect...` helpers, shared with `staticcapacity.rs`.

/// Nodes carrying `karpenter.sh/initialized=true` (upstream filters the nodes it saw created).
pub(super) async fn initialized_nodes(client: &Client) -> Vec<Node> {
    let mut nodes: Vec<Node> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|n| {
            n.labels()
                .get("karpenter.sh/initialized")
                .map(String::as_str)
                == Some("true")
        })
        .collect();
    nodes.sort_by_key(|n| n.name_any());
    nodes
}

/// `EventuallyExpectInitializedNodeCount("==", n)`, the nodes by name.
pub(super) async fn eventually_initialized_nodes(
    client: &Client,
    n: usize,
    limit: Duration,
) -> Vec<Node> {
    eventually(&format!("{n} initialized nodes"), limit, || {
        let client = client.clone();
        async move {
            let nodes = initialized_nodes(&client).await;
            (nodes.len() == n).then_some(nodes)
        }
    })
    .await
    .unwrap()
}

/// `EventuallyExpectCreatedNodeClaimCount("==", n)`, the NodeClaims by name.
pub(super) async fn eventually_nodeclaims(
    client: &Client,
    n: usize,
    limit: Duration,
) -> Vec<NodeClaim> {
    eventually(&format!("{n} nodeclaims"), limit, || {
        let client = client.clone();
        async move {
            let mut claims = crate::real_cluster::objects::nodeclaims(&client).await;
            claims.sort_by_key(|c| c.name_any());
            (claims.len() == n).then_some(claims)
        }
    })
    .await
    .unwrap()
}

/// `EventuallyExpectNodeClaimsReady`: each NodeClaim's `Ready` is `True`.
pub(super) async fn eventually_nodeclaims_ready(
    client: &Client,
    names: &[String],
    limit: Duration,
) {
    let api = Api::<NodeClaim>::all(client.clone());
    eventually(&format!("nodeclaims {names:?} Ready"), limit, || {
        let api = api.clone();
        async move {
            for name in names {
                let claim = api.get(name).await.ok()?;
                if !condition_true(&claim, "Ready") {
                    return None;
                }
            }
            Some(())
        }
    })
    .await
    .unwrap();
}

/// `EventuallyExpectNotFound`: the NodeClaims and Nodes are gone.
pub(super) async fn eventually_not_found(
    client: &Client,
    claims: &[String],
    nodes: &[String],
    limit: Duration,
) {
    let claim_api = Api::<NodeClaim>::all(client.clone());
    let node_api = Api::<Node>::all(client.clone());
    eventually(
        &format!("nodeclaims {claims:?} and nodes {nodes:?} gone"),
        limit,
        || {
            let (claim_api, node_api) = (claim_api.clone(), node_api.clone());
            async move {
                for name in claims {
                    if claim_api.get_opt(name).await.ok()?.is_some() {
                        return None;
                    }
                }
                for name in nodes {
                    if node_api.get_opt(name).await.ok()?.is_some() {
                        return None;
                    }
                }
                Some(())
            }
        },
    )
    .await
    .unwrap();
}

/// `ConsistentlyExpectNodeClaimCountNotExceed(duration, n)`.
pub(super) async fn consistently_nodeclaims_at_most(client: &Client, n: usize, duration: Duration) {
    let deadline = tokio::time::Instant::now() + duration;
    while tokio::time::Instant::now() < deadline {
        let count = crate::real_cluster::objects::nodeclaims(client).await.len();
        assert!(count <= n, "{count} nodeclaims, expected at most {n}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
