//! Every command's output pinned byte for byte (`insta` snapshots in `tests/it/snapshots/`): each
//! command in each `-o` format it has, its errors and its `--help`. A snapshot holds the command
//! line, the exit code, stdout and stderr, so a changed note or exit code shows as well as a
//! changed table.
//!
//! Plain `cargo test` compares and fails on a difference (in CI, `CI=true`, insta never writes);
//! to accept a deliberate change, run the tests with `INSTA_UPDATE=always` (or `cargo insta
//! review`, if installed) and read the diff of the `.snap` files before committing them.
//!
//! What changes from run to run is normalised before the comparison: the timings of `bench`
//! (seconds, pods per second, memory); `simulate --disruption` runs from a fixed `--now`.

use std::process::{Command, Stdio};
use std::sync::LazyLock;

use regex::Regex;

use crate::api_cli::repo;

/// A fixed virtual start for `simulate --disruption`, so its timestamps are the same every run.
const NOW: &str = "2026-01-01T00:00:00Z";
const SEEDS: &str = "tests/fixtures/manifests/seeds";
const INVALID: &str = "tests/fixtures/manifests/invalid";

/// Runs the binary from the repository root, with no environment but `PATH` (flags that read
/// environment variables would otherwise show their values in `--help`), `stdin` piped in.
fn run(args: &[&str], stdin: &str) -> String {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(args)
        .current_dir(repo())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin.as_bytes()).unwrap();
    drop(pipe);
    let output = child.wait_with_output().unwrap();
    let code = output
        .status
        .code()
        .map_or("signal".to_string(), |c| c.to_string());
    format!(
        "$ karpenter {}\nexit: {code}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Compares `content` with `tests/it/snapshots/<name>.snap`.
fn snapshot(name: &str, content: &str) {
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.bind(|| insta::assert_snapshot!(name, content));
}

fn snapshot_run(name: &str, args: &[&str]) {
    snapshot(name, &run(args, ""));
}

/// What differs between two runs of the same benchmark: its timings and this process's memory.
/// Replaced by fixed words, the rest of each line kept (column widths may shift: the tables
/// stay readable, and every other number is compared).
fn redact_timings(output: &str) -> String {
    static RULES: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
        [
            // JSON and YAML: `"seconds": 0.0123,` / `passSeconds: 0.5` / `peakRssKib: 1234`
            (
                r#"(?m)^(\s*"?(?:seconds|podsPerSecond|[a-zA-Z]+Seconds|peakRssKib)"?:\s*)[-0-9.e+]+"#,
                "${1}[redacted]",
            ),
            // `bench scheduling`'s streamed rows: the last two columns are seconds and pods/s
            (
                r"(?m)^(\S+ +\d+ +\d+ +\d+) +[0-9.]+ +\d+$",
                "${1} [seconds] [pods/s]",
            ),
            // its total line
            (
                r"in [0-9.]+s \(\d+ pods/s\)",
                "in [seconds]s ([pods/s] pods/s)",
            ),
            // `bench disruption`'s table: `0.123 s` and `12.3 MiB`
            (r"\b\d+\.\d+ s\b", "[seconds] s"),
            (r"\b\d+\.\d+ MiB\b", "[memory] MiB"),
        ]
        .into_iter()
        .map(|(pattern, replacement)| (Regex::new(pattern).unwrap(), replacement))
        .collect()
    });
    RULES.iter().fold(output.to_string(), |text, (rule, with)| {
        rule.replace_all(&text, *with).into_owned()
    })
}

/// The example directories, each a scenario of the guides.
fn example_dirs() -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(repo().join("examples"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_dir())
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 10, "{dirs:?}");
    dirs
}

#[test]
fn simulate_on_every_example_as_a_table_and_json() {
    for example in example_dirs() {
        let dir = format!("examples/{example}");
        snapshot_run(
            &format!("simulate__{example}__table"),
            &["simulate", "-f", &dir],
        );
        snapshot_run(
            &format!("simulate__{example}__json"),
            &["simulate", "-f", &dir, "-o", "json"],
        );
    }
}

