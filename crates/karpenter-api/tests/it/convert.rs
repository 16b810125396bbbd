//! `convert` keeps the legacy behaviour: the v1alpha5 webhook's capacity-type default is written
//! out, and an AL2 node class is flagged before a Kubernetes upgrade strands it.

use karpenter_api::convert::{Input, Level, Output, Warning, convert};
use serde_json::Value;

fn convert_one(yaml: &str) -> (Vec<Value>, Vec<Warning>) {
    let input = Input {
        source: "f.yaml".into(),
        index: 1,
        value: serde_saphyr::from_str(yaml).unwrap(),
    };
    let (mut outputs, warnings) = convert(std::slice::from_ref(&input));
    match outputs.remove(0) {
        Output::Converted(objects) => (
            objects.iter().map(|o| o.to_value().unwrap()).collect(),
            warnings,
        ),
        other => panic!("not converted: {other:?}"),
    }
}

fn requirements(nodepool: &Value) -> Vec<(String, String, Vec<String>)> {
    nodepool["spec"]["template"]["spec"]["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["key"].as_str().unwrap().to_string(),
                r["operator"].as_str().unwrap().to_string(),
                r["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

const PROVISIONER: &str = "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\nspec:\n  providerRef: {name: nc}\n";

#[test]
fn a_provisioner_without_capacity_type_gets_the_v1alpha5_on_demand_default_with_a_note() {
    let yaml = format!(
        "{PROVISIONER}  requirements:\n  - {{key: kubernetes.io/arch, operator: In, values: [arm64]}}\n"
    );
    let (objects, warnings) = convert_one(&yaml);
    assert_eq!(
        requirements(&objects[0]),
        [
            (
                "kubernetes.io/arch".into(),
                "In".into(),
                vec!["arm64".into()]
            ),
            (
                "karpenter.sh/capacity-type".into(),
                "In".into(),
                vec!["on-demand".into()]
            ),
        ]
    );
    let note = warnings
        .iter()
        .find(|w| w.field == "spec.requirements")
        .unwrap();
    assert_eq!(note.level, Level::Note);
    assert!(note.message.contains("v1alpha5 default"), "{note}");
}

#[test]
fn a_provisioner_choosing_its_capacity_type_keeps_it_without_a_note() {
    for yaml in [
        format!(
            "{PROVISIONER}  requirements:\n  - {{key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}}\n"
        ),
        format!("{PROVISIONER}  labels: {{karpenter.sh/capacity-type: spot}}\n"),
    ] {
        let (objects, warnings) = convert_one(&yaml);
        let capacity: Vec<_> = requirements(&objects[0])
            .into_iter()
            .filter(|(key, _, _)| key == "karpenter.sh/capacity-type")
            .collect();
        assert!(capacity.len() <= 1, "{capacity:?}");
        assert!(
            capacity
                .iter()
                .all(|(_, _, values)| values.contains(&"spot".to_string())),
            "{capacity:?}"
        );
        assert!(
            warnings.iter().all(|w| w.field != "spec.requirements"),
            "{warnings:?}"
        );
    }
}

#[test]
fn al2_node_classes_get_a_note_about_kubernetes_1_33() {
    for yaml in [
        // Explicit, v1alpha1.
        "apiVersion: karpenter.k8s.aws/v1alpha1\nkind: AWSNodeTemplate\nmetadata: {name: nc}\nspec:\n  amiFamily: AL2\n  instanceProfile: p\n  subnetSelector: {a: b}\n  securityGroupSelector: {a: b}\n",
        // Defaulted, v1beta1 with AMI terms.
        "apiVersion: karpenter.k8s.aws/v1beta1\nkind: EC2NodeClass\nmetadata: {name: nc}\nspec:\n  role: r\n  amiSelectorTerms: [{id: ami-1}]\n  subnetSelectorTerms: [{id: subnet-1}]\n  securityGroupSelectorTerms: [{id: sg-1}]\n",
    ] {
        let (_, warnings) = convert_one(yaml);
        let note = warnings
            .iter()
            .find(|w| w.level == Level::Note && w.field == "spec.amiFamily")
            .unwrap_or_else(|| panic!("no AL2 note: {warnings:?}"));
        assert!(note.message.contains("1.33"), "{note}");
    }
    let (_, warnings) = convert_one(
        "apiVersion: karpenter.k8s.aws/v1alpha1\nkind: AWSNodeTemplate\nmetadata: {name: nc}\nspec:\n  amiFamily: AL2023\n  instanceProfile: p\n  subnetSelector: {a: b}\n  securityGroupSelector: {a: b}\n",
    );
    assert!(
        warnings.iter().all(|w| !w.message.contains("1.33")),
        "{warnings:?}"
    );
}
