//! Upstream's capacitybuffer helpers_test.go and suite_test.go (resolution, replica calculation),
//! virtualpods' BuildVirtualPods and provisioning/buffers_test.go (the Provisioning condition),
//! translated.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use karpenter_api::autoscaling::{CapacityBufferSpec, LocalObjectRef, ScalableRef};
use karpenter_api::v1::ConditionsExt;
use serde_json::json;

use super::*;
use crate::resources::Quantity;
use crate::scheduling::{ExistingNodePlacement, UnschedulablePod};

const NOW: &str = "2026-11-28T12:00:00Z";

fn template(requests: serde_json::Value) -> PodTemplateSpec {
    serde_json::from_value(json!({
        "metadata": {"labels": {"app": "buffer"}},
        "spec": {"containers": [{"name": "pause", "image": "pause", "resources": {"requests": requests}}]}
    }))
    .unwrap()
}

fn buffer(spec: CapacityBufferSpec) -> CapacityBuffer {
    let mut buffer = CapacityBuffer::new("buf", spec);
    buffer.metadata.namespace = Some("default".into());
    buffer.metadata.uid = Some("uid-1".into());
    buffer.metadata.generation = Some(3);
    buffer
}

fn template_buffer(replicas: Option<i32>, limits: &[(&str, &str)]) -> CapacityBuffer {
    buffer(CapacityBufferSpec {
        pod_template_ref: Some(LocalObjectRef {
            name: "tmpl".into(),
        }),
        replicas,
        limits: (!limits.is_empty()).then(|| {
            limits
                .iter()
                .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
                .collect()
        }),
        ..CapacityBufferSpec::default()
    })
}

fn scalable_buffer(kind: &str, replicas: Option<i32>, percentage: Option<i32>) -> CapacityBuffer {
    buffer(CapacityBufferSpec {
        scalable_ref: Some(ScalableRef {
            api_group: "apps".into(),
            kind: kind.into(),
            name: "app".into(),
        }),
        replicas,
        percentage,
        ..CapacityBufferSpec::default()
    })
}

fn requests(pairs: &[(&str, &str)]) -> ResourceList {
    let mut list = ResourceList::new();
    for (k, v) in pairs {
        list.set(k, Quantity::parse(v).unwrap());
    }
    list
}

fn limits(pairs: &[(&str, &str)]) -> BTreeMap<String, K8sQuantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
        .collect()
}

// ---- calculateLimitReplicas ---------------------------------------------------------------------

#[test]
fn should_calculate_replicas_based_on_cpu_and_memory_limits() {
    let r = requests(&[("cpu", "1"), ("memory", "512Mi")]);
    assert_eq!(limit_replicas(&limits(&[("cpu", "4")]), &r), Some(4));
    assert_eq!(limit_replicas(&limits(&[("memory", "2Gi")]), &r), Some(4));
}

#[test]
fn should_take_the_minimum_across_multiple_resources() {
    let r = requests(&[("cpu", "1"), ("memory", "1Gi")]);
    assert_eq!(
        limit_replicas(&limits(&[("cpu", "10"), ("memory", "3Gi")]), &r),
        Some(3)
    );
}

#[test]
fn should_return_none_when_no_limit_resource_matches_or_the_pod_requests_nothing() {
    let r = requests(&[("cpu", "1")]);
    assert_eq!(limit_replicas(&limits(&[("memory", "4Gi")]), &r), None);
    assert_eq!(
        limit_replicas(&limits(&[("cpu", "4")]), &ResourceList::new()),
        None
    );
}

#[test]
fn should_floor_divide_handle_millicores_and_return_0_below_one_request() {
    let r = requests(&[("cpu", "1")]);
    assert_eq!(limit_replicas(&limits(&[("cpu", "2500m")]), &r), Some(2));
    let milli = requests(&[("cpu", "250m")]);
    assert_eq!(limit_replicas(&limits(&[("cpu", "1")]), &milli), Some(4));
    assert_eq!(limit_replicas(&limits(&[("cpu", "500m")]), &r), Some(0));
}

#[test]
fn requests_sum_containers_and_take_the_larger_init_container() {
    let spec: PodTemplateSpec = serde_json::from_value(json!({
        "spec": {
            "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "3"}}}],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1"}}}
            ]
        }
    }))
    .unwrap();
    let r = template_requests(&spec).unwrap();
    assert_eq!(r.get("cpu"), Quantity::parse("3").unwrap());
    assert_eq!(r.get("memory"), Quantity::parse("1Gi").unwrap());
    assert!(
        !r.contains("pods"),
        "pods is not a request limits can bound"
    );
}

