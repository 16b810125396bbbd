//! The EC2NodeClass controller (reference §1.2–1.4): resolves subnets, security groups, AMIs,
//! capacity reservations (with the ReservedCapacity gate) and the instance profile of every
//! EC2NodeClass into its status with the conditions `SubnetsReady`, `SecurityGroupsReady`,
//! `AMIsReady`, `CapacityReservationsReady`, `InstanceProfileReady`, `ValidationSucceeded` and `Ready`,
//! requeued every minute (upstream's subnet interval, the shortest of its sub-reconcilers); stamps
//! the NodeClass hash annotations; and holds the finalizer `karpenter.k8s.aws/termination`, which
//! waits while NodeClaims use the class, then deletes its launch templates and the instance
//! profile it created.
//!
//! A kube-rs `Controller`: one reconcile per object at a time, a per-object exponential backoff
//! on errors, every API call bounded by `karpenter_kube::timeouts`. Its reflector's store is also
//! the provider's [`NodeClassSource`] ([`NodeClassCache`]): launches read the class from memory.
//! Only the leader writes; a replica that becomes leader reconciles every class at once.

mod status;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use karpenter_api::v1::{
    CONDITION_FALSE, CONDITION_TRUE, ConditionsExt, EC2NodeClass, EC2NodeClassStatus, NodeClaim,
};
use karpenter_api::well_known as wk;
use karpenter_core::clock::Clock;
use karpenter_core::cloud_provider::CloudError;
use karpenter_kube::timeouts::{self, API_CALL_TIMEOUT, CLOUD_CALL_TIMEOUT};
use kube::api::{ListParams, Patch};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

pub use status::{
    CONDITION_INSTANCE_PROFILE_READY, CONDITION_VALIDATION_SUCCEEDED, READY_DEPENDENCIES,
    REASON_CLUSTER_CIDR_RESOLUTION_FAILED, REASON_INSTANCE_PROFILE_FAILED,
    REASON_INSTANCE_PROFILE_NOT_FOUND, REASON_TAG_VALIDATION_FAILED, ready_dependencies, set_ready,
    validate,
};

use crate::instance_profile::{
    ManagedProfile, managed_profile_name, managed_profile_path, managed_profile_tags,
};
use crate::provider::NodeClassSource;
use crate::reservations::{
    CONDITION_CAPACITY_RESERVATIONS_READY, ReservationAvailability, reservation_statuses,
};
use crate::resolve::REASON_RESOLUTION_FAILED;
use crate::{AwsClients, Error};

/// The EC2NodeClass finalizer: launch templates and the managed instance profile go first.
pub const TERMINATION_FINALIZER: &str = "karpenter.k8s.aws/termination";

/// Intervals of the loop.
#[derive(Clone, Copy, Debug)]
pub struct NodeClassTimings {
    /// Re-resolution of a class (upstream: subnets every minute, the rest every 5).
    pub requeue: Duration,
    /// While NodeClaims still use a class being deleted.
    pub finalizer_wait: Duration,
    /// First and longest per-object backoff after an error.
    pub backoff_base: Duration,
    pub backoff_max: Duration,
}

impl Default for NodeClassTimings {
    fn default() -> Self {
        Self {
            requeue: Duration::from_secs(60),
            finalizer_wait: Duration::from_secs(10),
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
        }
    }
}

/// What the controller needs to know about the cluster.
#[derive(Clone, Debug)]
pub struct NodeClassSettings {
    pub cluster_name: String,
    /// Kubernetes minor version for AMI aliases (`1.32`).
    pub kubernetes_version: String,
    /// The service CIDR (AL2023's nodeadm needs it; validation fails without it).
    pub service_cidr: Option<String>,
    /// `--isolated-vpc`: managed instance profiles are not deleted (upstream skips IAM there).
    pub isolated_vpc: bool,
    /// The `ReservedCapacity` feature gate: resolve `capacityReservationSelectorTerms` and make
    /// `Ready` depend on `CapacityReservationsReady`.
    pub reserved_capacity: bool,
    pub timings: NodeClassTimings,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("EC2NodeClass {name}: {action}: {source}")]
    Kube {
        name: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("EC2NodeClass {name}: {source}")]
    Aws {
        name: String,
        #[source]
        source: Error,
    },
    /// A selector could not be resolved for a reason that may pass (throttling, timeouts).
    #[error("EC2NodeClass {name}: {message}")]
    Resolution { name: String, message: String },
    #[error("EC2NodeClass {name}: {what} gave no answer within {limit:?}")]
    TimedOut {
        name: String,
        what: &'static str,
        limit: Duration,
    },
}

