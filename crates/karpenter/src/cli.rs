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
    /// Run the controller against a cluster (watchers, provisioner, NodePool status, leader election).
    Controller(Box<commands::controller::Args>),
}
