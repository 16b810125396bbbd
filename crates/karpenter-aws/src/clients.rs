//! AWS SDK clients, configured the standard way: region, credentials and endpoint from the
//! environment / profile / IRSA web identity (`aws_config::defaults`, which honours
//! `AWS_ENDPOINT_URL` for emulators), every call bounded by an operation timeout and retried with the
//! SDK's standard retry strategy.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_ec2::config::{Credentials, ProvideCredentials};
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};

use crate::Error;

/// How the clients are built. [`ClientOptions::default`] takes everything from the environment.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Overrides the region from the environment (`AWS_REGION`, profile, IMDS).
    pub region: Option<String>,
    /// Overrides the endpoint of every service (`AWS_ENDPOINT_URL` does the same from the
    /// environment); for emulators such as moto.
    pub endpoint_url: Option<String>,
    /// Fixed credentials instead of the default chain (tests against emulators).
    pub static_credentials: Option<Credentials>,
    /// Upper bound of one API call including the SDK's retries.
    pub operation_timeout: Duration,
    /// Upper bound of one attempt of a call.
    pub attempt_timeout: Duration,
    /// Attempts per call under the SDK's standard retry strategy (first attempt included).
    pub max_attempts: u32,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            region: None,
            endpoint_url: None,
            static_credentials: None,
            operation_timeout: Duration::from_secs(30),
            attempt_timeout: Duration::from_secs(10),
            max_attempts: 3,
        }
    }
}

/// The SDK clients the provider uses; cheap to clone (the SDK clients are reference-counted).
#[derive(Clone, Debug)]
pub struct AwsClients {
    pub ec2: aws_sdk_ec2::Client,
    pub ssm: aws_sdk_ssm::Client,
    /// Instance profiles of EC2NodeClasses with `spec.role`.
    pub iam: aws_sdk_iam::Client,
    /// `DescribeCluster`: endpoint, CA, service CIDR and version when the settings leave them out.
    pub eks: aws_sdk_eks::Client,
    /// The interruption queue.
    pub sqs: aws_sdk_sqs::Client,
    /// The Price List API, pointed at its endpoint region ([`crate::pricing::pricing_region`]).
    pub pricing: aws_sdk_pricing::Client,
    pub region: String,
    config: aws_config::SdkConfig,
}

impl AwsClients {
    /// Loads the shared configuration and builds the clients. Fails when no region is configured,
    /// so the controller stops at start with a clear message rather than on its first call.
    pub async fn load(options: &ClientOptions) -> Result<Self, Error> {
        // The SDK's default HTTPS client links aws-lc; the workspace already builds rustls on ring
        // (for kube), so we build the same hyper client on ring.
        let http_client = aws_smithy_http_client::Builder::new()
            .tls_provider(Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http_client)
            .retry_config(RetryConfig::standard().with_max_attempts(options.max_attempts.max(1)))
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_timeout(options.operation_timeout)
                    .operation_attempt_timeout(options.attempt_timeout)
                    .build(),
            );
        if let Some(region) = &options.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(endpoint) = &options.endpoint_url {
            loader = loader.endpoint_url(endpoint.clone());
        }
        if let Some(credentials) = &options.static_credentials {
            loader = loader.credentials_provider(credentials.clone());
        }
        let config = loader.load().await;
        let region = config
            .region()
            .map(|r| r.to_string())
            .ok_or_else(|| Error::Config {
                message: "no AWS region configured: set AWS_REGION (or a profile region)".into(),
            })?;
        let pricing = aws_sdk_pricing::config::Builder::from(&config)
            .region(Region::new(crate::pricing::pricing_region(&region)))
            .build();
        Ok(Self {
            ec2: aws_sdk_ec2::Client::new(&config),
            ssm: aws_sdk_ssm::Client::new(&config),
            iam: aws_sdk_iam::Client::new(&config),
            eks: aws_sdk_eks::Client::new(&config),
            sqs: aws_sdk_sqs::Client::new(&config),
            pricing: aws_sdk_pricing::Client::from_conf(pricing),
            region,
            config,
        })
    }

    /// Resolves credentials once through the configured chain, so a controller without any
    /// (no environment keys, profile, web identity, Pod Identity or instance role) stops at start
    /// with a message saying so instead of failing every call later.
    pub async fn check_credentials(&self) -> Result<(), Error> {
        let missing = |why: String| Error::Config {
            message: format!(
                "no AWS credentials found ({why}): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
                 AWS_PROFILE, or use IRSA / EKS Pod Identity"
            ),
        };
        let Some(provider) = self.config.credentials_provider() else {
            return Err(missing("no credentials provider configured".into()));
        };
        match tokio::time::timeout(CREDENTIALS_CHECK_TIMEOUT, provider.provide_credentials()).await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(err)) => Err(missing(err.to_string())),
            Err(_) => Err(missing(format!(
                "the credentials chain gave no answer within {CREDENTIALS_CHECK_TIMEOUT:?}"
            ))),
        }
    }
}

/// How long the start-up credentials check may take (the chain ends with IMDS, which may be slow).
pub const CREDENTIALS_CHECK_TIMEOUT: Duration = Duration::from_secs(20);
