//! `karpenter aws ...`: what an AWS account needs before the controller runs there.
//! `karpenter aws iam` prints the controller policy or the CloudFormation template of the
//! getting-started guides (node role, controller policy, interruption queue, EventBridge rules).

use std::process::ExitCode;

use anyhow::Context;
use karpenter_aws::iam;

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
    /// The region for ARNs and the region condition (`-o json`; `*` when omitted).
    #[arg(long, default_value = "*")]
    pub region: String,
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

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Iam(args) => iam_command(args),
    }
}

fn iam_command(args: IamArgs) -> anyhow::Result<ExitCode> {
    if args.cluster_name.trim().is_empty() {
        anyhow::bail!("--cluster-name must not be empty");
    }
    let text = match args.output {
        IamOutput::Json => {
            let queue = args
                .interruption_queue
                .as_deref()
                .unwrap_or(&args.cluster_name);
            let scope = iam::PolicyScope::concrete(
                &args.partition,
                &args.region,
                &args.account_id,
                &args.cluster_name,
                queue,
            );
            let mut text = serde_json::to_string_pretty(&iam::controller_policy(&scope))
                .context("rendering the policy")?;
            text.push('\n');
            text
        }
        IamOutput::Cloudformation => {
            serde_saphyr::to_string(&iam::cloudformation_template(&args.cluster_name))
                .context("rendering the CloudFormation template")?
        }
    };
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}
