//! The launch path against moto, at the provider level: a NodeClass resolved on moto, NodeClaims
//! created through `AwsCloudProvider` (launch templates + CreateFleet), then get/list/delete, the
//! crash-between-launch-and-status case, an injected insufficient-capacity error, and the
//! ownership check of `delete`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_ec2::types::InstanceType as Ec2InstanceType;
use karpenter_api::v1::{
    AmiSelectorTerm, CONDITION_READY, CONDITION_TRUE, ConditionsExt, EC2NodeClass,
    EC2NodeClassSpec, EC2NodeClassStatus, NodeClaim, NodeClaimSpec, NodeClaimStatus,
    NodeClassReference, SecurityGroupSelectorTerm, SubnetSelectorTerm,
};
use karpenter_api::well_known as wk;
use karpenter_aws::AwsClients;
use karpenter_aws::instance::{EKS_CLUSTER_NAME_TAG, NODECLAIM_TAG, NODECLASS_TAG, NODEPOOL_TAG};
use karpenter_aws::provider::{AwsCloudProvider, ClusterInfo, InstanceTypeSource, NodeClassSource};
use karpenter_aws::unavailable::OfferingKey;
use karpenter_core::clock::FakeClock;
use karpenter_core::cloud_provider::{CapacityOverlay, CloudError, CloudProvider};
use karpenter_core::instance_type::{InstanceType, Offering, Overhead};
use karpenter_core::resources::{self, Quantity, ResourceList};

use crate::harness::{
    DISCOVERY_TAG, ICE_LOCK, ICE_PARAMETER, moto_clients, seed_network, set_ice, unique_cluster,
};

const NODE_CLASS: &str = "default";

struct StaticNodeClasses(EC2NodeClass);

#[async_trait]
impl NodeClassSource for StaticNodeClasses {
    async fn node_class(&self, name: &str) -> Result<Option<EC2NodeClass>, CloudError> {
        Ok((self.0.metadata.name.as_deref() == Some(name)).then(|| self.0.clone()))
    }
}

struct StaticTypes(Vec<Arc<InstanceType>>);

#[async_trait]
impl InstanceTypeSource for StaticTypes {
    async fn instance_types(
        &self,
        _node_class: &EC2NodeClass,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        Ok(self.0.clone())
    }
}

/// A type offered spot and on-demand in us-west-2a and us-west-2b (the seeded subnets' zones).
fn instance_type(name: &str, arch: &str, cpu: i64, spot: f64, on_demand: f64) -> Arc<InstanceType> {
    let mut capacity = ResourceList::new();
    capacity.set(resources::CPU, Quantity::from_units(cpu));
    capacity.set(resources::MEMORY, Quantity::from_gibibytes(cpu * 4));
    capacity.set(resources::PODS, Quantity::from_units(29));
    let offering = |zone: &str, capacity_type: &str, price: f64| Offering {
        zone: zone.into(),
        capacity_type: capacity_type.into(),
        price,
        available: true,
        ..Offering::default()
    };
    Arc::new(InstanceType {
        name: name.into(),
        labels: BTreeMap::from([
            (wk::INSTANCE_TYPE_LABEL.to_string(), name.to_string()),
            (wk::ARCH_LABEL.to_string(), arch.to_string()),
            (wk::OS_LABEL.to_string(), "linux".to_string()),
        ]),
        capacity,
        overhead: Overhead::default(),
        offerings: ["us-west-2a", "us-west-2b"]
            .iter()
            .flat_map(|z| {
                [
                    offering(z, "spot", spot),
                    offering(z, "on-demand", on_demand),
                ]
            })
            .collect(),
        ..Default::default()
    })
}

/// The discovery-tagged security group `seed_network` made for `cluster`.
async fn network_security_group(clients: &AwsClients, cluster: &str) -> String {
    clients
        .resolve_security_groups(&[SecurityGroupSelectorTerm {
            tags: BTreeMap::from([(DISCOVERY_TAG.to_string(), cluster.to_string())]),
            ..Default::default()
        }])
        .await
        .unwrap()[0]
        .id
        .clone()
}

