//! Upstream's NodeOverlay tests (pkg/controllers/nodeoverlay/suite_test.go), translated: each test
//! is named after the upstream `It` (or `DescribeTable` + `Entry`) it reproduces. Upstream's
//! controller writes the verdicts as status conditions; here [`evaluate`] returns them.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use karpenter_api::NodePool;
use karpenter_api::v1alpha1::{NodeOverlaySpec, OverlayRequirement};

use super::*;
use crate::instance_type::{InstanceType, Offering};
use crate::resources::{Quantity, ResourceList};

fn pool(name: &str) -> NodePool {
    crate::state::fixtures::nodepool(name)
}

fn offering(capacity_type: &str, zone: &str, price: f64) -> Offering {
    Offering {
        zone: zone.into(),
        capacity_type: capacity_type.into(),
        price,
        available: true,
        ..Default::default()
    }
}

fn instance_type(name: &str, arch: &str, offerings: Vec<Offering>) -> Arc<InstanceType> {
    let labels: BTreeMap<String, String> = [
        ("node.kubernetes.io/instance-type", name),
        ("kubernetes.io/arch", arch),
        ("kubernetes.io/os", "linux"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Arc::new(InstanceType {
        name: name.into(),
        labels,
        capacity: ResourceList::parse([("cpu", "4"), ("memory", "16Gi"), ("pods", "110")]).unwrap(),
        offerings,
        ..Default::default()
    })
}

/// Upstream's BeforeEach: one type, one spot offering in test-zone-1 at 1.020.
fn default_type() -> Arc<InstanceType> {
    instance_type(
        "default-instance-type",
        "amd64",
        vec![offering("spot", "test-zone-1", 1.020)],
    )
}

/// The "Offering Requirements" BeforeEach: four offerings.
fn four_offering_type() -> Arc<InstanceType> {
    instance_type(
        "default-instance-type",
        "amd64",
        vec![
            offering("spot", "test-zone-1", 1.020),
            offering("on-demand", "test-zone-2", 2.020),
            offering("spot", "test-zone-3", 3.020),
            offering("reserved", "test-zone-4", 4.020),
        ],
    )
}

fn req(key: &str, operator: &str, values: &[&str]) -> OverlayRequirement {
    OverlayRequirement {
        key: key.into(),
        operator: operator.into(),
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

fn overlay(name: &str, weight: Option<i32>, requirements: Vec<OverlayRequirement>) -> NodeOverlay {
    NodeOverlay::new(
        name,
        NodeOverlaySpec {
            requirements,
            weight,
            ..Default::default()
        },
    )
}

fn priced(mut o: NodeOverlay, price: Option<&str>, adjustment: Option<&str>) -> NodeOverlay {
    o.spec.price = price.map(str::to_string);
    o.spec.price_adjustment = adjustment.map(str::to_string);
    o
}

fn with_capacity(mut o: NodeOverlay, capacity: &[(&str, &str)]) -> NodeOverlay {
    o.spec.capacity = Some(
        capacity
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.to_string()),
                )
            })
            .collect(),
    );
    o
}

fn pools_of(types: Vec<Arc<InstanceType>>) -> Vec<(NodePool, Vec<Arc<InstanceType>>)> {
    vec![(pool("default"), types)]
}

fn verdict(evaluation: &Evaluation, name: &str) -> Verdict {
    evaluation.verdict(name).cloned().unwrap()
}

