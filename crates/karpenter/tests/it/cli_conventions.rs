//! One command-line convention: `-o` on every command and bench kind, counts that mean something,
//! flags that say what they need, regions of the whole catalogue, plans that say why they are
//! empty, and `validate`/`convert` on objects that meet twice.

use std::process::Output;

use crate::api_cli::karpenter;

use serde_json::Value;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn succeeded(output: &Output) -> (String, String) {
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status.code()
    );
    (stdout, stderr)
}

#[test]
fn bench_scheduling_runs_only_the_pods_asked_for() {
    let (stdout, _) = succeeded(&karpenter(
        &[
            "bench",
            "scheduling",
            "--pods",
            "10",
            "--repeat",
            "1",
            "-o",
            "json",
        ],
        "",
    ));
    let rows: Value = serde_json::from_str(&stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1, "no preference runs unless asked: {rows:?}");
    assert_eq!(rows[0]["workload"], "diverse");
    assert_eq!(rows[0]["pods"], 10);
    let (yaml, _) = succeeded(&karpenter(
        &[
            "bench",
            "scheduling",
            "--pods",
            "5",
            "--repeat",
            "1",
            "-o",
            "yaml",
        ],
        "",
    ));
    assert!(yaml.contains("workload: diverse"), "{yaml}");
}

#[test]
fn bench_scheduling_refuses_zero_pods() {
    for pods in ["0", "10,0"] {
        let output = karpenter(&["bench", "scheduling", "--pods", pods], "");
        assert_eq!(output.status.code(), Some(2), "{pods}");
        let stderr = text(&output.stderr);
        assert!(stderr.contains("at least 1"), "{stderr}");
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn bench_disruption_takes_dash_o_and_still_reads_json() {
    let (yaml, _) = succeeded(&karpenter(
        &["bench", "disruption", "--nodes", "5", "-o", "yaml"],
        "",
    ));
    assert!(yaml.contains("candidatesEvaluated:"), "{yaml}");
    let (json, _) = succeeded(&karpenter(
        &["bench", "disruption", "--nodes", "5", "--json"],
        "",
    ));
    let report: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["nodes"], 5);
    let (table, _) = succeeded(&karpenter(&["bench", "disruption", "--nodes", "5"], ""));
    assert!(table.starts_with("nodes "), "{table}");
}

#[test]
fn crds_take_dash_o_json() {
    let (json, _) = succeeded(&karpenter(&["crds", "-o", "json"], ""));
    let list: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 5);
}

#[test]
fn disruption_flags_say_they_need_disruption() {
    let help = text(&karpenter(&["simulate", "--help"], "").stdout);
    // (--feature-gates also serves the plan: NodeOverlay=true.)
    for flag in ["--now", "--until"] {
        let line = help
            .lines()
            .skip_while(|l| !l.trim_start().starts_with(flag))
            .take(3)
            .collect::<Vec<_>>()
            .join(" ");
        assert!(line.contains("--disruption"), "{flag}: {line}");
    }
    let output = karpenter(&["simulate", "-f", "examples/inflate", "--until", "2h"], "");
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("--disruption"), "{stderr}");
}

#[test]
fn simulate_in_seoul_uses_its_zones_and_says_prices_are_approximate() {
    let (table, _) = succeeded(&karpenter(
        &[
            "simulate",
            "-f",
            "examples/inflate",
            "--region",
            "ap-northeast-2",
        ],
        "",
    ));
    assert!(table.contains("ap-northeast-2"), "{table}");
    assert!(
        table.contains("note: ap-northeast-2 has no price table of its own; us-east-1 on-demand prices are used as an approximation"),
        "{table}"
    );
    let (json, stderr) = succeeded(&karpenter(
        &[
            "simulate",
            "-f",
            "examples/inflate",
            "--region",
            "ap-northeast-2",
            "-o",
            "json",
        ],
        "",
    ));
    let plan: Value = serde_json::from_str(&json).unwrap();
    let claims = plan["nodeClaims"].as_array().unwrap();
    assert!(!claims.is_empty());
    assert!(
        claims
            .iter()
            .all(|c| c["zone"].as_str().unwrap().starts_with("ap-northeast-2")),
        "{claims:?}"
    );
    assert!(
        stderr.contains("note: ap-northeast-2 has no price table"),
        "{stderr}"
    );
    // us-east-1 has its own prices: no such note.
    let (table, _) = succeeded(&karpenter(&["simulate", "-f", "examples/inflate"], ""));
    assert!(!table.contains("approximation"), "{table}");
}

