//! Start-up of the aws provider for a controller replica: checks that the settings, region and
//! credentials are there (a clear error otherwise), learns the cluster (endpoint, CA, service
//! CIDR, DNS IP, Kubernetes version: the settings and the API server first, `eks:DescribeCluster`
//! for the rest), discovers instance types once, and builds the [`AwsCloudProvider`] with its
//! EC2NodeClass controller, whose cache is the provider's NodeClass source.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::Service;
use karpenter_api::v1::EC2NodeClass;
use karpenter_catalog::ProviderSettings;
use karpenter_core::clock::Clock;
use karpenter_core::cloud_provider::CloudError;
use karpenter_core::instance_type::InstanceType;
use kube::Api;

use super::{AwsCloudProvider, ClusterInfo, InstanceTypeSource};
use crate::nodeclass::{NodeClassController, NodeClassSettings, NodeClassTimings};
use crate::pricing::PriceTable;
use crate::reservations::ReservationAvailability;
use crate::{AwsClients, Error, InstanceTypeProvider, Settings, SettingsError};

/// Why the provider could not start. A wrapped AWS error is the `source`, never also part of the
/// message: the binary prints the whole chain (`{:#}`), which would otherwise say it twice.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Aws(#[from] Error),
    #[error(
        "CLUSTER_ENDPOINT is not set and eks:DescribeCluster could not tell the endpoint of cluster {cluster}"
    )]
    Endpoint {
        cluster: String,
        #[source]
        source: Error,
    },
    #[error(
        "the Kubernetes version is unknown: the API server's /version failed ({api}) and eks:DescribeCluster gave none"
    )]
    Version { api: String },
    #[error("discovering instance types (ec2:DescribeInstanceTypes)")]
    InstanceTypes(#[source] Error),
}

/// What `eks:DescribeCluster` says about the cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EksCluster {
    pub endpoint: Option<String>,
    /// Base64 PEM, as EKS gives it.
    pub ca_bundle: Option<String>,
    pub service_cidr: Option<String>,
    /// `1.32`.
    pub version: Option<String>,
}

impl AwsClients {
    pub async fn describe_cluster(&self, name: &str) -> Result<EksCluster, Error> {
        let out = self
            .eks
            .describe_cluster()
            .name(name)
            .send()
            .await
            .map_err(|e| Error::from_sdk("eks:DescribeCluster", e))?;
        let Some(cluster) = out.cluster() else {
            return Err(Error::NotFound {
                message: format!("eks:DescribeCluster returned no cluster {name}"),
            });
        };
        let network = cluster.kubernetes_network_config();
        Ok(EksCluster {
            endpoint: cluster.endpoint().map(str::to_string),
            ca_bundle: cluster
                .certificate_authority()
                .and_then(|c| c.data())
                .map(str::to_string),
            service_cidr: network
                .and_then(|n| n.service_ipv4_cidr().or(n.service_ipv6_cidr()))
                .map(str::to_string),
            version: cluster.version().map(str::to_string),
        })
    }
}

/// The controller's CA certificates (DER, as kube's config holds them) as the base64 PEM bundle
/// user data carries.
pub fn ca_bundle_from_der(certificates: &[Vec<u8>]) -> Option<String> {
    if certificates.is_empty() {
        return None;
    }
    let mut pem = String::new();
    for der in certificates {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let body = STANDARD.encode(der);
        for chunk in body.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(chunk));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    Some(STANDARD.encode(pem))
}

/// `v1.32.3-eks-abc` / `1.32+` ⇒ `1.32`.
pub fn minor_version(major: &str, minor: &str) -> Option<String> {
    let major: String = major.chars().take_while(char::is_ascii_digit).collect();
    let minor: String = minor.chars().take_while(char::is_ascii_digit).collect();
    (!major.is_empty() && !minor.is_empty()).then(|| format!("{major}.{minor}"))
}

