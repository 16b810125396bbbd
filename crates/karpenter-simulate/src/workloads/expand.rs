//! Workloads into pods, as their controllers make them. Expansion waits until the whole input is
//! read (`Manifests::admit_workloads`), so a pod may name a RuntimeClass, a StatefulSet may rely
//! on the default StorageClass or on its PersistentVolumeClaims wherever they stand in the input.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_core::pod::{Pod, PodSpec};

use super::Finding;
use super::admission::{self, ClaimTemplates};
use super::scale_steps::{self, SCALE_STEPS_ANNOTATION, ScaleSchedule};
use crate::manifests::{DEFAULT_NAMESPACE, MAX_PODS, Manifests, Problem};
use crate::pending::PendingPod;
use karpenter_input::Location;

/// A workload read but not yet expanded: expansion needs the whole input.
#[derive(Clone, Debug)]
pub struct Workload {
    pub location: Location,
    /// `Kind/name`, as problems name it.
    pub object: String,
    pub source: WorkloadSource,
}

/// What the pods are made from.
#[derive(Clone, Debug)]
pub enum WorkloadSource {
    /// A pod given as such.
    Pod(Box<Pod>),
    /// A DaemonSet: its pods' overhead counts on every node it runs on.
    DaemonSet(Box<DaemonSet>),
    /// `replicas` pods stamped from `template` by a controller.
    Replicas {
        owner: Box<ObjectMeta>,
        replicas: i32,
        template: Box<PodTemplateSpec>,
        /// The count's field, for errors (`spec.replicas`, `spec.parallelism`).
        count_field: &'static str,
        /// A StatefulSet's `spec.volumeClaimTemplates`.
        claim_templates: Vec<PersistentVolumeClaim>,
    },
}

impl Workload {
    /// Where the pod spec is in the object, for errors naming its fields.
    fn spec_path(&self) -> &'static str {
        match self.source {
            WorkloadSource::Pod(_) => "spec",
            WorkloadSource::DaemonSet(_) | WorkloadSource::Replicas { .. } => "spec.template.spec",
        }
    }
}

/// `namespace/name` keys of claims.
type ClaimKeys = HashSet<(String, String)>;

fn claim_key(claim: &PersistentVolumeClaim) -> (String, String) {
    (
        claim
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string()),
        claim.metadata.name.clone().unwrap_or_default(),
    )
}

impl Manifests {
    /// Expands every workload read so far into pods, in input order, after the admission the
    /// API server would run (RuntimeClass) and with the claims a StatefulSet's controller would
    /// create. Problems name the workload's document and field.
    pub(crate) fn admit_workloads(&mut self, problems: &mut Vec<Problem>) {
        let workloads = std::mem::take(&mut self.workloads_to_admit);
        let mut claims: ClaimKeys = self.claims.iter().map(claim_key).collect();
        let default_class = admission::default_storage_class(&self.storage_classes);
        for workload in workloads {
            let spec_path = workload.spec_path();
            let (location, object) = (workload.location, workload.object);
            let admitted = match workload.source {
                WorkloadSource::Pod(mut pod) => {
                    let namespace = karpenter_core::pod::namespace(&pod).to_string();
                    if let Some(spec) = pod.spec.as_mut() {
                        self.apply_limit_ranges(spec, &namespace);
                    }
                    admission::apply_runtime_class(
                        pod.spec.as_mut(),
                        &self.runtime_classes,
                        spec_path,
                    )
                    .and_then(|()| self.reserve_pods(1, "(object)"))
                    .map(|()| self.push_pod(*pod))
                }
                WorkloadSource::DaemonSet(mut daemonset) => {
                    let spec = daemonset
                        .spec
                        .as_mut()
                        .and_then(|s| s.template.spec.as_mut());
                    admission::apply_runtime_class(spec, &self.runtime_classes, spec_path)
                        .map(|()| self.daemonsets.push(*daemonset))
                }
                WorkloadSource::Replicas {
                    owner,
                    replicas,
                    template,
                    count_field,
                    claim_templates,
                } => {
                    if replicas == 0 {
                        self.scaled_to_zero
                            .push(format!("{object} has {count_field}: 0"));
                    }
                    let mut spec = template.spec.clone().map(PodSpec::from);
                    if let Some(spec) = spec.as_mut() {
                        let namespace = owner.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
                        self.apply_limit_ranges(spec, namespace);
                    }
                    admission::apply_runtime_class(spec.as_mut(), &self.runtime_classes, spec_path)
                        .and_then(|()| {
                            self.schedule_scale_steps(
                                &object,
                                &owner,
                                replicas,
                                &template,
                                spec.clone(),
                                !claim_templates.is_empty(),
                            )
                        })
                        .and_then(|()| {
                            let claim_templates = ClaimTemplates {
                                templates: &claim_templates,
                                default_class: default_class.as_deref(),
                            };
                            self.expand(
                                &owner,
                                replicas,
                                &template,
                                spec,
                                &claim_templates,
                                &mut claims,
                                count_field,
                            )
                        })
                }
            };
            if let Err((path, message, hint)) = admitted {
                problems.push(Problem {
                    location,
                    object,
                    path,
                    message,
                    hint: Some(hint),
                });
            }
        }
    }

    /// The LimitRanger admission of a pod created in `namespace` (DaemonSet pods get theirs
    /// when planned, from the cluster state, as in the controller).
    fn apply_limit_ranges(&self, spec: &mut PodSpec, namespace: &str) {
        let in_namespace = self
            .limit_ranges
            .iter()
            .filter(|lr| lr.metadata.namespace.as_deref() == Some(namespace));
        karpenter_core::pod::apply_limit_ranges(spec, in_namespace);
    }

