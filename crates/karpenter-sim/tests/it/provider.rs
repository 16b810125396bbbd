use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use karpenter_api::v1::{
    NodeClassReference, NodeSelectorRequirementWithMinValues, ResourceRequirements,
};
use karpenter_api::well_known as wk;
use karpenter_api::{NodeClaim, NodeClaimSpec, NodePool};
use karpenter_core::clock::{Clock, FakeClock};
use karpenter_core::cloud_provider::{CapacityOverlay, CloudError, CloudProvider};
use karpenter_core::instance_type::{InstanceType, Offering, Overhead};
use karpenter_core::resources::ResourceList;
use karpenter_sim::SimCloudProvider;

fn offering(zone: &str, capacity_type: &str, price: f64) -> Offering {
    Offering {
        zone: zone.into(),
        capacity_type: capacity_type.into(),
        price,
        available: true,
        ..Default::default()
    }
}

fn instance_type(name: &str, cpu: &str, offerings: Vec<Offering>) -> InstanceType {
    InstanceType {
        name: name.into(),
        labels: BTreeMap::from([
            (wk::INSTANCE_TYPE_LABEL.to_string(), name.to_string()),
            (wk::ARCH_LABEL.to_string(), "amd64".to_string()),
        ]),
        capacity: ResourceList::parse([("cpu", cpu), ("memory", "8Gi"), ("pods", "110")]).unwrap(),
        overhead: Overhead::default(),
        offerings,
        ..Default::default()
    }
}

/// small: on-demand 0.10 in a/b, spot 0.03 in a and 0.04 in b; big: on-demand 0.20, spot 0.06.
fn provider() -> (SimCloudProvider, Arc<FakeClock>) {
    let clock = Arc::new(FakeClock::default());
    let types = vec![
        instance_type(
            "small",
            "2",
            vec![
                offering("zone-a", "on-demand", 0.10),
                offering("zone-b", "on-demand", 0.10),
                offering("zone-a", "spot", 0.03),
                offering("zone-b", "spot", 0.04),
            ],
        ),
        instance_type(
            "big",
            "8",
            vec![
                offering("zone-a", "on-demand", 0.20),
                offering("zone-b", "spot", 0.06),
            ],
        ),
    ];
    (
        SimCloudProvider::with_instance_types("test-region", types, clock.clone()),
        clock,
    )
}

fn req(key: &str, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
    NodeSelectorRequirementWithMinValues {
        key: key.into(),
        operator: "In".into(),
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    }
}

fn claim(
    name: &str,
    requirements: Vec<NodeSelectorRequirementWithMinValues>,
    cpu: &str,
) -> NodeClaim {
    let mut nc = NodeClaim::new(
        name,
        NodeClaimSpec {
            requirements,
            resources: Some(ResourceRequirements {
                requests: BTreeMap::from([("cpu".to_string(), K8sQuantity(cpu.into()))]),
            }),
            node_class_ref: NodeClassReference {
                group: "karpenter.k8s.aws".into(),
                kind: "EC2NodeClass".into(),
                name: "default".into(),
            },
            taints: vec![Taint {
                key: "team".into(),
                value: Some("a".into()),
                effect: "NoSchedule".into(),
                ..Default::default()
            }],
            startup_taints: vec![Taint {
                key: "init".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }],
            ..Default::default()
        },
    );
    nc.metadata.uid = Some(format!("uid-{name}"));
    nc.metadata.labels = Some(BTreeMap::from([(
        wk::NODEPOOL_LABEL.to_string(),
        "default".to_string(),
    )]));
    nc
}

fn label<'a>(nc: &'a NodeClaim, key: &str) -> &'a str {
    nc.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
        .unwrap_or("")
}