/// The instance types of a NodeClass from EC2's descriptions (the provider's instance-type source).
pub struct Ec2InstanceTypes(pub Arc<InstanceTypeProvider>);

#[async_trait]
impl InstanceTypeSource for Ec2InstanceTypes {
    async fn instance_types(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        self.0
            .instance_types(Some(node_class))
            .await
            .map(|types| types.as_ref().clone())
            .map_err(|e| CloudError::other_from(e.to_string(), e))
    }
}

/// Inputs of [`start`] besides the clients.
pub struct StartOptions {
    pub settings: Settings,
    /// The controller's own CA bundle (base64 PEM; see [`ca_bundle_from_der`]); EKS's otherwise.
    pub ca_bundle: Option<String>,
    pub timings: NodeClassTimings,
}

/// The provider and its background loop, ready to hand to the controller.
pub struct AwsProvider {
    pub provider: Arc<AwsCloudProvider>,
    pub node_classes: NodeClassController,
    pub instance_types: Arc<InstanceTypeProvider>,
    /// The live prices the instance types are priced from (the pricing task updates them).
    pub prices: PriceTable,
    /// The clients, for the provider's other loops (pricing, interruption).
    pub clients: AwsClients,
    /// The settings the provider started with.
    pub settings: Settings,
    pub cluster: ClusterInfo,
    pub kubernetes_version: String,
}

