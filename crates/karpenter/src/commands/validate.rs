//! `karpenter validate`: check manifests offline with the CRDs' schema and CEL rules.

use std::path::PathBuf;
use std::process::ExitCode;

use karpenter_api::manifest::split_documents;
use karpenter_api::validation::{Outcome, validate_document};

use super::input::read_sources;

/// Flags of `karpenter validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Manifest file, directory (all *.yaml/*.yml inside, recursively) or `-` for stdin. Repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let sources = read_sources(&args.files)?;
    let (mut valid, mut invalid, mut skipped) = (0usize, 0usize, 0usize);
    for source in &sources {
        for doc in split_documents(&source.text) {
            let location = format!("{}:{}", source.name, doc.index);
            let value = match doc.value {
                Ok(value) => value,
                Err(err) => {
                    invalid += 1;
                    println!(
                        "{location}: (unparsed): (document): invalid YAML: {err} (fix the YAML syntax)"
                    );
                    continue;
                }
            };
            let report = validate_document(&value);
            let object = format!("{}/{}", or_unknown(&report.kind), or_unknown(&report.name));
            match report.outcome {
                Outcome::Valid => valid += 1,
                Outcome::Invalid(errors) => {
                    invalid += 1;
                    for error in errors {
                        println!("{location}: {object}: {error}");
                    }
                }
                Outcome::Skipped(reason) => {
                    skipped += 1;
                    eprintln!("{location}: {object}: skipped: {reason}");
                }
            }
        }
    }
    let summary = format!("{valid} valid, {invalid} invalid, {skipped} skipped");
    if invalid > 0 {
        eprintln!("validation failed: {summary}");
        Ok(ExitCode::FAILURE)
    } else {
        println!("ok: {summary}");
        Ok(ExitCode::SUCCESS)
    }
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "<unknown>" } else { s }
}