#[tokio::test]
async fn cheapest_spot_when_spot_allowed_else_cheapest_on_demand() {
    let (sim, _) = provider();
    let both = req(wk::CAPACITY_TYPE_LABEL, &["spot", "on-demand"]);
    let nc = sim.create(&claim("a", vec![both], "1")).await.unwrap();
    assert_eq!(label(&nc, wk::INSTANCE_TYPE_LABEL), "small");
    assert_eq!(label(&nc, wk::ZONE_LABEL), "zone-a");
    assert_eq!(label(&nc, wk::CAPACITY_TYPE_LABEL), "spot");

    let on_demand = req(wk::CAPACITY_TYPE_LABEL, &["on-demand"]);
    let nc = sim.create(&claim("b", vec![on_demand], "1")).await.unwrap();
    assert_eq!(label(&nc, wk::CAPACITY_TYPE_LABEL), "on-demand");
    assert_eq!(label(&nc, wk::INSTANCE_TYPE_LABEL), "small");

    // Requests that only fit the big type.
    let nc = sim.create(&claim("c", vec![], "4")).await.unwrap();
    assert_eq!(label(&nc, wk::INSTANCE_TYPE_LABEL), "big");
    assert_eq!(
        label(&nc, wk::ZONE_LABEL),
        "zone-b",
        "big's only spot offering"
    );
}

#[tokio::test]
async fn honours_zone_capacity_type_and_instance_type_requirements() {
    let (sim, _) = provider();
    let reqs = vec![
        req(wk::ZONE_LABEL, &["zone-b"]),
        req(wk::CAPACITY_TYPE_LABEL, &["spot"]),
    ];
    let nc = sim.create(&claim("a", reqs, "1")).await.unwrap();
    assert_eq!(
        (
            label(&nc, wk::ZONE_LABEL),
            label(&nc, wk::CAPACITY_TYPE_LABEL)
        ),
        ("zone-b", "spot")
    );
    let pid = nc.status.as_ref().unwrap().provider_id.clone().unwrap();
    assert!(pid.starts_with("sim://test-region/zone-b/i-"), "{pid}");

    let reqs = vec![
        req(wk::INSTANCE_TYPE_LABEL, &["big"]),
        req(wk::ZONE_LABEL, &["zone-a"]),
    ];
    let nc = sim.create(&claim("b", reqs, "1")).await.unwrap();
    assert_eq!(label(&nc, wk::INSTANCE_TYPE_LABEL), "big");
    assert_eq!(label(&nc, wk::CAPACITY_TYPE_LABEL), "on-demand");

    let impossible = vec![req(wk::ZONE_LABEL, &["zone-z"])];
    let err = sim.create(&claim("c", impossible, "1")).await.unwrap_err();
    assert!(
        matches!(err, CloudError::InsufficientCapacity(_)),
        "{err:?}"
    );
}

#[tokio::test]
async fn insufficient_capacity_fails_over_then_errors_and_marks_offerings_unavailable() {
    let (sim, clock) = provider();
    sim.set_insufficient_capacity("small", "zone-a", "spot");
    let nc = sim.create(&claim("a", vec![], "1")).await.unwrap();
    assert_eq!(
        (
            label(&nc, wk::INSTANCE_TYPE_LABEL),
            label(&nc, wk::ZONE_LABEL)
        ),
        ("small", "zone-b")
    );

    let pool = NodePool::new("default", Default::default());
    let small = |types: &[Arc<InstanceType>]| {
        types
            .iter()
            .find(|t| t.name == "small")
            .unwrap()
            .as_ref()
            .clone()
    };
    let offerings = small(&sim.instance_types(&pool, None).await.unwrap()).offerings;
    let spot_a = offerings
        .iter()
        .find(|o| o.zone == "zone-a" && o.capacity_type == "spot")
        .unwrap();
    assert!(
        !spot_a.available,
        "the exhausted offering is marked unavailable"
    );

    let only = vec![
        req(wk::INSTANCE_TYPE_LABEL, &["small"]),
        req(wk::ZONE_LABEL, &["zone-b"]),
        req(wk::CAPACITY_TYPE_LABEL, &["spot"]),
    ];
    sim.set_insufficient_capacity("small", "zone-b", "spot");
    let err = sim
        .create(&claim("b", only.clone(), "1"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, CloudError::InsufficientCapacity(_)),
        "{err:?}"
    );
    assert_eq!(err.metric_label(), "InsufficientCapacityError");

    // The marks expire after the TTL once capacity is back.
    sim.clear_insufficient_capacity();
    assert!(
        sim.create(&claim("c", only.clone(), "1")).await.is_err(),
        "still marked"
    );
    clock.advance(SignedDuration::from_secs(181));
    assert!(sim.create(&claim("d", only, "1")).await.is_ok());
    assert!(
        small(&sim.instance_types(&pool, None).await.unwrap())
            .offerings
            .iter()
            .all(|o| o.available)
    );
}

