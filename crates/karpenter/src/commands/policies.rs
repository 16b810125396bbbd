//! The scheduling policy flags shared by `controller` and `simulate` (upstream's names and values),
//! each mapped to the core's enum.

use karpenter_core::scheduling::{
    MinValuesPolicy, PackingPolicy, PreferencePolicy, SchedulerOptions,
};

/// `--preference-policy`: whether preferred affinities and `ScheduleAnyway` spreads are honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PreferencePolicyArg {
    #[value(name = "Respect")]
    Respect,
    #[value(name = "Ignore")]
    Ignore,
}

impl From<PreferencePolicyArg> for PreferencePolicy {
    fn from(arg: PreferencePolicyArg) -> Self {
        match arg {
            PreferencePolicyArg::Respect => PreferencePolicy::Respect,
            PreferencePolicyArg::Ignore => PreferencePolicy::Ignore,
        }
    }
}

/// `--min-values-policy`: refuse (`Strict`) or lower (`BestEffort`) an unmet `minValues`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MinValuesPolicyArg {
    #[value(name = "Strict")]
    Strict,
    #[value(name = "BestEffort")]
    BestEffort,
}

impl From<MinValuesPolicyArg> for MinValuesPolicy {
    fn from(arg: MinValuesPolicyArg) -> Self {
        match arg {
            MinValuesPolicyArg::Strict => MinValuesPolicy::Strict,
            MinValuesPolicyArg::BestEffort => MinValuesPolicy::BestEffort,
        }
    }
}

/// `--packing-policy`: the cheapest of a few plans (`CostOptimal`, the default, see
/// docs/scheduling.md) or upstream's greedy packing (`Upstream`, for comparison).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PackingPolicyArg {
    #[value(name = "Upstream")]
    Upstream,
    #[value(name = "CostOptimal")]
    CostOptimal,
}

impl From<PackingPolicyArg> for PackingPolicy {
    fn from(arg: PackingPolicyArg) -> Self {
        match arg {
            PackingPolicyArg::Upstream => PackingPolicy::Upstream,
            PackingPolicyArg::CostOptimal => PackingPolicy::CostOptimal,
        }
    }
}

/// The policy flags of `simulate` (the controller declares its own, read from the environment too).
#[derive(Debug, Clone, clap::Args)]
pub struct PolicyArgs {
    /// Honour (`Respect`) or drop (`Ignore`) preferred affinities and `ScheduleAnyway` spreads.
    #[arg(long, value_enum, default_value = "Respect")]
    pub preference_policy: PreferencePolicyArg,
    /// Refuse (`Strict`) or lower (`BestEffort`) a NodeClaim's unmet `minValues`.
    #[arg(long, value_enum, default_value = "Strict")]
    pub min_values_policy: MinValuesPolicyArg,
    /// Size NodeClaims for cost (`CostOptimal`, the default: never dearer than `Upstream`) or as upstream Karpenter does (`Upstream`, upstream Karpenter's choices, for comparison).
    #[arg(long, value_enum, default_value = "CostOptimal")]
    pub packing_policy: PackingPolicyArg,
}

impl PolicyArgs {
    pub fn scheduler_options(&self) -> SchedulerOptions {
        SchedulerOptions {
            preference_policy: self.preference_policy.into(),
            min_values_policy: self.min_values_policy.into(),
            packing_policy: self.packing_policy.into(),
            ..SchedulerOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn controller(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(["karpenter", "controller"].iter().chain(args))
    }

    #[test]
    fn controller_policies_map_to_the_core_enums() {
        let Command::Controller(args) = controller(&[
            "--preference-policy",
            "Ignore",
            "--min-values-policy",
            "BestEffort",
        ])
        .unwrap()
        .command
        else {
            panic!("not the controller command");
        };
        assert_eq!(
            PreferencePolicy::from(args.preference_policy),
            PreferencePolicy::Ignore
        );
        assert_eq!(
            MinValuesPolicy::from(args.min_values_policy),
            MinValuesPolicy::BestEffort
        );
    }

    #[test]
    fn a_bad_controller_policy_is_refused_naming_the_flag() {
        for flag in ["--preference-policy", "--min-values-policy"] {
            let error = controller(&[flag, "respect"]).unwrap_err().to_string();
            assert!(error.contains(flag), "{error}");
            assert!(error.contains("respect"), "{error}");
        }
    }

    #[test]
    fn simulate_defaults_are_upstreams() {
        let Command::Simulate(args) = Cli::try_parse_from(["karpenter", "simulate", "-f", "x"])
            .unwrap()
            .command
        else {
            panic!("not the simulate command");
        };
        let options = args.policies.scheduler_options();
        assert_eq!(options.preference_policy, PreferencePolicy::Respect);
        assert_eq!(options.min_values_policy, MinValuesPolicy::Strict);
    }
}
