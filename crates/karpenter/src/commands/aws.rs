//! `karpenter aws ...`: what an AWS account needs before the controller runs there.
//! `karpenter aws iam` prints the controller policy or the CloudFormation template of the
//! getting-started guides (node role, controller policy, interruption queue, EventBridge rules).

use std::process::ExitCode;

use anyhow::Context;

use crate::aws_iam as iam;
use crate::output;

/// Flags of `karpenter aws`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Print the controller's IAM policy (`-o json`) or the CloudFormation template with the node
    /// role, the controller policy and the interruption queue (`-o cloudformation`).
    Iam(IamArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum IamOutput {
    /// The controller policy document, scoped to the cluster.
    Json,
    /// The CloudFormation template (YAML) for `aws cloudformation deploy`.
    Cloudformation,
}

/// Flags of `karpenter aws iam`.
#[derive(Debug, clap::Args)]
pub struct IamArgs {
    /// The EKS cluster the policy is scoped to (tag conditions, role and queue names).
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster_name: String,
    /// The AWS partition (`aws`, `aws-cn`, `aws-us-gov`).
    #[arg(long, default_value = "aws")]
    pub partition: String,
    /// The region for ARNs and the region conditions (`-o json`). Omitted: any region (ARNs say
    /// `*`, the region conditions are left out).
    #[arg(long, value_parser = region_name)]
    pub region: Option<String>,
    /// The account id for ARNs (`-o json`; `*` when omitted).
    #[arg(long, default_value = "*")]
    pub account_id: String,
    /// The interruption queue's name (`-o json`; the cluster name when omitted, as the template names it).
    #[arg(long)]
    pub interruption_queue: Option<String>,
    /// What to print.
    #[arg(short = 'o', long = "output", value_enum, default_value = "json")]
    pub output: IamOutput,
}

/// A region name for `--region`: IAM compares the region conditions literally, so a wildcard
/// would match no request.
fn region_name(raw: &str) -> Result<String, String> {
    if raw.is_empty() || raw.contains(['*', '?']) {
        return Err("a region name such as eu-west-1 (omit --region for any region)".to_string());
    }
    Ok(raw.to_string())
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Iam(args) => iam_command(args),
    }
}

fn iam_command(args: IamArgs) -> anyhow::Result<ExitCode> {
    if args.cluster_name.trim().is_empty() {
        anyhow::bail!("--cluster-name must not be empty");
    }
    match args.output {
        IamOutput::Json => {
            let queue = args
                .interruption_queue
                .as_deref()
                .unwrap_or(&args.cluster_name);
            let scope = iam::PolicyScope::concrete(
                &args.partition,
                args.region.as_deref(),
                &args.account_id,
                &args.cluster_name,
                queue,
            );
            output::json(&iam::controller_policy(&scope)).context("printing the policy")?;
        }
        IamOutput::Cloudformation => {
            output::yaml(&iam::cloudformation_template(&args.cluster_name))
                .context("printing the CloudFormation template")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