#[test]
fn simulate_as_yaml_with_custom_instance_types_and_on_bad_input() {
    snapshot_run(
        "simulate__inflate__yaml",
        &["simulate", "-f", "examples/inflate", "-o", "yaml"],
    );
    snapshot_run(
        "simulate__inflate__custom_instance_types",
        &[
            "simulate",
            "-f",
            "examples/inflate",
            "--instance-types",
            "examples/custom-instance-types.yaml",
            "--region",
            "test-1",
        ],
    );
    snapshot_run(
        "simulate__inflate__region_outside_us_east_1",
        &[
            "simulate",
            "-f",
            "examples/inflate",
            "--region",
            "ap-northeast-2",
        ],
    );
    snapshot_run(
        "simulate__error__not_a_manifest",
        &["simulate", "-f", "examples/custom-instance-types.yaml"],
    );
    snapshot_run(
        "simulate__error__disruption_flag_without_disruption",
        &["simulate", "-f", "examples/inflate", "--until", "2h"],
    );
}

#[test]
fn simulate_disruption_on_every_disruption_example() {
    let examples: Vec<String> = example_dirs()
        .into_iter()
        .filter(|e| e.starts_with("disruption-"))
        .collect();
    assert!(examples.len() >= 5, "{examples:?}");
    for example in examples {
        let dir = format!("examples/{example}");
        let args = ["simulate", "--disruption", "--now", NOW, "-f", &dir];
        snapshot_run(&format!("simulate_disruption__{example}__table"), &args);
        snapshot_run(
            &format!("simulate_disruption__{example}__json"),
            &[&args[..], &["-o", "json"]].concat(),
        );
    }
    snapshot_run(
        "simulate_disruption__disruption-underutilized__yaml",
        &[
            "simulate",
            "--disruption",
            "--now",
            NOW,
            "-f",
            "examples/disruption-underutilized",
            "-o",
            "yaml",
        ],
    );
}

#[test]
fn validate_ok_and_errors_in_every_format() {
    let seed = |name: &str| format!("{SEEDS}/{name}.yaml");
    let bad = |name: &str| format!("{INVALID}/{name}.yaml");
    let (nodepools, spot) = (seed("003-v1-nodepools"), seed("002-v1-spot"));
    let valid = ["validate", "-f", &nodepools, "-f", &spot];
    let (name, role, hostname) = (
        bad("np-bad-name"),
        bad("ec2-no-role"),
        bad("nc-req-hostname"),
    );
    let invalid = ["validate", "-f", &name, "-f", &role, "-f", &hostname];
    for (format, extra) in [
        ("table", &[][..]),
        ("json", &["-o", "json"][..]),
        ("yaml", &["-o", "yaml"][..]),
    ] {
        snapshot_run(
            &format!("validate__ok__{format}"),
            &[&valid[..], extra].concat(),
        );
        snapshot_run(
            &format!("validate__errors__{format}"),
            &[&invalid[..], extra].concat(),
        );
    }
    snapshot(
        "validate__error__not_yaml",
        &run(&["validate", "-f", "-"], "kind: [unclosed\n"),
    );
    snapshot_run(
        "validate__error__missing_file",
        &["validate", "-f", "tests/fixtures/no-such-file.yaml"],
    );
}

#[test]
fn convert_output_and_errors() {
    for seed in [
        "000-v1alpha5-provisioner-awsnodetemplate",
        "001-v1beta1-getting-started",
    ] {
        let file = format!("{SEEDS}/{seed}.yaml");
        snapshot_run(&format!("convert__{seed}__yaml"), &["convert", "-f", &file]);
        snapshot_run(
            &format!("convert__{seed}__json"),
            &["convert", "-f", &file, "-o", "json"],
        );
    }
    snapshot(
        "convert__error__bad_legacy_field",
        &run(
            &["convert", "-f", "-"],
            "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: x}\nspec: {ttlSecondsAfterEmpty: -3}\n",
        ),
    );
    snapshot(
        "convert__nothing_to_convert",
        &run(&["convert", "-f", "-"], ""),
    );
}