#[tokio::test]
async fn injected_faults_fail_the_next_creates() {
    let (sim, _) = provider();
    sim.fail_next_creates(2, CloudError::other("boom"));
    assert_eq!(
        sim.create(&claim("a", vec![], "1")).await.unwrap_err(),
        CloudError::other("boom")
    );
    assert!(sim.create(&claim("a", vec![], "1")).await.is_err());
    assert!(sim.create(&claim("a", vec![], "1")).await.is_ok());
}

#[tokio::test]
async fn create_is_idempotent_and_delete_then_not_found() {
    let (sim, _) = provider();
    let nc = claim("a", vec![], "1");
    let first = sim.create(&nc).await.unwrap();
    let second = sim.create(&nc).await.unwrap();
    assert_eq!(first.status, second.status);
    assert_eq!(sim.instances().len(), 1);

    let pid = first.status.as_ref().unwrap().provider_id.clone().unwrap();
    let got = sim.get(&pid).await.unwrap();
    assert_eq!(label(&got, wk::INSTANCE_TYPE_LABEL), "small");
    assert_eq!(sim.list().await.unwrap().len(), 1);

    sim.delete(&first).await.unwrap();
    assert!(matches!(
        sim.delete(&first).await,
        Err(CloudError::NodeClaimNotFound(_))
    ));
    assert!(matches!(
        sim.get(&pid).await,
        Err(CloudError::NodeClaimNotFound(_))
    ));
    assert!(sim.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn registered_node_carries_labels_resources_and_taints() {
    let (sim, clock) = provider();
    let nc = sim.create(&claim("a", vec![], "1")).await.unwrap();
    let pid = nc.status.as_ref().unwrap().provider_id.clone().unwrap();
    let node = sim.registered_node(&pid).unwrap();
    let labels = node.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[wk::NODEPOOL_LABEL], "default");
    assert_eq!(labels[wk::INSTANCE_TYPE_LABEL], "small");
    assert_eq!(
        labels[wk::HOSTNAME_LABEL],
        node.metadata.name.clone().unwrap()
    );
    let spec = node.spec.as_ref().unwrap();
    assert_eq!(spec.provider_id.as_deref(), Some(pid.as_str()));
    let taints: Vec<(&str, &str)> = spec
        .taints
        .as_ref()
        .unwrap()
        .iter()
        .map(|t| (t.key.as_str(), t.effect.as_str()))
        .collect();
    assert_eq!(
        taints,
        [
            ("team", "NoSchedule"),
            ("init", "NoSchedule"),
            (wk::UNREGISTERED_TAINT_KEY, "NoExecute")
        ]
    );
    let status = node.status.as_ref().unwrap();
    assert_eq!(status.capacity.as_ref().unwrap()["cpu"].0, "2");
    assert_eq!(status.allocatable.as_ref().unwrap()["pods"].0, "110");
    assert_eq!(
        node.metadata.creation_timestamp.as_ref().unwrap().0,
        clock.now()
    );
}

#[tokio::test]
async fn snapshot_restore_round_trip_survives_a_restart() {
    let (sim, clock) = provider();
    let nc = claim("a", vec![], "1");
    let launched = sim.create(&nc).await.unwrap();
    sim.set_insufficient_capacity("big", "zone-b", "spot");
    assert!(
        sim.create(&claim("b", vec![], "4")).await.is_err(),
        "big's only spot offering is out"
    );
    // The retry falls back to on-demand because spot is now marked unavailable.
    let retried = sim.create(&claim("b", vec![], "4")).await.unwrap();
    assert_eq!(label(&retried, wk::CAPACITY_TYPE_LABEL), "on-demand");
    let json = sim.snapshot().unwrap();

    // A new provider (a restarted controller) restores the ledger from the ConfigMap.
    let restarted = SimCloudProvider::with_instance_types(
        "test-region",
        sim.catalog_types().map(|t| t.as_ref().clone()).collect(),
        clock.clone(),
    );
    restarted.restore(&json).unwrap();
    assert_eq!(restarted.instances(), sim.instances());
    assert!(
        json.contains("spot:big:zone-b"),
        "unavailable offerings are persisted"
    );
    assert_eq!(restarted.snapshot().unwrap(), json);
    // Idempotency holds across the restart.
    assert_eq!(restarted.create(&nc).await.unwrap().status, launched.status);
    assert_eq!(restarted.instances().len(), 2);

    let other = SimCloudProvider::with_instance_types("elsewhere", vec![], clock);
    assert!(other.restore(&json).is_err(), "region mismatch");
    assert!(restarted.restore("{not json").is_err());
}

#[tokio::test]
async fn shared_handle_sees_the_same_inventory() {
    let (sim, _) = provider();
    let controller_view = sim.clone();
    controller_view
        .create(&claim("a", vec![], "1"))
        .await
        .unwrap();
    assert_eq!(sim.instances().len(), 1);
}

#[tokio::test]
async fn embedded_catalogue_launches_m5_large_on_demand() {
    let sim = SimCloudProvider::new("us-east-1", Arc::new(FakeClock::default())).unwrap();
    let reqs = vec![
        req(wk::INSTANCE_TYPE_LABEL, &["m5.large"]),
        req(wk::CAPACITY_TYPE_LABEL, &["on-demand"]),
    ];
    let choice = sim.launch_choice(&claim("a", reqs.clone(), "1")).unwrap();
    assert_eq!(
        (choice.instance_type.as_str(), choice.price),
        ("m5.large", 0.096)
    );
    assert_eq!(choice.zone, "us-east-1a", "ties broken by zone name");
    let nc = sim.create(&claim("a", reqs, "1")).await.unwrap();
    assert_eq!(nc.status.unwrap().allocatable["memory"].0, "6903Mi");
    let pool = NodePool::new("default", Default::default());
    assert!(sim.instance_types(&pool, None).await.unwrap().len() > 1000);
}

#[tokio::test]
async fn a_price_overlaid_node_claim_launches_the_family_the_overlay_made_cheapest() {
    use karpenter_api::v1alpha1::{
        NodeOverlay, NodeOverlaySpec, OverlayRequirement, PRICE_OVERLAY_APPLIED_ANNOTATION,
    };
    let sim = SimCloudProvider::new("us-east-1", Arc::new(FakeClock::default())).unwrap();
    let pool = NodePool::new("default", Default::default());
    let offered = vec![(pool.clone(), sim.instance_types(&pool, None).await.unwrap())];
    // A savings plan: m7i costs 40% less on demand. By list price c6a.large is the cheaper.
    let overlay = NodeOverlay::new(
        "savings-plan-m7i",
        NodeOverlaySpec {
            requirements: vec![OverlayRequirement {
                key: "karpenter.k8s.aws/instance-family".into(),
                operator: "In".into(),
                values: vec!["m7i".into()],
            }],
            price_adjustment: Some("-40%".into()),
            ..Default::default()
        },
    );
    let overlaid = karpenter_core::node_overlay::evaluate(&[overlay], &offered).apply_all(offered);
    let on_demand_price = |name: &str| {
        overlaid[0]
            .1
            .iter()
            .find(|t| t.name == name)
            .unwrap()
            .offerings
            .iter()
            .filter(|o| o.capacity_type == "on-demand")
            .map(|o| o.price)
            .fold(f64::MAX, f64::min)
    };
    assert!(on_demand_price("m7i.large") < on_demand_price("c6a.large"));
    // The provisioner writes the options cheapest first at the overlaid price and annotates.
    let reqs = vec![
        req(wk::INSTANCE_TYPE_LABEL, &["m7i.large", "c6a.large"]),
        req(wk::CAPACITY_TYPE_LABEL, &["on-demand"]),
    ];
    let mut overlaid_claim = claim("overlaid", reqs.clone(), "1");
    overlaid_claim.metadata.annotations = Some(BTreeMap::from([(
        PRICE_OVERLAY_APPLIED_ANNOTATION.to_string(),
        "true".to_string(),
    )]));
    assert_eq!(
        sim.launch_choice(&overlaid_claim).unwrap().instance_type,
        "m7i.large"
    );
    let launched = sim.create(&overlaid_claim).await.unwrap();
    assert_eq!(label(&launched, wk::INSTANCE_TYPE_LABEL), "m7i.large");

    // The same options without the annotation: the provider's own (list) prices decide.
    let listed = sim.create(&claim("listed", reqs, "1")).await.unwrap();
    assert_eq!(label(&listed, wk::INSTANCE_TYPE_LABEL), "c6a.large");
}

/// A NodeClaim planned on capacity a NodeOverlay adds (hugepages the catalogue does not list):
/// a plain launch finds no type with it, the launch with the overlay's capacity picks the
/// cheapest option, and the instance's Node registers the hugepages (as a real kubelet reports
/// those the user configured), so the kube-scheduler can bind the pod there.
#[tokio::test]
async fn a_capacity_overlaid_node_claim_launches_and_its_node_registers_the_added_capacity() {
    let (sim, _) = provider();
    let mut nc = claim("hp", vec![], "1");
    nc.spec
        .resources
        .as_mut()
        .unwrap()
        .requests
        .insert("hugepages-2Mi".into(), K8sQuantity("512Mi".into()));
    assert!(
        sim.create(&nc).await.is_err(),
        "no catalogue type has hugepages"
    );
    let hugepages = ResourceList::parse([("hugepages-2Mi", "1Gi")]).unwrap();
    let overlay = CapacityOverlay::new(BTreeMap::from([
        ("small".to_string(), hugepages.clone()),
        ("big".to_string(), hugepages),
    ]));
    let launched = sim
        .create_with_capacity_overlay(&nc, &overlay)
        .await
        .unwrap();
    assert_eq!(label(&launched, wk::INSTANCE_TYPE_LABEL), "small");
    let status = launched.status.as_ref().unwrap();
    assert_eq!(status.capacity["hugepages-2Mi"].0, "1Gi");
    assert_eq!(status.allocatable["hugepages-2Mi"].0, "1Gi");
    let node = sim
        .registered_node(status.provider_id.as_deref().unwrap())
        .unwrap();
    let node_status = node.status.unwrap();
    assert_eq!(node_status.capacity.unwrap()["hugepages-2Mi"].0, "1Gi");
    assert_eq!(node_status.allocatable.unwrap()["hugepages-2Mi"].0, "1Gi");
    // Idempotent: the same NodeClaim gets the same instance, with its capacity.
    let again = sim
        .create_with_capacity_overlay(&nc, &overlay)
        .await
        .unwrap();
    assert_eq!(again.status, launched.status);
}
