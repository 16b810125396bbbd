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
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
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
    for which in [
        karpenter_api::rules::Crd::NodePool,
        karpenter_api::rules::Crd::NodeClaim,
        karpenter_api::rules::Crd::EC2NodeClass,
    ] {
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
    assert_eq!(server.count::<CustomResourceDefinition>(), 3);
}
