//! The NodeClaim lifecycle's pure verdicts (upstream `nodeclaim.lifecycle`): given a NodeClaim,
//! its Node and the time, what its conditions say and what must happen next. The controller
//! (`karpenter_controller::nodeclaim::lifecycle`) does the I/O around them, phase by phase:
//! launch → registration → initialization → `Ready`, liveness timeouts, termination deadline.
//!
//! No clock reads: `now` is always an argument, so tests run in virtual time.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use karpenter_api::v1::{
    CONDITION_FALSE, CONDITION_READY, CONDITION_TRUE, CONDITION_UNKNOWN, ConditionsExt,
    NODECLAIM_CONDITION_INITIALIZED, NODECLAIM_CONDITION_LAUNCHED, NODECLAIM_CONDITION_REGISTERED,
    parse_go_duration_secs,
};
use karpenter_api::well_known::{
    NODE_DO_NOT_SYNC_TAINTS_LABEL, NODE_REGISTERED_LABEL, TERMINATION_FINALIZER,
    UNREGISTERED_TAINT_KEY,
};
use karpenter_api::{NodeClaim, NodeClaimStatus};
use kube_core::{Resource, ResourceExt};

use crate::resources::ResourceList;
use crate::taints::{NO_EXECUTE, NO_SCHEDULE};

/// A launched NodeClaim whose Node has not registered within this long is deleted.
pub const REGISTRATION_TIMEOUT: SignedDuration = SignedDuration::from_mins(15);
/// A NodeClaim that could not launch for this long is deleted.
pub const LAUNCH_TIMEOUT: SignedDuration = SignedDuration::from_mins(5);

/// Longest launch-error message kept in the `Launched` condition (upstream truncates too).
pub const MAX_CONDITION_MESSAGE: usize = 300;

/// The conditions whose all being `True` makes the NodeClaim `Ready`, in order.
pub const READY_DEPENDENTS: [&str; 3] = [
    NODECLAIM_CONDITION_LAUNCHED,
    NODECLAIM_CONDITION_REGISTERED,
    NODECLAIM_CONDITION_INITIALIZED,
];

/// `status.providerID`, when set and not empty.
pub fn provider_id(claim: &NodeClaim) -> Option<&str> {
    claim
        .status
        .as_ref()?
        .provider_id
        .as_deref()
        .filter(|p| !p.is_empty())
}

pub(crate) use crate::node::node_is_ready;

/// `Launched=True`.
pub fn is_launched(claim: &NodeClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.is_condition_true(NODECLAIM_CONDITION_LAUNCHED))
}

/// `Registered=True`.
pub fn is_registered(claim: &NodeClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.is_condition_true(NODECLAIM_CONDITION_REGISTERED))
}

/// `Initialized=True`.
pub fn is_initialized(claim: &NodeClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.is_condition_true(NODECLAIM_CONDITION_INITIALIZED))
}

/// Sets one condition (its transition time moves only when its status changes).
pub fn set_condition(
    claim: &mut NodeClaim,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let generation = claim.metadata.generation;
    claim
        .status
        .get_or_insert_with(NodeClaimStatus::default)
        .set_condition(type_, status, reason, message, &now.to_string(), generation);
}

/// Every lifecycle condition starts `Unknown` (their transition times drive the liveness
/// timeouts).
pub fn initialize_conditions(claim: &mut NodeClaim, now: Timestamp) {
    for type_ in READY_DEPENDENTS.into_iter().chain([CONDITION_READY]) {
        if claim
            .status
            .as_ref()
            .and_then(|s| s.condition(type_))
            .is_none()
        {
            set_condition(
                claim,
                type_,
                CONDITION_UNKNOWN,
                "AwaitingReconciliation",
                "object is awaiting reconciliation",
                now,
            );
        }
    }
}

