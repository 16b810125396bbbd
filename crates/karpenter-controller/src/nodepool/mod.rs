//! NodePool controllers: `status.resources` / `status.nodes` (counter), `NodeClassReady`
//! (readiness), `ValidationSucceeded` (validation), `Ready`, and the
//! `karpenter.sh/nodepool-hash` annotations (hash). The decisions are pure functions of the
//! NodePool and the cluster state; [`run`] writes them when this replica leads.

pub mod validation;

use karpenter_core::nodepool::{hash, limits, usage};

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use karpenter_api::v1::Condition;
use karpenter_api::well_known::{
    NODEPOOL_HASH_ANNOTATION, NODEPOOL_HASH_VERSION, NODEPOOL_HASH_VERSION_ANNOTATION,
    NODEPOOL_LABEL,
};
use karpenter_api::{NodeClaim, NodePool, NodePoolStatus};
use karpenter_core::resources::{Quantity, ResourceList};
use karpenter_core::state::ClusterState;
use kube::api::{ListParams, Patch};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use crate::context::Context;
use crate::metrics::NodePoolResourceLabels;
use crate::timeouts;

pub const CONDITION_READY: &str = "Ready";
pub const CONDITION_VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
pub const CONDITION_NODECLASS_READY: &str = "NodeClassReady";

const EC2_NODECLASS_KIND: &str = "EC2NodeClass";

/// `(status, reason, message)` of `NodeClassReady`.
pub fn nodeclass_readiness(pool: &NodePool, state: &ClusterState) -> (bool, String, String) {
    let reference = &pool.spec.template.spec.node_class_ref;
    if reference.kind != EC2_NODECLASS_KIND
        || reference.group != karpenter_api::well_known::AWS_GROUP
    {
        // Kinds we have no informer for are not checked (the sim provider needs no NodeClass).
        return (true, "NodeClassReady".into(), String::new());
    }
    let Some(class) = state.nodeclass(&reference.name) else {
        return (
            false,
            "NodeClassNotFound".into(),
            format!("EC2NodeClass {:?} not found", reference.name),
        );
    };
    if class.metadata.deletion_timestamp.is_some() {
        return (
            false,
            "NodeClassTerminating".into(),
            format!("EC2NodeClass {:?} is terminating", reference.name),
        );
    }
    let ready = class
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_READY));
    match ready {
        // A NodeClass nobody reconciles (the sim provider) has no conditions: existing is enough.
        None => (true, "NodeClassReady".into(), String::new()),
        Some(c) if c.status == "True" => (true, "NodeClassReady".into(), String::new()),
        Some(c) if c.status == "False" => (
            false,
            c.reason
                .clone()
                .unwrap_or_else(|| "NodeClassNotReady".into()),
            c.message.clone().unwrap_or_default(),
        ),
        Some(_) => (
            false,
            "NodeClassReadinessUnknown".into(),
            "NodeClass readiness is unknown".into(),
        ),
    }
}

/// Why the provisioner may not use a pool now.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Unusable {
    #[error("nodepool is deleting")]
    Deleting,
    #[error("nodepool is static (spec.replicas)")]
    Static,
    #[error(transparent)]
    Invalid(#[from] validation::InvalidNodePool),
    /// The NodeClass is missing or not ready: the `NodeClassReady` condition's reason and message.
    #[error("{reason}: {message}")]
    NodeClassNotReady { reason: String, message: String },
}

/// Why the provisioner may not use the pool now, or `Ok`.
pub fn usable(pool: &NodePool, state: &ClusterState) -> Result<(), Unusable> {
    if pool.metadata.deletion_timestamp.is_some() {
        return Err(Unusable::Deleting);
    }
    if pool.spec.replicas.is_some() {
        return Err(Unusable::Static);
    }
    validation::validate(pool)?;
    let (ready, reason, message) = nodeclass_readiness(pool, state);
    if !ready {
        return Err(Unusable::NodeClassNotReady { reason, message });
    }
    Ok(())
}

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: (!message.is_empty()).then(|| message.into()),
        last_transition_time: None,
        observed_generation: generation,
    }
}

