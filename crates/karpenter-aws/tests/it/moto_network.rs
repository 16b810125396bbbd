//! Subnet and security-group resolution against moto.

use std::collections::BTreeMap;

use karpenter_api::v1::{
    AmiSelectorTerm, CONDITION_FALSE, ConditionsExt, EC2NodeClassSpec, EC2NodeClassStatus,
    SecurityGroupSelectorTerm, SubnetSelectorTerm,
};
use karpenter_aws::Error;
use karpenter_aws::resolve::{
    CONDITION_AMIS_READY, CONDITION_SECURITY_GROUPS_READY, CONDITION_SUBNETS_READY,
    REASON_SUBNETS_NOT_FOUND,
};

use crate::harness::{DISCOVERY_TAG, moto_clients, seed_network, unique_cluster};

fn discovery(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(DISCOVERY_TAG.to_string(), cluster.to_string())])
}

#[tokio::test]
async fn subnets_by_discovery_tag_most_free_ips_first() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let cluster = unique_cluster("subnets");
    let network = seed_network(&clients, &cluster).await;
    let subnets = clients
        .resolve_subnets(&[SubnetSelectorTerm {
            tags: discovery(&cluster),
            ..Default::default()
        }])
        .await
        .unwrap();
    let ids: Vec<&str> = subnets.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, [&network.large_subnet, &network.small_subnet]);
    assert_eq!(subnets[0].zone, "us-west-2a");
    assert_eq!(subnets[1].zone, "us-west-2b");
    assert!(subnets[0].zone_id.is_some(), "zone IDs are reported");
}

#[tokio::test]
async fn subnets_by_wildcard_tag_and_by_id() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let cluster = unique_cluster("subnet-terms");
    let network = seed_network(&clients, &cluster).await;
    // The untagged subnet joins through an id term; the others through a wildcard value on a
    // key only this test's subnets carry.
    let subnets = clients
        .resolve_subnets(&[
            SubnetSelectorTerm {
                tags: BTreeMap::from([(DISCOVERY_TAG.to_string(), "*".to_string())]),
                ..Default::default()
            },
            SubnetSelectorTerm {
                id: Some(network.untagged_subnet.clone()),
                ..Default::default()
            },
        ])
        .await
        .unwrap();
    let ids: Vec<&str> = subnets.iter().map(|s| s.id.as_str()).collect();
    for expected in [
        &network.large_subnet,
        &network.small_subnet,
        &network.untagged_subnet,
    ] {
        assert!(
            ids.contains(&expected.as_str()),
            "{expected} missing from {ids:?}"
        );
    }
    let by_id = clients
        .resolve_subnets(&[SubnetSelectorTerm {
            id: Some(network.small_subnet.clone()),
            ..Default::default()
        }])
        .await
        .unwrap();
    assert_eq!(by_id.len(), 1);
    assert_eq!(by_id[0].id, network.small_subnet);
}

#[tokio::test]
async fn security_groups_by_tag_id_and_name() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let cluster = unique_cluster("security-groups");
    let network = seed_network(&clients, &cluster).await;
    let by_tag = clients
        .resolve_security_groups(&[SecurityGroupSelectorTerm {
            tags: discovery(&cluster),
            ..Default::default()
        }])
        .await
        .unwrap();
    assert_eq!(by_tag.len(), 1);
    assert_eq!(by_tag[0].id, network.tagged_security_group);
    assert_eq!(
        by_tag[0].name.as_deref(),
        Some(network.security_group_name.as_str())
    );

    let by_name_or_id = clients
        .resolve_security_groups(&[
            SecurityGroupSelectorTerm {
                name: Some(network.security_group_name.clone()),
                ..Default::default()
            },
            SecurityGroupSelectorTerm {
                id: Some(network.untagged_security_group.clone()),
                ..Default::default()
            },
        ])
        .await
        .unwrap();
    let mut expected = vec![
        network.tagged_security_group.clone(),
        network.untagged_security_group.clone(),
    ];
    expected.sort();
    let ids: Vec<String> = by_name_or_id.into_iter().map(|g| g.id).collect();
    assert_eq!(ids, expected, "sorted by ID, one entry per group");
}

#[tokio::test]
async fn nothing_matching_says_what_was_looked_for() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let cluster = unique_cluster("nothing");
    let err = clients
        .resolve_subnets(&[SubnetSelectorTerm {
            tags: discovery(&cluster),
            ..Default::default()
        }])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    assert!(!err.retryable());
    assert_eq!(
        err.to_string(),
        format!("no subnet matches tags karpenter.sh/discovery={cluster}")
    );
}

#[tokio::test]
async fn node_class_status_gets_entries_and_conditions() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let cluster = unique_cluster("node-class");
    let network = seed_network(&clients, &cluster).await;
    let spec = EC2NodeClassSpec {
        subnet_selector_terms: vec![SubnetSelectorTerm {
            tags: discovery(&cluster),
            ..Default::default()
        }],
        security_group_selector_terms: vec![SecurityGroupSelectorTerm {
            tags: discovery("no-such-cluster"),
            ..Default::default()
        }],
        ami_selector_terms: vec![AmiSelectorTerm {
            alias: Some("al2023@latest".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let now = "2026-01-01T00:00:00Z".parse().unwrap();
    let resolution = clients.resolve_node_class(&spec, "1.33", now).await;
    let mut status = EC2NodeClassStatus::default();
    resolution.apply(&mut status, "2026-01-01T00:00:00Z", Some(1));

    assert_eq!(status.subnets.len(), 2);
    assert_eq!(status.subnets[0].id, network.large_subnet);
    assert!(status.is_condition_true(CONDITION_SUBNETS_READY));
    assert!(status.is_condition_true(CONDITION_AMIS_READY));
    assert!(!status.amis.is_empty());
    let groups = status.condition(CONDITION_SECURITY_GROUPS_READY).unwrap();
    assert_eq!(groups.status, CONDITION_FALSE);
    assert_eq!(
        groups.message.as_deref(),
        Some("no security group matches tags karpenter.sh/discovery=no-such-cluster")
    );
    assert!(status.security_groups.is_empty());

    // The same with no matching subnet: the reason upstream uses.
    let mut spec = spec;
    spec.subnet_selector_terms[0].tags = discovery("my-cluster-without-subnets");
    let resolution = clients.resolve_node_class(&spec, "1.33", now).await;
    resolution.apply(&mut status, "2026-01-01T00:01:00Z", Some(2));
    let subnets = status.condition(CONDITION_SUBNETS_READY).unwrap();
    assert_eq!(subnets.reason.as_deref(), Some(REASON_SUBNETS_NOT_FOUND));
    assert_eq!(
        subnets.message.as_deref(),
        Some("no subnet matches tags karpenter.sh/discovery=my-cluster-without-subnets")
    );
    assert!(status.subnets.is_empty());
}
