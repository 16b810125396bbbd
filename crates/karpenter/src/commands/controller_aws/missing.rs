//! Stands in for the aws provider in a build without the `aws` feature: `--cloud-provider aws`
//! stops at its first step with one line saying how to get a build that has it (checked by
//! `tests/it/no_aws_feature.rs`).

use std::sync::Arc;

use karpenter_controller::run::ProviderTask;
use karpenter_core::clock::Clock;
use karpenter_core::cloud_provider::CloudProvider;
use karpenter_core::feature_gates::FeatureGates;

use super::AwsArgs;

/// What `--cloud-provider aws` says on a build without the provider.
pub const NOT_BUILT: &str = "--cloud-provider aws needs the `aws` cargo feature, which this build \
    lacks: build with `cargo build --release --features aws` (the container image has it)";

/// The provider's settings; none exist in this build.
pub enum Settings {}

/// The provider's SDK clients; none exist in this build.
pub enum Clients {}

pub fn settings(
    _cluster_name: &str,
    _args: &AwsArgs,
    _feature_gates: FeatureGates,
) -> anyhow::Result<Settings> {
    anyhow::bail!(NOT_BUILT)
}

pub async fn clients(_args: &AwsArgs) -> anyhow::Result<Clients> {
    anyhow::bail!(NOT_BUILT)
}

pub async fn provider(
    settings: Settings,
    _clients: Clients,
    _client: kube::Client,
    _ca_certificates: Option<&[Vec<u8>]>,
    _clock: Arc<dyn Clock>,
) -> anyhow::Result<(Arc<dyn CloudProvider>, Vec<ProviderTask>)> {
    match settings {}
}
