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
    /// Benchmarks: `bench scheduling` (upstream's scheduling workload, timed), `bench disruption`
    /// (one disruption pass over a large cluster), `bench packing` (plan cost against the lower
    /// bound per packing policy).
    Bench(commands::bench::Args),
    /// Plan the nodes for a set of manifests on the built-in `sim` provider (no cluster needed).
    Simulate(commands::simulate::Args),
    /// Explain a live cluster's pod, node, NodeClaim or NodePool with the controller's reasons
    /// (read-only).
    Explain(commands::explain::Args),
    /// What applying NodePools/EC2NodeClasses would do to a live cluster: drift, replacements,
    /// cost, rollout time (read-only; exit 0 no change, 1 changes, 2 error).
    Diff(commands::diff::Args),
    /// AWS account set-up (`aws iam`: the controller policy and the CloudFormation template).
    Aws(commands::aws::Args),
    /// Run the controller against a cluster (watchers, provisioner, NodePool status, leader election).
    Controller(Box<commands::controller::Args>),
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every visible flag and subcommand of every command says what it is for in `--help`.
    #[test]
    fn every_flag_and_subcommand_has_help_text() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !arg.is_hide_set() && !builtin && arg.get_help().is_none() {
                    missing.push(format!("{path} --{}", arg.get_id()));
                }
            }
            for sub in command.get_subcommands() {
                let sub_path = format!("{path} {}", sub.get_name());
                if sub.get_name() != "help" && sub.get_about().is_none() {
                    missing.push(sub_path.clone());
                }
                walk(sub, &sub_path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "karpenter", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }

    /// The top-level help names every bench kind, so `karpenter --help` is enough to find them.
    #[test]
    fn the_top_level_help_lists_every_bench_kind() {
        let cli = Cli::command();
        let about = cli
            .find_subcommand("bench")
            .and_then(|bench| bench.get_about())
            .map(ToString::to_string)
            .unwrap_or_default();
        let bench = cli
            .find_subcommand("bench")
            .map(|b| {
                b.get_subcommands()
                    .map(|k| k.get_name().to_string())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        assert!(bench.len() >= 2, "{bench:?}");
        for kind in bench {
            assert!(
                about.contains(&format!("`bench {kind}`")),
                "{kind}: {about}"
            );
        }
    }
}
