//! The NodeClaim lifecycle (upstream `nodeclaim.lifecycle`): finalizer → launch → registration
//! → initialization → `Ready`, liveness timeouts, and the finalizer that deletes the Node and
//! terminates the instance.
//!
//! Launch is idempotent across restarts: the provider's `create` returns the existing instance
//! for a NodeClaim that already has one, and the providerID is written to status before
//! anything else, so a crash between launch and the status write relaunches nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use karpenter_api::v1::{
    CONDITION_FALSE, CONDITION_READY, CONDITION_TRUE, CONDITION_UNKNOWN, ConditionsExt,
    NODECLAIM_CONDITION_INITIALIZED, NODECLAIM_CONDITION_INSTANCE_TERMINATING,
    NODECLAIM_CONDITION_LAUNCHED, NODECLAIM_CONDITION_REGISTERED, parse_go_duration_secs,
};
use karpenter_api::well_known::{
    CAPACITY_TYPE_LABEL, NODE_DO_NOT_SYNC_TAINTS_LABEL, NODE_INITIALIZED_LABEL,
    NODE_REGISTERED_LABEL, NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION, TERMINATION_FINALIZER,
    UNREGISTERED_TAINT_KEY,
};
use karpenter_api::{NodeClaim, NodeClaimStatus};
use karpenter_core::cloud_provider::CloudError;
use karpenter_core::resources::ResourceList;
use karpenter_core::taints::{NO_EXECUTE, NO_SCHEDULE};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Resource, ResourceExt};

use super::{has_finalizer, is_conflict, is_managed, is_not_found, name, parse_time, rfc3339};
use crate::context::Context;
use crate::events::{EventRecord, EventType};
use crate::metrics::{NodeClaimDisruptedLabels, NodeClaimLabels, NodePoolLabels, seconds_since};
use crate::timeouts;
use crate::workers::Workers;

/// A launched NodeClaim whose Node has not registered within this long is deleted.
pub const REGISTRATION_TIMEOUT: SignedDuration = SignedDuration::from_mins(15);
/// A NodeClaim that could not launch for this long is deleted.
pub const LAUNCH_TIMEOUT: SignedDuration = SignedDuration::from_mins(5);

pub const REASON_INSUFFICIENT_CAPACITY: &str = "InsufficientCapacityError";
pub const REASON_NODECLASS_NOT_READY: &str = "NodeClassNotReady";
pub const REASON_UNREGISTERED_TAINT_MISSING: &str = "UnregisteredTaintMissing";

/// Longest launch-error message kept in the `Launched` condition (upstream truncates too).
const MAX_CONDITION_MESSAGE: usize = 300;

/// The conditions whose all being `True` makes the NodeClaim `Ready`, in order.
const READY_DEPENDENTS: [&str; 3] = [
    NODECLAIM_CONDITION_LAUNCHED,
    NODECLAIM_CONDITION_REGISTERED,
    NODECLAIM_CONDITION_INITIALIZED,
];

fn api(ctx: &Context) -> Api<NodeClaim> {
    Api::all(ctx.client.clone())
}

fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> crate::Error {
    let action = action.into();
    move |e| crate::Error::kube(action, e)
}

/// Starts a reconcile for every managed NodeClaim in the state that is not already in flight
/// or backing off (the loop books the results).
pub fn start_reconciles(ctx: &Arc<Context>, workers: &mut Workers) {
    let claims: Vec<NodeClaim> = ctx
        .state
        .read()
        .nodeclaims()
        .filter(|c| is_managed(ctx, c))
        .cloned()
        .collect();
    let candidates = claims
        .into_iter()
        .map(|claim| {
            let ctx = ctx.clone();
            (name(&claim), async move { reconcile(&ctx, claim).await })
        })
        .collect();
    workers.start_in_turn(ctx.now(), candidates);
}

/// Makes the state see our write at once, before the watch delivers it (never over a newer
/// watched copy).
fn remember<K: crate::state::Tracked>(ctx: &Context, obj: &K) {
    ctx.state.write().remember(obj.clone());
}