/// The status the NodePool should have now. Conditions keep their `lastTransitionTime` unless
/// their status changes.
pub fn desired_status(pool: &NodePool, state: &ClusterState, now: Timestamp) -> NodePoolStatus {
    let generation = pool.metadata.generation;
    let usage = usage(state, &pool.name_any());
    let nodes = usage
        .get(karpenter_api::well_known::NODES_RESOURCE)
        .units_ceil();
    let validation = validation::validate(pool);
    let (class_ok, class_reason, class_message) = nodeclass_readiness(pool, state);
    let mut conditions = vec![
        match &validation {
            Ok(()) => condition(
                CONDITION_VALIDATION_SUCCEEDED,
                true,
                CONDITION_VALIDATION_SUCCEEDED,
                "",
                generation,
            ),
            Err(invalid) => condition(
                CONDITION_VALIDATION_SUCCEEDED,
                false,
                "NodePoolValidationFailed",
                &invalid.to_string(),
                generation,
            ),
        },
        condition(
            CONDITION_NODECLASS_READY,
            class_ok,
            &class_reason,
            &class_message,
            generation,
        ),
    ];
    let ready = validation.is_ok() && class_ok;
    let not_ready: Vec<&str> = conditions
        .iter()
        .filter(|c| c.status != "True")
        .map(|c| c.type_.as_str())
        .collect();
    let ready_message = if ready {
        String::new()
    } else {
        format!("{} not true", not_ready.join(", "))
    };
    conditions.push(condition(
        CONDITION_READY,
        ready,
        if ready {
            "Ready"
        } else {
            "UnhealthyDependents"
        },
        &ready_message,
        generation,
    ));

    let previous = pool
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    for c in &mut conditions {
        let kept = previous
            .iter()
            .find(|p| p.type_ == c.type_ && p.status == c.status)
            .and_then(|p| p.last_transition_time.clone());
        c.last_transition_time = Some(kept.unwrap_or_else(|| now.to_string()));
    }
    let mut resources = usage;
    resources.remove(karpenter_api::well_known::NODES_RESOURCE);
    // Upstream keeps `nodes` in status.resources too.
    resources.set(
        karpenter_api::well_known::NODES_RESOURCE,
        Quantity::from_units(nodes),
    );
    NodePoolStatus {
        resources: resources.to_k8s(),
        nodes: Some(nodes),
        node_class_observed_generation: pool
            .status
            .as_ref()
            .and_then(|s| s.node_class_observed_generation),
        conditions,
    }
}

/// Annotations the pool should carry, if they differ from what it has.
pub fn desired_hash_annotations(pool: &NodePool) -> Option<(String, &'static str)> {
    let hash = hash::template_hash(pool);
    let annotations = pool.annotations();
    let current = annotations.get(NODEPOOL_HASH_ANNOTATION);
    let version = annotations.get(NODEPOOL_HASH_VERSION_ANNOTATION);
    (current != Some(&hash) || version.map(String::as_str) != Some(NODEPOOL_HASH_VERSION))
        .then_some((hash, NODEPOOL_HASH_VERSION))
}

/// Brings one NodePool's annotations, status and metrics up to date. Writes only as leader.
pub async fn reconcile(ctx: &Arc<Context>, name: &str) -> crate::Result<()> {
    let (pool, desired) = {
        let state = ctx.state.read();
        let Some(pool) = state.nodepool(name).cloned() else {
            return Ok(());
        };
        let desired = desired_status(&pool, &state, ctx.now());
        (pool, desired)
    };
    update_metrics(ctx, &pool, &desired);
    let Some(leader) = ctx.leader() else {
        return Ok(());
    };
    let api: Api<NodePool> = Api::all(leader.writer());
    if hash::pool_needs_claim_restamp(&pool) {
        // Before the pool takes the current version, as upstream: if a claim's write fails, the
        // pool keeps its old version and the next reconcile retries.
        restamp_nodeclaims(&leader.writer(), &pool).await?;
    }
    if let Some((hash, version)) = desired_hash_annotations(&pool) {
        let patch = json!({"metadata": {"annotations": {NODEPOOL_HASH_ANNOTATION: hash, NODEPOOL_HASH_VERSION_ANNOTATION: version}}});
        timeouts::api(api.patch(
            name,
            &karpenter_kube::identity::patch_params(),
            &Patch::Merge(&patch),
        ))
        .await
        .map_err(|e| crate::Error::kube(format!("annotate nodepool {name} with its hash"), e))?;
    }
    if !status_equivalent(pool.status.as_ref(), &desired) {
        let patch = json!({"status": desired});
        timeouts::api(api.patch_status(
            name,
            &karpenter_kube::identity::patch_params(),
            &Patch::Merge(&patch),
        ))
        .await
        .map_err(|e| crate::Error::kube(format!("update status of nodepool {name}"), e))?;
    }
    Ok(())
}

