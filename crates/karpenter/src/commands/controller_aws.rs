//! `karpenter controller --cloud-provider aws`: the aws provider's flags (upstream's names and
//! environment variables), its start-up checks and the one list of its background tasks.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use karpenter_aws::interruption::consumer::{InterruptionConsumer, run_interruption_when_leading};
use karpenter_aws::nodeclass::NodeClassTimings;
use karpenter_aws::pricing::PricingUpdater;
use karpenter_aws::provider::{StartOptions, ca_bundle_from_der};
use karpenter_aws::settings::{
    ENV_CLUSTER_ENDPOINT, ENV_CLUSTER_NAME, ENV_INTERRUPTION_QUEUE, ENV_ISOLATED_VPC,
    ENV_RESERVED_ENIS, ENV_VM_MEMORY_OVERHEAD_PERCENT,
};
use karpenter_aws::{AwsClients, ClientOptions};
use karpenter_controller::run::ProviderTask;
use karpenter_controller::settings::{BATCH_DURATION_RANGE, parse_duration_in};
use karpenter_core::clock::Clock;
use karpenter_core::cloud_provider::CloudProvider;

/// Flags of the aws provider (ignored by `sim`).
#[derive(Debug, Default, clap::Args)]
pub struct AwsArgs {
    /// The EKS cluster's API endpoint for the nodes (default: from `eks:DescribeCluster`).
    #[arg(long, env = "CLUSTER_ENDPOINT")]
    pub cluster_endpoint: Option<String>,
    /// SQS queue name of the interruption events (interruption handling is off without it).
    #[arg(long, env = "INTERRUPTION_QUEUE")]
    pub interruption_queue: Option<String>,
    /// Share of memory the hypervisor keeps (0.075 = 7.5%).
    #[arg(long, env = "VM_MEMORY_OVERHEAD_PERCENT")]
    pub vm_memory_overhead_percent: Option<String>,
    /// ENIs kept out of the max-pods computation.
    #[arg(long, env = "RESERVED_ENIS")]
    pub reserved_enis: Option<String>,
    /// The cluster has no route to public AWS endpoints (pricing uses embedded data).
    #[arg(long, env = "ISOLATED_VPC")]
    pub isolated_vpc: Option<String>,
    /// Upper bound of one AWS API call and of each attempt (default: 30 s per call, 10 s per
    /// attempt). For emulators: moto answers DescribeInstanceTypes in one slow page.
    #[arg(long, env = "AWS_API_TIMEOUT", hide = true, value_parser = api_timeout)]
    pub aws_api_timeout: Option<Duration>,
}

fn api_timeout(raw: &str) -> Result<Duration, String> {
    parse_duration_in("AWS_API_TIMEOUT", raw, &BATCH_DURATION_RANGE).map_err(|e| e.to_string())
}

/// The provider settings, read and validated as upstream reads its environment; errors name the
/// variable (`CLUSTER_NAME is required ...`).
pub fn settings(cluster_name: &str, args: &AwsArgs) -> anyhow::Result<karpenter_aws::Settings> {
    let lookup = |name: &str| -> Option<String> {
        match name {
            ENV_CLUSTER_NAME => Some(cluster_name.to_string()),
            ENV_CLUSTER_ENDPOINT => args.cluster_endpoint.clone(),
            ENV_INTERRUPTION_QUEUE => args.interruption_queue.clone(),
            ENV_VM_MEMORY_OVERHEAD_PERCENT => args.vm_memory_overhead_percent.clone(),
            ENV_RESERVED_ENIS => args.reserved_enis.clone(),
            ENV_ISOLATED_VPC => args.isolated_vpc.clone(),
            _ => None,
        }
    };
    Ok(karpenter_aws::Settings::from_env(lookup)?)
}

/// The SDK clients from the standard sources (`AWS_REGION`, credentials chain, `AWS_ENDPOINT_URL`),
/// with the region and credentials checked now rather than at the first launch.
pub async fn clients(args: &AwsArgs) -> anyhow::Result<AwsClients> {
    let mut options = ClientOptions::default();
    if let Some(timeout) = args.aws_api_timeout {
        options.operation_timeout = timeout;
        options.attempt_timeout = timeout;
    }
    let clients = AwsClients::load(&options).await?;
    clients.check_credentials().await?;
    Ok(clients)
}

/// The aws provider and its background tasks. The one place where the provider's loops are
/// listed: the EC2NodeClass controller (its cache is the provider's NodeClass source), the price
/// updater and, with `INTERRUPTION_QUEUE`, the interruption consumer (leader only).
pub async fn provider(
    settings: karpenter_aws::Settings,
    clients: AwsClients,
    client: kube::Client,
    ca_certificates: Option<&[Vec<u8>]>,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<(Arc<dyn CloudProvider>, Vec<ProviderTask>)> {
    let aws = karpenter_aws::provider::start(
        StartOptions {
            settings,
            ca_bundle: ca_certificates.and_then(ca_bundle_from_der),
            timings: NodeClassTimings::default(),
        },
        clients,
        client,
        clock.clone(),
    )
    .await
    .context("starting the aws provider")?;
    let node_classes = aws.node_classes;
    let mut tasks = vec![ProviderTask::new("ec2nodeclass controller", move |cx| {
        node_classes.run(cx.leadership, cx.shutdown)
    })];
    let pricing = PricingUpdater {
        clients: aws.clients.clone(),
        table: aws.prices.clone(),
        isolated_vpc: aws.settings.isolated_vpc,
    };
    tasks.push(ProviderTask::new("pricing", move |cx| {
        pricing.run(cx.clock, cx.shutdown)
    }));
    if let Some(queue) = aws.settings.interruption_queue.as_deref() {
        let consumer = InterruptionConsumer::new(
            &aws.clients,
            queue,
            aws.provider.unavailable_offerings().clone(),
            clock,
        )
        .await
        .with_context(|| format!("INTERRUPTION_QUEUE {queue:?}"))?
        .with_reservations(aws.provider.reservation_availability().clone());
        tasks.push(ProviderTask::new("interruption", move |cx| {
            // Upstream's karpenter_interruption_* metrics, on /metrics from the start.
            cx.metrics
                .register_provider_metrics(|registry| consumer.metrics.register(registry));
            run_interruption_when_leading(consumer, cx.client, cx.leadership, cx.shutdown)
        }));
    }
    Ok((aws.provider, tasks))
}
