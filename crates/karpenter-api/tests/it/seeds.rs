//! Every NodePool/EC2NodeClass/Provisioner/AWSNodeTemplate of the seed guides validates (v1) or
//! converts (legacy) cleanly, and the converted output validates.

use karpenter_api::convert::{Input, Output, convert};
use karpenter_api::validation::{Outcome, is_legacy, validate_document};

use super::fixtures::{documents, root, yaml_files};

fn api_kind(value: &serde_json::Value) -> (String, String) {
    let text = |k: &str| {
        value
            .get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    (text("apiVersion"), text("kind"))
}

#[test]
fn seed_fixtures_cover_every_guide() {
    let names: Vec<String> = yaml_files(&root().join("seeds"))
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for guide in ["000", "001", "002", "003", "004"] {
        assert!(
            names.iter().any(|n| n.starts_with(guide)),
            "no fixture from seed guide {guide}"
        );
    }
}

#[test]
fn v1_seed_manifests_validate() {
    let mut checked = 0;
    for file in yaml_files(&root().join("seeds")) {
        for doc in documents(&file) {
            let value = doc.value.unwrap();
            let (api_version, kind) = api_kind(&value);
            if is_legacy(&api_version, &kind) {
                continue;
            }
            let report = validate_document(&value);
            assert_eq!(
                report.outcome,
                Outcome::Valid,
                "{}:{} {kind}",
                file.display(),
                doc.index
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 12, "v1 objects in the seed guides");
}

#[test]
fn legacy_seed_manifests_convert_and_the_result_validates() {
    let mut converted_objects = 0;
    for file in yaml_files(&root().join("seeds")) {
        let inputs: Vec<Input> = documents(&file)
            .into_iter()
            .map(|d| Input {
                source: file.display().to_string(),
                index: d.index,
                value: d.value.unwrap(),
            })
            .collect();
        let legacy = inputs.iter().filter(|i| {
            let (a, k) = api_kind(&i.value);
            is_legacy(&a, &k)
        });
        let legacy_count = legacy.count();
        let (outputs, warnings) = convert(&inputs);
        for warning in &warnings {
            // Warnings must name a field.
            assert!(!warning.field.is_empty(), "{warning}");
        }
        for (input, output) in inputs.iter().zip(outputs) {
            let (a, k) = api_kind(&input.value);
            match output {
                Output::PassThrough => assert!(!is_legacy(&a, &k)),
                Output::Converted(objects) => {
                    assert!(!objects.is_empty(), "{}:{}", file.display(), input.index);
                    for object in objects {
                        let value = object.to_value().unwrap();
                        let report = validate_document(&value);
                        assert_eq!(
                            report.outcome,
                            Outcome::Valid,
                            "{}:{} converted {k}: {value:#}",
                            file.display(),
                            input.index
                        );
                        converted_objects += 1;
                    }
                }
                Output::Failed(reason) => panic!("{}:{}: {reason}", file.display(), input.index),
            }
        }
        if legacy_count == 0 {
            assert!(warnings.is_empty());
        }
    }
    assert_eq!(converted_objects, 8, "legacy objects in the seed guides");
}

#[test]
fn v1beta1_conversion_maps_policy_expiry_and_node_class_ref() {
    let file = root().join("seeds/001-v1beta1-getting-started.yaml");
    let inputs: Vec<Input> = documents(&file)
        .into_iter()
        .map(|d| Input {
            source: "f".into(),
            index: d.index,
            value: d.value.unwrap(),
        })
        .collect();
    let (outputs, _) = convert(&inputs);
    let Output::Converted(objects) = &outputs[0] else {
        panic!("not converted")
    };
    let np = objects[0].to_value().unwrap();
    assert_eq!(np["apiVersion"], "karpenter.sh/v1");
    assert_eq!(
        np["spec"]["disruption"]["consolidationPolicy"],
        "WhenEmptyOrUnderutilized"
    );
    assert_eq!(np["spec"]["disruption"]["consolidateAfter"], "0s");
    assert_eq!(np["spec"]["template"]["spec"]["expireAfter"], "720h");
    assert!(np["spec"]["disruption"].get("expireAfter").is_none());
    assert_eq!(
        np["spec"]["template"]["spec"]["nodeClassRef"]["group"],
        "karpenter.k8s.aws"
    );
    assert_eq!(
        np["spec"]["template"]["spec"]["nodeClassRef"]["kind"],
        "EC2NodeClass"
    );
    let Output::Converted(objects) = &outputs[1] else {
        panic!("not converted")
    };
    let nc = objects[0].to_value().unwrap();
    assert_eq!(nc["apiVersion"], "karpenter.k8s.aws/v1");
    assert_eq!(nc["spec"]["amiFamily"], "AL2");
    assert_eq!(
        nc["spec"]["amiSelectorTerms"][0]["id"],
        "ami-0a1b2c3d4e5f60718"
    );
}

#[test]
fn v1alpha5_conversion_maps_provider_ref_and_ttls() {
    let file = root().join("seeds/000-v1alpha5-provisioner-awsnodetemplate.yaml");
    let inputs: Vec<Input> = documents(&file)
        .into_iter()
        .map(|d| Input {
            source: "f".into(),
            index: d.index,
            value: d.value.unwrap(),
        })
        .collect();
    let (outputs, warnings) = convert(&inputs);
    let Output::Converted(objects) = &outputs[0] else {
        panic!("not converted")
    };
    let np = objects[0].to_value().unwrap();
    assert_eq!(
        np["spec"]["template"]["spec"]["nodeClassRef"]["name"],
        "default"
    );
    assert_eq!(np["spec"]["template"]["spec"]["expireAfter"], "Never");
    assert_eq!(np["spec"]["disruption"]["consolidateAfter"], "Never");
    let Output::Converted(objects) = &outputs[1] else {
        panic!("not converted")
    };
    let nc = objects[0].to_value().unwrap();
    assert_eq!(nc["spec"]["amiSelectorTerms"][0]["alias"], "al2@latest");
    assert_eq!(
        nc["spec"]["subnetSelectorTerms"][0]["tags"]["karpenter.sh/discovery"],
        "${CLUSTER_NAME}"
    );
    assert!(
        warnings.iter().any(|w| w.field == "spec.instanceProfile"),
        "{warnings:?}"
    );
}