/// The reflector's store of EC2NodeClasses, as the provider reads them.
#[derive(Clone)]
pub struct NodeClassCache(Store<EC2NodeClass>);

impl NodeClassCache {
    /// Whether the first list has been stored.
    pub fn is_synced(&self) -> bool {
        // `wait_until_ready` resolves at once when ready; poll it without waiting.
        futures::FutureExt::now_or_never(self.0.wait_until_ready()).is_some_and(|r| r.is_ok())
    }
}

#[async_trait]
impl NodeClassSource for NodeClassCache {
    async fn node_class(&self, name: &str) -> Result<Option<EC2NodeClass>, CloudError> {
        // Before the first list every class would look missing (and its NodeClaims would be
        // deleted as NodeClassNotReady): wait for it, bounded like an API call.
        match tokio::time::timeout(API_CALL_TIMEOUT, self.0.wait_until_ready()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => {
                return Err(CloudError::other(
                    "the EC2NodeClass cache has not synced yet",
                ));
            }
        }
        Ok(self
            .0
            .get(&ObjectRef::new(name))
            .map(|class| (*class).clone()))
    }
}

struct Inner {
    client: kube::Client,
    clients: AwsClients,
    settings: NodeClassSettings,
    clock: Arc<dyn Clock>,
    leadership: watch::Receiver<bool>,
    reservations: ReservationAvailability,
    /// Consecutive failures per object, for the backoff.
    failures: Mutex<HashMap<String, u32>>,
}

/// The controller, built before the replica starts so its cache can be handed to the provider.
pub struct NodeClassController {
    controller: Controller<EC2NodeClass>,
    cache: NodeClassCache,
    client: kube::Client,
    clients: AwsClients,
    settings: NodeClassSettings,
    clock: Arc<dyn Clock>,
    reservations: ReservationAvailability,
}

impl NodeClassController {
    pub fn new(
        client: kube::Client,
        clients: AwsClients,
        settings: NodeClassSettings,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let api: Api<EC2NodeClass> = Api::all(client.clone());
        let controller = Controller::new(api, karpenter_kube::watch::config());
        let cache = NodeClassCache(controller.store());
        Self {
            controller,
            cache,
            client,
            clients,
            settings,
            clock,
            reservations: ReservationAvailability::default(),
        }
    }

    /// Syncs the room left in each resolved capacity reservation into `availability` (shared
    /// with the provider, whose reserved offerings read it).
    pub fn with_reservations(mut self, availability: ReservationAvailability) -> Self {
        self.reservations = availability;
        self
    }

    /// The EC2NodeClasses as this controller's reflector sees them (the provider's source).
    pub fn cache(&self) -> NodeClassCache {
        self.cache.clone()
    }

    /// Runs until `shutdown` turns true. Reconciles write only while `leadership` is true; each
    /// change to leader reconciles every class.
    pub async fn run(self, leadership: watch::Receiver<bool>, mut shutdown: watch::Receiver<bool>) {
        let inner = Arc::new(Inner {
            client: self.client,
            clients: self.clients,
            settings: self.settings,
            clock: self.clock,
            leadership: leadership.clone(),
            reservations: self.reservations,
            failures: Mutex::new(HashMap::new()),
        });
        let became_leader = futures::stream::unfold(leadership, |mut rx| async move {
            rx.wait_for(|leading| !*leading).await.ok()?;
            rx.wait_for(|leading| *leading).await.ok()?;
            Some(((), rx))
        });
        // The controller wants a `Sync` shutdown future; a oneshot fired by a watcher task is.
        let (stop_tx, stop_rx) = futures::channel::oneshot::channel::<()>();
        let stopper = tokio::spawn(async move {
            karpenter_kube::stopped(&mut shutdown).await;
            let _ = stop_tx.send(());
        });
        self.controller
            .reconcile_all_on(became_leader)
            .graceful_shutdown_on(async move {
                let _ = stop_rx.await;
            })
            .run(reconcile, error_policy, inner)
            .for_each(|result| async move {
                if let Err(err) = result {
                    tracing::debug!(error = %err, "ec2nodeclass controller");
                }
            })
            .await;
        stopper.abort();
    }
}

