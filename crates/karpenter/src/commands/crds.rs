//! `karpenter crds`: print or write the CRDs.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use karpenter_api::crd;

/// Flags of `karpenter crds`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write one file per CRD into DIR instead of printing them.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// The CRDs as YAML documents with file names (`karpenter.sh_nodepools.yaml`, ...).
pub fn render() -> anyhow::Result<Vec<(String, String)>> {
    let crds = crd::all().context("generating the CRDs")?;
    crds.iter()
        .map(|c| {
            let yaml = serde_saphyr::to_string(c).with_context(|| format!("rendering {}", crd::file_name(c)))?;
            Ok((crd::file_name(c), yaml))
        })
        .collect()
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rendered = render()?;
    match args.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, yaml) in rendered {
                let path = dir.join(name);
                std::fs::write(&path, format!("---\n{yaml}")).with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
        None => {
            for (_, yaml) in rendered {
                print!("---\n{yaml}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