/// An AL2023 EC2NodeClass of `cluster`, resolved on moto and Ready.
async fn resolved_node_class(clients: &AwsClients, cluster: &str) -> EC2NodeClass {
    resolved_node_class_with_alias(clients, cluster, "al2023@latest").await
}

/// An EC2NodeClass of `cluster` selecting AMIs by `alias`, resolved on moto and Ready.
async fn resolved_node_class_with_alias(
    clients: &AwsClients,
    cluster: &str,
    alias: &str,
) -> EC2NodeClass {
    seed_network(clients, cluster).await;
    let discovery = BTreeMap::from([(DISCOVERY_TAG.to_string(), cluster.to_string())]);
    let spec = EC2NodeClassSpec {
        subnet_selector_terms: vec![SubnetSelectorTerm {
            tags: discovery.clone(),
            id: None,
        }],
        security_group_selector_terms: vec![SecurityGroupSelectorTerm {
            tags: discovery,
            ..Default::default()
        }],
        ami_selector_terms: vec![AmiSelectorTerm {
            alias: Some(alias.into()),
            ..Default::default()
        }],
        role: Some("KarpenterNodeRole".into()),
        tags: BTreeMap::from([("team".to_string(), "platform".to_string())]),
        ..Default::default()
    };
    let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let resolution = clients.resolve_node_class(&spec, "1.32", now).await;
    let mut status = EC2NodeClassStatus::default();
    resolution.apply(&mut status, "2026-01-01T00:00:00Z", Some(1));
    assert!(
        !status.subnets.is_empty() && !status.amis.is_empty(),
        "{status:#?}"
    );
    status.instance_profile = Some(format!("{cluster}_profile"));
    status.set_condition(
        CONDITION_READY,
        CONDITION_TRUE,
        "Ready",
        "",
        "2026-01-01T00:00:00Z",
        Some(1),
    );
    let mut node_class = EC2NodeClass::new(NODE_CLASS, spec);
    node_class.status = Some(status);
    node_class
}

fn provider(
    clients: &AwsClients,
    cluster: &str,
    node_class: EC2NodeClass,
    types: Vec<Arc<InstanceType>>,
) -> AwsCloudProvider {
    AwsCloudProvider::new(
        clients.clone(),
        ClusterInfo {
            name: cluster.to_string(),
            endpoint: "https://ABC.gr7.us-west-2.eks.amazonaws.com".into(),
            ca_bundle: Some("Y2EtYnVuZGxl".into()),
            service_cidr: Some("10.100.0.0/16".into()),
            dns_ip: Some("10.100.0.10".into()),
        },
        Arc::new(StaticNodeClasses(node_class)),
        Some(Arc::new(StaticTypes(types))),
        Arc::new(FakeClock::default()),
    )
}

fn node_claim(name: &str) -> NodeClaim {
    let mut claim = NodeClaim::new(
        name,
        NodeClaimSpec {
            node_class_ref: NodeClassReference {
                group: wk::AWS_GROUP.into(),
                kind: "EC2NodeClass".into(),
                name: NODE_CLASS.into(),
            },
            ..Default::default()
        },
    );
    claim.metadata.labels = Some(BTreeMap::from([(
        wk::NODEPOOL_LABEL.to_string(),
        "general".to_string(),
    )]));
    claim
}

fn provider_id(claim: &NodeClaim) -> String {
    claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap()
}

fn label<'a>(claim: &'a NodeClaim, key: &str) -> &'a str {
    claim.metadata.labels.as_ref().unwrap()[key].as_str()
}