fn error_policy(node_class: Arc<EC2NodeClass>, err: &ReconcileError, inner: Arc<Inner>) -> Action {
    let name = node_class.name_any();
    let failures = {
        let mut map = karpenter_kube::lock(&inner.failures);
        let n = map.entry(name).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let timings = inner.settings.timings;
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(16));
    let delay = timings
        .backoff_base
        .saturating_mul(factor)
        .min(timings.backoff_max);
    tracing::warn!(error = %err, retry_in = ?delay, "ec2nodeclass reconcile failed");
    Action::requeue(delay)
}

async fn reconcile(
    node_class: Arc<EC2NodeClass>,
    inner: Arc<Inner>,
) -> Result<Action, ReconcileError> {
    if !*inner.leadership.borrow() {
        // Not ours to write; `reconcile_all_on` brings every class back when we lead.
        return Ok(Action::await_change());
    }
    let result = if node_class.metadata.deletion_timestamp.is_some() {
        finalize(&node_class, &inner).await
    } else {
        reconcile_live(&node_class, &inner).await
    };
    if result.is_ok() {
        karpenter_kube::lock(&inner.failures).remove(&node_class.name_any());
    }
    result
}

fn kube_err(name: &str, action: &'static str) -> impl FnOnce(kube::Error) -> ReconcileError {
    let name = name.to_string();
    move |source| ReconcileError::Kube {
        name,
        action,
        source,
    }
}

/// Bounds a cloud call by the controller's cloud timeout.
async fn cloud<T>(
    name: &str,
    what: &'static str,
    call: impl std::future::Future<Output = T>,
) -> Result<T, ReconcileError> {
    tokio::time::timeout(CLOUD_CALL_TIMEOUT, call)
        .await
        .map_err(|_| ReconcileError::TimedOut {
            name: name.to_string(),
            what,
            limit: CLOUD_CALL_TIMEOUT,
        })
}

fn has_finalizer(node_class: &EC2NodeClass) -> bool {
    node_class
        .finalizers()
        .iter()
        .any(|f| f == TERMINATION_FINALIZER)
}

/// Replaces the finalizer list, guarded by the resource version (a concurrent change conflicts
/// and the reconcile retries).
async fn write_finalizers(
    api: &Api<EC2NodeClass>,
    node_class: &EC2NodeClass,
    finalizers: Vec<String>,
) -> Result<EC2NodeClass, ReconcileError> {
    let name = node_class.name_any();
    let patch = json!({"metadata": {
        "resourceVersion": node_class.resource_version(),
        "finalizers": finalizers,
    }});
    timeouts::api(api.patch(
        &name,
        &karpenter_kube::identity::patch_params(),
        &Patch::Merge(&patch),
    ))
    .await
    .map_err(kube_err(&name, "write finalizers"))
}