/// `Ready` mirrors its dependents: `True` once all are, else the first one not `True`.
pub fn update_ready(claim: &mut NodeClaim, now: Timestamp) {
    let status = claim.status.get_or_insert_with(NodeClaimStatus::default);
    let blocking = READY_DEPENDENTS.iter().find_map(|type_| {
        status
            .condition(type_)
            .filter(|c| c.status != CONDITION_TRUE)
            .cloned()
    });
    let (state, reason, message) = match blocking {
        None => (
            CONDITION_TRUE.to_string(),
            CONDITION_READY.to_string(),
            String::new(),
        ),
        Some(c) => {
            let state = if c.status == CONDITION_FALSE {
                CONDITION_FALSE
            } else {
                CONDITION_UNKNOWN
            };
            (
                state.to_string(),
                format!("{}{}", c.type_, "NotTrue"),
                format!("{} is {}", c.type_, c.status),
            )
        }
    };
    set_condition(claim, CONDITION_READY, &state, &reason, &message, now);
}

/// A launch error shortened to [`MAX_CONDITION_MESSAGE`] characters.
pub fn truncate_message(message: &str) -> String {
    message.chars().take(MAX_CONDITION_MESSAGE).collect()
}

/// Copies what the provider resolved onto the NodeClaim: labels (the NodeClaim's own labels win),
/// annotations, providerID, imageID, capacity, allocatable.
pub fn hydrate(claim: &mut NodeClaim, launched: &NodeClaim) {
    let own = claim.labels().clone();
    let mut labels: BTreeMap<String, String> = launched.labels().clone();
    labels.extend(own);
    claim.metadata.labels = Some(labels);
    if !launched.annotations().is_empty() {
        let own = claim.annotations().clone();
        let mut annotations = launched.annotations().clone();
        annotations.extend(own);
        claim.metadata.annotations = Some(annotations);
    }
    let from = launched.status.clone().unwrap_or_default();
    let status = claim.status.get_or_insert_with(NodeClaimStatus::default);
    status.provider_id = from.provider_id;
    status.image_id = from.image_id;
    status.capacity = from.capacity;
    status.allocatable = from.allocatable;
}

/// Same key, effect and value (an absent value equals an empty one).
pub fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key
        && a.effect == b.effect
        && a.value.as_deref().unwrap_or("") == b.value.as_deref().unwrap_or("")
}

/// The Node as registration leaves it: the termination finalizer, an owner reference to the
/// NodeClaim, the NodeClaim's labels and annotations, its taints and startup taints (unless the
/// node opts out with `karpenter.sh/do-not-sync-taints=true`), `karpenter.sh/registered=true`,
/// and no `karpenter.sh/unregistered` taint.
pub fn registered_node(node: &Node, claim: &NodeClaim) -> Node {
    let mut node = node.clone();
    let finalizers = node.metadata.finalizers.get_or_insert_default();
    if !finalizers.iter().any(|f| f == TERMINATION_FINALIZER) {
        finalizers.push(TERMINATION_FINALIZER.to_string());
    }
    let uid = claim.uid().unwrap_or_default();
    let owners = node.metadata.owner_references.get_or_insert_default();
    if !owners
        .iter()
        .any(|o| o.uid == uid && o.kind == NodeClaim::kind(&()))
    {
        owners.push(OwnerReference {
            api_version: NodeClaim::api_version(&()).into_owned(),
            kind: NodeClaim::kind(&()).into_owned(),
            name: claim.name_any(),
            uid,
            block_owner_deletion: Some(true),
            controller: None,
        });
    }
    let labels = node.metadata.labels.get_or_insert_default();
    labels.extend(claim.labels().clone());
    let sync_taints = labels
        .get(NODE_DO_NOT_SYNC_TAINTS_LABEL)
        .is_none_or(|v| v != "true");
    labels.insert(NODE_REGISTERED_LABEL.to_string(), "true".to_string());
    if !claim.annotations().is_empty() {
        node.metadata
            .annotations
            .get_or_insert_default()
            .extend(claim.annotations().clone());
    }
    let spec = node.spec.get_or_insert_default();
    let taints = spec.taints.get_or_insert_default();
    if sync_taints {
        for taint in claim.spec.taints.iter().chain(&claim.spec.startup_taints) {
            if !taints.iter().any(|t| same_taint(t, taint)) {
                taints.push(taint.clone());
            }
        }
    }
    taints.retain(|t| !(t.key == UNREGISTERED_TAINT_KEY && t.effect == NO_EXECUTE));
    if taints.is_empty() {
        spec.taints = None;
    }
    node
}

