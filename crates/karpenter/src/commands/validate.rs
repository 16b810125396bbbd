//! `karpenter validate`: check manifests offline with the CRDs' schema and CEL rules.

use std::path::PathBuf;
use std::process::ExitCode;

use karpenter_api::validation::{
    Outcome, ValidationError, unexpanded_variables, v1_kind, validate_document,
};
use karpenter_input::{DuplicateNames, Location, identity, objects};
use serde::Serialize;
use serde_json::Value;

use super::input::{EXIT_NOTHING_CHECKED, read_inputs};
use crate::output::{self, Format};

/// Flags of `karpenter validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Manifest file, directory (all *.yaml/*.yml/*.json inside, recursively) or `-` for stdin.
    /// Repeatable.
    #[arg(
        short = 'f',
        long = "filename",
        required = true,
        value_name = "FILE|DIR|-"
    )]
    pub files: Vec<PathBuf>,
    /// Output format: `table` prints one line per problem; `json`/`yaml` the whole report.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

/// What `validate -o json|yaml` prints.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    /// Every problem, in input order.
    problems: Vec<Problem>,
    /// Things that are not wrong but may not be what was meant (the same object in two files).
    warnings: Vec<String>,
    /// Documents of kinds `validate` does not check, with why.
    skipped: Vec<Skipped>,
    summary: Summary,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Problem {
    /// `FILE:DOC (line L)`.
    location: String,
    /// `Kind/name`.
    object: String,
    /// The field, e.g. `spec.weight` (`(document)` when the document is not YAML, empty for the
    /// whole object).
    path: String,
    message: String,
    hint: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Skipped {
    location: String,
    object: String,
    reason: String,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Summary {
    valid: usize,
    invalid: usize,
    skipped: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let read = read_inputs(&args.files)?;
    let mut report = Report::default();
    let mut names = DuplicateNames::default();
    for source in &read.sources {
        for object in objects(source) {
            let location = &object.location;
            let value = match object.value {
                Ok(value) => value,
                Err(err) => {
                    report.summary.invalid += 1;
                    report.problems.push(Problem {
                        location: location.to_string(),
                        object: "<unknown>/<unknown>".into(),
                        path: "(document)".into(),
                        message: format!("invalid YAML: {err}"),
                        hint: None,
                    });
                    continue;
                }
            };
            let checked = validate_document(&value);
            let object_name = format!(
                "{}/{}",
                or_unknown(&checked.kind),
                or_unknown(&checked.name)
            );
            let mut errors = match checked.outcome {
                Outcome::Valid => Vec::new(),
                Outcome::Invalid(errors) => errors,
                Outcome::Skipped(reason) => {
                    report.summary.skipped += 1;
                    report.skipped.push(Skipped {
                        location: location.to_string(),
                        object: object_name,
                        reason,
                    });
                    continue;
                }
            };
            errors.extend(check_duplicate(
                &mut names,
                &value,
                location,
                &mut report.warnings,
            ));
            if errors.is_empty() {
                report.summary.valid += 1;
                // An invalid value already says so in its error's hint.
                if let Some(warning) = shell_variables(&value, &object_name, location) {
                    report.warnings.push(warning);
                }
            } else {
                report.summary.invalid += 1;
                report
                    .problems
                    .extend(errors.into_iter().map(|error| Problem {
                        location: location.to_string(),
                        object: object_name.clone(),
                        path: error.path,
                        message: error.message,
                        hint: error.hint,
                    }));
            }
        }
    }
    print(&report, args.output)
}

/// One name per kind. Within a file a second object is a mistake the API server refuses on create
/// ("already exists"): an error. Across files it is what `kubectl apply -f DIR` applies twice,
/// the later replacing the earlier: a warning naming both files.
fn check_duplicate(
    names: &mut DuplicateNames,
    value: &Value,
    location: &Location,
    warnings: &mut Vec<String>,
) -> Option<ValidationError> {
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let (kind, name, _) = identity(value);
    v1_kind(api_version, kind)?;
    let first = names.check(api_version, kind, "", name, location)?;
    if first.source == location.source {
        return Some(ValidationError::new(
            "metadata.name",
            format!("Duplicate value: {name:?}: {kind} {name} is already defined at {first}"),
            "names are unique per kind; rename or remove one",
        ));
    }
    warnings.push(format!(
        "{kind}/{name} is defined in both {first} and {location}: `kubectl apply -f` applies both, and the later one replaces the earlier; keep one, or rename one if both are meant"
    ));
    None
}

/// A warning when the document still holds `${VAR}`s (a manifest meant for `envsubst`, as the
/// guides' are): valid as it is, and applied literally by the API server.
fn shell_variables(value: &Value, object_name: &str, location: &Location) -> Option<String> {
    let found = unexpanded_variables(value);
    let (first_field, _) = found.first()?;
    let mut variables: Vec<&str> = found.iter().map(|(_, v)| v.as_str()).collect();
    variables.sort_unstable();
    variables.dedup();
    let fields = match found.len() {
        1 => format!("{first_field} holds"),
        n => format!("{n} fields ({first_field}, ...) hold"),
    };
    let (noun, pronoun) = if variables.len() == 1 {
        ("variable", "it")
    } else {
        ("variables", "them")
    };
    Some(format!(
        "{location}: {object_name}: {fields} the shell {noun} {}: substitute {pronoun} before applying (export, then `envsubst < FILE | kubectl apply -f -`), or the API server stores {pronoun} literally",
        variables.join(", ")
    ))
}

fn print(report: &Report, format: Format) -> anyhow::Result<ExitCode> {
    let summary = &report.summary;
    let counts = format!(
        "{} valid, {} invalid, {} skipped",
        summary.valid, summary.invalid, summary.skipped
    );
    if format == Format::Table {
        for skipped in &report.skipped {
            output::say(format!(
                "{}: {}: skipped: {}",
                skipped.location, skipped.object, skipped.reason
            ));
        }
        for warning in &report.warnings {
            output::warning(warning);
        }
        for problem in &report.problems {
            let error = ValidationError {
                path: problem.path.clone(),
                message: problem.message.clone(),
                hint: problem.hint.clone(),
            };
            output::line(&format!(
                "{}: {}: {error}",
                problem.location, problem.object
            ));
        }
    } else {
        output::render(format, report, |_| String::new())?;
    }
    if summary.invalid > 0 {
        output::say(format!("validation failed: {counts}"));
        Ok(ExitCode::FAILURE)
    } else if summary.valid == 0 {
        output::say(format!(
            "nothing validated: {counts} (no karpenter.sh/v1 NodePool or NodeClaim, or karpenter.k8s.aws/v1 EC2NodeClass in the input)"
        ));
        Ok(ExitCode::from(EXIT_NOTHING_CHECKED))
    } else {
        if format == Format::Table {
            output::line(&format!("ok: {counts}"));
        }
        Ok(ExitCode::SUCCESS)
    }
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "<unknown>" } else { s }
}
