//! The CRDs' `x-kubernetes-validations` evaluated client-side with kube-cel: they reject the same
//! invalid objects that `validate` rejects, and accept every valid seed manifest.

use karpenter_api::crd;
use karpenter_api::rules::Crd;
use karpenter_api::validation::{self, v1_kind};
use serde_json::{Value, json};

use super::fixtures::{documents, invalid_case, invalid_case_names, root, yaml_files};

fn which(value: &Value) -> Crd {
    let text = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or_default();
    v1_kind(text("apiVersion"), text("kind")).unwrap_or_else(|| panic!("not a v1 object: {value}"))
}

fn cel(value: &Value, old: Option<&Value>) -> Result<(), String> {
    let schema = crd::schema(which(value)).unwrap();
    kube_cel::Validator::new()
        .validate(&schema, value, old)
        .map_err(|errs| {
            errs.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        })
}

#[test]
fn cel_rules_reject_every_cel_layer_invalid_fixture() {
    let mut checked = 0;
    for name in invalid_case_names() {
        let case = invalid_case(&name);
        if case.layer != "cel" {
            continue;
        }
        let rust = validation::validate_document(&case.value);
        assert!(
            matches!(rust.outcome, validation::Outcome::Invalid(_)),
            "{name}: validate accepted it"
        );
        match cel(&case.value, None) {
            Err(message) => assert!(
                message.contains(&case.message),
                "{name}: CEL rejected with {message:?}, expected {:?}",
                case.message
            ),
            Ok(()) => panic!("{name}: the CRD's CEL rules accept it, but validate rejects it"),
        }
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} CEL cases");
}

#[test]
fn cel_rules_accept_every_valid_seed() {
    let mut checked = 0;
    for file in yaml_files(&root().join("seeds")) {
        for doc in documents(&file) {
            let value = doc.value.unwrap();
            let api_version = value["apiVersion"].as_str().unwrap_or_default();
            let kind = value["kind"].as_str().unwrap_or_default();
            if v1_kind(api_version, kind).is_none() {
                continue;
            }
            cel(&value, None).unwrap_or_else(|e| panic!("{}:{}: {e}", file.display(), doc.index));
            checked += 1;
        }
    }
    assert_eq!(checked, 12);
}

fn nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": { "name": "p" },
        "spec": { "template": { "spec": {
            "requirements": [],
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" }
        } } }
    })
}

#[test]
fn transition_rules_match_in_cel_and_rust() {
    let old = nodepool();
    // Changing the NodeClass kind is forbidden; changing its name is fine.
    let mut new = old.clone();
    new["spec"]["template"]["spec"]["nodeClassRef"]["kind"] = json!("OtherNodeClass");
    let cel_error = cel(&new, Some(&old)).unwrap_err();
    assert!(
        cel_error.contains("nodeClassRef.kind is immutable"),
        "{cel_error}"
    );
    let (o, n) = (
        serde_json::from_value(old.clone()).unwrap(),
        serde_json::from_value(new).unwrap(),
    );
    let rust = validation::validate_nodepool_update(&o, &n);
    assert_eq!(rust[0].message, "nodeClassRef.kind is immutable");

    let mut renamed = old.clone();
    renamed["spec"]["template"]["spec"]["nodeClassRef"]["name"] = json!("other");
    cel(&renamed, Some(&old)).unwrap();
    assert!(
        validation::validate_nodepool_update(&o, &serde_json::from_value(renamed).unwrap())
            .is_empty()
    );

    // Static <-> dynamic.
    let mut static_pool = old.clone();
    static_pool["spec"]["replicas"] = json!(3);
    let cel_error = cel(&static_pool, Some(&old)).unwrap_err();
    assert!(
        cel_error.contains("Cannot transition NodePool"),
        "{cel_error}"
    );
    let rust =
        validation::validate_nodepool_update(&o, &serde_json::from_value(static_pool).unwrap());
    assert!(rust[0].message.starts_with("Cannot transition NodePool"));
}

#[test]
fn nodeclaim_spec_is_immutable_in_cel_and_rust() {
    let old = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": { "name": "c" },
        "spec": { "requirements": [], "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "a" } }
    });
    let mut new = old.clone();
    new["spec"]["nodeClassRef"]["name"] = json!("b");
    assert!(
        cel(&new, Some(&old))
            .unwrap_err()
            .contains("spec is immutable")
    );
    cel(&old, Some(&old)).unwrap();
    let rust = validation::validate_nodeclaim_update(
        &serde_json::from_value(old.clone()).unwrap(),
        &serde_json::from_value(new).unwrap(),
    );
    assert_eq!(rust[0].message, "spec is immutable");
}

#[test]
fn ec2nodeclass_role_to_instance_profile_is_forbidden_in_cel_and_rust() {
    let old = json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": { "name": "c" },
        "spec": {
            "role": "r", "amiSelectorTerms": [{ "alias": "al2023@latest" }],
            "subnetSelectorTerms": [{ "id": "subnet-1" }], "securityGroupSelectorTerms": [{ "id": "sg-1" }]
        }
    });
    let mut new = old.clone();
    new["spec"].as_object_mut().unwrap().remove("role");
    new["spec"]["instanceProfile"] = json!("p");
    assert!(
        cel(&new, Some(&old))
            .unwrap_err()
            .contains("changing from 'role' to 'instanceProfile'")
    );
    let rust = validation::validate_ec2nodeclass_update(
        &serde_json::from_value(old).unwrap(),
        &serde_json::from_value(new).unwrap(),
    );
    assert!(
        rust[0]
            .message
            .starts_with("changing from 'role' to 'instanceProfile'")
    );
}