// ---- calculatePercentageReplicas ----------------------------------------------------------------

#[test]
fn percentage_replicas_ceil_with_a_floor_of_one() {
    assert_eq!(percentage_replicas(10, 20), 2);
    assert_eq!(percentage_replicas(10, 25), 3);
    assert_eq!(percentage_replicas(1, 1), 1);
    assert_eq!(percentage_replicas(0, 50), 0);
    assert_eq!(percentage_replicas(10, 0), 0);
    assert_eq!(percentage_replicas(7, 100), 7);
    assert_eq!(percentage_replicas(10, 250), 25);
    assert_eq!(percentage_replicas(i32::MAX, i32::MAX), i32::MAX);
}

// ---- Replica calculation (suite_test DescribeTable) ---------------------------------------------

#[test]
fn replica_calculation_table() {
    let one_cpu = requests(&[("cpu", "1")]);
    let r = Some(&one_cpu);
    // fixed replicas only
    assert_eq!(desired_replicas(&template_buffer(Some(3), &[]), None, r), 3);
    // replicas capped by binding limit
    assert_eq!(
        desired_replicas(&template_buffer(Some(5), &[("cpu", "2")]), None, r),
        2
    );
    // non-binding limit does not reduce
    assert_eq!(
        desired_replicas(&template_buffer(Some(2), &[("cpu", "10")]), None, r),
        2
    );
    // limits only
    assert_eq!(
        desired_replicas(&template_buffer(None, &[("cpu", "5")]), None, r),
        5
    );
    // percentage only
    assert_eq!(
        desired_replicas(&scalable_buffer("Deployment", None, Some(20)), Some(10), r),
        2
    );
    // replicas > percentage, percentage > replicas
    assert_eq!(
        desired_replicas(
            &scalable_buffer("Deployment", Some(5), Some(20)),
            Some(10),
            r
        ),
        5
    );
    assert_eq!(
        desired_replicas(
            &scalable_buffer("Deployment", Some(1), Some(50)),
            Some(10),
            r
        ),
        5
    );
    // max of replicas and percentage capped by limit
    let mut capped = scalable_buffer("Deployment", Some(3), Some(50));
    capped.spec.limits = Some(limits(&[("cpu", "4")]));
    assert_eq!(desired_replicas(&capped, Some(10), r), 4);
    // percentage rounds up to a minimum of 1
    assert_eq!(
        desired_replicas(&scalable_buffer("Deployment", None, Some(1)), Some(3), r),
        1
    );
    // percentage is ignored without a workload (a podTemplateRef buffer)
    let mut template_pct = template_buffer(Some(2), &[]);
    template_pct.spec.percentage = Some(90);
    assert_eq!(desired_replicas(&template_pct, None, r), 2);
}

// ---- resolution (suite_test) --------------------------------------------------------------------

#[test]
fn should_resolve_a_pod_template_and_set_ready_for_provisioning_true() {
    let buffer = template_buffer(Some(3), &[]);
    let resolution = resolve(
        &buffer,
        Lookup::PodTemplate {
            name: "tmpl".into(),
            generation: Some(7),
            template: template(json!({"cpu": "1"})),
        },
        NOW,
    );
    let status = &resolution.status;
    assert_eq!(status.replicas, Some(3));
    assert_eq!(status.pod_template_ref.as_ref().unwrap().name, "tmpl");
    assert_eq!(status.pod_template_generation, Some(7));
    let ready = status.condition(CONDITION_READY_FOR_PROVISIONING).unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(ready.reason.as_deref(), Some(REASON_RESOLVED));
    assert_eq!(ready.observed_generation, Some(3));
    assert_eq!(resolution.chunks.unwrap().1, 3);
}

#[test]
fn should_set_ready_for_provisioning_false_when_the_reference_is_not_found() {
    let buffer = template_buffer(Some(3), &[]);
    let resolution = resolve(
        &buffer,
        Lookup::NotFound(not_found_message("PodTemplate", "tmpl")),
        NOW,
    );
    let ready = resolution
        .status
        .condition(CONDITION_READY_FOR_PROVISIONING)
        .unwrap()
        .clone();
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some(REASON_POD_TEMPLATE_NOT_FOUND));
    assert_eq!(
        ready.message.as_deref(),
        Some("podtemplates \"tmpl\" not found")
    );
    assert!(resolution.chunks.is_none());

    let scalable = scalable_buffer("Deployment", Some(2), None);
    let resolution = resolve(
        &scalable,
        Lookup::NotFound(not_found_message("Deployment", "app")),
        NOW,
    );
    let ready = resolution
        .status
        .condition(CONDITION_READY_FOR_PROVISIONING)
        .unwrap();
    assert_eq!(ready.reason.as_deref(), Some(REASON_SCALABLE_REF_NOT_FOUND));
}

