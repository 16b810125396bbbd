//! Structure of the generated CRDs: names, scope, subresources, printer columns, defaults and every
//! CEL rule at its path.

use karpenter_api::crd;
use karpenter_api::rules::{self, Crd};
use serde_json::Value;

fn crd_value(which: Crd) -> Value {
    serde_json::to_value(crd::crd(which).unwrap()).unwrap()
}

fn node<'a>(schema: &'a Value, path: &str) -> &'a Value {
    let mut node = schema;
    for segment in path.split('.') {
        let (field, items) = segment
            .strip_suffix("[]")
            .map_or((segment, false), |f| (f, true));
        node = &node["properties"][field];
        if items {
            node = &node["items"];
        }
        assert!(!node.is_null(), "missing schema path {path}");
    }
    node
}

#[test]
fn names_scope_and_categories() {
    for (which, name, kind, plural, short) in [
        (
            Crd::NodePool,
            "nodepools.karpenter.sh",
            "NodePool",
            "nodepools",
            ["np", "nps"],
        ),
        (
            Crd::NodeClaim,
            "nodeclaims.karpenter.sh",
            "NodeClaim",
            "nodeclaims",
            ["nc", "ncs"],
        ),
        (
            Crd::EC2NodeClass,
            "ec2nodeclasses.karpenter.k8s.aws",
            "EC2NodeClass",
            "ec2nodeclasses",
            ["ec2nc", "ec2ncs"],
        ),
    ] {
        let crd = crd_value(which);
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(crd["metadata"]["name"], name);
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert_eq!(crd["spec"]["names"]["kind"], kind);
        assert_eq!(crd["spec"]["names"]["plural"], plural);
        assert_eq!(crd["spec"]["names"]["shortNames"], serde_json::json!(short));
        assert_eq!(
            crd["spec"]["names"]["categories"],
            serde_json::json!(["karpenter"])
        );
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1");
        assert_eq!(version["served"], true);
        assert_eq!(version["storage"], true);
        assert!(version["subresources"]["status"].is_object());
    }
}

#[test]
fn capacitybuffer_crd_is_upstreams_v1beta1() {
    let crd = crd_value(Crd::CapacityBuffer);
    assert_eq!(
        crd["metadata"]["name"],
        "capacitybuffers.autoscaling.x-k8s.io"
    );
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    assert_eq!(crd["spec"]["names"]["kind"], "CapacityBuffer");
    assert_eq!(
        crd["spec"]["names"]["shortNames"],
        serde_json::json!(["cb"])
    );
    assert_eq!(
        crd["spec"]["names"]["categories"],
        serde_json::json!(["autoscaling"])
    );
    let version = &crd["spec"]["versions"][0];
    assert_eq!(version["name"], "v1beta1");
    assert!(version["subresources"]["status"].is_object());
    let names: Vec<String> = columns(Crd::CapacityBuffer)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        names,
        [
            "Strategy",
            "PodTemplate",
            "Replicas",
            "ConditionsType",
            "ConditionsStatus",
            "ConditionsReason",
            "Age"
        ]
    );
    let schema = crd::schema(Crd::CapacityBuffer).unwrap();
    assert_eq!(
        node(&schema, "spec.provisioningStrategy")["default"],
        "buffer.x-k8s.io/active-capacity"
    );
    assert_eq!(node(&schema, "spec.replicas")["minimum"], 0);
    assert_eq!(node(&schema, "spec.percentage")["minimum"], 0);
    assert_eq!(node(&schema, "spec.podTemplateRef.name")["minLength"], 1);
    assert_eq!(
        node(&schema, "spec.scalableRef")["required"],
        serde_json::json!(["kind", "name"])
    );
    let rules: Vec<&str> = node(&schema, "spec")["x-kubernetes-validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rule"].as_str().unwrap())
        .collect();
    assert_eq!(
        rules,
        [
            "!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",
            "!(has(self.podTemplateRef) && has(self.scalableRef))"
        ]
    );
    assert_eq!(
        node(&schema, "status.conditions")["x-kubernetes-list-type"],
        "map"
    );
}

#[test]
fn nodeoverlay_crd_is_upstreams_v1alpha1() {
    let crd = crd_value(Crd::NodeOverlay);
    assert_eq!(crd["metadata"]["name"], "nodeoverlays.karpenter.sh");
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(crd["spec"]["names"]["kind"], "NodeOverlay");
    assert_eq!(
        crd["spec"]["names"]["shortNames"],
        serde_json::json!(["overlays"])
    );
    assert_eq!(
        crd["spec"]["names"]["categories"],
        serde_json::json!(["karpenter"])
    );
    let version = &crd["spec"]["versions"][0];
    assert_eq!(version["name"], "v1alpha1");
    assert!(version["subresources"]["status"].is_object());
    assert_eq!(
        columns(Crd::NodeOverlay),
        vec![("Ready".into(), 0), ("Age".into(), 0), ("Weight".into(), 1)]
    );
    let schema = crd::schema(Crd::NodeOverlay).unwrap();
    assert_eq!(
        schema["properties"]["spec"]["required"],
        serde_json::json!(["requirements"])
    );
    assert_eq!(node(&schema, "spec.weight")["minimum"], 1);
    assert_eq!(node(&schema, "spec.weight")["maximum"], 10000);
    assert_eq!(node(&schema, "spec.requirements")["maxItems"], 100);
    assert_eq!(
        node(&schema, "spec.priceAdjustment")["pattern"],
        crd::PRICE_ADJUSTMENT_PATTERN
    );
    assert_eq!(node(&schema, "spec.price")["pattern"], crd::PRICE_PATTERN);
    assert_eq!(
        node(&schema, "spec.capacity")["additionalProperties"]["x-kubernetes-int-or-string"],
        true
    );
}

