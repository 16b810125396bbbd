//! Each deliberately invalid manifest is rejected with an error at the expected field path.

use karpenter_api::validation::{Outcome, validate_document};

use super::fixtures::{invalid_case, invalid_case_names};

fn assert_rejected(name: &str) {
    let case = invalid_case(name);
    let report = validate_document(&case.value);
    let Outcome::Invalid(errors) = report.outcome else {
        panic!("{name}: accepted, expected {}: {}", case.path, case.message)
    };
    assert!(
        errors
            .iter()
            .any(|e| e.path == case.path && e.message.contains(&case.message)),
        "{name}: expected `{}: ...{}...`, got:\n{}",
        case.path,
        case.message,
        errors
            .iter()
            .map(|e| format!("  {e}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        errors
            .iter()
            .all(|e| e.hint.as_ref().is_some_and(|h| !h.is_empty())),
        "{name}: every error has a hint"
    );
}

macro_rules! invalid_cases {
    ($($name:ident,)*) => {
        $(#[test] fn $name() { assert_rejected(&stringify!($name).replace('_', "-")); })*

        #[test]
        fn every_invalid_fixture_has_a_named_test() {
            let named: Vec<String> = vec![$(stringify!($name).replace('_', "-")),*];
            let mut on_disk = invalid_case_names();
            on_disk.sort();
            let mut named_sorted = named.clone();
            named_sorted.sort();
            assert_eq!(named_sorted, on_disk);
            assert!(named.len() >= 40);
        }
    };
}

invalid_cases! {
    cb_both_refs,
    cb_negative_replicas,
    cb_template_without_size,
    no_bad_price_adjustment,
    no_capacity_cpu,
    no_missing_requirements,
    no_price_and_adjustment,
    no_req_hostname,
    no_req_not_in_without_values,
    no_weight_zero,
    ec2_alias_bad_family,
    ec2_alias_no_version,
    ec2_alias_windows_version,
    ec2_alias_with_other_terms,
    ec2_ami_family_mismatch,
    ec2_ami_family_missing,
    ec2_ami_id_with_name,
    ec2_bad_ami_family,
    ec2_ebs_without_size,
    ec2_empty_role,
    ec2_empty_subnet_terms,
    ec2_empty_tag_value,
    ec2_hop_limit,
    ec2_http_tokens,
    ec2_instance_store_policy,
    ec2_kubelet_eviction_soft_grace,
    ec2_kubelet_image_gc,
    ec2_kubelet_max_pods,
    ec2_kubelet_reserved_key,
    ec2_missing_ami_terms,
    ec2_no_role,
    ec2_placement_group_both,
    ec2_restricted_tag_nodepool,
    ec2_restricted_tag,
    ec2_role_and_profile,
    ec2_sg_name_and_id,
    ec2_subnet_bad_id,
    ec2_subnet_id_and_tags,
    ec2_subnet_term_empty,
    ec2_two_root_volumes,
    ec2_unknown_field,
    ec2_volume_size,
    ec2_volume_type,
    nc_empty_nodeclassref_kind,
    nc_missing_requirements,
    nc_req_hostname,
    np_bad_consolidate_after,
    np_bad_name,
    np_bad_operator,
    np_bad_policy,
    np_budget_cron_four_fields,
    np_budget_cron_invalid,
    np_budget_duration_seconds,
    np_budget_duration_without_schedule,
    np_budget_nodes_negative,
    np_budget_nodes_percent,
    np_budget_reason_expired,
    np_budget_schedule_without_duration,
    np_label_bad_key,
    np_label_bad_value,
    np_label_hostname,
    np_label_karpenter_domain,
    np_label_karpenter_subdomain,
    np_label_nodepool,
    np_limits_bad_quantity,
    np_missing_nodeclassref,
    np_missing_requirements,
    np_negative_expire_after,
    np_nodeclassref_empty_group,
    np_nodeclassref_empty_name,
    np_nodeclassref_group_slash,
    np_policy_lowercase,
    np_replicas_negative,
    np_req_bad_key,
    np_req_capacity_type_unknown,
    np_req_gt_decimal,
    np_req_gt_negative,
    np_req_gt_not_integer,
    np_req_hostname,
    np_req_in_without_values,
    np_req_karpenter_domain,
    np_req_lt_two_values,
    np_req_min_values_51,
    np_req_min_values_above_values,
    np_req_min_values_zero,
    np_req_nodepool,
    np_static_with_cpu_limit,
    np_static_with_weight,
    np_taint_bad_effect,
    np_taint_bad_key,
    np_taint_duplicate,
    np_taint_missing_key,
    np_tgp_never,
    np_unknown_field,
    np_weight_string,
    np_weight_too_high,
    np_weight_zero,
}

/// A schema error does not hide the CEL and runtime errors of the same object: the user sees every
/// problem in one run, as `validate` promises.
#[test]
fn schema_and_cel_errors_are_reported_together() {
    let doc = serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "weight": 200,
            "template": {"spec": {
                "requirements": [{"key": "kubernetes.io/hostname", "operator": "Exists"}],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }}
        }
    });
    let Outcome::Invalid(errors) = validate_document(&doc).outcome else {
        panic!("accepted an invalid NodePool")
    };
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert!(paths.contains(&"spec.weight"), "{paths:?}");
    assert!(
        paths.contains(&"spec.template.spec.requirements[0].key"),
        "{paths:?}"
    );
    let unique: std::collections::BTreeSet<_> = errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(unique.len(), errors.len(), "no error is reported twice");
}