async fn reconcile_live(
    node_class: &EC2NodeClass,
    inner: &Inner,
) -> Result<Action, ReconcileError> {
    let name = node_class.name_any();
    let api: Api<EC2NodeClass> = Api::all(inner.client.clone());
    let mut current = node_class.clone();
    if !has_finalizer(&current) {
        let mut finalizers = current.finalizers().to_vec();
        finalizers.push(TERMINATION_FINALIZER.to_string());
        current = write_finalizers(&api, &current, finalizers).await?;
    }

    let now = inner.clock.now();
    let now_rfc3339 = now.to_string();
    let generation = current.metadata.generation;
    let before = current.status.clone().unwrap_or_default();
    let mut status = before.clone();
    let resolution = cloud(
        &name,
        "resolving subnets, security groups and AMIs",
        inner
            .clients
            .resolve_node_class(&current.spec, &inner.settings.kubernetes_version, now),
    )
    .await?;
    resolution.apply(&mut status, &now_rfc3339, generation);
    let reservation_error = if inner.settings.reserved_capacity {
        reconcile_capacity_reservations(&current, inner, &mut status, now, &now_rfc3339).await?
    } else {
        status.capacity_reservations.clear();
        status
            .conditions
            .retain(|c| c.type_ != CONDITION_CAPACITY_RESERVATIONS_READY);
        None
    };
    let transient = [
        resolution.subnets.as_ref().err(),
        resolution.security_groups.as_ref().err(),
        resolution.amis.as_ref().err(),
        reservation_error.as_ref(),
    ]
    .into_iter()
    .flatten()
    .find(|e| e.retryable())
    .map(|e| e.to_string());

    let profile_error =
        reconcile_instance_profile(&current, inner, &mut status, &now_rfc3339).await?;
    match validate(&current, inner.settings.service_cidr.as_deref()) {
        None => status.set_condition(
            CONDITION_VALIDATION_SUCCEEDED,
            CONDITION_TRUE,
            CONDITION_VALIDATION_SUCCEEDED,
            "",
            &now_rfc3339,
            generation,
        ),
        Some((reason, message)) => status.set_condition(
            CONDITION_VALIDATION_SUCCEEDED,
            CONDITION_FALSE,
            reason,
            &message,
            &now_rfc3339,
            generation,
        ),
    };
    set_ready(
        &mut status,
        &now_rfc3339,
        generation,
        inner.settings.reserved_capacity,
    );

    if status != before {
        write_status(&api, &current, &status).await?;
    }
    stamp_hash(&api, &current).await?;

    if let Some(source) = profile_error {
        return Err(ReconcileError::Aws { name, source });
    }
    if let Some(message) = transient {
        tracing::warn!(node_class = %name, error = %message, "resolution failed; retrying with backoff");
        return Err(ReconcileError::Resolution { name, message });
    }
    Ok(Action::requeue(inner.settings.timings.requeue))
}

/// `status.capacityReservations` and `CapacityReservationsReady` (reference §1.2): the active
/// reservations the terms select (none selected is Ready with no entries), their counts synced
/// into the shared [`ReservationAvailability`]. A failed lookup keeps the last answer (entries
/// and condition, so a throttled API neither drifts reserved nodes nor stops launches); before
/// any answer the condition is `False` (`ResolutionFailed`). The error is returned so a
/// retryable one backs off.
async fn reconcile_capacity_reservations(
    node_class: &EC2NodeClass,
    inner: &Inner,
    status: &mut EC2NodeClassStatus,
    now: jiff::Timestamp,
    now_rfc3339: &str,
) -> Result<Option<Error>, ReconcileError> {
    let name = node_class.name_any();
    let generation = node_class.metadata.generation;
    let terms = &node_class.spec.capacity_reservation_selector_terms;
    let found = if terms.is_empty() {
        Ok(Vec::new())
    } else {
        cloud(
            &name,
            "ec2:DescribeCapacityReservations",
            inner.clients.describe_capacity_reservations(terms),
        )
        .await?
    };
    match found {
        Ok(found) => {
            inner.reservations.sync(&found);
            status.capacity_reservations = reservation_statuses(&found, now);
            status.set_condition(
                CONDITION_CAPACITY_RESERVATIONS_READY,
                CONDITION_TRUE,
                CONDITION_CAPACITY_RESERVATIONS_READY,
                "",
                now_rfc3339,
                generation,
            );
            Ok(None)
        }
        Err(err) => {
            tracing::warn!(node_class = %name, error = %err, "resolving capacity reservations failed");
            if !status.is_condition_true(CONDITION_CAPACITY_RESERVATIONS_READY) {
                status.set_condition(
                    CONDITION_CAPACITY_RESERVATIONS_READY,
                    CONDITION_FALSE,
                    REASON_RESOLUTION_FAILED,
                    &err.to_string(),
                    now_rfc3339,
                    generation,
                );
            }
            Ok(Some(err))
        }
    }
}