/// A write was refused (409/404): the state's copy is behind the API server. Reads the current
/// object and puts it into the state, so the next tick works from it instead of relying on a
/// watch event that may already have been consumed (registration stays level-triggered).
async fn resync<K>(ctx: &Context, api: &Api<K>, stale: &K)
where
    K: crate::state::Tracked + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let obj_name = stale.name_any();
    match timeouts::api(api.get_opt(&obj_name)).await {
        Ok(Some(fresh)) => {
            ctx.state.write().apply(fresh);
        }
        Ok(None) => ctx.state.write().delete(stale),
        Err(err) => {
            tracing::debug!(name = %obj_name, error = %err, "cannot re-read object after a refused write")
        }
    }
}

/// One pass over one NodeClaim.
pub async fn reconcile(ctx: &Context, claim: NodeClaim) -> crate::Result<()> {
    if claim.metadata.deletion_timestamp.is_some() {
        return finalize(ctx, claim).await;
    }
    let claim_name = name(&claim);
    let mut claim = claim;
    if !has_finalizer(&claim) {
        claim
            .metadata
            .finalizers
            .get_or_insert_default()
            .push(TERMINATION_FINALIZER.to_string());
        match timeouts::api(api(ctx).replace(&claim_name, &PostParams::default(), &claim)).await {
            Ok(updated) => {
                remember(ctx, &updated);
                claim = updated;
            }
            Err(err) if is_conflict(&err) || is_not_found(&err) => {
                resync(ctx, &api(ctx), &claim).await;
                return Ok(());
            }
            Err(err) => {
                return Err(crate::Error::kube(
                    format!("add finalizer to nodeclaim {claim_name}"),
                    err,
                ));
            }
        }
    }
    let now = ctx.now();
    let before = claim.status.clone();
    initialize_conditions(&mut claim, now);

    if !is_launched(&claim) {
        match launch(ctx, &mut claim, now).await? {
            LaunchOutcome::Launched => {}
            LaunchOutcome::Deleted | LaunchOutcome::Stale => return Ok(()),
            LaunchOutcome::Failed => {
                write_status(ctx, &claim, before.as_ref()).await?;
                return check_liveness(ctx, &claim, now).await;
            }
        }
    }

    let nodes = nodes_for(ctx, &claim);
    register(ctx, &mut claim, &nodes, now).await?;
    let nodes = nodes_for(ctx, &claim);
    initialize(ctx, &mut claim, &nodes, now).await?;
    update_ready(&mut claim, now);
    write_status(ctx, &claim, before.as_ref()).await?;
    check_liveness(ctx, &claim, now).await
}

fn is_launched(claim: &NodeClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.is_condition_true(NODECLAIM_CONDITION_LAUNCHED))
}

fn is_registered(claim: &NodeClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.is_condition_true(NODECLAIM_CONDITION_REGISTERED))
}

fn provider_id(claim: &NodeClaim) -> Option<&str> {
    claim
        .status
        .as_ref()?
        .provider_id
        .as_deref()
        .filter(|p| !p.is_empty())
}