/// Checks the credentials, learns the cluster and builds the provider. Every failure names what
/// is missing.
pub async fn start(
    options: StartOptions,
    clients: AwsClients,
    client: kube::Client,
    clock: Arc<dyn Clock>,
) -> Result<AwsProvider, StartError> {
    let settings = options.settings;
    settings.validate()?;
    clients.check_credentials().await?;
    let needs_eks = settings.cluster_endpoint.is_none() || options.ca_bundle.is_none();
    // The service CIDR (AL2023) and the version come from EKS too; without an endpoint from the
    // settings, EKS must answer.
    let eks = match clients.describe_cluster(&settings.cluster_name).await {
        Ok(eks) => eks,
        Err(source) if settings.cluster_endpoint.is_none() => {
            return Err(StartError::Endpoint {
                cluster: settings.cluster_name.clone(),
                source,
            });
        }
        Err(err) => {
            if needs_eks {
                tracing::warn!(error = %err, "eks:DescribeCluster failed; no CA bundle");
            } else {
                tracing::warn!(error = %err, "eks:DescribeCluster failed; the service CIDR is unknown (AL2023 NodeClasses will not be Ready)");
            }
            EksCluster::default()
        }
    };
    let endpoint = match settings.cluster_endpoint.clone().or(eks.endpoint.clone()) {
        Some(endpoint) => endpoint,
        None => {
            return Err(StartError::Endpoint {
                cluster: settings.cluster_name.clone(),
                source: Error::NotFound {
                    message: "the cluster has no endpoint".into(),
                },
            });
        }
    };
    let kubernetes_version = match client.apiserver_version().await {
        Ok(info) => minor_version(&info.major, &info.minor),
        Err(err) => {
            tracing::debug!(error = %err, "the API server's /version failed; asking EKS");
            None
        }
    };
    let kubernetes_version = match kubernetes_version.or(eks.version.clone()) {
        Some(version) => version,
        None => {
            return Err(StartError::Version {
                api: "no answer".into(),
            });
        }
    };
    let dns_ip = Api::<Service>::namespaced(client.clone(), "kube-system")
        .get_opt("kube-dns")
        .await
        .ok()
        .flatten()
        .and_then(|s| s.spec.and_then(|spec| spec.cluster_ip))
        .filter(|ip| ip != "None");
    let cluster = ClusterInfo {
        name: settings.cluster_name.clone(),
        endpoint,
        ca_bundle: options.ca_bundle.or(eks.ca_bundle),
        service_cidr: eks.service_cidr,
        dns_ip,
    };
    let prices = PriceTable::new();
    let instance_types = Arc::new(
        InstanceTypeProvider::new(
            clients.clone(),
            ProviderSettings {
                vm_memory_overhead_percent: settings.vm_memory_overhead_percent,
                reserved_enis: settings.reserved_enis,
            },
            clock.clone(),
        )
        .with_prices(prices.clone()),
    );
    // Upstream stops when the first discovery fails: without types nothing can launch.
    instance_types
        .refresh()
        .await
        .map_err(StartError::InstanceTypes)?;
    let node_classes = NodeClassController::new(
        client,
        clients.clone(),
        NodeClassSettings {
            cluster_name: settings.cluster_name.clone(),
            kubernetes_version: kubernetes_version.clone(),
            service_cidr: cluster.service_cidr.clone(),
            isolated_vpc: settings.isolated_vpc,
            reserved_capacity: settings.reserved_capacity,
            timings: options.timings,
        },
        clock.clone(),
    );
    // The NodeClass controller syncs each reservation's room from EC2; the provider offers it
    // and counts its own launches against it.
    let reservations = ReservationAvailability::default();
    let node_classes = node_classes.with_reservations(reservations.clone());
    let provider = Arc::new(
        AwsCloudProvider::new(
            clients.clone(),
            cluster.clone(),
            Arc::new(node_classes.cache()),
            Some(Arc::new(Ec2InstanceTypes(instance_types.clone()))),
            clock,
        )
        .with_reservations(reservations, settings.reserved_capacity),
    );
    tracing::info!(
        cluster = %cluster.name,
        endpoint = %cluster.endpoint,
        kubernetes_version = %kubernetes_version,
        service_cidr = ?cluster.service_cidr,
        "aws provider ready"
    );
    Ok(AwsProvider {
        provider,
        node_classes,
        instance_types,
        prices,
        clients,
        settings,
        cluster,
        kubernetes_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error as the binary prints it: each cause once, joined by `: ` (anyhow's `{:#}`).
    fn chain(err: &dyn std::error::Error) -> String {
        let mut text = err.to_string();
        let mut next = err.source();
        while let Some(cause) = next {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            next = cause.source();
        }
        text
    }

    fn denied() -> Error {
        Error::Api {
            operation: "DescribeInstanceTypes",
            code: Some("UnauthorizedOperation".into()),
            message: "You are not authorized".into(),
            transient: false,
            source: "sdk".into(),
        }
    }

    #[test]
    fn a_failed_start_names_the_aws_error_once() {
        let printed = chain(&StartError::InstanceTypes(denied()));
        assert_eq!(
            printed,
            "discovering instance types (ec2:DescribeInstanceTypes): DescribeInstanceTypes failed: \
             UnauthorizedOperation: You are not authorized: sdk"
        );
        let printed = chain(&StartError::Aws(denied()));
        assert_eq!(
            printed.matches("DescribeInstanceTypes failed").count(),
            1,
            "{printed}"
        );
        let printed = chain(&StartError::Endpoint {
            cluster: "prod".into(),
            source: denied(),
        });
        assert_eq!(
            printed.matches("You are not authorized").count(),
            1,
            "{printed}"
        );
        assert!(
            printed.starts_with("CLUSTER_ENDPOINT is not set"),
            "{printed}"
        );
    }

    #[test]
    fn versions_keep_major_and_minor_digits() {
        assert_eq!(minor_version("1", "32+").as_deref(), Some("1.32"));
        assert_eq!(minor_version("1", "30").as_deref(), Some("1.30"));
        assert_eq!(minor_version("", "30"), None);
    }

    #[test]
    fn der_certificates_become_a_base64_pem_bundle() {
        assert_eq!(ca_bundle_from_der(&[]), None);
        let bundle = ca_bundle_from_der(&[vec![1, 2, 3]]).unwrap();
        let pem = String::from_utf8(STANDARD.decode(bundle).unwrap()).unwrap();
        assert_eq!(
            pem,
            "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n"
        );
    }
}
