//! The aws provider for the controller (the `aws` feature): settings, SDK clients, start-up.

use std::sync::Arc;

use anyhow::Context as _;
use karpenter_aws::interruption::consumer::{InterruptionConsumer, run_interruption_when_leading};
use karpenter_aws::nodeclass::NodeClassTimings;
use karpenter_aws::pricing::PricingUpdater;
use karpenter_aws::provider::{StartOptions, ca_bundle_from_der};
use karpenter_aws::settings::{
    ENV_CLUSTER_ENDPOINT, ENV_CLUSTER_NAME, ENV_INTERRUPTION_QUEUE, ENV_ISOLATED_VPC,
    ENV_RESERVED_ENIS, ENV_SPOT_REBALANCE_REPLACE, ENV_VM_MEMORY_OVERHEAD_PERCENT,
};
use karpenter_aws::{AwsClients, ClientOptions};
use karpenter_controller::run::ProviderTask;
use karpenter_core::clock::Clock;
use karpenter_core::cloud_provider::CloudProvider;
use karpenter_core::feature_gates::FeatureGates;

use super::AwsArgs;

/// The provider settings, read and validated as upstream reads its environment; errors name the
/// variable (`CLUSTER_NAME is required ...`).
pub fn settings(
    cluster_name: &str,
    args: &AwsArgs,
    feature_gates: FeatureGates,
) -> anyhow::Result<karpenter_aws::Settings> {
    let lookup = |name: &str| -> Option<String> {
        match name {
            ENV_CLUSTER_NAME => Some(cluster_name.to_string()),
            ENV_CLUSTER_ENDPOINT => args.cluster_endpoint.clone(),
            ENV_INTERRUPTION_QUEUE => args.interruption_queue.clone(),
            ENV_VM_MEMORY_OVERHEAD_PERCENT => args.vm_memory_overhead_percent.clone(),
            ENV_RESERVED_ENIS => args.reserved_enis.clone(),
            ENV_ISOLATED_VPC => args.isolated_vpc.clone(),
            ENV_SPOT_REBALANCE_REPLACE => args.spot_rebalance_replace.clone(),
            _ => None,
        }
    };
    let mut settings = karpenter_aws::Settings::from_env(lookup)?;
    settings.reserved_capacity = feature_gates.reserved_capacity;
    Ok(settings)
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
        .with_reservations(aws.provider.reservation_availability().clone())
        .with_spot_rebalance_replace(aws.settings.spot_rebalance_replace);
        tasks.push(ProviderTask::new("interruption", move |cx| {
            // Upstream's karpenter_interruption_* metrics, on /metrics from the start.
            cx.metrics
                .register_provider_metrics(|registry| consumer.metrics.register(registry));
            run_interruption_when_leading(consumer, cx.client, cx.leadership, cx.shutdown)
        }));
    }
    Ok((aws.provider, tasks))
}