fn set(
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
        .set_condition(type_, status, reason, message, &rfc3339(now), generation);
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
            set(
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
    set(claim, CONDITION_READY, &state, &reason, &message, now);
}

async fn write_status(
    ctx: &Context,
    claim: &NodeClaim,
    before: Option<&NodeClaimStatus>,
) -> crate::Result<()> {
    if claim.status.as_ref() == before {
        return Ok(());
    }
    let claim_name = name(claim);
    match timeouts::api(api(ctx).replace_status(&claim_name, &PostParams::default(), claim)).await {
        Ok(updated) => {
            remember(ctx, &updated);
            Ok(())
        }
        Err(err) if is_conflict(&err) || is_not_found(&err) => {
            resync(ctx, &api(ctx), claim).await;
            Ok(())
        }
        Err(err) => Err(crate::Error::kube(
            format!("update status of nodeclaim {claim_name}"),
            err,
        )),
    }
}

enum LaunchOutcome {
    Launched,
    Failed,
    Deleted,
    /// The state's copy was behind the API server; it has been re-read, try again next tick.
    Stale,
}

fn truncate(message: &str) -> String {
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

async fn launch(
    ctx: &Context,
    claim: &mut NodeClaim,
    now: Timestamp,
) -> crate::Result<LaunchOutcome> {
    let claim_name = name(claim);
    match timeouts::cloud(ctx.cloud.create(claim)).await {
        Ok(launched) => {
            hydrate(claim, &launched);
            set(
                claim,
                NODECLAIM_CONDITION_LAUNCHED,
                CONDITION_TRUE,
                NODECLAIM_CONDITION_LAUNCHED,
                "",
                now,
            );
            // The providerID goes to the API server first: a restart from here on finds it.
            let mut updated = match timeouts::api(api(ctx).replace_status(
                &claim_name,
                &PostParams::default(),
                claim,
            ))
            .await
            {
                Ok(updated) => updated,
                Err(err) if is_conflict(&err) || is_not_found(&err) => {
                    // Launch is idempotent: the next tick relaunches from the fresh copy and
                    // gets the same instance back.
                    resync(ctx, &api(ctx), claim).await;
                    return Ok(LaunchOutcome::Stale);
                }
                Err(err) => {
                    return Err(kube_err(format!("record launch of nodeclaim {claim_name}"))(err));
                }
            };
            if updated.metadata.labels != claim.metadata.labels
                || updated.metadata.annotations != claim.metadata.annotations
            {
                updated.metadata.labels = claim.metadata.labels.clone();
                updated.metadata.annotations = claim.metadata.annotations.clone();
                updated =
                    timeouts::api(api(ctx).replace(&claim_name, &PostParams::default(), &updated))
                        .await
                        .map_err(kube_err(format!("label launched nodeclaim {claim_name}")))?;
            }
            remember(ctx, &updated);
            tracing::info!(
                nodeclaim = %claim_name,
                provider_id = provider_id(&updated).unwrap_or_default(),
                instance_type = updated.labels().get(karpenter_api::well_known::INSTANCE_TYPE_LABEL).map(String::as_str).unwrap_or_default(),
                "launched nodeclaim"
            );
            *claim = updated;
            Ok(LaunchOutcome::Launched)
        }
        Err(err @ (CloudError::InsufficientCapacity(_) | CloudError::NodeClassNotReady(_))) => {
            let (event, reason) = match err {
                CloudError::InsufficientCapacity(_) => {
                    (REASON_INSUFFICIENT_CAPACITY, "insufficient_capacity")
                }
                _ => (REASON_NODECLASS_NOT_READY, "nodeclass_not_ready"),
            };
            tracing::error!(nodeclaim = %claim_name, error = %err, "failed launching nodeclaim; deleting it");
            ctx.events
                .publish(EventRecord::new(
                    claim,
                    EventType::Warning,
                    event,
                    format!("Failed to launch nodeclaim: {err}"),
                ))
                .await;
            delete_claim(ctx, claim, reason).await?;
            Ok(LaunchOutcome::Deleted)
        }
        Err(CloudError::Create { reason, message }) => {
            set(
                claim,
                NODECLAIM_CONDITION_LAUNCHED,
                CONDITION_UNKNOWN,
                &reason,
                &truncate(&message),
                now,
            );
            Ok(LaunchOutcome::Failed)
        }
        Err(err) => {
            tracing::warn!(nodeclaim = %claim_name, error = %err, "launch failed; retrying");
            set(
                claim,
                NODECLAIM_CONDITION_LAUNCHED,
                CONDITION_UNKNOWN,
                "LaunchFailed",
                &truncate(&err.to_string()),
                now,
            );
            Ok(LaunchOutcome::Failed)
        }
    }
}

/// Deletes the NodeClaim (its finalizer then terminates whatever was launched), counting why.
async fn delete_claim(ctx: &Context, claim: &NodeClaim, reason: &str) -> crate::Result<()> {
    let claim_name = name(claim);
    match timeouts::api(api(ctx).delete(&claim_name, &DeleteParams::default())).await {
        Ok(_) => {}
        Err(err) if is_not_found(&err) => return Ok(()),
        Err(err) => {
            return Err(crate::Error::kube(
                format!("delete nodeclaim {claim_name}"),
                err,
            ));
        }
    }
    ctx.metrics
        .nodeclaims_disrupted
        .get_or_create(&NodeClaimDisruptedLabels {
            reason: reason.to_string(),
            nodepool: claim.nodepool_name().unwrap_or_default().to_string(),
            capacity_type: claim
                .labels()
                .get(CAPACITY_TYPE_LABEL)
                .cloned()
                .unwrap_or_default(),
        })
        .inc();
    Ok(())
}

/// Nodes carrying the NodeClaim's providerID, from the state.
fn nodes_for(ctx: &Context, claim: &NodeClaim) -> Vec<Node> {
    let Some(id) = provider_id(claim) else {
        return Vec::new();
    };
    ctx.state
        .read()
        .nodes()
        .filter(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(id))
        .cloned()
        .collect()
}

fn same_taint(a: &Taint, b: &Taint) -> bool {
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

async fn register(
    ctx: &Context,
    claim: &mut NodeClaim,
    nodes: &[Node],
    now: Timestamp,
) -> crate::Result<()> {
    if is_registered(claim) {
        return Ok(());
    }
    let node = match nodes {
        [] => {
            set(
                claim,
                NODECLAIM_CONDITION_REGISTERED,
                CONDITION_UNKNOWN,
                "NodeNotFound",
                "Node not registered with cluster",
                now,
            );
            return Ok(());
        }
        [node] => node,
        _ => {
            set(
                claim,
                NODECLAIM_CONDITION_REGISTERED,
                CONDITION_FALSE,
                "MultipleNodesFound",
                "Invariant violated, matched multiple nodes",
                now,
            );
            return Ok(());
        }
    };
    let has_unregistered_taint = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == UNREGISTERED_TAINT_KEY));
    if !has_unregistered_taint && !node.labels().contains_key(NODE_REGISTERED_LABEL) {
        ctx.events
            .publish(EventRecord::new(
                node,
                EventType::Warning,
                REASON_UNREGISTERED_TAINT_MISSING,
                format!("Missing {UNREGISTERED_TAINT_KEY} taint which prevents registration related race conditions on Karpenter-managed nodes"),
            ))
            .await;
    }
    let desired = registered_node(node, claim);
    let node_name = node.name_any();
    if desired != *node {
        let node_api = Api::<Node>::all(ctx.client.clone());
        match timeouts::api(node_api.replace(&node_name, &PostParams::default(), &desired)).await {
            Ok(updated) => remember(ctx, &updated),
            Err(err) if is_conflict(&err) || is_not_found(&err) => {
                resync(ctx, &node_api, node).await;
                return Ok(());
            }
            Err(err) => return Err(crate::Error::kube(format!("sync node {node_name}"), err)),
        }
    }
    claim
        .status
        .get_or_insert_with(NodeClaimStatus::default)
        .node_name = Some(node_name.clone());
    set(
        claim,
        NODECLAIM_CONDITION_REGISTERED,
        CONDITION_TRUE,
        NODECLAIM_CONDITION_REGISTERED,
        "",
        now,
    );
    ctx.metrics
        .nodes_created
        .get_or_create(&NodePoolLabels {
            nodepool: claim.nodepool_name().unwrap_or_default().to_string(),
        })
        .inc();
    tracing::info!(nodeclaim = %name(claim), node = %node_name, "registered nodeclaim");
    Ok(())
}

fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Taints that say the node is still starting (upstream's known ephemeral taints).
fn is_known_ephemeral(taint: &Taint) -> bool {
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

async fn initialize(
    ctx: &Context,
    claim: &mut NodeClaim,
    nodes: &[Node],
    now: Timestamp,
) -> crate::Result<()> {
    let initialized = claim
        .status
        .as_ref()
        .is_some_and(|s| s.is_condition_true(NODECLAIM_CONDITION_INITIALIZED));
    if !is_registered(claim) || initialized {
        return Ok(());
    }
    let [node] = nodes else {
        set(
            claim,
            NODECLAIM_CONDITION_INITIALIZED,
            CONDITION_UNKNOWN,
            "NodeNotFound",
            "Node not registered with cluster",
            now,
        );
        return Ok(());
    };
    if let Some((reason, message)) = initialization_blocker(claim, node) {
        set(
            claim,
            NODECLAIM_CONDITION_INITIALIZED,
            CONDITION_UNKNOWN,
            reason,
            &message,
            now,
        );
        return Ok(());
    }
    if node
        .labels()
        .get(NODE_INITIALIZED_LABEL)
        .is_none_or(|v| v != "true")
    {
        let mut desired = node.clone();
        desired
            .metadata
            .labels
            .get_or_insert_default()
            .insert(NODE_INITIALIZED_LABEL.into(), "true".into());
        let node_name = node.name_any();
        let node_api = Api::<Node>::all(ctx.client.clone());
        match timeouts::api(node_api.replace(&node_name, &PostParams::default(), &desired)).await {
            Ok(updated) => remember(ctx, &updated),
            Err(err) if is_conflict(&err) || is_not_found(&err) => {
                resync(ctx, &node_api, node).await;
                return Ok(());
            }
            Err(err) => {
                return Err(crate::Error::kube(
                    format!("label node {node_name} initialized"),
                    err,
                ));
            }
        }
    }
    set(
        claim,
        NODECLAIM_CONDITION_INITIALIZED,
        CONDITION_TRUE,
        NODECLAIM_CONDITION_INITIALIZED,
        "",
        now,
    );
    tracing::info!(nodeclaim = %name(claim), "initialized nodeclaim");
    Ok(())
}

fn transitioned_at(claim: &NodeClaim, type_: &str) -> Option<Timestamp> {
    claim
        .status
        .as_ref()?
        .condition(type_)?
        .last_transition_time
        .as_deref()
        .and_then(parse_time)
}

/// Upstream liveness: an unlaunched NodeClaim past [`LAUNCH_TIMEOUT`] or an unregistered one past
/// [`REGISTRATION_TIMEOUT`] (each measured from its condition's last transition) is deleted.
/// Returns the metric reason.
pub fn liveness_verdict(claim: &NodeClaim, now: Timestamp) -> Option<&'static str> {
    if is_registered(claim) {
        return None;
    }
    let expired = |type_: &str, timeout: SignedDuration| {
        transitioned_at(claim, type_).is_some_and(|at| now.duration_since(at) >= timeout)
    };
    if !is_launched(claim) {
        return expired(NODECLAIM_CONDITION_LAUNCHED, LAUNCH_TIMEOUT).then_some("launch_timeout");
    }
    expired(NODECLAIM_CONDITION_REGISTERED, REGISTRATION_TIMEOUT).then_some("registration_timeout")
}

async fn check_liveness(ctx: &Context, claim: &NodeClaim, now: Timestamp) -> crate::Result<()> {
    let Some(reason) = liveness_verdict(claim, now) else {
        return Ok(());
    };
    tracing::info!(nodeclaim = %name(claim), %reason, "deleting nodeclaim that did not come up in time");
    delete_claim(ctx, claim, reason).await
}

/// When the drain must be over: deletion + `spec.terminationGracePeriod`.
pub fn termination_deadline(claim: &NodeClaim) -> Option<Timestamp> {
    let deleted = claim.metadata.deletion_timestamp.as_ref()?.0;
    let grace = parse_go_duration_secs(claim.spec.termination_grace_period.as_deref()?).ok()?;
    deleted.checked_add(SignedDuration::from_secs(grace)).ok()
}

/// The NodeClaim finalizer: deadline annotation, delete the Node (its finalizer drains), then
/// terminate the instance until the provider says it is gone, then let the NodeClaim go.
async fn finalize(ctx: &Context, claim: NodeClaim) -> crate::Result<()> {
    if !has_finalizer(&claim) {
        return Ok(());
    }
    let claim_name = name(&claim);
    let mut claim = claim;
    if let Some(deadline) = termination_deadline(&claim)
        && !claim
            .annotations()
            .contains_key(NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION)
    {
        claim.metadata.annotations.get_or_insert_default().insert(
            NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION.into(),
            rfc3339(deadline),
        );
        match timeouts::api(api(ctx).replace(&claim_name, &PostParams::default(), &claim)).await {
            Ok(updated) => {
                remember(ctx, &updated);
                claim = updated;
            }
            Err(err) if is_conflict(&err) || is_not_found(&err) => return Ok(()),
            Err(err) => {
                return Err(crate::Error::kube(
                    format!("annotate nodeclaim {claim_name}"),
                    err,
                ));
            }
        }
    }
    let nodes = nodes_for(ctx, &claim);
    if !nodes.is_empty() {
        let node_api: Api<Node> = Api::all(ctx.client.clone());
        for node in nodes
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
        {
            match timeouts::api(node_api.delete(&node.name_any(), &DeleteParams::default())).await {
                Ok(_) => {}
                Err(err) if is_not_found(&err) => {}
                Err(err) => {
                    return Err(crate::Error::kube(
                        format!("delete node {}", node.name_any()),
                        err,
                    ));
                }
            }
        }
        // The Node's own finalizer drains and terminates; wait for it to be gone.
        return Ok(());
    }
    match timeouts::cloud(ctx.cloud.delete(&claim)).await {
        Ok(()) => {
            let now = ctx.now();
            let before = claim.status.clone();
            set(
                &mut claim,
                NODECLAIM_CONDITION_INSTANCE_TERMINATING,
                CONDITION_TRUE,
                "InstanceTerminating",
                "",
                now,
            );
            return write_status(ctx, &claim, before.as_ref()).await;
        }
        Err(CloudError::NodeClaimNotFound(_)) => {}
        Err(err) => {
            return Err(crate::Error::Cloud {
                action: format!("terminate instance of nodeclaim {claim_name}"),
                source: err,
            });
        }
    }
    claim
        .metadata
        .finalizers
        .get_or_insert_default()
        .retain(|f| f != TERMINATION_FINALIZER);
    match timeouts::api(api(ctx).replace(&claim_name, &PostParams::default(), &claim)).await {
        Ok(_) => {}
        Err(err) if is_conflict(&err) || is_not_found(&err) => return Ok(()),
        Err(err) => {
            return Err(crate::Error::kube(
                format!("remove finalizer from nodeclaim {claim_name}"),
                err,
            ));
        }
    }
    let nodepool = claim.nodepool_name().unwrap_or_default().to_string();
    ctx.metrics
        .nodeclaims_terminated
        .get_or_create(&NodeClaimLabels {
            nodepool: nodepool.clone(),
            capacity_type: claim
                .labels()
                .get(CAPACITY_TYPE_LABEL)
                .cloned()
                .unwrap_or_default(),
        })
        .inc();
    if let Some(seconds) = seconds_since(claim.metadata.deletion_timestamp.as_ref(), ctx.now()) {
        ctx.metrics
            .nodeclaims_termination_duration
            .get_or_create(&NodePoolLabels { nodepool })
            .observe(seconds);
    }
    tracing::info!(nodeclaim = %claim_name, "deleted nodeclaim");
    Ok(())
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
        set(
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
        set(
            &mut c,
            NODECLAIM_CONDITION_REGISTERED,
            CONDITION_UNKNOWN,
            "NodeNotFound",
            "",
            at(4),
        );
        assert_eq!(liveness_verdict(&c, at(14)), None);
        assert_eq!(liveness_verdict(&c, at(15)), Some("registration_timeout"));
        set(
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
            set(&mut c, type_, CONDITION_TRUE, type_, "", t0());
        }
        update_ready(&mut c, t0());
        assert!(c.is_ready());
        set(
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
