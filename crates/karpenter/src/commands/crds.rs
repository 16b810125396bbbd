//! `karpenter crds`: print or write the CRDs.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use karpenter_api::crd;

use crate::output;

/// Flags of `karpenter crds`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write one file per CRD into DIR instead of printing them.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rendered = crd::render_yaml().context("generating the CRDs")?;
    match args.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, yaml) in rendered {
                let path = dir.join(name);
                std::fs::write(&path, yaml)
                    .with_context(|| format!("writing {}", path.display()))?;
                output::say(format!("wrote {}", path.display()));
            }
        }
        None => {
            for (_, yaml) in rendered {
                output::text(&yaml);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