/// `InstanceProfileReady` and `status.instanceProfile`. A retryable IAM failure is returned (after
/// the condition says so) so the object backs off.
async fn reconcile_instance_profile(
    node_class: &EC2NodeClass,
    inner: &Inner,
    status: &mut EC2NodeClassStatus,
    now_rfc3339: &str,
) -> Result<Option<Error>, ReconcileError> {
    let name = node_class.name_any();
    let generation = node_class.metadata.generation;
    let settings = &inner.settings;
    let region = &inner.clients.region;
    let outcome: Result<String, Error> = match (
        node_class.spec.instance_profile.as_deref(),
        node_class.spec.role.as_deref(),
    ) {
        (Some(profile), _) => {
            match cloud(
                &name,
                "iam:GetInstanceProfile",
                inner.clients.instance_profile_roles(profile),
            )
            .await?
            {
                Ok(Some(_)) => Ok(profile.to_string()),
                Ok(None) => Err(Error::NotFound {
                    message: format!("instance profile {profile} does not exist"),
                }),
                Err(e) => Err(e),
            }
        }
        (None, Some(role)) => {
            let profile = managed_profile_name(&settings.cluster_name, region, &name);
            let path = managed_profile_path(
                region,
                &settings.cluster_name,
                node_class.metadata.uid.as_deref().unwrap_or("unknown"),
            );
            let tags =
                managed_profile_tags(&node_class.spec.tags, &settings.cluster_name, region, &name);
            cloud(
                &name,
                "creating the instance profile",
                inner.clients.ensure_instance_profile(&ManagedProfile {
                    name: &profile,
                    path: &path,
                    role,
                    tags: &tags,
                }),
            )
            .await?
            .map(|()| profile)
        }
        (None, None) => Err(Error::NotFound {
            message: "neither spec.role nor spec.instanceProfile is set".into(),
        }),
    };
    match outcome {
        Ok(profile) => {
            status.instance_profile = Some(profile);
            status.set_condition(
                CONDITION_INSTANCE_PROFILE_READY,
                CONDITION_TRUE,
                CONDITION_INSTANCE_PROFILE_READY,
                "",
                now_rfc3339,
                generation,
            );
            Ok(None)
        }
        Err(err) => {
            let reason = match err {
                Error::NotFound { .. } => REASON_INSTANCE_PROFILE_NOT_FOUND,
                _ => REASON_INSTANCE_PROFILE_FAILED,
            };
            status.set_condition(
                CONDITION_INSTANCE_PROFILE_READY,
                CONDITION_FALSE,
                reason,
                &err.to_string(),
                now_rfc3339,
                generation,
            );
            Ok(err.retryable().then_some(err))
        }
    }
}

async fn write_status(
    api: &Api<EC2NodeClass>,
    node_class: &EC2NodeClass,
    status: &EC2NodeClassStatus,
) -> Result<(), ReconcileError> {
    let name = node_class.name_any();
    let patch = json!({
        "metadata": {"resourceVersion": node_class.resource_version()},
        "status": status_patch(node_class.status.as_ref(), status),
    });
    timeouts::api(api.patch_status(
        &name,
        &karpenter_kube::identity::patch_params(),
        &Patch::Merge(&patch),
    ))
    .await
    .map_err(kube_err(&name, "write status"))?;
    Ok(())
}