    /// Checks that `count` more pods stay within [`MAX_PODS`].
    fn reserve_pods(&self, count: usize, field: &str) -> Result<(), Finding> {
        let total = self
            .pending_pods
            .len()
            .saturating_add(self.bound_pods.len())
            .saturating_add(count);
        if total > MAX_PODS {
            return Err((
                field.to_string(),
                format!(
                    "Too many pods: {count} more would make {total}, over the limit of {MAX_PODS} pods per simulation"
                ),
                "lower the replica count or simulate a part of the cluster at a time".to_string(),
            ));
        }
        Ok(())
    }

    fn push_pod(&mut self, pod: Pod) {
        if pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some()
        {
            self.bound_pods.push(pod);
        } else {
            self.pending_pods.push(PendingPod::single(pod));
        }
    }

    /// Keeps the workload's timed scale steps (its [`SCALE_STEPS_ANNOTATION`]) for
    /// `--disruption`, with the pod its replicas are stamped from.
    fn schedule_scale_steps(
        &mut self,
        object: &str,
        owner: &ObjectMeta,
        replicas: i32,
        template: &PodTemplateSpec,
        spec: Option<PodSpec>,
        own_claims: bool,
    ) -> Result<(), Finding> {
        let Some(raw) = owner
            .annotations
            .as_ref()
            .and_then(|a| a.get(SCALE_STEPS_ANNOTATION))
        else {
            return Ok(());
        };
        let path = format!("metadata.annotations[{SCALE_STEPS_ANNOTATION}]");
        let steps = scale_steps::parse(raw).map_err(|message| {
            (
                path.clone(),
                message,
                "comma-separated DURATION=REPLICAS after --now, e.g. \"10m=200, 20m=600\"".into(),
            )
        })?;
        let per_replica = own_claims
            || spec.as_ref().is_some_and(|s| {
                s.node_name.is_some()
                    || s.volumes
                        .as_ref()
                        .is_some_and(|vs| vs.iter().any(|v| v.ephemeral.is_some()))
            });
        if per_replica {
            return Err((
                path,
                "scale steps need replicas stamped from one pod (no nodeName, ephemeral volumes or volumeClaimTemplates)".into(),
                "simulate such a workload at each size in its own run".into(),
            ));
        }
        let namespace = owner
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        self.scale_steps.push(ScaleSchedule {
            object: object.to_string(),
            template: Arc::new(Pod {
                metadata: ObjectMeta {
                    name: owner.name.clone(),
                    labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
                    namespace: Some(namespace),
                    ..Default::default()
                },
                spec,
                status: None,
            }),
            initial: u32::try_from(replicas).unwrap_or(0),
            steps,
        });
        Ok(())
    }

    /// Adds `replicas` pods with `spec` (the template's, admitted), named `<workload>-<i>`.
    /// Pending replicas share one `Pod` (named after the workload; a replica adds its ordinal),
    /// so a million replicas stay small, unless each replica has claims of its own.
    #[allow(clippy::too_many_arguments)]
    fn expand(
        &mut self,
        owner: &ObjectMeta,
        replicas: i32,
        template: &PodTemplateSpec,
        spec: Option<PodSpec>,
        claim_templates: &ClaimTemplates<'_>,
        claims: &mut ClaimKeys,
        field: &str,
    ) -> Result<(), Finding> {
        let replicas = u32::try_from(replicas).unwrap_or(0);
        let count = usize::try_from(replicas).unwrap_or(usize::MAX);
        self.reserve_pods(count, field)?;
        let namespace = owner
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        let owner_name = owner.name.clone().unwrap_or_default();
        let template_metadata = ObjectMeta {
            labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
            annotations: None,
            namespace: Some(namespace.clone()),
            ..Default::default()
        };
        let named = |i: u32, spec: Option<PodSpec>| {
            let mut metadata = template_metadata.clone();
            metadata.name = Some(format!("{owner_name}-{i}"));
            Pod {
                metadata,
                spec,
                status: None,
            }
        };
        let bound = spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
        // A generic ephemeral volume's claim is named after the pod, and so is a StatefulSet
        // replica's claim: such replicas differ.
        let ephemeral = spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|vs| vs.iter().any(|v| v.ephemeral.is_some()));
        let own_claims = !claim_templates.templates.is_empty();
        if bound || ephemeral || own_claims {
            for i in 0..replicas {
                let mut spec = spec.clone();
                if own_claims {
                    let generated =
                        claim_templates.for_replica(&namespace, &owner_name, i, spec.as_mut());
                    for claim in generated {
                        if claims.insert(claim_key(&claim)) {
                            self.claims.push(claim);
                        }
                    }
                }
                let pod = named(i, spec);
                if bound {
                    self.bound_pods.push(pod);
                } else {
                    self.pending_pods.push(PendingPod::single(pod));
                }
            }
        } else {
            let mut metadata = template_metadata.clone();
            metadata.name = Some(owner_name.clone());
            let shared = Arc::new(Pod {
                metadata,
                spec,
                status: None,
            });
            self.pending_pods.reserve(count);
            self.pending_pods
                .extend((0..replicas).map(|i| PendingPod::replica(Arc::clone(&shared), i)));
        }
        Ok(())
    }
}
