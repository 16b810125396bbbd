//! Hand-made bad CRDs, one per rule: each is refused with the API server's wording.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use super::*;

const BASE: &str = "spec.validation.openAPIV3Schema";

fn crd_with_spec(spec: Value) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Cluster",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"metadata": {"type": "object"}, "spec": spec}
                }}
            }]
        }
    }))
    .unwrap()
}

fn errors_of(spec: Value) -> Vec<String> {
    match check_crd(&crd_with_spec(spec)) {
        Ok(()) => Vec::new(),
        Err(invalid) => invalid.errors.iter().map(ToString::to_string).collect(),
    }
}

fn assert_refused(spec: Value, expected: &str) {
    let errors = errors_of(spec);
    assert!(
        errors.iter().any(|e| e == expected),
        "expected {expected:?} among {errors:#?}"
    );
}

#[test]
fn a_good_crd_passes() {
    let spec = json!({
        "type": "object",
        "properties": {
            "terms": {"type": "array", "minItems": 1, "maxItems": 30, "items": {"type": "string", "maxLength": 63},
                      "x-kubernetes-validations": [{"rule": "self.all(x, x != '')", "message": "no empty terms"}]},
            "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 64, "default": 1}
        }
    });
    assert_eq!(errors_of(spec), Vec::<String>::new());
}

#[test]
fn empty_default_under_min_items_is_the_issue_message() {
    let spec = json!({
        "type": "object",
        "properties": {"amiSelectorTerms": {"type": "array", "minItems": 1, "maxItems": 30, "default": [],
                                             "items": {"type": "object", "properties": {"id": {"type": "string"}}}}}
    });
    assert_refused(
        spec,
        "spec.validation.openAPIV3Schema.properties[spec].properties[amiSelectorTerms].default: Invalid value: 0: in body should have at least 1 items",
    );
}

#[test]
fn default_failing_its_own_cel_rule() {
    let spec = json!({
        "type": "object",
        "properties": {"subnetSelectorTerms": {
            "type": "array", "maxItems": 30, "default": [],
            "items": {"type": "string"},
            "x-kubernetes-validations": [{"rule": "self.size() != 0", "message": "subnetSelectorTerms cannot be empty"}]
        }}
    });
    assert_refused(
        spec,
        &format!(
            "{BASE}.properties[spec].properties[subnetSelectorTerms].default: Invalid value: \"array\": subnetSelectorTerms cannot be empty"
        ),
    );
}

#[test]
fn defaults_checked_for_type_enum_pattern_bounds_format_and_required() {
    let p = |name: &str| format!("{BASE}.properties[spec].properties[{name}].default");
    let spec = json!({
        "type": "object",
        "properties": {
            "t": {"type": "integer", "default": "1"},
            "e": {"type": "string", "enum": ["a"], "default": "b"},
            "p": {"type": "string", "pattern": "^[0-9]+h$", "default": "1d"},
            "l": {"type": "string", "maxLength": 2, "default": "abc"},
            "n": {"type": "integer", "minimum": 1, "default": 0},
            "f": {"type": "string", "format": "duration", "default": "forever"},
            "o": {"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "default": {"b": "x"}},
            "u": {"type": "object", "properties": {"a": {"type": "string"}}, "default": {"z": "x"}}
        }
    });
    let errors = errors_of(spec);
    let expect = [
        format!(
            "{}: Invalid value: \"string\": in body must be of type integer: \"string\"",
            p("t")
        ),
        format!(
            "{}: Unsupported value: \"b\": supported values: \"a\"",
            p("e")
        ),
        format!(
            "{}: Invalid value: \"1d\": in body should match '^[0-9]+h$'",
            p("p")
        ),
        format!(
            "{}: Invalid value: \"abc\": in body should be at most 2 chars long",
            p("l")
        ),
        format!(
            "{}: Invalid value: 0: in body should be greater than or equal to 1",
            p("n")
        ),
        format!(
            "{}: Invalid value: \"forever\": in body must be of type duration: \"forever\"",
            p("f")
        ),
        format!("{}.a: Required value", p("o")),
        format!(
            "{}: Invalid value: {{\"z\":\"x\"}}: must not have unknown fields: [z]",
            p("u")
        ),
    ];
    for expected in &expect {
        assert!(
            errors.contains(expected),
            "expected {expected:?} among {errors:#?}"
        );
    }
    assert_eq!(errors.len(), expect.len(), "{errors:#?}");
}

#[test]
fn nested_defaults_apply_before_the_default_is_checked() {
    // The parent default `{}` gets `mode: "c"` from the child default, which the enum refuses.
    let spec = json!({
        "type": "object",
        "properties": {"d": {"type": "object", "default": {},
            "properties": {"mode": {"type": "string", "enum": ["a"], "default": "c"}}}}
    });
    let errors = errors_of(spec);
    assert!(
        errors.contains(&format!("{BASE}.properties[spec].properties[d].default.mode: Unsupported value: \"c\": supported values: \"a\"")),
        "{errors:#?}"
    );
}

#[test]
fn structural_rules() {
    let spec = json!({
        "type": "object",
        "properties": {
            "untyped": {"description": "no type"},
            "both": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}},
            "list": {"type": "array"},
            "junctor": {"type": "string", "anyOf": [{"type": "string", "default": "x"}]},
            "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "object"}},
            "map": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                    "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
            "unique": {"type": "array", "uniqueItems": true, "items": {"type": "string"}},
            "old": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}},
                    "x-kubernetes-validations": [{"rule": "self.a == oldSelf.a"}]}},
            "broken": {"type": "string", "x-kubernetes-validations": [{"rule": "self ==", "message": "m"}]}
        }
    });
    let errors = errors_of(spec);
    let at = |s: &str| format!("{BASE}.properties[spec].properties[{s}]");
    let expect = [
        format!(
            "{}.type: Required value: must not be empty for specified object fields",
            at("untyped")
        ),
        format!(
            "{}.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
            at("both")
        ),
        format!("{}.items: Required value: must be specified", at("list")),
        format!(
            "{}.anyOf[0].type: Forbidden: must be empty to be structural",
            at("junctor")
        ),
        format!(
            "{}.anyOf[0].default: Forbidden: must not be set inside logical junctors",
            at("junctor")
        ),
        format!(
            "{}.items.type: Invalid value: \"object\": must be a scalar type if parent array type is set",
            at("set")
        ),
        format!(
            "{}.items.properties[k]: Required value: all map keys must be required or have a default value",
            at("map")
        ),
        format!(
            "{}.uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            at("unique")
        ),
    ];
    for expected in &expect {
        assert!(
            errors.contains(expected),
            "expected {expected:?} among {errors:#?}"
        );
    }
    assert!(
        errors.iter().any(|e| e.starts_with(&format!(
            "{}.items.x-kubernetes-validations[0].rule: Invalid value",
            at("old")
        )) && e
            .contains("oldSelf cannot be used on the uncorrelatable portion")),
        "{errors:#?}"
    );
    assert!(
        errors.iter().any(|e| e.starts_with(&format!("{}.x-kubernetes-validations[0].rule: Invalid value: \"self ==\": compilation failed", at("broken")))),
        "{errors:#?}"
    );
}