/// `status` as a merge patch over `before`: empty lists are left out of the serialised status, and
/// a merge patch keeps what it does not mention, so a field that became empty (the last capacity
/// reservation gone) is written as `null` to remove it.
fn status_patch(
    before: Option<&EC2NodeClassStatus>,
    status: &EC2NodeClassStatus,
) -> serde_json::Value {
    let mut patch = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    if let (Some(serde_json::Value::Object(old)), serde_json::Value::Object(new)) = (
        before.and_then(|b| serde_json::to_value(b).ok()),
        &mut patch,
    ) {
        for key in old.keys() {
            new.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    patch
}

/// The NodeClass hash annotations (static drift reads them from launched NodeClaims).
async fn stamp_hash(
    api: &Api<EC2NodeClass>,
    node_class: &EC2NodeClass,
) -> Result<(), ReconcileError> {
    let hash = crate::drift::node_class_hash(node_class);
    let annotations = node_class.annotations();
    if annotations.get(wk::EC2NODECLASS_HASH_ANNOTATION) == Some(&hash)
        && annotations
            .get(wk::EC2NODECLASS_HASH_VERSION_ANNOTATION)
            .map(String::as_str)
            == Some(crate::drift::HASH_VERSION)
    {
        return Ok(());
    }
    let name = node_class.name_any();
    let patch = json!({"metadata": {"annotations": {
        wk::EC2NODECLASS_HASH_ANNOTATION: hash,
        wk::EC2NODECLASS_HASH_VERSION_ANNOTATION: crate::drift::HASH_VERSION,
    }}});
    timeouts::api(api.patch(
        &name,
        &karpenter_kube::identity::patch_params(),
        &Patch::Merge(&patch),
    ))
    .await
    .map_err(kube_err(&name, "write hash annotations"))?;
    Ok(())
}

/// The NodeClaims that use `name` (by `spec.nodeClassRef`).
async fn node_claims_using(inner: &Inner, name: &str) -> Result<Vec<String>, ReconcileError> {
    let api: Api<NodeClaim> = Api::all(inner.client.clone());
    karpenter_kube::watch::list_paged(&api, &ListParams::default(), |c| {
        let reference = &c.spec.node_class_ref;
        (reference.name == name && reference.group == wk::AWS_GROUP).then(|| c.name_any())
    })
    .await
    .map_err(kube_err(name, "list nodeclaims"))
}

async fn finalize(node_class: &EC2NodeClass, inner: &Inner) -> Result<Action, ReconcileError> {
    if !has_finalizer(node_class) {
        return Ok(Action::await_change());
    }
    let name = node_class.name_any();
    let users = node_claims_using(inner, &name).await?;
    if !users.is_empty() {
        tracing::info!(node_class = %name, nodeclaims = ?users, "waiting on NodeClaims before deleting the EC2NodeClass");
        return Ok(Action::requeue(inner.settings.timings.finalizer_wait));
    }
    let aws = |source| ReconcileError::Aws {
        name: name.clone(),
        source,
    };
    let deleted = cloud(
        &name,
        "deleting launch templates",
        inner
            .clients
            .delete_launch_templates_for_node_class(&inner.settings.cluster_name, &name),
    )
    .await?
    .map_err(aws)?;
    if !deleted.is_empty() {
        tracing::info!(node_class = %name, launch_templates = ?deleted, "deleted launch templates");
    }
    let managed = node_class.spec.instance_profile.is_none() && node_class.spec.role.is_some();
    if managed
        && !inner.settings.isolated_vpc
        && let Some(profile) = node_class
            .status
            .as_ref()
            .and_then(|s| s.instance_profile.as_deref())
    {
        cloud(
            &name,
            "deleting the instance profile",
            inner.clients.delete_instance_profile(profile),
        )
        .await?
        .map_err(aws)?;
    }
    let api: Api<EC2NodeClass> = Api::all(inner.client.clone());
    let finalizers: Vec<String> = node_class
        .finalizers()
        .iter()
        .filter(|f| *f != TERMINATION_FINALIZER)
        .cloned()
        .collect();
    match write_finalizers(&api, node_class, finalizers).await {
        Ok(_) => Ok(Action::await_change()),
        Err(ReconcileError::Kube { source, .. }) if karpenter_kube::is_not_found(&source) => {
            Ok(Action::await_change())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use karpenter_api::v1::CapacityReservationStatus;

    use super::*;

    #[test]
    fn a_list_that_became_empty_is_removed_by_the_status_patch() {
        let before = EC2NodeClassStatus {
            capacity_reservations: vec![CapacityReservationStatus {
                id: "cr-1".into(),
                ..Default::default()
            }],
            instance_profile: Some("profile".into()),
            ..Default::default()
        };
        let after = EC2NodeClassStatus {
            instance_profile: Some("profile".into()),
            ..Default::default()
        };
        let patch = status_patch(Some(&before), &after);
        assert_eq!(
            patch,
            json!({"capacityReservations": null, "instanceProfile": "profile"})
        );
        assert_eq!(
            status_patch(None, &after),
            json!({"instanceProfile": "profile"})
        );
    }
}
