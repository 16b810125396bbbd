//! `karpenter convert`: turn legacy (v1alpha5, v1alpha1, v1beta1) manifests into v1.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use karpenter_api::convert::{Input, Level, Output, convert};
use karpenter_api::manifest::to_yaml_documents;
use karpenter_api::validation::{Outcome, validate_document};
use karpenter_input::objects;

use super::input::{EXIT_NOTHING_CHECKED, read_inputs};
use crate::output::{self, ManifestFormat};

/// Flags of `karpenter convert`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Manifest file, directory (all *.yaml/*.yml/*.json inside, recursively) or `-` for stdin.
    /// Repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Output format: multi-document YAML, or a JSON list (`kind: List`).
    #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
    pub output: ManifestFormat,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let read = read_inputs(&args.files)?;
    let mut inputs = Vec::new();
    let mut texts = Vec::new();
    for source in &read.sources {
        for object in objects(source) {
            let location = object.location;
            let value = match object.value {
                Ok(value) => value,
                Err(err) => bail!("{location}: invalid YAML: {err}"),
            };
            // Items of a `kind: List` have no text of their own: they pass through re-rendered.
            let text = match object.text {
                Some(text) => text,
                None => {
                    to_yaml_documents(std::slice::from_ref(&value)).map_err(anyhow::Error::msg)?
                }
            };
            inputs.push(Input {
                source: source.name.clone(),
                index: location.document,
                value,
            });
            texts.push(text);
        }
    }
    if inputs.is_empty() {
        output::say("nothing converted: the input holds no documents");
        return Ok(ExitCode::from(EXIT_NOTHING_CHECKED));
    }
    let (outputs, warnings) = convert(&inputs);
    for warning in &warnings {
        match warning.level {
            Level::Note => output::note(warning),
            Level::Warning => output::warning(warning),
        }
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
                    // The output must pass `karpenter validate`; say why when it does not.
                    let report = validate_document(&object.to_value()?);
                    if let Outcome::Invalid(errors) = report.outcome {
                        failed = true;
                        for error in errors {
                            output::error(format!(
                                "{}:{}: converted {}/{} does not validate: {error}",
                                input.source, input.index, report.kind, report.name
                            ));
                        }
                    }
                    match args.output {
                        ManifestFormat::Yaml => {
                            yaml_docs.push(object.to_yaml().map_err(anyhow::Error::msg)?)
                        }
                        ManifestFormat::Json => json_items.push(object.to_value()?),
                    }
                }
            }
            Output::Failed(reason) => {
                failed = true;
                let text = |pointer: &str| {
                    input
                        .value
                        .pointer(pointer)
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("<unknown>")
                        .to_string()
                };
                output::error(format!(
                    "{}:{}: {}/{}: {reason}",
                    input.source,
                    input.index,
                    text("/kind"),
                    text("/metadata/name")
                ));
            }
        }
    }
    match args.output {
        ManifestFormat::Yaml => output::yaml_documents(&yaml_docs),
        ManifestFormat::Json => {
            let list =
                serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": json_items });
            output::json(&list)?;
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
