//! The generated CRDs pass the API server's CRD checks (structural schema, every `default`
//! valid for its own node and CEL rules, CEL cost budgets), as reproduced by
//! `karpenter_testapi::crd_check`, and the test API server accepts them through its API.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::crd;
use karpenter_testapi::TestApiServer;
use karpenter_testapi::crd_check::{self, PER_CRD_COST_LIMIT, PER_RULE_COST_LIMIT};
use kube::api::{Api, PostParams};

#[test]
fn generated_crds_pass_the_api_server_crd_checks() {
    let crds = crd::all().unwrap();
    let failures: Vec<String> = crds
        .iter()
        .filter_map(|c| crd_check::check_crd(c).err())
        .flat_map(|invalid| {
            let name = invalid.name.clone();
            invalid
                .errors
                .into_iter()
                .map(move |e| format!("{name}: {e}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "the API server would refuse:\n{}",
        failures.join("\n")
    );
}

#[test]
fn committed_deploy_crds_pass_the_api_server_crd_checks() {
    let dir = super::fixtures::crate_dir().join("../../deploy/crds");
    for (name, _) in crd::render_yaml().unwrap() {
        let text = std::fs::read_to_string(dir.join(&name)).unwrap();
        let parsed: CustomResourceDefinition = serde_saphyr::from_str(&text).unwrap();
        if let Err(invalid) = crd_check::check_crd(&parsed) {
            panic!("deploy/crds/{name}: {invalid}");
        }
    }
}

#[test]
fn cel_rules_fit_the_cost_budgets_with_room_to_spare() {
    // Not only under the limits: each rule well under, so a small schema change cannot tip it.
    for which in karpenter_api::rules::Crd::ALL {
        let schema = crd::schema(which).unwrap();
        let report = crd_check::cost_report(&schema);
        for (path, cost) in &report.rules {
            assert!(*cost <= PER_RULE_COST_LIMIT / 2, "{which:?} {path}: {cost}");
        }
        assert!(
            report.total <= PER_CRD_COST_LIMIT / 2,
            "{which:?}: total {}",
            report.total
        );
    }
}

#[tokio::test]
async fn the_test_api_server_accepts_the_crds_through_its_api() {
    let server = TestApiServer::new();
    let crds: Api<CustomResourceDefinition> = Api::all(server.client());
    for c in crd::all().unwrap() {
        crds.create(&PostParams::default(), &c).await.unwrap();
    }
    assert_eq!(server.count::<CustomResourceDefinition>(), 5);
}

/// Creates any v1 document through the test API server with a plain `kube::Client`.
async fn create_through_the_api(
    server: &TestApiServer,
    value: &serde_json::Value,
) -> Result<(), kube::Error> {
    use kube::api::DynamicObject;
    use kube::discovery::ApiResource;
    let api_version = value["apiVersion"].as_str().unwrap();
    let kind = value["kind"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap();
    let plural = match kind {
        "NodePool" => "nodepools",
        "NodeClaim" => "nodeclaims",
        "EC2NodeClass" => "ec2nodeclasses",
        "NodeOverlay" => "nodeoverlays",
        "CapacityBuffer" => "capacitybuffers",
        other => panic!("not one of our kinds: {other}"),
    };
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    // CapacityBuffers are namespaced (their fixtures name a namespace); the rest cluster-scoped.
    let api: Api<DynamicObject> = match value["metadata"]["namespace"].as_str() {
        Some(namespace) => Api::namespaced_with(server.client(), namespace, &resource),
        None => Api::all_with(server.client(), &resource),
    };
    let object: DynamicObject = serde_json::from_value(value.clone()).unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .map(|_| ())
}

/// A test API server serving our CRDs.
fn server_with_crds(crds: &[CustomResourceDefinition]) -> TestApiServer {
    let server = TestApiServer::new();
    for c in crds {
        server.register_crd(c).unwrap();
    }
    server
}

const UNKNOWN_FIELD_CASES: [&str; 2] = ["ec2-unknown-field", "np-unknown-field"];

/// Unknown fields: pruned by default, a 400 naming them under `fieldValidation=Strict` (what
/// `kubectl apply --server-side` sends).
#[tokio::test]
async fn unknown_fields_are_pruned_or_refused_under_strict_field_validation() {
    use super::fixtures::invalid_case;
    use kube::api::{DynamicObject, Patch, PatchParams, ValidationDirective};
    use kube::discovery::ApiResource;
    for name in UNKNOWN_FIELD_CASES {
        let case = invalid_case(name);
        let server = server_with_crds(&crd::all().unwrap());
        let strict = PatchParams {
            field_manager: Some("test".into()),
            field_validation: Some(ValidationDirective::Strict),
            ..PatchParams::default()
        };
        let api_version = case.value["apiVersion"].as_str().unwrap();
        let kind = case.value["kind"].as_str().unwrap();
        let plural = if kind == "NodePool" {
            "nodepools"
        } else {
            "ec2nodeclasses"
        };
        let resource = ApiResource {
            group: api_version.split_once('/').unwrap().0.into(),
            version: "v1".into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        let api: Api<DynamicObject> = Api::all_with(server.client(), &resource);
        let object_name = case.value["metadata"]["name"].as_str().unwrap();
        match api
            .patch(object_name, &strict, &Patch::Apply(&case.value))
            .await
        {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 400, "{name}: {status:?}");
                let field = case.path.as_str();
                assert!(
                    status
                        .message
                        .contains(&format!("strict decoding error: unknown field \"{field}\"")),
                    "{name}: {}",
                    status.message
                );
            }
            other => panic!("{name}: strict apply accepted: {other:?}"),
        }
        create_through_the_api(&server, &case.value).await.unwrap();
        let stored = server
            .get_value(api_version, kind, None, object_name)
            .unwrap();
        let pointer = format!("/{}", case.path.replace('.', "/"));
        assert!(
            stored.pointer(&pointer).is_none(),
            "{name}: {} was not pruned",
            case.path
        );
    }
}

/// The test API server now refuses what the real one refuses: every invalid fixture of the schema
/// and CEL layers is a 422 (CEL ones with the rule's message), through a plain `kube::Client`.
#[tokio::test]
async fn the_test_api_server_refuses_every_schema_and_cel_invalid_fixture() {
    use super::fixtures::{invalid_case, invalid_case_names};
    // Unknown fields are pruned, not refused, without `fieldValidation=Strict` (next test).
    let pruned = UNKNOWN_FIELD_CASES;
    let server = server_with_crds(&crd::all().unwrap());
    let mut refused = 0;
    for name in invalid_case_names() {
        let case = invalid_case(&name);
        if case.layer == "runtime" || pruned.contains(&name.as_str()) {
            continue;
        }
        match create_through_the_api(&server, &case.value).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{name}: {status:?}");
                if case.layer == "cel" {
                    assert!(
                        status.message.contains(&case.message),
                        "{name}: {}",
                        status.message
                    );
                }
                refused += 1;
            }
            other => panic!(
                "{name} ({} layer): the test API server accepted it: {other:?}",
                case.layer
            ),
        }
    }
    assert!(refused >= 70, "only {refused} refused");
}

#[tokio::test]
async fn the_test_api_server_accepts_every_valid_seed_and_applies_the_crd_defaults() {
    use super::fixtures::{documents, root, yaml_files};
    let crds = crd::all().unwrap();
    let mut created = 0;
    for file in yaml_files(&root().join("seeds")) {
        // Seed files reuse names (`default`), so each gets its own server.
        let server = server_with_crds(&crds);
        for doc in documents(&file) {
            let value = doc.value.unwrap();
            let text = |k: &str| value[k].as_str().unwrap_or_default().to_string();
            if karpenter_api::validation::v1_kind(&text("apiVersion"), &text("kind")).is_none() {
                continue;
            }
            create_through_the_api(&server, &value)
                .await
                .unwrap_or_else(|e| panic!("{}:{}: {e}", file.display(), doc.index));
            created += 1;
        }
    }
    assert_eq!(created, 12);
    let server = server_with_crds(&crds);
    // A minimal NodePool comes back with the CRD's defaults, as from a real API server.
    let minimal = serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "minimal"},
        "spec": {"template": {"spec": {
            "requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }}}
    });
    create_through_the_api(&server, &minimal).await.unwrap();
    let stored = server
        .get::<karpenter_api::v1::NodePool>(None, "minimal")
        .unwrap();
    let disruption = stored.spec.disruption.unwrap();
    assert_eq!(
        serde_json::to_value(&disruption).unwrap(),
        serde_json::json!({"budgets": [{"nodes": "10%"}], "consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized"})
    );
}
