//! Capacity reservations through the controller, on a real control plane and moto (the launcher fakes
//! `DescribeCapacityReservations` and launches into reservations, see `tests/moto/README.md`): an
//! EC2NodeClass selecting a reservation gets it in `status.capacityReservations` with
//! `CapacityReservationsReady`; pods launch into it as `reserved` first, and once its instances
//! are used up the next NodeClaim falls back to on-demand.

use std::time::Duration;

use karpenter_api::v1::{CapacityReservationSelectorTerm, ConditionsExt, EC2NodeClass, NodeClaim};
use karpenter_api::well_known as wk;
use karpenter_aws::reservations::CONDITION_CAPACITY_RESERVATIONS_READY;
use kube::ResourceExt;
use serde_json::json;

use crate::controller_e2e::{AwsCluster, NODE_CLASS};
use crate::harness::{RESERVATIONS_LOCK, set_reservations};

fn label<'a>(claim: &'a NodeClaim, key: &str) -> Option<&'a str> {
    claim.labels().get(key).map(String::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_launch_into_a_selected_reservation_first_then_on_demand() {
    let Some(cluster) = AwsCluster::new("e2e-reserved").await else {
        return;
    };
    let _reservations = RESERVATIONS_LOCK.lock().await;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let id = format!("cr-{nanos:x}");
    set_reservations(
        &cluster.clients,
        &json!([{
            "CapacityReservationId": id,
            "InstanceType": "m5.large",
            "AvailabilityZone": "us-west-2a",
            "AvailableInstanceCount": 2,
            "InstanceMatchCriteria": "targeted",
            "Tags": [{"Key": "team", "Value": "ml"}]
        }]),
    )
    .await;
    let (controller, provider) = cluster.start_controller(|p| p, None).await;

    let mut class = cluster.node_class();
    class.spec.capacity_reservation_selector_terms = vec![CapacityReservationSelectorTerm {
        id: Some(id.clone()),
        ..Default::default()
    }];
    cluster.put(&class).await;
    let class = cluster
        .eventually("EC2NodeClass Ready", Duration::from_secs(30), async || {
            cluster
                .get::<EC2NodeClass>(NODE_CLASS)
                .await
                .filter(EC2NodeClass::is_ready)
        })
        .await;
    let status = class.status.unwrap();
    assert!(status.is_condition_true(CONDITION_CAPACITY_RESERVATIONS_READY));
    assert_eq!(status.capacity_reservations.len(), 1, "{status:#?}");
    let reservation = &status.capacity_reservations[0];
    assert_eq!(reservation.id, id);
    assert_eq!(reservation.instance_type, "m5.large");
    assert_eq!(reservation.availability_zone, "us-west-2a");
    assert_eq!(reservation.owner_id, "123456789012");
    assert_eq!(reservation.instance_match_criteria, "targeted");
    assert_eq!(reservation.state.as_deref(), Some("active"));
    assert_eq!(reservation.reservation_type.as_deref(), Some("default"));
    assert_eq!(provider.reservation_availability().available(&id), 2);

    // No disruption: moto's instances carry the VPC's default security group, so they are
    // security-group drifted, and a replacement would blur which launch went where.
    let mut pool = cluster.node_pool_of(
        &[wk::CAPACITY_TYPE_RESERVED, wk::CAPACITY_TYPE_ON_DEMAND],
        &["m5.large"],
    );
    pool.spec.disruption = serde_json::from_value(json!({"budgets": [{"nodes": "0"}]})).unwrap();
    cluster.put(&pool).await;
    // 1.5 cpu: one pod per m5.large (1930m allocatable).
    cluster.deploy("reserved", 3, "1500m").await;
    let claims = cluster
        .eventually(
            "three launched NodeClaims and the pods bound",
            Duration::from_secs(60),
            async || {
                cluster.play_kubelet().await;
                let claims = cluster.launched_claims().await;
                let pods = cluster.pods("reserved").await;
                let bound = pods.len() == 3
                    && pods
                        .iter()
                        .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some());
                // The launch writes the provider ID, then the labels.
                let labelled = claims
                    .iter()
                    .all(|c| c.labels().contains_key(wk::CAPACITY_TYPE_LABEL));
                (claims.len() >= 3 && bound && labelled).then_some(claims)
            },
        )
        .await;
    assert_eq!(claims.len(), 3, "{claims:#?}");
    let reserved: Vec<&NodeClaim> = claims
        .iter()
        .filter(|c| label(c, wk::CAPACITY_TYPE_LABEL) == Some(wk::CAPACITY_TYPE_RESERVED))
        .collect();
    assert_eq!(reserved.len(), 2, "the reservation's two instances first");
    for claim in &reserved {
        assert_eq!(
            label(claim, wk::AWS_CAPACITY_RESERVATION_ID_LABEL),
            Some(id.as_str())
        );
        assert_eq!(
            label(claim, wk::AWS_CAPACITY_RESERVATION_TYPE_LABEL),
            Some("default")
        );
        assert_eq!(
            label(claim, wk::AWS_CAPACITY_RESERVATION_INTERRUPTIBLE_LABEL),
            Some("false")
        );
        assert_eq!(label(claim, wk::ZONE_LABEL), Some("us-west-2a"));
    }
    let on_demand: Vec<&NodeClaim> = claims
        .iter()
        .filter(|c| label(c, wk::CAPACITY_TYPE_LABEL) == Some(wk::CAPACITY_TYPE_ON_DEMAND))
        .collect();
    assert_eq!(on_demand.len(), 1, "then on-demand: {claims:#?}");
    assert_eq!(
        label(on_demand[0], wk::AWS_CAPACITY_RESERVATION_ID_LABEL),
        None
    );

    // EC2 agrees: two instances in the reservation (as `reserved`: launched only into
    // reservations), one outside; the reservation is full, and the provider knows it.
    let instances = cluster
        .clients
        .cluster_instances(&cluster.name)
        .await
        .unwrap();
    let in_reservation = instances
        .iter()
        .filter(|i| i.capacity_reservation_id.as_deref() == Some(id.as_str()))
        .inspect(|i| assert_eq!(i.capacity_type, wk::CAPACITY_TYPE_RESERVED))
        .count();
    assert_eq!(in_reservation, 2, "{instances:#?}");
    assert_eq!(instances.len(), 3, "{instances:#?}");
    let described = cluster
        .clients
        .describe_capacity_reservations(&[CapacityReservationSelectorTerm {
            id: Some(id.clone()),
            ..Default::default()
        }])
        .await
        .unwrap();
    assert_eq!(described[0].available, 0);
    assert_eq!(provider.reservation_availability().available(&id), 0);

    // The reserved launch template targets the reservation; the on-demand one opts out of
    // open reservations.
    let templates = cluster
        .clients
        .launch_templates_for_node_class(&cluster.name, NODE_CLASS)
        .await
        .unwrap();
    let mut preferences: Vec<(Option<String>, Option<String>)> = Vec::new();
    for (_, template_id) in &templates {
        let versions = cluster
            .clients
            .ec2
            .describe_launch_template_versions()
            .launch_template_id(template_id)
            .versions("$Latest")
            .send()
            .await
            .unwrap();
        for version in versions.launch_template_versions() {
            let spec = version
                .launch_template_data()
                .and_then(|d| d.capacity_reservation_specification());
            preferences.push((
                spec.and_then(|s| s.capacity_reservation_preference())
                    .map(|p| p.as_str().to_string()),
                spec.and_then(|s| s.capacity_reservation_target())
                    .and_then(|t| t.capacity_reservation_id())
                    .map(str::to_string),
            ));
        }
    }
    // Claims planned in different passes may carry different labels (a claim narrowed to the
    // reservation's zone and ID, or one the fleet placed there), and labels are part of a
    // template, so there may be more than one template per preference: what counts is that
    // every template is one of the two kinds and both kinds exist.
    preferences.sort();
    preferences.dedup();
    assert_eq!(
        preferences,
        vec![
            (Some("capacity-reservations-only".into()), Some(id.clone())),
            (Some("none".into()), None),
        ]
    );

    // The reservation ends (EC2 forgets it): the next reconcile (a spec change triggers one)
    // removes it from the status, so the reserved nodes would be CapacityReservationDrift.
    set_reservations(&cluster.clients, &json!([])).await;
    let mut changed = cluster.get::<EC2NodeClass>(NODE_CLASS).await.unwrap();
    changed
        .spec
        .tags
        .insert("reservation".into(), "ended".into());
    cluster.put(&changed).await;
    let status = cluster
        .eventually(
            "the reservation gone from the status",
            Duration::from_secs(30),
            async || {
                let status = cluster.get::<EC2NodeClass>(NODE_CLASS).await?.status?;
                status.capacity_reservations.is_empty().then_some(status)
            },
        )
        .await;
    assert!(status.is_condition_true(CONDITION_CAPACITY_RESERVATIONS_READY));
    controller.stop().await;
}