#[test]
fn root_metadata_may_only_restrict_name_and_generate_name() {
    let mut crd = serde_json::to_value(crd_with_spec(json!({"type": "object"}))).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"] = json!({"type": "object", "properties": {"labels": {"type": "object", "additionalProperties": {"type": "string"}}}});
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    let err = check_crd(&crd).unwrap_err();
    assert_eq!(
        err.errors[0].to_string(),
        format!(
            "{BASE}.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"
        )
    );
}

#[test]
fn a_rule_over_an_unbounded_list_exceeds_the_per_rule_budget() {
    let spec = json!({
        "type": "object",
        "properties": {"interfaces": {
            "type": "array",
            "items": {"type": "object", "properties": {"card": {"type": "integer"}, "device": {"type": "integer"}}},
            "x-kubernetes-validations": [{"rule": "self.all(x, self.exists_one(y, x.card == y.card && x.device == y.device))"}]
        }}
    });
    let errors = errors_of(spec.clone());
    let prefix = format!(
        "{BASE}.properties[spec].properties[interfaces].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of"
    );
    assert!(errors.iter().any(|e| e.starts_with(&prefix)), "{errors:#?}");
    // Bounded as upstream bounds it, the same rule fits.
    let mut bounded = spec;
    bounded["properties"]["interfaces"]["maxItems"] = json!(150);
    assert_eq!(errors_of(bounded), Vec::<String>::new());
}

#[test]
fn many_cheap_rules_under_an_unbounded_list_exceed_the_per_crd_budget() {
    // Each rule is cheap, but runs once per element of an unbounded list of unbounded lists.
    let rules: Vec<Value> = (0..20)
        .map(|i| json!({"rule": format!("self.a != 'x{i}'")}))
        .collect();
    let spec = json!({
        "type": "object",
        "properties": {"outer": {"type": "array", "items": {"type": "array", "items": {
            "type": "object", "properties": {"a": {"type": "string", "maxLength": 10}},
            "x-kubernetes-validations": rules
        }}}}
    });
    let errors = errors_of(spec);
    assert!(
        errors.iter().any(|e| e.starts_with(&format!(
            "{BASE}: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget"
        ))),
        "{errors:#?}"
    );
}

#[test]
fn the_status_message_aggregates_like_the_api_server() {
    let spec = json!({"type": "object", "properties": {"a": {"type": "array", "minItems": 1, "default": [], "items": {"type": "string"}}}});
    let err = check_crd(&crd_with_spec(spec)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.com\" is invalid: spec.validation.openAPIV3Schema.properties[spec].properties[a].default: Invalid value: 0: in body should have at least 1 items"
    );
}