fn prices(types: &[Arc<InstanceType>], name: &str) -> Vec<f64> {
    types
        .iter()
        .find(|t| t.name == name)
        .unwrap()
        .offerings
        .iter()
        .map(|o| o.price)
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

const IT: &str = "node.kubernetes.io/instance-type";

// ---- Validation ---------------------------------------------------------------------------------

#[test]
fn should_return_the_same_instance_type_when_zero_overlay_are_applied() {
    let pools = pools_of(vec![default_type()]);
    let evaluation = evaluate(&[], &pools);
    let applied = evaluation.apply("default", &pools[0].1);
    assert!(Arc::ptr_eq(&applied[0], &pools[0].1[0]));
}

#[test]
fn should_pass_with_a_single_overlay() {
    let pools = pools_of(vec![default_type()]);
    let o = priced(
        overlay(
            "overlay",
            Some(10),
            vec![req(IT, "In", &["default-instance-type"])],
        ),
        Some("0.5"),
        None,
    );
    let evaluation = evaluate(&[o], &pools);
    assert_eq!(verdict(&evaluation, "overlay"), Verdict::Applied);
    assert_eq!(Verdict::Applied.condition().0, "True");
}

#[test]
fn runtime_validation_should_fail_validation_for_invalid_requirements_values() {
    let key = format!("test.com.test/test-{}", "a".repeat(250));
    let o = overlay("overlay", Some(10), vec![req(&key, "Exists", &[])]);
    let evaluation = evaluate(&[o], &pools_of(vec![default_type()]));
    let v = verdict(&evaluation, "overlay");
    assert!(matches!(v, Verdict::Invalid(_)), "{v:?}");
    assert_eq!(v.condition().1, "RuntimeValidation");
}

#[test]
fn runtime_validation_should_fail_validation_for_invalid_capacity_values() {
    // Upstream adds a resource to its well-known set; ours is fixed, so use one of them.
    let o = with_capacity(
        overlay(
            "overlay",
            Some(10),
            vec![req(IT, "In", &["default-instance-type"])],
        ),
        &[("cpu", "5")],
    );
    let evaluation = evaluate(&[o], &pools_of(vec![default_type()]));
    let v = verdict(&evaluation, "overlay");
    assert_eq!(v.condition().0, "False");
    assert_eq!(v.condition().1, "RuntimeValidation");
    // Not applied: the type keeps its capacity.
    let applied = evaluation.apply("default", &[default_type()]);
    assert_eq!(
        applied[0].capacity.get("cpu"),
        Quantity::parse("4").unwrap()
    );
}

#[test]
fn instance_types_requirements_should_fail_when_requirements_overlays_overlap() {
    let types = vec![
        instance_type(
            "arm-instance-type",
            "arm64",
            vec![offering("spot", "test-zone-1", 1.0)],
        ),
        instance_type(
            "amd-instance-type",
            "amd64",
            vec![offering("spot", "test-zone-1", 1.0)],
        ),
    ];
    let a = priced(
        overlay(
            "overlay-a",
            Some(10),
            vec![req("kubernetes.io/arch", "In", &["arm64"])],
        ),
        Some("1.03"),
        None,
    );
    let b = priced(
        overlay(
            "overlay-b",
            Some(10),
            vec![req("kubernetes.io/os", "In", &["linux"])],
        ),
        Some("23"),
        None,
    );
    let evaluation = evaluate(&[a, b], &pools_of(types));
    assert_eq!(verdict(&evaluation, "overlay-a"), Verdict::Conflict);
    assert_eq!(verdict(&evaluation, "overlay-a").condition().1, "Conflict");
    assert_eq!(verdict(&evaluation, "overlay-b"), Verdict::Applied);
}

#[test]
fn instance_types_requirements_should_succeed_with_requirements_overlays_dont_overlap() {
    let types = vec![
        instance_type(
            "arm-instance-type",
            "arm64",
            vec![offering("spot", "test-zone-1", 1.0)],
        ),
        instance_type(
            "amd-instance-type",
            "amd64",
            vec![offering("spot", "test-zone-1", 1.0)],
        ),
    ];
    let a = priced(
        overlay(
            "overlay-a",
            Some(10),
            vec![req("kubernetes.io/arch", "In", &["arm64"])],
        ),
        Some("1.03"),
        None,
    );
    let b = priced(
        overlay(
            "overlay-b",
            Some(10),
            vec![req("kubernetes.io/arch", "In", &["amd64"])],
        ),
        Some("23"),
        None,
    );
    let evaluation = evaluate(&[a, b], &pools_of(types.clone()));
    assert_eq!(verdict(&evaluation, "overlay-a"), Verdict::Applied);
    assert_eq!(verdict(&evaluation, "overlay-b"), Verdict::Applied);
    let applied = evaluation.apply("default", &types);
    assert_eq!(prices(&applied, "arm-instance-type"), vec![1.03]);
    assert_eq!(prices(&applied, "amd-instance-type"), vec![23.0]);
}

#[test]
fn offering_requirements_should_fail_with_requirements_overlays_overlap_on_zone() {
    let a = priced(
        overlay(
            "overlay-a",
            Some(10),
            vec![req(
                "topology.kubernetes.io/zone",
                "In",
                &["test-zone-1", "test-zone-4"],
            )],
        ),
        Some("1.03"),
        None,
    );
    let b = priced(
        overlay(
            "overlay-b",
            Some(10),
            vec![req("karpenter.sh/capacity-type", "Exists", &[])],
        ),
        Some("23"),
        None,
    );
    let evaluation = evaluate(&[a, b], &pools_of(vec![four_offering_type()]));
    assert_eq!(verdict(&evaluation, "overlay-a"), Verdict::Conflict);
    assert_eq!(verdict(&evaluation, "overlay-b"), Verdict::Applied);
}

#[test]
fn offering_requirements_should_fail_with_requirements_overlays_overlap_on_capacity_type() {
    let a = priced(
        overlay(
            "overlay-a",
            Some(10),
            vec![req("karpenter.sh/capacity-type", "In", &["spot"])],
        ),
        Some("1.03"),
        None,
    );
    let b = priced(
        overlay(
            "overlay-b",
            Some(10),
            vec![req("topology.kubernetes.io/zone", "In", &["test-zone-3"])],
        ),
        Some("23"),
        None,
    );
    let evaluation = evaluate(&[a, b], &pools_of(vec![four_offering_type()]));
    assert_eq!(verdict(&evaluation, "overlay-a"), Verdict::Conflict);
    assert_eq!(verdict(&evaluation, "overlay-b"), Verdict::Applied);
}

#[test]
fn offering_requirements_should_succeed_with_requirements_overlays_dont_overlap() {
    let a = priced(
        overlay(
            "overlay-a",
            Some(10),
            vec![req("karpenter.sh/capacity-type", "In", &["spot"])],
        ),
        Some("1.03"),
        None,
    );
    let b = priced(
        overlay(
            "overlay-b",
            Some(10),
            vec![req(
                "karpenter.sh/capacity-type",
                "In",
                &["on-demand", "reserved"],
            )],
        ),
        Some("23"),
        None,
    );
    let types = vec![four_offering_type()];
    let evaluation = evaluate(&[a, b], &pools_of(types.clone()));
    assert_eq!(verdict(&evaluation, "overlay-a"), Verdict::Applied);
    assert_eq!(verdict(&evaluation, "overlay-b"), Verdict::Applied);
    let applied = evaluation.apply("default", &types);
    assert_eq!(
        prices(&applied, "default-instance-type"),
        vec![1.03, 23.0, 1.03, 23.0]
    );
}

/// The four pricing `DescribeTable`s, each with its `Price` and `PriceAdjustment` entries.
fn pricing_table(
    a_values: &[&str],
    b_operator: &str,
    b_values: &[&str],
    b_weight: i32,
    entries: [(&str, &str); 2],
    expect_a: Verdict,
) {
    let types = vec![
        default_type(),
        instance_type(
            "small-instance-type",
            "amd64",
            vec![offering("spot", "test-zone-1", 0.5)],
        ),
        instance_type(
            "gpu-vendor-instance-type",
            "amd64",
            vec![offering("spot", "test-zone-1", 3.0)],
        ),
    ];
    for (entry, (change_a, change_b)) in ["Price", "PriceAdjustment"].into_iter().zip(entries) {
        let set = |o: NodeOverlay, change: &str| {
            if entry == "Price" {
                priced(o, Some(change), None)
            } else {
                priced(o, None, Some(change))
            }
        };
        let a = set(
            overlay("overlay-a", Some(10), vec![req(IT, "In", a_values)]),
            change_a,
        );
        let b = set(
            overlay(
                "overlay-b",
                Some(b_weight),
                vec![req(IT, b_operator, b_values)],
            ),
            change_b,
        );
        let evaluation = evaluate(&[a, b], &pools_of(types.clone()));
        assert_eq!(verdict(&evaluation, "overlay-a"), expect_a, "{entry}");
        assert_eq!(
            verdict(&evaluation, "overlay-b"),
            Verdict::Applied,
            "{entry}"
        );
    }
}

#[test]
fn pricing_updates_should_fail_with_conflicting_pricing_updates_overlays_with_overlapping_requirements()
 {
    pricing_table(
        &["default-instance-type", "small-instance-type"],
        "In",
        &["default-instance-type", "gpu-vendor-instance-type"],
        10,
        [("1.03", "23"), ("+54", "-2")],
        Verdict::Conflict,
    );
}

#[test]
fn pricing_updates_should_fail_with_pricing_updates_are_the_same_overlays_with_overlapping_requirements()
 {
    pricing_table(
        &["default-instance-type", "small-instance-type"],
        "In",
        &["default-instance-type", "gpu-vendor-instance-type"],
        10,
        [("100", "100"), ("+100", "+100")],
        Verdict::Conflict,
    );
}

#[test]
fn pricing_updates_should_pass_with_conflicting_pricing_updates_overlays_with_mutually_exclusive_requirements()
 {
    pricing_table(
        &["default-instance-type"],
        "NotIn",
        &["default-instance-type"],
        10,
        [("54", "23"), ("+54", "-2")],
        Verdict::Applied,
    );
}

#[test]
fn pricing_updates_should_pass_with_conflicting_pricing_update_overlays_with_mutually_exclusive_weights()
 {
    pricing_table(
        &["default-instance-type"],
        "In",
        &["default-instance-type", "gpu-vendor-instance-type"],
        20,
        [("34", "2"), ("-4", "-2")],
        Verdict::Applied,
    );
}

// ---- Capacity Adjustment --------------------------------------------------------------------------

fn capacity_pair(
    a_values: &[&str],
    b_operator: &str,
    b_values: &[&str],
    b_weight: i32,
    a_capacity: &[(&str, &str)],
    b_capacity: &[(&str, &str)],
) -> Evaluation {
    let types = vec![
        default_type(),
        instance_type(
            "gpu-vendor-instance-type",
            "amd64",
            vec![offering("spot", "test-zone-1", 3.0)],
        ),
    ];
    let a = with_capacity(
        overlay("overlay-a", Some(10), vec![req(IT, "In", a_values)]),
        a_capacity,
    );
    let b = with_capacity(
        overlay(
            "overlay-b",
            Some(b_weight),
            vec![req(IT, b_operator, b_values)],
        ),
        b_capacity,
    );
    evaluate(&[a, b], &pools_of(types))
}

#[test]
fn capacity_adjustment_should_fail_with_conflicting_capacity_overlays_with_overlapping_requirements()
 {
    let e = capacity_pair(
        &["default-instance-type"],
        "In",
        &["default-instance-type", "gpu-vendor-instance-type"],
        10,
        &[("hugepages-1Gi", "100Mi")],
        &[("hugepages-1Gi", "50Mi")],
    );
    assert_eq!(verdict(&e, "overlay-a"), Verdict::Conflict);
    assert_eq!(verdict(&e, "overlay-b"), Verdict::Applied);
}

#[test]
fn capacity_adjustment_should_fail_with_conflicting_capacity_overlays_with_multiple_overlays() {
    let types = vec![default_type()];
    let overlays = vec![
        with_capacity(
            overlay(
                "overlay-a",
                Some(10),
                vec![req(IT, "In", &["default-instance-type"])],
            ),
            &[("hugepages-1Gi", "100Mi")],
        ),
        with_capacity(
            overlay(
                "overlay-b",
                Some(10),
                vec![req(IT, "In", &["default-instance-type"])],
            ),
            &[("hugepages-2Mi", "100Mi")],
        ),
        with_capacity(
            overlay(
                "overlay-c",
                Some(10),
                vec![req(IT, "In", &["default-instance-type"])],
            ),
            &[("hugepages-1Gi", "10Mi"), ("hugepages-2Mi", "10Mi")],
        ),
    ];
    let e = evaluate(&overlays, &pools_of(types));
    // overlay-c goes first (same weight, later name); both others touch one of its resources.
    assert_eq!(verdict(&e, "overlay-c"), Verdict::Applied);
    assert_eq!(verdict(&e, "overlay-b"), Verdict::Conflict);
    assert_eq!(verdict(&e, "overlay-a"), Verdict::Conflict);
}

#[test]
fn capacity_adjustment_should_pass_with_capacity_adjustment_are_the_same_overlays_with_overlapping_requirements()
 {
    // Upstream's It says "pass" but asserts overlay-a Conflict: same weight, same resource.
    let e = capacity_pair(
        &["default-instance-type"],
        "In",
        &["default-instance-type", "gpu-vendor-instance-type"],
        10,
        &[("hugepages-1Gi", "100Mi")],
        &[("hugepages-1Gi", "100Mi")],
    );
    assert_eq!(verdict(&e, "overlay-a"), Verdict::Conflict);
    assert_eq!(verdict(&e, "overlay-b"), Verdict::Applied);
}

#[test]
fn capacity_adjustment_should_pass_with_conflicting_capacity_overlays_with_mutually_exclusive_requirements()
 {
    let e = capacity_pair(
        &["default-instance-type"],
        "NotIn",
        &["default-instance-type"],
        10,
        &[("hugepages-1Gi", "100Mi")],
        &[("hugepages-1Gi", "50Mi")],
    );
    assert_eq!(verdict(&e, "overlay-a"), Verdict::Applied);
    assert_eq!(verdict(&e, "overlay-b"), Verdict::Applied);
}

#[test]
fn capacity_adjustment_should_pass_with_conflicting_capacity_overlays_with_mutually_exclusive_weights()
 {
    let e = capacity_pair(
        &["default-instance-type"],
        "In",
        &["default-instance-type", "gpu-vendor-instance-type"],
        20,
        &[("hugepages-1Gi", "100Mi")],
        &[("hugepages-1Gi", "50Mi")],
    );
    assert_eq!(verdict(&e, "overlay-a"), Verdict::Applied);
    assert_eq!(verdict(&e, "overlay-b"), Verdict::Applied);
}

#[test]
fn capacity_adjustment_should_pass_with_non_conflicting_capacity_overlays_with_overlapping_requirements()
 {
    let e = capacity_pair(
        &["default-instance-type"],
        "In",
        &["default-instance-type", "gpu-vendor-instance-type"],
        10,
        &[("hugepages-1Gi", "100Mi")],
        &[("hugepages-2Mi", "50Mi")],
    );
    assert_eq!(verdict(&e, "overlay-a"), Verdict::Applied);
    assert_eq!(verdict(&e, "overlay-b"), Verdict::Applied);
}

// ---- Instance Type Controller ---------------------------------------------------------------------

#[test]
fn price_updates_should_update_prices_based_on_the_overlay_entry_price_and_price_adjustment() {
    for (price, adjustment, expected) in [
        (Some("13234.223"), None, 13234.223),
        (None, Some("+1000"), 1001.020),
    ] {
        let o = priced(
            overlay(
                "overlay",
                Some(10),
                vec![req(IT, "In", &["default-instance-type"])],
            ),
            price,
            adjustment,
        );
        let pools = pools_of(vec![default_type()]);
        let applied = evaluate(&[o], &pools).apply("default", &pools[0].1);
        assert!(close(
            prices(&applied, "default-instance-type")[0],
            expected
        ));
    }
}

#[test]
fn price_updates_should_not_update_prices_for_instance_types_that_do_not_match() {
    for (price, adjustment) in [(Some("13234.223"), None), (None, Some("+1000"))] {
        let o = priced(
            overlay(
                "overlay",
                Some(10),
                vec![req(IT, "In", &["other-instance-type"])],
            ),
            price,
            adjustment,
        );
        let pools = pools_of(vec![default_type()]);
        let applied = evaluate(&[o], &pools).apply("default", &pools[0].1);
        assert!(close(prices(&applied, "default-instance-type")[0], 1.02));
    }
}

#[test]
fn capacity_requirements_should_only_apply_override_for_nodepool_that_defined_in_the_overlay_requirements()
 {
    let pools = vec![
        (pool("default"), vec![default_type()]),
        (pool("other"), vec![default_type()]),
    ];
    let o = with_capacity(
        overlay(
            "overlay",
            Some(10),
            vec![req("karpenter.sh/nodepool", "In", &["default"])],
        ),
        &[("hugepages-2Mi", "1Gi")],
    );
    let e = evaluate(&[o], &pools);
    let default = e.apply("default", &pools[0].1);
    let other = e.apply("other", &pools[1].1);
    assert_eq!(
        default[0].capacity.get("hugepages-2Mi"),
        Quantity::parse("1Gi").unwrap()
    );
    assert!(!other[0].capacity.contains("hugepages-2Mi"));
}

#[test]
fn capacity_requirements_should_pass_with_conflicting_capcaity_update_overlays_for_all_nodepools() {
    // Two overlays of the same weight, each selecting a different pool: no conflict.
    let pools = vec![
        (pool("default"), vec![default_type()]),
        (pool("other"), vec![default_type()]),
    ];
    let a = with_capacity(
        overlay(
            "overlay-a",
            Some(10),
            vec![req("karpenter.sh/nodepool", "In", &["default"])],
        ),
        &[("hugepages-2Mi", "1Gi")],
    );
    let b = with_capacity(
        overlay(
            "overlay-b",
            Some(10),
            vec![req("karpenter.sh/nodepool", "In", &["other"])],
        ),
        &[("hugepages-2Mi", "2Gi")],
    );
    let e = evaluate(&[a, b], &pools);
    assert_eq!(verdict(&e, "overlay-a"), Verdict::Applied);
    assert_eq!(verdict(&e, "overlay-b"), Verdict::Applied);
    assert_eq!(
        e.apply("other", &pools[1].1)[0]
            .capacity
            .get("hugepages-2Mi"),
        Quantity::parse("2Gi").unwrap()
    );
}

#[test]
fn capacity_requirements_should_only_apply_price_adjustments_for_nodeclaim_spec_labels_that_defined_in_the_overlay_requirements()
 {
    // The fixture pool's template labels carry team=a.
    let pools = pools_of(vec![default_type()]);
    let matching = priced(
        overlay("match", Some(10), vec![req("team", "In", &["a"])]),
        Some("9"),
        None,
    );
    let e = evaluate(&[matching], &pools);
    assert!(close(
        prices(&e.apply("default", &pools[0].1), "default-instance-type")[0],
        9.0
    ));
    let other = priced(
        overlay("miss", Some(10), vec![req("team", "In", &["b"])]),
        Some("9"),
        None,
    );
    let e = evaluate(&[other], &pools);
    assert!(close(
        prices(&e.apply("default", &pools[0].1), "default-instance-type")[0],
        1.02
    ));
}

#[test]
fn should_not_apply_capacity_adjustments_for_invalid_overlay() {
    let o = with_capacity(
        overlay(
            "overlay",
            Some(10),
            vec![req(IT, "In", &["default-instance-type"])],
        ),
        &[("memory", "1Gi")],
    );
    let pools = pools_of(vec![default_type()]);
    let applied = evaluate(&[o], &pools).apply("default", &pools[0].1);
    assert_eq!(applied[0].capacity, pools[0].1[0].capacity);
}

#[test]
fn should_not_apply_capacity_adjustments_for_instances_types_that_do_not_overlap() {
    let o = with_capacity(
        overlay(
            "overlay",
            Some(10),
            vec![req("kubernetes.io/arch", "In", &["arm64"])],
        ),
        &[("hugepages-2Mi", "1Gi")],
    );
    let pools = pools_of(vec![default_type()]);
    let applied = evaluate(&[o], &pools).apply("default", &pools[0].1);
    assert!(!applied[0].capacity.contains("hugepages-2Mi"));
}

#[test]
fn should_apply_capacity_adjustments_for_instances_types() {
    let o = with_capacity(
        overlay(
            "overlay",
            Some(10),
            vec![req(IT, "In", &["default-instance-type"])],
        ),
        &[("hugepages-2Mi", "1Gi")],
    );
    let pools = pools_of(vec![default_type()]);
    let applied = evaluate(&[o], &pools).apply("default", &pools[0].1);
    assert_eq!(
        applied[0].capacity.get("hugepages-2Mi"),
        Quantity::parse("1Gi").unwrap()
    );
    // Capacity only adds: cpu is untouched; hugepages come out of allocatable memory.
    assert_eq!(
        applied[0].capacity.get("cpu"),
        Quantity::parse("4").unwrap()
    );
    assert_eq!(
        applied[0].allocatable().get("memory"),
        Quantity::parse("15Gi").unwrap()
    );
}

#[test]
fn should_update_capacity_for_instance_types_from_multiple_overlays() {
    let overlays = vec![
        with_capacity(
            overlay(
                "overlay-a",
                Some(10),
                vec![req(IT, "In", &["default-instance-type"])],
            ),
            &[("hugepages-1Gi", "1Gi")],
        ),
        with_capacity(
            overlay("overlay-b", Some(20), vec![req(IT, "Exists", &[])]),
            &[("hugepages-2Mi", "2Gi")],
        ),
    ];
    let pools = pools_of(vec![default_type()]);
    let applied = evaluate(&overlays, &pools).apply("default", &pools[0].1);
    assert_eq!(
        applied[0].capacity.get("hugepages-1Gi"),
        Quantity::parse("1Gi").unwrap()
    );
    assert_eq!(
        applied[0].capacity.get("hugepages-2Mi"),
        Quantity::parse("2Gi").unwrap()
    );
}

#[test]
fn should_update_price_offerings_instance_types_from_multiple_overlays_with_different_weights() {
    let overlays = vec![
        priced(
            overlay(
                "overlay-a",
                Some(10),
                vec![req(
                    "karpenter.sh/capacity-type",
                    "In",
                    &["spot", "on-demand"],
                )],
            ),
            Some("1"),
            None,
        ),
        priced(
            overlay(
                "overlay-b",
                Some(20),
                vec![req("karpenter.sh/capacity-type", "In", &["on-demand"])],
            ),
            Some("2"),
            None,
        ),
    ];
    let pools = pools_of(vec![four_offering_type()]);
    let e = evaluate(&overlays, &pools);
    assert_eq!(verdict(&e, "overlay-a"), Verdict::Applied);
    assert_eq!(
        prices(&e.apply("default", &pools[0].1), "default-instance-type"),
        vec![1.0, 2.0, 1.0, 4.02]
    );
}

#[test]
fn should_apply_higher_weight_overlay_when_multiple_overlays_match_the_same_instance_type() {
    let overlays = vec![
        priced(
            overlay("cheap", Some(1), vec![req(IT, "Exists", &[])]),
            Some("0.1"),
            None,
        ),
        priced(
            overlay("dear", Some(100), vec![req(IT, "Exists", &[])]),
            Some("9"),
            None,
        ),
    ];
    let pools = pools_of(vec![default_type()]);
    let e = evaluate(&overlays, &pools);
    assert!(close(
        prices(&e.apply("default", &pools[0].1), "default-instance-type")[0],
        9.0
    ));
    assert_eq!(verdict(&e, "cheap"), Verdict::Applied);
}

#[test]
fn should_that_there_is_not_a_partial_application_for_instance_types() {
    // overlay-a conflicts with overlay-b on default-instance-type only; it must not change
    // small-instance-type either.
    let types = vec![
        default_type(),
        instance_type(
            "small-instance-type",
            "amd64",
            vec![offering("spot", "test-zone-1", 0.5)],
        ),
    ];
    let a = priced(
        overlay(
            "overlay-a",
            Some(10),
            vec![req(
                IT,
                "In",
                &["default-instance-type", "small-instance-type"],
            )],
        ),
        Some("7"),
        None,
    );
    let b = priced(
        overlay(
            "overlay-b",
            Some(10),
            vec![req(IT, "In", &["default-instance-type"])],
        ),
        Some("3"),
        None,
    );
    let pools = pools_of(types);
    let e = evaluate(&[a, b], &pools);
    assert_eq!(verdict(&e, "overlay-a"), Verdict::Conflict);
    let applied = e.apply("default", &pools[0].1);
    assert!(close(prices(&applied, "small-instance-type")[0], 0.5));
    assert!(close(prices(&applied, "default-instance-type")[0], 3.0));
}

#[test]
fn should_that_there_is_not_a_partial_application_for_nodepools() {
    let pools = vec![
        (pool("default"), vec![default_type()]),
        (pool("other"), vec![default_type()]),
    ];
    let a = priced(
        overlay("overlay-a", Some(10), vec![req(IT, "Exists", &[])]),
        Some("7"),
        None,
    );
    let b = priced(
        overlay(
            "overlay-b",
            Some(10),
            vec![req("karpenter.sh/nodepool", "In", &["other"])],
        ),
        Some("3"),
        None,
    );
    let e = evaluate(&[a, b], &pools);
    assert_eq!(verdict(&e, "overlay-a"), Verdict::Conflict);
    assert!(close(
        prices(&e.apply("default", &pools[0].1), "default-instance-type")[0],
        1.02
    ));
    assert!(close(
        prices(&e.apply("other", &pools[1].1), "default-instance-type")[0],
        3.0
    ));
}

#[test]
fn should_apply_pricing_and_capacity_adjustment_from_two_overlays_on_the_same_instance_type() {
    let overlays = vec![
        priced(
            overlay("price", Some(10), vec![req(IT, "Exists", &[])]),
            None,
            Some("-50%"),
        ),
        with_capacity(
            overlay("capacity", Some(10), vec![req(IT, "Exists", &[])]),
            &[("example.com/device", "2")],
        ),
    ];
    let pools = pools_of(vec![default_type()]);
    let e = evaluate(&overlays, &pools);
    assert_eq!(verdict(&e, "price"), Verdict::Applied);
    assert_eq!(verdict(&e, "capacity"), Verdict::Applied);
    let applied = e.apply("default", &pools[0].1);
    assert!(close(applied[0].offerings[0].price, 0.51));
    assert_eq!(
        applied[0].capacity.get("example.com/device"),
        Quantity::parse("2").unwrap()
    );
}

#[test]
fn should_have_an_empty_instance_types_set_when_cloudprovider_does_not_return_instance_types() {
    let pools = pools_of(vec![]);
    let o = priced(
        overlay("overlay", Some(10), vec![req(IT, "Exists", &[])]),
        Some("1"),
        None,
    );
    let e = evaluate(&[o], &pools);
    assert!(e.apply("default", &[]).is_empty());
    assert!(!e.changes("default"));
}

// ---- AdjustedPrice (pkg/cloudprovider suite: "should adjust price based overlay values") --------

#[test]
fn should_adjust_price_based_overlay_values() {
    for (change, expected) in [
        ("+10%", 1.1),
        ("-10%", 0.9),
        ("-100%", 0.0),
        ("+0.5", 1.5),
        ("-2", 0.0),
        ("3.25", 3.25),
        ("0", 0.0),
    ] {
        let got = PriceChange::parse(change).unwrap().apply(1.0);
        assert!(close(got, expected), "{change}: {got}");
    }
    assert!(PriceChange::parse("cheap").is_none());
    assert!(PriceChange::parse("+NaN").is_none());
}

#[test]
fn ordering_is_by_weight_then_later_name_first() {
    let a = overlay("a", Some(5), vec![]);
    let b = overlay("b", Some(5), vec![]);
    let c = overlay("c", None, vec![]);
    let d = overlay("d", Some(50), vec![]);
    let mut ordered = vec![&a, &b, &c, &d];
    order_by_weight(&mut ordered);
    let names: Vec<String> = ordered.iter().map(|o| o.name_any()).collect();
    assert_eq!(names, ["d", "b", "a", "c"]);
}

#[test]
fn conflicting_overlay_gets_validation_succeeded_false_with_upstreams_reason_and_message() {
    let o = overlay("overlay-a", Some(10), vec![]);
    let status = desired_status(&o, &Verdict::Conflict, "2026-01-01T00:00:00Z").unwrap();
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "ValidationSucceeded")
        .unwrap();
    assert_eq!(condition.status, "False");
    assert_eq!(condition.reason.as_deref(), Some("Conflict"));
    assert_eq!(
        condition.message.as_deref(),
        Some("conflict with another overlay")
    );
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "False");
    // Written once: the same verdict later changes nothing.
    let mut written = o.clone();
    written.status = Some(status);
    assert!(desired_status(&written, &Verdict::Conflict, "2026-01-02T00:00:00Z").is_none());
    let fixed = desired_status(&written, &Verdict::Applied, "2026-01-02T00:00:00Z").unwrap();
    assert!(fixed.conditions.iter().all(|c| c.status == "True"));
}

