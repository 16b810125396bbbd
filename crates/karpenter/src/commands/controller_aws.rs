//! `karpenter controller --cloud-provider aws`: the aws provider's flags (upstream's names and
//! environment variables), in every build, and the provider itself (`sdk`: its start-up checks and
//! the one list of its background tasks) in builds with the `aws` feature. Without it, `missing`
//! stands in and `--cloud-provider aws` stops with one line saying how to build it.

use std::time::Duration;

use karpenter_controller::settings::{BATCH_DURATION_RANGE, parse_duration_in};

#[cfg(not(feature = "aws"))]
mod missing;
#[cfg(feature = "aws")]
mod sdk;

#[cfg(not(feature = "aws"))]
pub use missing::{clients, provider, settings};
#[cfg(feature = "aws")]
pub use sdk::{clients, provider, settings};

/// Flags of the aws provider (ignored by `sim`). Accepted by every build (the chart sets their
/// environment variables); only the `aws` feature's provider reads them.
#[derive(Debug, Default, clap::Args)]
#[cfg_attr(not(feature = "aws"), allow(dead_code))]
pub struct AwsArgs {
    /// The EKS cluster's API endpoint for the nodes (default: from `eks:DescribeCluster`).
    #[arg(long, env = "CLUSTER_ENDPOINT")]
    pub cluster_endpoint: Option<String>,
    /// SQS queue name of the interruption events (interruption handling is off without it).
    #[arg(long, env = "INTERRUPTION_QUEUE")]
    pub interruption_queue: Option<String>,
    /// Replace a spot node on a rebalance recommendation, as drift does (karpenter-rs; default:
    /// an event only). See docs/spot-rebalance.md.
    #[arg(long, env = "SPOT_REBALANCE_REPLACE")]
    pub spot_rebalance_replace: Option<String>,
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