#[tokio::test]
async fn ten_node_claims_launch_tagged_instances_with_al2023_user_data_and_delete_terminates_them()
{
    let Some(clients) = moto_clients().await else {
        return;
    };
    let cluster = unique_cluster("launch10");
    let node_class = resolved_node_class(&clients, &cluster).await;
    let provider = provider(
        &clients,
        &cluster,
        node_class,
        vec![
            instance_type("m5.large", "amd64", 2, 0.04, 0.096),
            instance_type("m5.xlarge", "amd64", 4, 0.08, 0.192),
        ],
    );
    let mut launched = Vec::new();
    for i in 0..10 {
        let claim = provider
            .create(&node_claim(&format!("general-{i}")))
            .await
            .unwrap();
        // The cheapest spot override comes first and moto takes the first override.
        assert_eq!(label(&claim, wk::INSTANCE_TYPE_LABEL), "m5.large");
        assert_eq!(label(&claim, wk::CAPACITY_TYPE_LABEL), "spot");
        assert_eq!(label(&claim, wk::ZONE_LABEL), "us-west-2a");
        assert!(
            provider_id(&claim).starts_with("aws:///us-west-2a/i-"),
            "{}",
            provider_id(&claim)
        );
        let status = claim.status.as_ref().unwrap();
        assert_eq!(status.capacity["cpu"].0, "2");
        assert!(
            status
                .image_id
                .as_deref()
                .is_some_and(|i| i.starts_with("ami-"))
        );
        assert_eq!(
            claim.metadata.annotations.as_ref().unwrap()["karpenter.k8s.aws/instance-profile-name"],
            format!("{cluster}_profile")
        );
        launched.push(claim);
    }
    let ids: BTreeSet<String> = launched.iter().map(provider_id).collect();
    assert_eq!(ids.len(), 10);

    let instances = clients.cluster_instances(&cluster).await.unwrap();
    assert_eq!(instances.len(), 10);
    for instance in &instances {
        let tags = &instance.tags;
        assert_eq!(tags[&format!("kubernetes.io/cluster/{cluster}")], "owned");
        assert_eq!(tags[EKS_CLUSTER_NAME_TAG], cluster);
        assert_eq!(tags[NODEPOOL_TAG], "general");
        assert_eq!(tags[NODECLASS_TAG], NODE_CLASS);
        assert_eq!(tags["team"], "platform");
        assert!(tags[NODECLAIM_TAG].starts_with("general-"));
        assert_eq!(tags["Name"], tags[NODECLAIM_TAG]);
    }
    assert_eq!(provider.list().await.unwrap().len(), 10);

    // One template serves them all (same AMI, max pods, capacity type), with AL2023 user data.
    let templates = clients
        .launch_templates_for_node_class(&cluster, NODE_CLASS)
        .await
        .unwrap();
    assert_eq!(templates.len(), 1, "{templates:?}");
    assert!(templates[0].0.starts_with("karpenter.k8s.aws/"));
    let user_data = clients
        .launch_template_user_data(&templates[0].0)
        .await
        .unwrap()
        .unwrap();
    assert!(
        user_data.contains("Content-Type: application/node.eks.aws"),
        "{user_data}"
    );
    assert!(user_data.contains("# Karpenter Generated NodeConfig"));
    assert!(user_data.contains("kind: NodeConfig"));
    assert!(user_data.contains(&format!("name: {cluster}")));
    assert!(user_data.contains("maxPods: 29"));
    assert!(user_data.contains("karpenter.sh/nodepool=general"));

    let got = provider.get(&provider_id(&launched[3])).await.unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("general-3"));
    assert_eq!(label(&got, wk::INSTANCE_TYPE_LABEL), "m5.large");

    for claim in &launched {
        provider.delete(claim).await.unwrap();
    }
    for claim in &launched {
        assert!(matches!(
            provider.delete(claim).await,
            Err(CloudError::NodeClaimNotFound(_))
        ));
    }
    assert!(provider.list().await.unwrap().is_empty());
    assert!(matches!(
        provider.get(&provider_id(&launched[0])).await,
        Err(CloudError::NodeClaimNotFound(_))
    ));
    // Templates outlive their instances until the NodeClass goes.
    assert_eq!(
        clients
            .launch_templates_for_node_class(&cluster, NODE_CLASS)
            .await
            .unwrap()
            .len(),
        1
    );
    let deleted = clients
        .delete_launch_templates_for_node_class(&cluster, NODE_CLASS)
        .await
        .unwrap();
    assert_eq!(deleted, vec![templates[0].0.clone()]);
    assert!(
        clients
            .launch_templates_for_node_class(&cluster, NODE_CLASS)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_crash_between_create_fleet_and_the_status_write_launches_nothing_new() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let cluster = unique_cluster("crash");
    let node_class = resolved_node_class(&clients, &cluster).await;
    let types = vec![instance_type("m5.large", "amd64", 2, 0.04, 0.096)];
    let first = provider(&clients, &cluster, node_class.clone(), types.clone());
    let claim = node_claim("general-crash");
    let launched = first.create(&claim).await.unwrap();
    // "Restart": a new provider (empty caches) gets the NodeClaim as it was before the status
    // write, without a provider ID.
    let restarted = provider(&clients, &cluster, node_class, types);
    let again = restarted.create(&claim).await.unwrap();
    assert_eq!(provider_id(&again), provider_id(&launched));
    assert_eq!(clients.cluster_instances(&cluster).await.unwrap().len(), 1);
    // Deleting that NodeClaim (still without a provider ID) finds the instance by its tag.
    restarted.delete(&claim).await.unwrap();
    assert!(
        clients
            .cluster_instances(&cluster)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        restarted.delete(&claim).await,
        Err(CloudError::NodeClaimNotFound(_))
    ));
}