#[test]
fn nodepool_scale_subresource() {
    let crd = crd_value(Crd::NodePool);
    let scale = &crd["spec"]["versions"][0]["subresources"]["scale"];
    assert_eq!(scale["specReplicasPath"], ".spec.replicas");
    assert_eq!(scale["statusReplicasPath"], ".status.nodes");
    assert!(crd_value(Crd::NodeClaim)["spec"]["versions"][0]["subresources"]["scale"].is_null());
}

fn columns(which: Crd) -> Vec<(String, i64)> {
    crd_value(which)["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["priority"].as_i64().unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn printer_columns_including_wide_ones() {
    let np = columns(Crd::NodePool);
    let expected: Vec<(String, i64)> = [
        ("NodeClass", 0),
        ("Nodes", 0),
        ("Ready", 0),
        ("Age", 0),
        ("Weight", 1),
        ("CPU", 1),
        ("Memory", 1),
    ]
    .iter()
    .map(|(n, p)| (n.to_string(), *p))
    .collect();
    assert_eq!(np, expected);
    let nc: Vec<String> = columns(Crd::NodeClaim)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        nc,
        [
            "Type",
            "Capacity",
            "Zone",
            "Node",
            "Ready",
            "Age",
            "ImageID",
            "ID",
            "NodePool",
            "NodeClass",
            "Drifted"
        ]
    );
    assert_eq!(
        columns(Crd::EC2NodeClass),
        vec![("Ready".into(), 0), ("Age".into(), 0), ("Role".into(), 1)]
    );
}

#[test]
fn every_cel_rule_is_present_at_its_path() {
    let mut placed = 0;
    for rule in rules::ALL {
        for (which, path) in rule.paths {
            let schema = crd::schema(*which).unwrap();
            let validations = node(&schema, path)["x-kubernetes-validations"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(
                validations
                    .iter()
                    .any(|v| v["rule"] == rule.rule && v["message"] == rule.message),
                "{which:?} {path}: missing rule {}",
                rule.rule
            );
            placed += 1;
        }
    }
    assert!(placed >= 60, "{placed}");
}

#[test]
fn crd_defaults() {
    let np = crd::schema(Crd::NodePool).unwrap();
    assert_eq!(
        node(&np, "spec.template.spec.expireAfter")["default"],
        "720h"
    );
    assert_eq!(
        node(&np, "spec.disruption.consolidateAfter")["default"],
        "0s"
    );
    assert_eq!(
        node(&np, "spec.disruption.consolidationPolicy")["default"],
        "WhenEmptyOrUnderutilized"
    );
    assert_eq!(
        node(&np, "spec.disruption.budgets")["default"],
        serde_json::json!([{ "nodes": "10%" }])
    );
    let ec2 = crd::schema(Crd::EC2NodeClass).unwrap();
    assert_eq!(
        node(&ec2, "spec.metadataOptions")["default"],
        serde_json::json!({ "httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required" })
    );
    // Issue 8: `#[serde(default)]` must not leak into the CRD as `default: []` on required,
    // non-empty lists (the API server refuses such a CRD).
    for path in [
        "spec.amiSelectorTerms",
        "spec.subnetSelectorTerms",
        "spec.securityGroupSelectorTerms",
    ] {
        assert!(
            node(&ec2, path).get("default").is_none(),
            "{path} has a default"
        );
    }
}

/// Structural: every node with properties/items is typed; quantities are int-or-string.
fn assert_structural(node: &Value, path: &str) {
    let Some(obj) = node.as_object() else { return };
    if obj.contains_key("properties")
        || obj.contains_key("items")
        || obj.contains_key("additionalProperties")
    {
        assert!(obj.contains_key("type"), "{path}: untyped node");
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            if !v
                .get("x-kubernetes-int-or-string")
                .is_some_and(|b| b == true)
            {
                assert!(v.get("type").is_some(), "{path}.{k}: untyped field");
            }
            assert_structural(v, &format!("{path}.{k}"));
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = obj.get(key) {
            assert_structural(child, &format!("{path}[{key}]"));
        }
    }
}

#[test]
fn schemas_are_structural() {
    for which in Crd::ALL {
        assert_structural(&crd::schema(which).unwrap(), &format!("{which:?}"));
    }
    let np = crd::schema(Crd::NodePool).unwrap();
    assert_eq!(
        node(&np, "spec.limits")["additionalProperties"]["x-kubernetes-int-or-string"],
        true
    );
    assert_eq!(
        node(&np, "spec.template.spec.requirements[].values")["x-kubernetes-list-type"],
        "atomic"
    );
    assert_eq!(
        node(&np, "status.conditions")["x-kubernetes-list-type"],
        "map"
    );
}

/// `deploy/crds/` is committed; it must be exactly what `karpenter crds` generates.
#[test]
fn deploy_crds_are_up_to_date() {
    let dir = super::fixtures::crate_dir().join("../../deploy/crds");
    let update = std::env::var_os("KARPENTER_UPDATE_CRDS").is_some();
    let crds = crd::all().unwrap();
    for (i, (name, yaml)) in crd::render_yaml().unwrap().into_iter().enumerate() {
        // The YAML (folded long CEL rules and all) reads back as exactly the generated CRD.
        let parsed: Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(
            parsed,
            serde_json::to_value(&crds[i]).unwrap(),
            "{name} does not round-trip"
        );
        let path = dir.join(&name);
        if update {
            std::fs::write(&path, &yaml).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == yaml,
            "deploy/crds/{name} is out of date; regenerate with: cargo run -- crds --dir deploy/crds"
        );
    }
}