/// Taints that say the node is still starting (upstream's known ephemeral taints).
pub fn is_known_ephemeral(taint: &Taint) -> bool {
    use karpenter_api::well_known::{
        NODE_NOT_READY_TAINT_KEY, NODE_UNINITIALIZED_TAINT_KEY, NODE_UNREACHABLE_TAINT_KEY,
    };
    match taint.key.as_str() {
        NODE_NOT_READY_TAINT_KEY => taint.effect == NO_SCHEDULE || taint.effect == NO_EXECUTE,
        NODE_UNREACHABLE_TAINT_KEY => taint.effect == NO_SCHEDULE,
        NODE_UNINITIALIZED_TAINT_KEY => {
            taint.effect == NO_SCHEDULE && taint.value.as_deref() == Some("true")
        }
        UNREGISTERED_TAINT_KEY => taint.effect == NO_EXECUTE,
        key => key.starts_with("readiness.k8s.io/"),
    }
}

/// Why the node is not initialized yet (`(reason, message)`), or `None` when it is: Ready, no
/// startup or ephemeral taints left, and every resource the NodeClaim requested registered.
pub fn initialization_blocker(claim: &NodeClaim, node: &Node) -> Option<(&'static str, String)> {
    if !node_is_ready(node) {
        return Some(("NodeNotReady", "Node status is NotReady".into()));
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if let Some(t) = taints
        .iter()
        .find(|t| claim.spec.startup_taints.iter().any(|s| same_taint(s, t)))
    {
        return Some((
            "StartupTaintsExist",
            format!("StartupTaint {:?} still exists", t.key),
        ));
    }
    if let Some(t) = taints.iter().find(|t| is_known_ephemeral(t)) {
        return Some((
            "KnownEphemeralTaintsExist",
            format!("KnownEphemeralTaint {:?} still exists", t.key),
        ));
    }
    let requested = claim
        .spec
        .resources
        .as_ref()
        .and_then(|r| ResourceList::from_k8s(&r.requests).ok())
        .unwrap_or_default();
    let allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| ResourceList::from_k8s(a).ok())
        .unwrap_or_default();
    if let Some((resource, _)) = requested
        .iter()
        .find(|(r, q)| !q.is_zero() && allocatable.get(r).is_zero())
    {
        return Some((
            "ResourceNotRegistered",
            format!("Resource {resource:?} was requested but not registered"),
        ));
    }
    None
}

/// When the condition last changed status.
pub fn transitioned_at(claim: &NodeClaim, type_: &str) -> Option<Timestamp> {
    claim
        .status
        .as_ref()?
        .condition(type_)?
        .last_transition_time
        .as_deref()
        .and_then(|raw| raw.parse().ok())
}

/// Upstream liveness: an unlaunched NodeClaim past [`LAUNCH_TIMEOUT`] or an unregistered one past
/// [`REGISTRATION_TIMEOUT`] (each measured from its condition's last transition) is deleted.
/// Returns the metric reason.
pub fn liveness_verdict(claim: &NodeClaim, now: Timestamp) -> Option<&'static str> {
    liveness_verdict_with(claim, now, REGISTRATION_TIMEOUT)
}

/// [`liveness_verdict`] with another registration timeout (the controller's hidden
/// `REGISTRATION_TTL`, which tests shorten to watch the deletion).
pub fn liveness_verdict_with(
    claim: &NodeClaim,
    now: Timestamp,
    registration_timeout: SignedDuration,
) -> Option<&'static str> {
    if is_registered(claim) {
        return None;
    }
    let expired = |type_: &str, timeout: SignedDuration| {
        transitioned_at(claim, type_).is_some_and(|at| now.duration_since(at) >= timeout)
    };
    if !is_launched(claim) {
        return expired(NODECLAIM_CONDITION_LAUNCHED, LAUNCH_TIMEOUT).then_some("launch_timeout");
    }
    expired(NODECLAIM_CONDITION_REGISTERED, registration_timeout).then_some("registration_timeout")
}