#[tokio::test]
async fn insufficient_capacity_moves_the_launch_to_another_offering() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let cluster = unique_cluster("ice");
    let node_class = resolved_node_class(&clients, &cluster).await;
    let _ice = ICE_LOCK.lock().await;
    // Types no other test launches: the launcher's injection is global.
    let provider = provider(
        &clients,
        &cluster,
        node_class,
        vec![
            instance_type("c6i.large", "amd64", 2, 0.03, 0.085),
            instance_type("c5.large", "amd64", 2, 0.035, 0.085),
        ],
    );
    set_ice(&clients, &["spot:c6i.large:*"]).await;
    let claim = provider.create(&node_claim("general-ice-1")).await;
    let marked = provider.unavailable_offerings().marked();
    let moved = claim.unwrap();
    assert_eq!(label(&moved, wk::INSTANCE_TYPE_LABEL), "c5.large");
    assert_eq!(label(&moved, wk::CAPACITY_TYPE_LABEL), "spot");
    assert!(
        marked.contains(&OfferingKey::new("spot", "c6i.large", "us-west-2a")),
        "{marked:?}"
    );

    // No spot capacity at all: this launch fails as insufficient capacity and marks every spot
    // offering; the next one goes on-demand.
    set_ice(&clients, &["spot:c6i.large:*", "spot:c5.large:*"]).await;
    let failed = provider.create(&node_claim("general-ice-2")).await;
    assert!(
        matches!(failed, Err(CloudError::InsufficientCapacity(ref m)) if m.contains("InsufficientInstanceCapacity")),
        "{failed:?}"
    );
    let on_demand = provider.create(&node_claim("general-ice-2")).await;
    clients
        .ssm
        .delete_parameter()
        .name(ICE_PARAMETER)
        .send()
        .await
        .unwrap();
    let on_demand = on_demand.unwrap();
    assert_eq!(label(&on_demand, wk::CAPACITY_TYPE_LABEL), "on-demand");
    assert_eq!(clients.cluster_instances(&cluster).await.unwrap().len(), 2);
}

