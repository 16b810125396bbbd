//! `karpenter crds`: print or write the CRDs.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use karpenter_api::crd;

use crate::output::{self, ManifestFormat};

/// Flags of `karpenter crds`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write one file per CRD into DIR instead of printing them.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Output format: multi-document YAML, or a JSON list (`kind: List`) for `kubectl apply -f -`.
    #[arg(
        short = 'o',
        long = "output",
        value_enum,
        default_value = "yaml",
        conflicts_with = "dir"
    )]
    pub output: ManifestFormat,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.output == ManifestFormat::Json {
        let items = crd::all().context("generating the CRDs")?;
        output::json(&serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": items }))?;
        return Ok(ExitCode::SUCCESS);
    }
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
