//! Upstream's NodeOverlay API tests (pkg/apis/v1alpha1/nodeoverlay_validation_test.go,
//! "CEL/Validation"), translated: each test is named after the upstream `It` or `DescribeTable` it
//! reproduces, and checks `validate`'s verdict (schema, CEL rules and runtime checks, the same the
//! API server applies with the committed CRD).

use karpenter_api::validation::{Outcome, validate_document};
use serde_json::{Value, json};

fn overlay(spec: Value) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "overlay"},
        "spec": spec,
    })
}

fn with_requirement(key: &str, operator: &str, values: &[&str]) -> Value {
    overlay(json!({"requirements": [{"key": key, "operator": operator, "values": values}]}))
}

fn valid(doc: &Value) -> bool {
    matches!(validate_document(doc).outcome, Outcome::Valid)
}

fn price(text: &str) -> Value {
    overlay(json!({"requirements": [], "price": text}))
}

fn adjustment(text: &str) -> Value {
    overlay(json!({"requirements": [], "priceAdjustment": text}))
}

#[test]
fn requirements_should_fail_for_no_values_for_in_and_not_in_operator() {
    assert!(!valid(&with_requirement("example.com/team", "In", &[])));
    assert!(!valid(&with_requirement("example.com/team", "NotIn", &[])));
}

#[test]
fn requirements_should_succeed_for_valid_requirement_keys() {
    for key in ["Test", "test.com/Test", "test.com.com/test", "key-only"] {
        assert!(valid(&with_requirement(key, "Exists", &[])), "{key}");
    }
}

#[test]
fn requirements_should_fail_for_invalid_requirement_keys() {
    for key in [
        "test.com.com}",
        "Test.com/test",
        "test/test/test",
        "test/",
        "/test",
    ] {
        assert!(!valid(&with_requirement(key, "Exists", &[])), "{key}");
    }
}

#[test]
fn requirements_should_allow_for_the_karpenter_sh_nodepool_label() {
    assert!(valid(&with_requirement(
        "karpenter.sh/nodepool",
        "In",
        &["default"]
    )));
}

#[test]
fn requirements_should_fail_at_runtime_for_requirement_keys_that_are_too_long() {
    let key = format!("test.com.test/test-{}", "a".repeat(250));
    assert!(!valid(&with_requirement(&key, "Exists", &[])));
}

#[test]
fn requirements_should_allow_supported_ops_and_fail_for_unsupported_ops() {
    for (op, values) in [
        ("In", &["test"][..]),
        ("NotIn", &["test"][..]),
        ("Gt", &["1"][..]),
        ("Lt", &["1"][..]),
        ("Gte", &["1"][..]),
        ("Lte", &["1"][..]),
        ("Exists", &[][..]),
        ("DoesNotExist", &[][..]),
    ] {
        assert!(
            valid(&with_requirement("example.com/x", op, values)),
            "{op}"
        );
    }
    for op in ["within", "AnyOf"] {
        assert!(
            !valid(&with_requirement("example.com/x", op, &["a"])),
            "{op}"
        );
    }
}

#[test]
fn requirements_should_fail_for_restricted_domains() {
    for key in [
        "karpenter.sh/custom",
        "subdomain.karpenter.sh/custom",
        "kubernetes.io/hostname",
    ] {
        assert!(!valid(&with_requirement(key, "In", &["x"])), "{key}");
    }
}

#[test]
fn requirements_should_allow_well_known_label_exceptions() {
    for key in [
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
        "kubernetes.io/arch",
        "karpenter.sh/capacity-type",
        "karpenter.k8s.aws/instance-family",
    ] {
        assert!(valid(&with_requirement(key, "In", &["x"])), "{key}");
    }
}

#[test]
fn requirements_should_allow_empty_requirements() {
    assert!(valid(&overlay(json!({"requirements": []}))));
}

#[test]
fn requirements_should_fail_with_invalid_gt_or_lt_and_gte_or_lte_values() {
    for op in ["Gt", "Lt", "Gte", "Lte"] {
        for values in [&[][..], &["1", "2"][..], &["a"][..], &["-1"][..]] {
            assert!(
                !valid(&with_requirement("example.com/x", op, values)),
                "{op} {values:?}"
            );
        }
    }
}

#[test]
fn shout_not_be_able_to_set_both_price_and_price_adjustment() {
    let doc = overlay(json!({"requirements": [], "price": "0.432", "priceAdjustment": "+10%"}));
    assert!(!valid(&doc));
}

#[test]
fn price_invalid_input() {
    for text in [
        "+42",
        ".5",
        "42.",
        "42%",
        "3,14",
        "1e10",
        "0x42",
        "forty-two",
        "42a",
        "42 ",
        " 42",
        "42.0.0",
        "-",
        ".",
        "-100.0%",
        "-101.1%",
        "-129",
    ] {
        assert!(!valid(&price(text)), "{text:?}");
    }
    for text in ["42", "0.432", "0"] {
        assert!(valid(&price(text)), "{text:?}");
    }
}

#[test]
fn price_adjustment_should_not_allow_an_unsigned_percentage_integer_or_float() {
    for text in ["1%", "1", "1.3"] {
        assert!(!valid(&adjustment(text)), "{text:?}");
    }
}

#[test]
fn price_adjustment_should_allow_signed_percentages_integers_and_floats() {
    for text in [
        "+1%",
        "-1%",
        "-100%",
        "+100.102%",
        "+298%",
        "+43",
        "-43",
        "+34.43",
        "-34.43",
    ] {
        assert!(valid(&adjustment(text)), "{text:?}");
    }
    // A decrease of more than 100% is refused.
    assert!(!valid(&adjustment("-101%")));
}