// ---- What the launch reads (upstream's IsPricingOverlayApplied / IsCapacityOverlayApplied) ------

#[test]
fn applied_types_carry_which_overlay_changed_them() {
    let priced_type = instance_type(
        "priced-type",
        "amd64",
        vec![offering("on-demand", "test-zone-1", 1.0)],
    );
    let capacity_type = instance_type(
        "capacity-type",
        "amd64",
        vec![offering("on-demand", "test-zone-1", 1.0)],
    );
    let untouched = instance_type(
        "untouched-type",
        "amd64",
        vec![offering("on-demand", "test-zone-1", 1.0)],
    );
    let pools = pools_of(vec![priced_type, capacity_type, untouched]);
    let overlays = [
        priced(
            overlay("price", None, vec![req(IT, "In", &["priced-type"])]),
            None,
            Some("-10%"),
        ),
        with_capacity(
            overlay("capacity", None, vec![req(IT, "In", &["capacity-type"])]),
            &[("example.com/fpga", "2")],
        ),
    ];
    let evaluation = evaluate(&overlays, &pools);
    let applied = evaluation.apply("default", &pools[0].1);
    let marks: BTreeMap<&str, crate::instance_type::OverlayApplied> = applied
        .iter()
        .map(|t| (t.name.as_str(), t.overlay_applied))
        .collect();
    assert!(marks["priced-type"].price && !marks["priced-type"].capacity);
    assert!(marks["capacity-type"].capacity && !marks["capacity-type"].price);
    assert!(marks["untouched-type"].is_none());
    // The provider's own copies are never marked.
    assert!(pools[0].1.iter().all(|t| t.overlay_applied.is_none()));
}

