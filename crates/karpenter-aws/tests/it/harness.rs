//! Connects the tests to the moto launcher that `./scripts/test.sh` starts, seeds networks in it,
//! and gives them a real control plane (`karpenter-envtest`).

use std::sync::atomic::{AtomicU32, Ordering};

use aws_sdk_ec2::config::Credentials;
use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
use karpenter_aws::{AwsClients, ClientOptions};

pub const ENDPOINT_ENV: &str = "KARPENTER_TEST_AWS_ENDPOINT";
pub const SKIP_ENV: &str = "KARPENTER_SKIP_MOTO";
pub const DISCOVERY_TAG: &str = "karpenter.sh/discovery";
/// The launcher's insufficient-capacity injection: a JSON list of `capacity:type:zone` patterns.
pub const ICE_PARAMETER: &str = "/moto-karpenter/ice";

/// The injection is one parameter global to the launcher: tests that set it hold this lock.
pub static ICE_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Sets the launcher's insufficient-capacity patterns (`[]` turns the injection off).
pub async fn set_ice(clients: &AwsClients, patterns: &[&str]) {
    clients
        .ssm
        .put_parameter()
        .name(ICE_PARAMETER)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .overwrite(true)
        .value(serde_json::to_string(patterns).unwrap())
        .send()
        .await
        .unwrap();
}

/// The launcher's fake capacity reservations: a JSON list of EC2 `CapacityReservation`s (see
/// `tests/moto/README.md`).
pub const RESERVATIONS_PARAMETER: &str = "/moto-karpenter/capacity-reservations";

/// The reservations are one parameter global to the launcher: tests that set it hold this lock.
pub static RESERVATIONS_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Replaces the launcher's capacity reservations (`[]`: none).
pub async fn set_reservations(clients: &AwsClients, reservations: &serde_json::Value) {
    clients
        .ssm
        .put_parameter()
        .name(RESERVATIONS_PARAMETER)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .overwrite(true)
        .value(reservations.to_string())
        .send()
        .await
        .unwrap();
}

/// Clients pointed at moto, or `None` (after saying so) when `KARPENTER_SKIP_MOTO=1`. Without the
/// endpoint the test fails: moto tests must never pass silently.
pub async fn moto_clients() -> Option<AwsClients> {
    // moto answers from one Python thread shared by every test of the binary; a paginated
    // DescribeInstanceTypes alone takes seconds on a loaded machine.
    moto_clients_with_timeouts(
        std::time::Duration::from_secs(120),
        std::time::Duration::from_secs(60),
    )
    .await
}

/// [`moto_clients`] with other per-call and per-attempt timeouts.
pub async fn moto_clients_with_timeouts(
    operation_timeout: std::time::Duration,
    attempt_timeout: std::time::Duration,
) -> Option<AwsClients> {
    let endpoint = match std::env::var(ENDPOINT_ENV) {
        Ok(endpoint) if !endpoint.is_empty() => endpoint,
        _ if std::env::var(SKIP_ENV).as_deref() == Ok("1") => {
            eprintln!("skipped: {SKIP_ENV}=1, this test needs moto");
            return None;
        }
        _ => panic!(
            "{ENDPOINT_ENV} is not set: run ./scripts/test.sh, which starts the moto emulator these \
             tests need (or set {SKIP_ENV}=1 to skip them)"
        ),
    };
    let options = ClientOptions {
        region: Some("us-west-2".into()),
        endpoint_url: Some(endpoint),
        static_credentials: Some(Credentials::new("testing", "testing", None, None, "moto")),
        operation_timeout,
        attempt_timeout,
        ..ClientOptions::default()
    };
    Some(AwsClients::load(&options).await.expect("clients for moto"))
}

/// A cluster name no other test (or earlier run against the same moto) uses, so tests can share
/// one emulator.
pub fn unique_cluster(test: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{test}-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn tags(resource: ResourceType, pairs: &[(&str, &str)]) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(
            pairs
                .iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                .collect(),
        ))
        .build()
}

/// The resources [`seed_network`] created.
pub struct Network {
    /// Tagged for discovery: a /24 in us-west-2a and a /26 in us-west-2b.
    pub large_subnet: String,
    pub small_subnet: String,
    /// In the same VPC, without the discovery tag.
    pub untagged_subnet: String,
    pub tagged_security_group: String,
    pub untagged_security_group: String,
    pub security_group_name: String,
}

/// A VPC with two discovery-tagged subnets and one untagged, and a tagged and an untagged
/// security group, as a cluster's network looks to Karpenter.
pub async fn seed_network(clients: &AwsClients, cluster: &str) -> Network {
    let ec2 = &clients.ec2;
    let discovery = [(DISCOVERY_TAG, cluster)];
    let vpc_id = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .expect("CreateVpc")
        .vpc()
        .and_then(|v| v.vpc_id())
        .expect("vpc id")
        .to_string();
    let subnet = |cidr: &'static str, zone: &'static str, tagged: bool| {
        let vpc_id = vpc_id.clone();
        async move {
            let mut request = ec2
                .create_subnet()
                .vpc_id(vpc_id)
                .cidr_block(cidr)
                .availability_zone(zone);
            if tagged {
                request = request.tag_specifications(tags(ResourceType::Subnet, &discovery));
            }
            request
                .send()
                .await
                .expect("CreateSubnet")
                .subnet()
                .and_then(|s| s.subnet_id())
                .expect("subnet id")
                .to_string()
        }
    };
    let large_subnet = subnet("10.0.0.0/24", "us-west-2a", true).await;
    let small_subnet = subnet("10.0.1.0/26", "us-west-2b", true).await;
    let untagged_subnet = subnet("10.0.2.0/24", "us-west-2c", false).await;
    let security_group_name = format!("{cluster}-nodes");
    let group = |name: String, tagged: bool| {
        let vpc_id = vpc_id.clone();
        async move {
            let mut request = ec2
                .create_security_group()
                .group_name(name)
                .description("karpenter-aws test")
                .vpc_id(vpc_id);
            if tagged {
                request = request.tag_specifications(tags(ResourceType::SecurityGroup, &discovery));
            }
            request
                .send()
                .await
                .expect("CreateSecurityGroup")
                .group_id()
                .expect("group id")
                .to_string()
        }
    };
    let tagged_security_group = group(security_group_name.clone(), true).await;
    let untagged_security_group = group(format!("{cluster}-other"), false).await;
    Network {
        large_subnet,
        small_subnet,
        untagged_subnet,
        tagged_security_group,
        untagged_security_group,
        security_group_name,
    }
}

/// The CRDs the controller needs, as users install them (`deploy/crds`).
pub fn control_plane_setup() -> karpenter_envtest::Setup {
    karpenter_envtest::Setup {
        crds: vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")],
    }
}

/// A real control plane for `test` (`karpenter-envtest`: kube-apiserver, controller-manager and
/// scheduler, the committed CRDs, a namespace of the test's own); `None` (after saying so) without
/// `KUBEBUILDER_ASSETS`.
pub async fn real_cluster(test: &str) -> Option<karpenter_envtest::Cluster> {
    karpenter_envtest::cluster(test, &control_plane_setup()).await
}
