//! Command-line surface. Each subcommand's flags live beside its implementation in `commands/`.

use clap::{Parser, Subcommand};

use crate::commands;

/// karpenter-rs: Kubernetes node autoscaling, compatible with Karpenter.
#[derive(Debug, Parser)]
#[command(name = "karpenter", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print (or write) the CustomResourceDefinitions.
    Crds(commands::crds::Args),
    /// Check NodePool, NodeClaim and EC2NodeClass manifests offline (schema and CEL rules).
    Validate(commands::validate::Args),
    /// Convert legacy (v1alpha5, v1alpha1, v1beta1) manifests to v1.
    Convert(commands::convert::Args),
    /// Benchmarks (`bench scheduling`: upstream's scheduling workload, timed).
    Bench(commands::bench::Args),
    /// Plan the nodes for a set of manifests on the built-in `sim` provider (no cluster needed).
    Simulate(commands::simulate::Args),
    /// AWS account set-up (`aws iam`: the controller policy and the CloudFormation template).
    Aws(commands::aws::Args),
    /// Run the controller against a cluster (watchers, provisioner, NodePool status, leader election).
    Controller(Box<commands::controller::Args>),
}
