//! `karpenter crds`: print or write the CRDs.

use std::process::ExitCode;



/// Flags of `karpenter crds`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write one file per CRD into DIR instead of printing them.
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    Ok(ExitCode::SUCCESS)
}