/// Re-stamps the pool's NodeClaims made under another hash version (upstream
/// `nodepool.hash`'s `updateNodeClaimHash`). Listed from the API server, not the cache: this runs
/// once per version change, and a claim annotated just before the pool changed (as a user or an
/// upgrade does) must be seen with its current annotations.
async fn restamp_nodeclaims(client: &kube::Client, pool: &NodePool) -> crate::Result<()> {
    let name = pool.name_any();
    let api: Api<NodeClaim> = Api::all(client.clone());
    let selector = format!("{NODEPOOL_LABEL}={name}");
    let claims = timeouts::api(api.list(&ListParams::default().labels(&selector)))
        .await
        .map_err(|e| crate::Error::kube(format!("list nodeclaims of nodepool {name}"), e))?;
    let mut first_error = None;
    for claim in &claims.items {
        let Some(annotations) = hash::nodeclaim_restamp(pool, claim) else {
            continue;
        };
        let claim_name = claim.name_any();
        let patch = json!({"metadata": {"annotations": annotations}});
        let written = timeouts::api(api.patch(
            &claim_name,
            &karpenter_kube::identity::patch_params(),
            &Patch::Merge(&patch),
        ))
        .await;
        match written {
            Ok(_) => {
                tracing::info!(nodepool = %name, nodeclaim = %claim_name, "re-stamped nodeclaim with the current nodepool hash version");
            }
            // Gone meanwhile: nothing left to stamp.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                first_error.get_or_insert_with(|| {
                    crate::Error::kube(
                        format!("re-stamp nodeclaim {claim_name} with its nodepool hash"),
                        e,
                    )
                });
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

fn status_equivalent(current: Option<&NodePoolStatus>, desired: &NodePoolStatus) -> bool {
    current.is_some_and(|c| c == desired)
}

fn update_metrics(ctx: &Context, pool: &NodePool, status: &NodePoolStatus) {
    let name = pool.name_any();
    let labels = |resource: &str| NodePoolResourceLabels {
        nodepool: name.clone(),
        resource_type: resource.to_string(),
    };
    if let Ok(usage) = ResourceList::from_k8s(&status.resources) {
        for (resource, quantity) in usage.iter() {
            ctx.metrics
                .nodepools_usage
                .get_or_create(&labels(resource))
                .set(quantity.as_f64_units());
        }
    }
    if let Ok(limits) = limits(pool) {
        for (resource, quantity) in limits.iter() {
            ctx.metrics
                .nodepools_limit
                .get_or_create(&labels(resource))
                .set(quantity.as_f64_units());
        }
    }
}

/// Reconciles every NodePool whenever something changes (see [`Context::nodepools_changed`])
/// and at least every `nodepool_status_period`, until `shutdown` turns true.
pub async fn run(ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let mut starts = ctx.work_starts();
    let period = ctx
        .settings
        .nodepool_status_period
        .max(Duration::from_millis(100));
    loop {
        if ctx.state.read().synced() {
            let names: Vec<String> = ctx
                .state
                .read()
                .nodepools()
                .map(ResourceExt::name_any)
                .collect();
            for name in names {
                if let Err(err) = reconcile(&ctx, &name).await {
                    tracing::error!(nodepool = %name, error = %err, "failed to reconcile nodepool");
                }
            }
        }
        // Same cadence: report objects the watchers had to skip (gauge, Warning events).
        crate::state::ignored::report(&ctx).await;
        tokio::select! {
            () = ctx.nodepools_changed.notified() => {}
            // A new leader writes what its predecessor left stale at once.
            () = starts.next() => {}
            () = tokio::time::sleep(period) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixtures::*;
    use karpenter_core::nodepool::exceeded_limit;

    fn t0() -> Timestamp {
        Timestamp::from_second(1_704_067_200).unwrap()
    }

    #[test]
    fn counts_resources_of_the_pools_nodes() {
        let state = ClusterState::from_objects(
            vec![nodepool("default")],
            vec![
                nodeclaim("default-a", "default", Some("sim://1"), "4"),
                nodeclaim("default-b", "default", None, "2"),
                nodeclaim("other-c", "other", None, "8"),
            ],
            vec![node("n1", Some("default"), "sim://1", "4")],
            vec![],
        );
        let status = desired_status(state.nodepool("default").unwrap(), &state, t0());
        assert_eq!(status.nodes, Some(2));
        let resources = ResourceList::from_k8s(&status.resources).unwrap();
        assert_eq!(resources.get("cpu").millis(), 6000);
        assert_eq!(resources.get("ephemeral-storage"), Quantity::ZERO);
        assert_eq!(resources.get("nodes").units_ceil(), 2);
    }

    #[test]
    fn nodeclass_missing_makes_the_pool_not_ready() {
        let state = ClusterState::from_objects(vec![nodepool("default")], vec![], vec![], vec![]);
        let pool = state.nodepool("default").unwrap();
        let status = desired_status(pool, &state, t0());
        let get = |t: &str| {
            status
                .conditions
                .iter()
                .find(|c| c.type_ == t)
                .unwrap()
                .clone()
        };
        assert_eq!(get(CONDITION_NODECLASS_READY).status, "False");
        assert_eq!(
            get(CONDITION_NODECLASS_READY).reason.as_deref(),
            Some("NodeClassNotFound")
        );
        assert_eq!(get(CONDITION_READY).status, "False");
        assert!(
            usable(pool, &state)
                .unwrap_err()
                .to_string()
                .contains("NodeClassNotFound")
        );

        let mut state = state;
        state.apply::<karpenter_api::v1::EC2NodeClass>(
            serde_json::from_value(
                serde_json::json!({"metadata": {"name": "default"}, "spec": {}}),
            )
            .unwrap(),
        );
        let pool = state.nodepool("default").unwrap();
        let status = desired_status(pool, &state, t0());
        assert!(
            status.conditions.iter().all(|c| c.status == "True"),
            "{:?}",
            status.conditions
        );
        usable(pool, &state).unwrap();
    }

    #[test]
    fn invalid_pool_gets_a_false_validation_condition_and_keeps_transition_times() {
        let mut pool = nodepool("bad");
        pool.spec.template.spec.node_class_ref.kind = "SimNodeClass".into();
        pool.spec
            .template
            .metadata
            .as_mut()
            .unwrap()
            .labels
            .insert("kubernetes.io/hostname".into(), "x".into());
        let state = ClusterState::from_objects(vec![pool.clone()], vec![], vec![], vec![]);
        let status = desired_status(&pool, &state, t0());
        let validation = status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_VALIDATION_SUCCEEDED)
            .unwrap();
        assert_eq!(validation.status, "False");
        assert_eq!(
            validation.reason.as_deref(),
            Some("NodePoolValidationFailed")
        );
        assert!(
            validation
                .message
                .as_deref()
                .unwrap()
                .contains("kubernetes.io/hostname")
        );

        pool.status = Some(status.clone());
        let later = desired_status(&pool, &state, t0() + jiff::SignedDuration::from_secs(60));
        assert_eq!(
            later, status,
            "nothing changed, so the status is identical (no write)"
        );
    }

    #[test]
    fn limits_exceeded_names_the_resource() {
        let limits = ResourceList::parse([("cpu", "10")]).unwrap();
        assert!(exceeded_limit(&limits, &ResourceList::parse([("cpu", "10")]).unwrap()).is_none());
        let msg = exceeded_limit(&limits, &ResourceList::parse([("cpu", "12")]).unwrap()).unwrap();
        assert!(msg.starts_with("cpu limit 10 exceeded"), "{msg}");
    }

    #[test]
    fn hash_annotation_needed_until_stamped() {
        let mut pool = nodepool("p");
        let (hash, version) = desired_hash_annotations(&pool).unwrap();
        pool.metadata.annotations = Some(
            [
                (NODEPOOL_HASH_ANNOTATION.to_string(), hash),
                (
                    NODEPOOL_HASH_VERSION_ANNOTATION.to_string(),
                    version.to_string(),
                ),
            ]
            .into(),
        );
        assert!(desired_hash_annotations(&pool).is_none());
    }
}
