//! `karpenter validate`: check manifests offline with the CRDs' schema and CEL rules.

use std::path::PathBuf;
use std::process::ExitCode;

use karpenter_api::validation::{Outcome, v1_kind, validate_document};
use karpenter_sim::simulate::sources::{DuplicateNames, identity, objects};
use serde_json::Value;

use super::input::{EXIT_NOTHING_CHECKED, read_inputs};
use crate::output;

/// Flags of `karpenter validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Manifest file, directory (all *.yaml/*.yml/*.json inside, recursively) or `-` for stdin.
    /// Repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let read = read_inputs(&args.files)?;
    let (mut valid, mut invalid, mut skipped) = (0usize, 0usize, 0usize);
    let mut names = DuplicateNames::default();
    for source in &read.sources {
        for object in objects(source) {
            let location = &object.location;
            let value = match object.value {
                Ok(value) => value,
                Err(err) => {
                    invalid += 1;
                    output::line(&format!(
                        "{location}: <unknown>/<unknown>: (document): invalid YAML: {err} (fix the YAML syntax)"
                    ));
                    continue;
                }
            };
            let report = validate_document(&value);
            let object_name = format!("{}/{}", or_unknown(&report.kind), or_unknown(&report.name));
            let mut errors = match report.outcome {
                Outcome::Valid => Vec::new(),
                Outcome::Invalid(errors) => errors,
                Outcome::Skipped(reason) => {
                    skipped += 1;
                    output::say(format!("{location}: {object_name}: skipped: {reason}"));
                    continue;
                }
            };
            // The API server refuses a second object with the same name ("already exists").
            let api_version = value
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or("");
            let (kind, name, _) = identity(&value);
            if v1_kind(api_version, kind).is_some()
                && let Some(first) = names.check(api_version, kind, "", name, location)
            {
                errors.push(karpenter_api::validation::ValidationError::new(
                    "metadata.name",
                    format!(
                        "Duplicate value: {name:?}: {kind} {name} is already defined at {first}"
                    ),
                    "names are unique per kind; rename or remove one",
                ));
            }
            if errors.is_empty() {
                valid += 1;
            } else {
                invalid += 1;
                for error in errors {
                    output::line(&format!("{location}: {object_name}: {error}"));
                }
            }
        }
    }
    let summary = format!("{valid} valid, {invalid} invalid, {skipped} skipped");
    if invalid > 0 {
        output::say(format!("validation failed: {summary}"));
        Ok(ExitCode::FAILURE)
    } else if valid == 0 {
        output::say(format!(
            "nothing validated: {summary} (no karpenter.sh/v1 NodePool or NodeClaim, or karpenter.k8s.aws/v1 EC2NodeClass in the input)"
        ));
        Ok(ExitCode::from(EXIT_NOTHING_CHECKED))
    } else {
        output::line(&format!("ok: {summary}"));
        Ok(ExitCode::SUCCESS)
    }
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "<unknown>" } else { s }
}