#[test]
fn should_resolve_a_workload_and_calculate_percentage_based_replicas() {
    let mut buffer = scalable_buffer("StatefulSet", None, Some(20));
    // A status left from a podTemplateRef spec is cleared.
    buffer.status = Some(CapacityBufferStatus {
        pod_template_ref: Some(LocalObjectRef { name: "old".into() }),
        pod_template_generation: Some(1),
        ..CapacityBufferStatus::default()
    });
    let resolution = resolve(
        &buffer,
        Lookup::Workload {
            replicas: 10,
            template: template(json!({"cpu": "500m"})),
        },
        NOW,
    );
    assert_eq!(resolution.status.replicas, Some(2));
    assert!(resolution.status.pod_template_ref.is_none());
    assert!(resolution.status.pod_template_generation.is_none());
}

#[test]
fn should_return_errors_for_unsupported_kinds_groups_and_no_reference() {
    assert_eq!(
        reference(&scalable_buffer("DaemonSet", Some(1), None)).unwrap_err(),
        "unsupported kind \"DaemonSet\""
    );
    let mut other_group = scalable_buffer("Deployment", Some(1), None);
    other_group.spec.scalable_ref.as_mut().unwrap().api_group = "example.com".into();
    assert_eq!(
        reference(&other_group).unwrap_err(),
        "unsupported scalableRef API group \"example.com\""
    );
    let neither = buffer(CapacityBufferSpec::default());
    let message = reference(&neither).unwrap_err();
    let resolution = resolve(&neither, Lookup::Failed(message), NOW);
    let ready = resolution
        .status
        .condition(CONDITION_READY_FOR_PROVISIONING)
        .unwrap();
    assert_eq!(ready.reason.as_deref(), Some(REASON_RESOLUTION_FAILED));
    assert_eq!(
        ready.message.as_deref(),
        Some("Neither podTemplateRef nor scalableRef is set")
    );
    // The core group (empty) means apps, as upstream.
    let mut core = scalable_buffer("ReplicaSet", Some(1), None);
    core.spec.scalable_ref.as_mut().unwrap().api_group = String::new();
    assert_eq!(reference(&core).unwrap(), ("ReplicaSet", "app"));
}

#[test]
fn resolving_twice_changes_nothing() {
    let mut buffer = template_buffer(Some(2), &[]);
    let lookup = Lookup::PodTemplate {
        name: "tmpl".into(),
        generation: Some(1),
        template: template(json!({"cpu": "1"})),
    };
    buffer.status = Some(resolve(&buffer, lookup.clone(), NOW).status);
    let again = resolve(&buffer, lookup, "2026-11-28T13:00:00Z");
    assert_eq!(Some(&again.status), buffer.status.as_ref());
}

// ---- virtual pods -------------------------------------------------------------------------------

#[test]
fn virtual_pods_carry_the_template_and_name_their_buffer() {
    let buffer = template_buffer(Some(2), &[]);
    let mut spec = template(json!({"cpu": "1"}));
    let pod_spec = spec.spec.as_mut().unwrap();
    pod_spec.node_name = Some("somewhere".into());
    pod_spec.volumes = Some(vec![
        serde_json::from_value(
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "c"}}),
        )
        .unwrap(),
        serde_json::from_value(json!({"name": "scratch", "emptyDir": {}})).unwrap(),
    ]);
    let pods = virtual_pods(&buffer, &spec, 2);
    assert_eq!(pods.len(), 2);
    assert_eq!(pods[0].name_any(), "capacity-buffer-buf-1");
    assert_eq!(pods[1].metadata.uid.as_deref(), Some("uid-1-2"));
    assert_eq!(
        pods[0].labels().get("app").map(String::as_str),
        Some("buffer")
    );
    assert!(pods.iter().all(is_virtual));
    assert_eq!(buffer_of(&pods[0]).as_deref(), Some("default/buf"));
    let spec = pods[0].spec.as_ref().unwrap();
    assert_eq!(spec.priority, Some(i32::MIN));
    assert!(spec.node_name.is_none());
    let volumes: Vec<_> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(volumes, ["scratch"]);
    assert_eq!(
        pod::effective_requests(&pods[0]).unwrap().get("cpu"),
        Quantity::parse("1").unwrap()
    );
    assert!(virtual_pods(&buffer, &spec_of(&pods[0]), 0).is_empty());
    assert!(virtual_pods(&buffer, &spec_of(&pods[0]), -1).is_empty());
}

