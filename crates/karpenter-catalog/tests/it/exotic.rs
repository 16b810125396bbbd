//! The launch-time exotic filter.

use karpenter_catalog::Catalog;
use karpenter_catalog::exotic::{is_exotic, prefer_generic};
use karpenter_core::instance_type::InstanceType;

use super::find;

#[test]
fn metal_gpu_and_accelerator_types_are_exotic() {
    let types = Catalog::embedded()
        .unwrap()
        .instance_types("us-east-1")
        .unwrap();
    for name in [
        "a1.metal",
        "m5.metal",
        "p4d.24xlarge",
        "g5.xlarge",
        "inf1.xlarge",
        "trn1.2xlarge",
    ] {
        assert!(is_exotic(find(&types, name)), "{name}");
    }
    for name in ["m5.large", "a1.large", "c6g.xlarge", "m5d.24xlarge"] {
        assert!(!is_exotic(find(&types, name)), "{name}");
    }
}

#[test]
fn generic_types_win_unless_there_are_none() {
    let types = Catalog::embedded()
        .unwrap()
        .instance_types("us-east-1")
        .unwrap();
    let pick = |names: &[&str]| -> Vec<String> {
        let mut chosen: Vec<&InstanceType> = names.iter().map(|n| find(&types, n)).collect();
        prefer_generic(&mut chosen, |t| t);
        chosen.iter().map(|t| t.name.clone()).collect()
    };
    assert_eq!(
        pick(&["a1.metal", "m5.large", "p4d.24xlarge"]),
        ["m5.large"]
    );
    assert_eq!(
        pick(&["a1.metal", "p4d.24xlarge"]),
        ["a1.metal", "p4d.24xlarge"]
    );
}