/// When the drain must be over: deletion + `spec.terminationGracePeriod`.
pub fn termination_deadline(claim: &NodeClaim) -> Option<Timestamp> {
    let deleted = claim.metadata.deletion_timestamp.as_ref()?.0;
    let grace = parse_go_duration_secs(claim.spec.termination_grace_period.as_deref()?).ok()?;
    deleted.checked_add(SignedDuration::from_secs(grace)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim() -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abc", "uid": "uid-1", "labels": {"karpenter.sh/nodepool": "default", "team": "a"},
                         "annotations": {"note": "x"}},
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "startup", "effect": "NoSchedule"}],
                "resources": {"requests": {"cpu": "1", "example.com/gpu": "1"}}
            },
            "status": {"providerID": "sim://r/z/i-1"}
        }))
        .unwrap()
    }

    fn node(taints: serde_json::Value, ready: &str, allocatable: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "spec": {"providerID": "sim://r/z/i-1", "taints": taints},
            "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": ready}]}
        }))
        .unwrap()
    }

    fn t0() -> Timestamp {
        Timestamp::from_second(1_704_067_200).unwrap()
    }

    #[test]
    fn registration_syncs_labels_taints_owner_and_removes_unregistered_taint() {
        let n = node(
            json!([{"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
                             {"key": "startup", "effect": "NoSchedule"}]),
            "True",
            json!({}),
        );
        let synced = registered_node(&n, &claim());
        let labels = synced.labels();
        assert_eq!(labels["karpenter.sh/registered"], "true");
        assert_eq!(labels["team"], "a");
        assert_eq!(labels["kubernetes.io/hostname"], "n1");
        assert_eq!(synced.annotations()["note"], "x");
        let keys: Vec<&str> = synced
            .spec
            .as_ref()
            .unwrap()
            .taints
            .as_ref()
            .unwrap()
            .iter()
            .map(|t| t.key.as_str())
            .collect();
        assert_eq!(
            keys,
            ["startup", "dedicated"],
            "startup taint not duplicated, unregistered gone"
        );
        assert_eq!(synced.finalizers(), [TERMINATION_FINALIZER]);
        assert_eq!(synced.owner_references().len(), 1);
        assert_eq!(synced.owner_references()[0].kind, "NodeClaim");
        // Idempotent: a second pass changes nothing (no duplicated owner reference).
        assert_eq!(registered_node(&synced, &claim()), synced);
    }

    #[test]
    fn registration_respects_do_not_sync_taints() {
        let mut n = node(
            json!([{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]),
            "True",
            json!({}),
        );
        n.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(NODE_DO_NOT_SYNC_TAINTS_LABEL.into(), "true".into());
        let synced = registered_node(&n, &claim());
        assert!(synced.spec.as_ref().unwrap().taints.is_none());
    }

    #[test]
    fn initialization_waits_for_ready_startup_taints_ephemeral_taints_and_resources() {
        let c = claim();
        let gpu = json!({"cpu": "2", "example.com/gpu": "1"});
        assert_eq!(
            initialization_blocker(&c, &node(json!([]), "False", gpu.clone()))
                .unwrap()
                .0,
            "NodeNotReady"
        );
        let startup = node(
            json!([{"key": "startup", "effect": "NoSchedule"}]),
            "True",
            gpu.clone(),
        );
        assert_eq!(
            initialization_blocker(&c, &startup).unwrap().0,
            "StartupTaintsExist"
        );
        let not_ready = node(
            json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]),
            "True",
            gpu.clone(),
        );
        assert_eq!(
            initialization_blocker(&c, &not_ready).unwrap().0,
            "KnownEphemeralTaintsExist"
        );
        let gate = node(
            json!([{"key": "readiness.k8s.io/net", "effect": "NoSchedule"}]),
            "True",
            gpu.clone(),
        );
        assert_eq!(
            initialization_blocker(&c, &gate).unwrap().0,
            "KnownEphemeralTaintsExist"
        );
        let no_gpu = node(
            json!([{"key": "dedicated", "value": "a", "effect": "NoSchedule"}]),
            "True",
            json!({"cpu": "2"}),
        );
        assert_eq!(
            initialization_blocker(&c, &no_gpu).unwrap().0,
            "ResourceNotRegistered"
        );
        let ok = node(
            json!([{"key": "dedicated", "value": "a", "effect": "NoSchedule"}]),
            "True",
            gpu,
        );
        assert_eq!(initialization_blocker(&c, &ok), None);
    }

    #[test]
    fn liveness_uses_condition_transition_times() {
        let mut c = claim();
        initialize_conditions(&mut c, t0());
        let at = |mins: i64| t0().checked_add(SignedDuration::from_mins(mins)).unwrap();
        assert_eq!(liveness_verdict(&c, at(4)), None);
        assert_eq!(liveness_verdict(&c, at(5)), Some("launch_timeout"));
        set_condition(
            &mut c,
            NODECLAIM_CONDITION_LAUNCHED,
            CONDITION_TRUE,
            "Launched",
            "",
            at(4),
        );
        assert_eq!(
            liveness_verdict(&c, at(10)),
            None,
            "registration is timed from its own condition"
        );
        set_condition(
            &mut c,
            NODECLAIM_CONDITION_REGISTERED,
            CONDITION_UNKNOWN,
            "NodeNotFound",
            "",
            at(4),
        );
        assert_eq!(liveness_verdict(&c, at(14)), None);
        assert_eq!(liveness_verdict(&c, at(15)), Some("registration_timeout"));
        set_condition(
            &mut c,
            NODECLAIM_CONDITION_REGISTERED,
            CONDITION_TRUE,
            "Registered",
            "",
            at(16),
        );
        assert_eq!(liveness_verdict(&c, at(60)), None, "never once registered");
    }

    #[test]
    fn ready_follows_dependents() {
        let mut c = claim();
        initialize_conditions(&mut c, t0());
        update_ready(&mut c, t0());
        assert!(!c.is_ready());
        for type_ in READY_DEPENDENTS {
            set_condition(&mut c, type_, CONDITION_TRUE, type_, "", t0());
        }
        update_ready(&mut c, t0());
        assert!(c.is_ready());
        set_condition(
            &mut c,
            NODECLAIM_CONDITION_REGISTERED,
            CONDITION_FALSE,
            "MultipleNodesFound",
            "",
            t0(),
        );
        update_ready(&mut c, t0());
        let ready = c
            .status
            .as_ref()
            .unwrap()
            .condition(CONDITION_READY)
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("RegisteredNotTrue"))
        );
    }

    #[test]
    fn hydrate_lets_nodeclaim_labels_win() {
        let mut c = claim();
        let mut launched = claim();
        launched.metadata.labels = Some(
            [
                ("team".to_string(), "provider".to_string()),
                ("zone".to_string(), "z1".to_string()),
            ]
            .into(),
        );
        launched.status = Some(NodeClaimStatus {
            provider_id: Some("sim://x".into()),
            image_id: Some("ami".into()),
            ..Default::default()
        });
        hydrate(&mut c, &launched);
        assert_eq!(c.labels()["team"], "a");
        assert_eq!(c.labels()["zone"], "z1");
        assert_eq!(provider_id(&c), Some("sim://x"));
    }

    #[test]
    fn termination_deadline_adds_grace_to_deletion() {
        let mut c = claim();
        assert_eq!(termination_deadline(&c), None);
        c.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t0()));
        c.spec.termination_grace_period = Some("1h".into());
        assert_eq!(
            termination_deadline(&c),
            Some(t0().checked_add(SignedDuration::from_hours(1)).unwrap())
        );
    }
}