#[test]
fn crds_as_yaml_and_json() {
    snapshot_run("crds__yaml", &["crds"]);
    snapshot_run("crds__json", &["crds", "-o", "json"]);
}

#[test]
fn aws_iam_in_each_variant() {
    snapshot_run(
        "aws_iam__json__any_region",
        &["aws", "iam", "--cluster-name", "demo"],
    );
    snapshot_run(
        "aws_iam__json__scoped",
        &[
            "aws",
            "iam",
            "--cluster-name",
            "demo",
            "--region",
            "eu-west-1",
            "--account-id",
            "123456789012",
            "--interruption-queue",
            "demo-interruptions",
        ],
    );
    snapshot_run(
        "aws_iam__json__china_partition",
        &[
            "aws",
            "iam",
            "--cluster-name",
            "demo",
            "--partition",
            "aws-cn",
            "--region",
            "cn-north-1",
        ],
    );
    snapshot_run(
        "aws_iam__cloudformation",
        &[
            "aws",
            "iam",
            "--cluster-name",
            "demo",
            "-o",
            "cloudformation",
        ],
    );
    snapshot_run(
        "aws_iam__error__empty_cluster_name",
        &["aws", "iam", "--cluster-name", " "],
    );
    snapshot_run(
        "aws_iam__error__wildcard_region",
        &["aws", "iam", "--cluster-name", "demo", "--region", "*"],
    );
    snapshot_run("aws_iam__error__no_cluster_name", &["aws", "iam"]);
}

#[test]
fn bench_reports_in_every_format_with_timings_redacted() {
    let scheduling = ["bench", "scheduling", "--pods", "10,25", "--repeat", "1"];
    let disruption = ["bench", "disruption", "--nodes", "12"];
    for (format, extra) in [
        ("table", &[][..]),
        ("json", &["-o", "json"][..]),
        ("yaml", &["-o", "yaml"][..]),
    ] {
        snapshot(
            &format!("bench_scheduling__{format}"),
            &redact_timings(&run(&[&scheduling[..], extra].concat(), "")),
        );
        snapshot(
            &format!("bench_disruption__{format}"),
            &redact_timings(&run(&[&disruption[..], extra].concat(), "")),
        );
    }
}

#[test]
fn timings_are_redacted_and_nothing_else() {
    let json = "  \"pods\": 10,\n  \"seconds\": 0.0123,\n  \"passSeconds\": 1e-5,\n  \"peakRssKib\": 2048\n";
    assert_eq!(
        redact_timings(json),
        "  \"pods\": 10,\n  \"seconds\": [redacted],\n  \"passSeconds\": [redacted],\n  \"peakRssKib\": [redacted]\n"
    );
    let row = "diverse                   10           2             0     0.0012         8123";
    assert_eq!(
        redact_timings(row),
        "diverse                   10           2             0 [seconds] [pods/s]"
    );
    assert_eq!(
        redact_timings("decide pass          0.123 s\npeak RSS             12.5 MiB\nnodes 12"),
        "decide pass          [seconds] s\npeak RSS             [memory] MiB\nnodes 12"
    );
}

#[test]
fn help_of_every_command() {
    let commands: &[&[&str]] = &[
        &[],
        &["crds"],
        &["validate"],
        &["convert"],
        &["simulate"],
        &["explain"],
        &["diff"],
        &["bench"],
        &["bench", "scheduling"],
        &["bench", "disruption"],
        &["aws"],
        &["aws", "iam"],
        &["controller"],
    ];
    for command in commands {
        let name = if command.is_empty() {
            "help__karpenter".to_string()
        } else {
            format!("help__{}", command.join("_"))
        };
        snapshot_run(&name, &[*command, &["--help"]].concat());
    }
}
