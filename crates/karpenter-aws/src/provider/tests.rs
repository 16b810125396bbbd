//! Unit tests of the provider that make no AWS call.

use std::collections::BTreeMap;

use karpenter_api::v1::{EC2NodeClassSpec, NodeClaimTemplate, NodePoolSpec};
use karpenter_core::clock::FakeClock;
use karpenter_core::instance_type::{Offering, Overhead};
use karpenter_core::resources::{self, Quantity, ResourceList};

use super::*;
use crate::ClientOptions;
use crate::unavailable::OfferingKey;

struct OneClass(EC2NodeClass);

#[async_trait]
impl NodeClassSource for OneClass {
    async fn node_class(&self, name: &str) -> Result<Option<EC2NodeClass>, CloudError> {
        Ok((self.0.metadata.name.as_deref() == Some(name)).then(|| self.0.clone()))
    }
}

struct Types(Vec<Arc<InstanceType>>);

#[async_trait]
impl InstanceTypeSource for Types {
    async fn instance_types(
        &self,
        _node_class: &EC2NodeClass,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        Ok(self.0.clone())
    }
}

/// An m5.large with two spot offerings (also used by `hydrate`'s tests).
pub(super) fn m5_large() -> Arc<InstanceType> {
    let mut capacity = ResourceList::new();
    capacity.set(resources::CPU, Quantity::from_units(2));
    capacity.set(resources::MEMORY, Quantity::from_gibibytes(8));
    capacity.set(resources::PODS, Quantity::from_units(29));
    capacity.set(resources::EFA, Quantity::ZERO);
    Arc::new(InstanceType {
        name: "m5.large".into(),
        labels: BTreeMap::from([(wk::ARCH_LABEL.to_string(), "amd64".to_string())]),
        capacity,
        overhead: Overhead::default(),
        offerings: ["us-west-2a", "us-west-2b"]
            .iter()
            .map(|z| Offering {
                zone: (*z).to_string(),
                capacity_type: "spot".into(),
                price: 0.04,
                available: true,
                ..Offering::default()
            })
            .collect(),
        ..Default::default()
    })
}

/// A provider whose clients point nowhere: these tests make no AWS call.
async fn offline_provider(types: Option<Vec<Arc<InstanceType>>>) -> AwsCloudProvider {
    let clients = AwsClients::load(&ClientOptions {
        region: Some("us-west-2".into()),
        endpoint_url: Some("http://127.0.0.1:9".into()),
        static_credentials: Some(aws_sdk_ec2::config::Credentials::new(
            "a", "b", None, None, "test",
        )),
        ..ClientOptions::default()
    })
    .await
    .unwrap();
    AwsCloudProvider::new(
        clients,
        ClusterInfo::default(),
        Arc::new(OneClass(EC2NodeClass::new(
            "default",
            EC2NodeClassSpec::default(),
        ))),
        types.map(|t| Arc::new(Types(t)) as Arc<dyn InstanceTypeSource>),
        Arc::new(FakeClock::default()),
    )
}

fn node_pool() -> NodePool {
    NodePool::new(
        "general",
        NodePoolSpec {
            template: NodeClaimTemplate {
                spec: karpenter_api::v1::NodeClaimTemplateSpec {
                    node_class_ref: karpenter_api::v1::NodeClassReference {
                        group: wk::AWS_GROUP.into(),
                        kind: "EC2NodeClass".into(),
                        name: "default".into(),
                    },
                    ..Default::default()
                },
                ..Default::default()
            },
            ..Default::default()
        },
    )
}

#[tokio::test]
async fn instance_types_report_offerings_marked_unavailable() {
    let provider = offline_provider(Some(vec![m5_large()])).await;
    provider
        .unavailable_offerings()
        .mark(OfferingKey::new("spot", "m5.large", "us-west-2a"));
    let types = provider.instance_types(&node_pool(), None).await.unwrap();
    let availability: Vec<(&str, bool)> = types[0]
        .offerings
        .iter()
        .map(|o| (o.zone.as_str(), o.available))
        .collect();
    assert_eq!(
        availability,
        vec![("us-west-2a", false), ("us-west-2b", true)]
    );
}

#[tokio::test]
async fn without_an_instance_type_source_the_error_says_so() {
    let provider = offline_provider(None).await;
    let err = provider
        .instance_types(&node_pool(), None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no instance-type source"), "{err}");
    let mut other = node_pool();
    other.spec.template.spec.node_class_ref.name = "missing".into();
    let err = provider.instance_types(&other, None).await.unwrap_err();
    assert!(matches!(err, CloudError::NodeClassNotReady(_)), "{err}");
}

#[tokio::test]
async fn instance_types_offer_the_node_class_reservations_while_they_have_room() {
    let mut class = EC2NodeClass::new("default", EC2NodeClassSpec::default());
    class.status = Some(karpenter_api::v1::EC2NodeClassStatus {
        capacity_reservations: vec![karpenter_api::v1::CapacityReservationStatus {
            id: "cr-1".into(),
            availability_zone: "us-west-2a".into(),
            instance_type: "m5.large".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let availability = ReservationAvailability::default();
    availability.sync(&[reservations::ReservationInfo {
        id: "cr-1".into(),
        instance_type: "m5.large".into(),
        zone: "us-west-2a".into(),
        owner_id: "123456789012".into(),
        instance_match_criteria: "targeted".into(),
        available: 1,
        end: None,
        reservation_type: "default".into(),
        interruptible: false,
    }]);
    let provider = offline_provider(Some(vec![m5_large()]))
        .await
        .with_reservations(availability.clone(), true);
    let reserved = |types: &[Arc<InstanceType>]| -> Vec<(String, bool, Option<u32>)> {
        types[0]
            .offerings
            .iter()
            .filter(|o| o.capacity_type == wk::CAPACITY_TYPE_RESERVED)
            .map(|o| {
                (
                    o.reservation_id.clone().unwrap_or_default(),
                    o.available,
                    o.reservation_capacity,
                )
            })
            .collect()
    };
    let types = provider
        .instance_types(&node_pool(), Some(&class))
        .await
        .unwrap();
    assert_eq!(reserved(&types), vec![("cr-1".to_string(), true, Some(1))]);
    provider.reservation_availability().mark_launched("cr-1");
    let types = provider
        .instance_types(&node_pool(), Some(&class))
        .await
        .unwrap();
    assert_eq!(reserved(&types), vec![("cr-1".to_string(), false, Some(0))]);

    // ReservedCapacity gate off: no reserved offerings at all.
    let gated = offline_provider(Some(vec![m5_large()]))
        .await
        .with_reservations(availability, false);
    let types = gated
        .instance_types(&node_pool(), Some(&class))
        .await
        .unwrap();
    assert!(reserved(&types).is_empty());
}