#[tokio::test]
async fn delete_refuses_an_instance_this_cluster_does_not_own() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let cluster = unique_cluster("owner");
    let node_class = resolved_node_class(&clients, &cluster).await;
    let image = node_class.status.as_ref().unwrap().amis[0].id.clone();
    let provider = provider(&clients, &cluster, node_class, vec![]);
    let foreign = clients
        .ec2
        .run_instances()
        .image_id(image)
        .instance_type(Ec2InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .send()
        .await
        .unwrap();
    let instance = &foreign.instances()[0];
    let id = instance.instance_id().unwrap();
    let zone = instance
        .placement()
        .and_then(|p| p.availability_zone())
        .unwrap();
    let mut claim = node_claim("general-foreign");
    claim.status = Some(NodeClaimStatus {
        provider_id: Some(format!("aws:///{zone}/{id}")),
        ..Default::default()
    });
    let refused = provider.delete(&claim).await;
    assert!(
        matches!(refused, Err(CloudError::Other { ref message, .. }) if message.contains("refusing to terminate")),
        "{refused:?}"
    );
    let still = clients
        .instance(&format!("aws:///{zone}/{id}"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(still.state, "running");
    clients
        .ec2
        .terminate_instances()
        .instance_ids(id)
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn leaked_instances_are_unclaimed_and_past_the_grace_period() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let cluster = unique_cluster("leak");
    let node_class = resolved_node_class(&clients, &cluster).await;
    let provider = provider(
        &clients,
        &cluster,
        node_class,
        vec![instance_type("m5.large", "amd64", 2, 0.04, 0.096)],
    );
    provider.create(&node_claim("general-kept")).await.unwrap();
    provider
        .create(&node_claim("general-leaked"))
        .await
        .unwrap();
    let alive = BTreeSet::from(["general-kept".to_string()]);
    let later = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3600);
    let leaked = clients
        .leaked_instances(&cluster, &alive, later, jiff::SignedDuration::from_secs(30))
        .await
        .unwrap();
    let names: Vec<&str> = leaked.iter().filter_map(|i| i.node_claim()).collect();
    assert_eq!(names, vec!["general-leaked"]);
    // Within the grace period nothing is leaked.
    let early = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(3600);
    assert!(
        clients
            .leaked_instances(&cluster, &alive, early, jiff::SignedDuration::from_secs(30))
            .await
            .unwrap()
            .is_empty()
    );
    for claim in provider.list().await.unwrap() {
        let mut claim = claim;
        claim.status.get_or_insert_with(Default::default);
        provider.delete(&claim).await.unwrap();
    }
}

#[tokio::test]
async fn bottlerocket_alias_launches_with_toml_user_data_and_its_block_devices() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let cluster = unique_cluster("bottlerocket");
    let node_class =
        resolved_node_class_with_alias(&clients, &cluster, "bottlerocket@latest").await;
    let provider = provider(
        &clients,
        &cluster,
        node_class,
        vec![instance_type("m5.large", "amd64", 2, 0.04, 0.096)],
    );
    let claim = provider.create(&node_claim("general-br")).await.unwrap();
    let templates = clients
        .launch_templates_for_node_class(&cluster, NODE_CLASS)
        .await
        .unwrap();
    assert_eq!(templates.len(), 1);
    let user_data = clients
        .launch_template_user_data(&templates[0].0)
        .await
        .unwrap()
        .unwrap();
    let settings: toml::Table = toml::from_str(&user_data).unwrap();
    let kubernetes = settings["settings"]["kubernetes"].as_table().unwrap();
    assert_eq!(kubernetes["cluster-name"].as_str(), Some(cluster.as_str()));
    assert_eq!(kubernetes["max-pods"].as_integer(), Some(29));
    assert_eq!(
        kubernetes["node-labels"]["karpenter.sh/nodepool"].as_str(),
        Some("general")
    );
    assert_eq!(
        kubernetes["node-taints"]["karpenter.sh/unregistered"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let version = clients
        .ec2
        .describe_launch_template_versions()
        .launch_template_name(&templates[0].0)
        .versions("$Latest")
        .send()
        .await
        .unwrap();
    let data = version.launch_template_versions()[0]
        .launch_template_data()
        .unwrap();
    let devices: Vec<(&str, Option<i32>)> = data
        .block_device_mappings()
        .iter()
        .map(|b| {
            (
                b.device_name().unwrap(),
                b.ebs().and_then(|e| e.volume_size()),
            )
        })
        .collect();
    assert_eq!(
        devices,
        vec![("/dev/xvda", Some(4)), ("/dev/xvdb", Some(20))]
    );
    // What moto's instances ignore is still checkable on the template itself.
    let metadata = data.metadata_options().unwrap();
    assert_eq!(metadata.http_tokens().map(|t| t.as_str()), Some("required"));
    assert_eq!(metadata.http_put_response_hop_limit(), Some(1));
    assert_eq!(
        data.iam_instance_profile().and_then(|p| p.name()),
        Some(format!("{cluster}_profile").as_str())
    );
    assert_eq!(
        data.security_group_ids(),
        [network_security_group(&clients, &cluster).await]
    );
    let template = clients
        .ec2
        .describe_launch_templates()
        .launch_template_names(&templates[0].0)
        .send()
        .await
        .unwrap();
    let tags: BTreeMap<&str, &str> = template.launch_templates()[0]
        .tags()
        .iter()
        .map(|t| (t.key().unwrap(), t.value().unwrap()))
        .collect();
    assert_eq!(tags[EKS_CLUSTER_NAME_TAG], cluster);
    assert_eq!(tags[NODECLASS_TAG], NODE_CLASS);
    assert_eq!(tags[NODEPOOL_TAG], "general");
    assert!(
        !tags.contains_key(NODECLAIM_TAG),
        "templates are shared by NodeClaims"
    );
    provider.delete(&claim).await.unwrap();
    clients
        .delete_launch_templates_for_node_class(&cluster, NODE_CLASS)
        .await
        .unwrap();
}

/// The fleet CreateFleet made for NodeClaim `name` (tagged with it), as moto recorded it.
async fn fleet_of(clients: &AwsClients, name: &str) -> aws_sdk_ec2::types::FleetData {
    let fleets = clients.ec2.describe_fleets().send().await.unwrap();
    fleets
        .fleets()
        .iter()
        .find(|f| {
            f.tags()
                .iter()
                .any(|t| t.key() == Some(NODECLAIM_TAG) && t.value() == Some(name))
        })
        .cloned()
        .unwrap_or_else(|| panic!("no fleet tagged {NODECLAIM_TAG}={name}"))
}

/// (instance type, priority) of every override of `fleet`, in request order.
fn priorities(fleet: &aws_sdk_ec2::types::FleetData) -> Vec<(String, f64)> {
    fleet
        .launch_template_configs()
        .iter()
        .flat_map(|c| c.overrides())
        .map(|o| {
            (
                o.instance_type().unwrap().as_str().to_string(),
                o.priority().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_price_overlaid_node_claim_launches_the_overlay_cheapest_type_with_prioritized_allocation()
 {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let cluster = unique_cluster("overlay");
    let node_class = resolved_node_class(&clients, &cluster).await;
    // By the list price t3a.large is the cheaper; a NodeOverlay made m6a.large the cheapest, so
    // the provisioner wrote it first and annotated the NodeClaim.
    let provider = provider(
        &clients,
        &cluster,
        node_class,
        vec![
            instance_type("t3a.large", "amd64", 2, 0.02, 0.0752),
            instance_type("m6a.large", "amd64", 2, 0.03, 0.0864),
        ],
    );
    let claim = |name: &str, annotated: bool| {
        let mut claim = node_claim(name);
        claim.spec.requirements = vec![
            karpenter_api::v1::NodeSelectorRequirementWithMinValues {
                key: wk::CAPACITY_TYPE_LABEL.into(),
                operator: "In".into(),
                values: vec!["on-demand".to_string()].into(),
                min_values: None,
            },
            karpenter_api::v1::NodeSelectorRequirementWithMinValues {
                key: wk::INSTANCE_TYPE_LABEL.into(),
                operator: "In".into(),
                values: vec!["m6a.large".to_string(), "t3a.large".to_string()].into(),
                min_values: None,
            },
        ];
        if annotated {
            claim.metadata.annotations = Some(BTreeMap::from([(
                karpenter_api::v1alpha1::PRICE_OVERLAY_APPLIED_ANNOTATION.to_string(),
                "true".to_string(),
            )]));
        }
        claim
    };

    let overlaid = provider
        .create(&claim("general-overlay-1", true))
        .await
        .unwrap();
    assert_eq!(label(&overlaid, wk::INSTANCE_TYPE_LABEL), "m6a.large");
    assert_eq!(label(&overlaid, wk::CAPACITY_TYPE_LABEL), "on-demand");
    let fleet = fleet_of(&clients, "general-overlay-1").await;
    assert_eq!(
        fleet
            .on_demand_options()
            .and_then(|o| o.allocation_strategy())
            .map(|s| s.as_str()),
        Some("prioritized")
    );
    assert_eq!(
        priorities(&fleet),
        [
            ("m6a.large".to_string(), 0.0),
            ("m6a.large".to_string(), 0.0),
            ("t3a.large".to_string(), 1.0),
            ("t3a.large".to_string(), 1.0),
        ]
    );

    // The same NodeClaim without the annotation: EC2's prices decide, lowest price first.
    let listed = provider
        .create(&claim("general-overlay-2", false))
        .await
        .unwrap();
    assert_eq!(label(&listed, wk::INSTANCE_TYPE_LABEL), "t3a.large");
    let fleet = fleet_of(&clients, "general-overlay-2").await;
    assert_eq!(
        fleet
            .on_demand_options()
            .and_then(|o| o.allocation_strategy())
            .map(|s| s.as_str()),
        Some("lowest-price")
    );
    assert_eq!(priorities(&fleet)[0], ("t3a.large".to_string(), 0.0752));
}

/// A NodeClaim planned on hugepages a NodeOverlay adds: EC2's catalogue has none, so a plain
/// create finds no type; the create with the overlay's capacity launches the option and the
/// launched NodeClaim counts the hugepages until the Node (whose kubelet reports the pages the
/// user configured) registers.
#[tokio::test]
async fn a_capacity_overlaid_node_claim_launches_and_carries_the_added_capacity() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let cluster = unique_cluster("hugepages");
    let node_class = resolved_node_class(&clients, &cluster).await;
    let provider = provider(
        &clients,
        &cluster,
        node_class,
        vec![instance_type("m6a.large", "amd64", 2, 0.03, 0.0864)],
    );
    let mut claim = node_claim("general-hugepages-1");
    claim.spec.resources = Some(karpenter_api::v1::ResourceRequirements {
        requests: BTreeMap::from([
            (
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
            ),
            (
                "hugepages-2Mi".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("512Mi".into()),
            ),
        ]),
    });
    assert!(provider.create(&claim).await.is_err());
    let overlay = CapacityOverlay::new(BTreeMap::from([(
        "m6a.large".to_string(),
        ResourceList::parse([("hugepages-2Mi", "1Gi")]).unwrap(),
    )]));
    let launched = provider
        .create_with_capacity_overlay(&claim, &overlay)
        .await
        .unwrap();
    assert_eq!(label(&launched, wk::INSTANCE_TYPE_LABEL), "m6a.large");
    let status = launched.status.as_ref().unwrap();
    assert_eq!(status.capacity["hugepages-2Mi"].0, "1Gi");
    assert_eq!(status.allocatable["hugepages-2Mi"].0, "1Gi");
    assert_eq!(status.capacity["cpu"].0, "2");
}