#[test]
fn an_empty_plan_says_why() {
    let (table, _) = succeeded(&karpenter(
        &["simulate", "-f", "examples/getting-started-eks"],
        "",
    ));
    assert!(table.contains("0 of 0 pods scheduled"), "{table}");
    assert!(
        table.contains("note: no pending pods: Deployment/inflate has spec.replicas: 0 (scale up"),
        "{table}"
    );
    let (_, stderr) = succeeded(&karpenter(
        &[
            "simulate",
            "-f",
            "examples/getting-started-eks",
            "-o",
            "json",
        ],
        "",
    ));
    assert!(stderr.contains("spec.replicas: 0"), "{stderr}");
}

#[test]
fn validate_warns_once_about_an_object_in_two_files_and_passes() {
    // The v1 seed guide defines NodePool `production` in both of its files.
    let output = karpenter(
        &[
            "validate",
            "-f",
            "tests/fixtures/manifests/seeds/003-v1-nodepools.yaml",
            "-f",
            "tests/fixtures/manifests/seeds/003-v1-ec2nodeclasses.yaml",
        ],
        "",
    );
    let (stdout, stderr) = succeeded(&output);
    assert!(stdout.starts_with("ok: "), "{stdout}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect();
    let production: Vec<&&str> = warnings
        .iter()
        .filter(|l| l.contains("NodePool/production"))
        .collect();
    assert_eq!(production.len(), 1, "{stderr}");
    assert!(
        production[0].contains("003-v1-ec2nodeclasses.yaml")
            && production[0].contains("003-v1-nodepools.yaml"),
        "{}",
        production[0]
    );
    // Within one file the second object is still an error.
    let twice = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: a}\nspec: {role: r, amiSelectorTerms: [{alias: al2023@latest}], subnetSelectorTerms: [{id: subnet-1}], securityGroupSelectorTerms: [{id: sg-1}]}\n";
    let output = karpenter(&["validate", "-f", "-"], &format!("{twice}---\n{twice}"));
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stdout).contains("Duplicate value"));
}

#[test]
fn validate_reports_as_json() {
    let output = karpenter(
        &[
            "validate",
            "-f",
            "tests/fixtures/manifests/invalid/np-weight-too-high.yaml",
            "-o",
            "json",
        ],
        "",
    );
    assert_eq!(output.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["summary"]["invalid"], 1);
    assert_eq!(report["problems"][0]["path"], "spec.weight");
    assert_eq!(report["problems"][0]["object"], "NodePool/default");
}

#[test]
fn convert_refuses_two_documents_making_one_object_naming_both() {
    let output = karpenter(&["convert", "-f", "tests/fixtures/manifests/seeds"], "");
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: ") && l.contains("is also produced by"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(error.contains("NodePool \"default\""), "{error}");
    assert!(
        error.contains("000-v1alpha5-provisioner-awsnodetemplate.yaml:1 Provisioner/default"),
        "{error}"
    );
}

#[test]
fn convert_notes_the_kept_behaviour() {
    let input = "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: p}\nspec:\n  providerRef: {name: nc}\n---\napiVersion: karpenter.k8s.aws/v1alpha1\nkind: AWSNodeTemplate\nmetadata: {name: nc}\nspec:\n  amiFamily: AL2\n  instanceProfile: prof\n  subnetSelector: {karpenter.sh/discovery: c}\n  securityGroupSelector: {karpenter.sh/discovery: c}\n";
    let (stdout, stderr) = succeeded(&karpenter(&["convert", "-f", "-"], input));
    assert!(
        stdout.contains("key: karpenter.sh/capacity-type\n        operator: In\n        values:\n        - on-demand"),
        "{stdout}"
    );
    assert!(
        stderr.contains(
            "note: -:1: Provisioner/p: spec.requirements: no karpenter.sh/capacity-type requirement"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "note: -:2: AWSNodeTemplate/nc: spec.amiFamily: AL2 has no AMIs for Kubernetes 1.33"
        ),
        "{stderr}"
    );
}

/// `karpenter crds | head -1`: the reader closes the pipe early; the command stops quietly with
/// success (no panic, no backtrace), whatever the format.
#[test]
fn a_closed_stdout_pipe_ends_the_command_quietly() {
    for args in [&["crds"][..], &["crds", "-o", "json"][..]] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Read one chunk (as `head` does), then close the pipe.
        let mut first = [0u8; 64];
        let read = std::io::Read::read(child.stdout.as_mut().unwrap(), &mut first).unwrap();
        assert!(read > 0);
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        let stderr = text(&output.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            output.status.success(),
            "{args:?}: {:?} {stderr}",
            output.status
        );
    }
}