fn spec_of(_pod: &Pod) -> PodTemplateSpec {
    template(json!({"cpu": "1"}))
}

#[test]
fn a_real_pod_is_not_virtual() {
    let mut pod = Pod::default();
    assert!(!is_virtual(&pod));
    pod.metadata.annotations = Some(BTreeMap::from([(
        VIRTUAL_POD_ANNOTATION.to_string(),
        "false".to_string(),
    )]));
    assert!(!is_virtual(&pod));
    assert!(buffer_of(&pod).is_none());
}

// ---- provisioning condition (provisioning/buffers_test.go) --------------------------------------

fn ready_buffer(replicas: i32) -> CapacityBuffer {
    let mut buffer = template_buffer(Some(replicas), &[]);
    buffer.status = Some(
        resolve(
            &buffer,
            Lookup::PodTemplate {
                name: "tmpl".into(),
                generation: Some(1),
                template: template(json!({"cpu": "1"})),
            },
            NOW,
        )
        .status,
    );
    buffer
}

#[test]
fn placements_are_summarized_per_buffer_and_hosts_are_the_nodes_with_virtual_pods() {
    let buffer = ready_buffer(3);
    let mut pods = virtual_pods(&buffer, &template(json!({"cpu": "1"})), 3);
    pods.push(Pod::default()); // a real pod, index 3
    let results = SchedulingResults {
        existing_nodes: vec![
            ExistingNodePlacement {
                node: "node-a".into(),
                pods: vec![0, 3],
            },
            ExistingNodePlacement {
                node: "node-real".into(),
                pods: vec![3],
            },
        ],
        unschedulable: vec![UnschedulablePod {
            pod: 1,
            namespace: "default".into(),
            name: "capacity-buffer-buf-2".into(),
            explanation: String::new(),
        }],
        ..SchedulingResults::default()
    };
    let summary = summarize_placements(&pods, &results);
    assert_eq!(
        summary.get("default/buf"),
        Some(&Placement {
            existing: 1,
            new_capacity: 0,
            failed: 1
        })
    );
    assert_eq!(summary.len(), 1);
    assert_eq!(
        hosting_nodes(&pods, &results)
            .into_iter()
            .collect::<Vec<_>>(),
        ["node-a"]
    );
}

#[test]
fn provisioning_condition_follows_where_the_chunks_landed() {
    let buffer = ready_buffer(2);
    let fits = Placement {
        existing: 2,
        ..Placement::default()
    };
    let (state, reason, message) = provisioning_condition(&buffer, Some(&fits)).unwrap();
    assert_eq!((state, reason), ("True", REASON_FITS_EXISTING_CAPACITY));
    assert_eq!(message, "All 2 virtual pods fit on existing capacity");
    let needs = Placement {
        existing: 1,
        new_capacity: 1,
        failed: 0,
    };
    let (state, reason, message) = provisioning_condition(&buffer, Some(&needs)).unwrap();
    assert_eq!((state, reason), ("False", REASON_REQUIRES_NEW_CAPACITY));
    assert_eq!(message, "1/2 virtual pods required new capacity, 0 failed");
    assert!(provisioning_condition(&buffer, None).is_none());

    let not_ready = template_buffer(Some(2), &[]);
    assert_eq!(
        provisioning_condition(&not_ready, None).unwrap().1,
        REASON_NOT_READY_FOR_PROVISIONING
    );
    let empty = ready_buffer(0);
    assert_eq!(
        provisioning_condition(&empty, Some(&fits)).unwrap().1,
        REASON_BUFFER_EMPTY
    );
    assert!(!ready(&empty) && ready(&buffer));

    let status = with_provisioning_condition(&buffer, Some(&fits), NOW).unwrap();
    assert!(status.is_condition_true(CONDITION_PROVISIONING));
    let mut written = buffer.clone();
    written.status = Some(status);
    assert!(with_provisioning_condition(&written, Some(&fits), NOW).is_none());
}
