//! `karpenter convert`: turn legacy (v1alpha5, v1alpha1, v1beta1) manifests into v1.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use karpenter_api::convert::{Input, Output, convert};
use karpenter_api::manifest::split_documents;

use super::input::read_sources;

/// Output format of `karpenter convert`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Yaml,
    Json,
}

/// Flags of `karpenter convert`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Manifest file, directory (all *.yaml/*.yml inside, recursively) or `-` for stdin. Repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Output format: multi-document YAML, or a JSON list (`kind: List`).
    #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
    pub output: Format,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let sources = read_sources(&args.files)?;
    let mut inputs = Vec::new();
    let mut texts = Vec::new();
    for source in &sources {
        for doc in split_documents(&source.text) {
            match doc.value {
                Ok(value) => {
                    inputs.push(Input {
                        source: source.name.clone(),
                        index: doc.index,
                        value,
                    });
                    texts.push(doc.text);
                }
                Err(err) => bail!("{}:{}: invalid YAML: {err}", source.name, doc.index),
            }
        }
    }
    let (outputs, warnings) = convert(&inputs);
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    let mut failed = false;
    let mut yaml_docs: Vec<String> = Vec::new();
    let mut json_items: Vec<serde_json::Value> = Vec::new();
    for ((input, text), output) in inputs.iter().zip(&texts).zip(outputs) {
        match output {
            Output::PassThrough => {
                yaml_docs.push(text.clone());
                json_items.push(input.value.clone());
            }
            Output::Converted(objects) => {
                for object in objects {
                    match args.output {
                        Format::Yaml => {
                            yaml_docs.push(object.to_yaml().map_err(anyhow::Error::msg)?)
                        }
                        Format::Json => json_items.push(object.to_value()?),
                    }
                }
            }
            Output::Failed(reason) => {
                failed = true;
                eprintln!("error: {}:{}: {reason}", input.source, input.index);
            }
        }
    }
    match args.output {
        Format::Yaml => {
            for doc in yaml_docs {
                print!("---\n{doc}");
                if !doc.ends_with('\n') {
                    println!();
                }
            }
        }
        Format::Json => {
            let list =
                serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": json_items });
            println!("{}", serde_json::to_string_pretty(&list)?);
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