#[test]
fn launch_order_is_the_claims_instance_type_order_only_with_the_price_annotation() {
    let claim = |annotated: bool| -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {
                "name": "default-x",
                "annotations": if annotated {
                    serde_json::json!({"karpenter.sh/price-overlay-applied": "true"})
                } else {
                    serde_json::json!({})
                },
            },
            "spec": {
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": IT, "operator": "In", "values": ["m7i.large", "c6a.large", "m5.large"]},
                ],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
        }))
        .unwrap()
    };
    assert_eq!(
        launch_order(&claim(true)).unwrap(),
        ["m7i.large", "c6a.large", "m5.large"]
    );
    assert_eq!(launch_order(&claim(false)), None);
}

/// The launch's view: the overlay's capacity per type of the pool it applies in (none for the
/// other pool), the provider's claim without the overlay-only requests, and the launched claim's
/// status with the capacity of the type it got.
#[test]
fn capacity_added_feeds_the_launch_of_a_claim_planned_on_overlaid_capacity() {
    let pools = vec![
        (pool("default"), vec![default_type()]),
        (pool("other"), vec![default_type()]),
    ];
    let o = with_capacity(
        overlay(
            "hugepages",
            Some(10),
            vec![req("karpenter.sh/nodepool", "In", &["default"])],
        ),
        &[("hugepages-2Mi", "1Gi")],
    );
    let e = evaluate(&[o], &pools);
    assert!(e.capacity_added("other").is_empty());
    let added = e.capacity_added("default");
    assert_eq!(
        added.added("default-instance-type").get("hugepages-2Mi"),
        Quantity::parse("1Gi").unwrap()
    );
    assert!(added.added("another-type").is_empty());

    let claim: NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-x", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "requirements": [{"key": IT, "operator": "In", "values": ["default-instance-type"]}],
            "resources": {"requests": {"cpu": "1", "hugepages-2Mi": "512Mi", "pods": "1"}},
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        },
    }))
    .unwrap();
    let for_provider = added.claim_for_provider(&claim);
    let requests = &for_provider.spec.resources.as_ref().unwrap().requests;
    assert_eq!(
        requests.keys().map(String::as_str).collect::<Vec<_>>(),
        ["cpu", "pods"]
    );
    assert_eq!(for_provider.spec.requirements, claim.spec.requirements);

    let mut launched = for_provider.clone();
    launched
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(IT.to_string(), "default-instance-type".to_string());
    added.add_to_status(&mut launched);
    let status = launched.status.as_ref().unwrap();
    assert_eq!(status.capacity["hugepages-2Mi"].0, "1Gi");
    assert_eq!(status.allocatable["hugepages-2Mi"].0, "1Gi");
    let mut elsewhere = for_provider;
    elsewhere
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(IT.to_string(), "another-type".to_string());
    added.add_to_status(&mut elsewhere);
    assert!(
        elsewhere
            .status
            .is_none_or(|s| !s.capacity.contains_key("hugepages-2Mi"))
    );
}
