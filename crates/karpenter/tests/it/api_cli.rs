//! `karpenter crds`, `validate` and `convert` end to end: the real binary, output format and exit codes.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs the built binary from the repository root with `stdin` piped in.
pub(crate) fn karpenter(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin.as_bytes()).unwrap();
    drop(pipe);
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

const SEEDS: &str = "tests/fixtures/manifests/seeds";

#[test]
fn crds_prints_every_crd() {
    let out = karpenter(&["crds"], "");
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    assert_eq!(stdout.matches("kind: CustomResourceDefinition").count(), 5);
    for name in [
        "nodepools.karpenter.sh",
        "nodeclaims.karpenter.sh",
        "ec2nodeclasses.karpenter.k8s.aws",
        "nodeoverlays.karpenter.sh",
        "capacitybuffers.autoscaling.x-k8s.io",
    ] {
        assert!(stdout.contains(&format!("name: {name}")), "{name}");
    }
}

#[test]
fn crds_dir_writes_what_is_committed_in_deploy() {
    let dir = std::env::temp_dir().join(format!("karpenter-crds-{}", std::process::id()));
    let out = karpenter(&["crds", "--dir", dir.to_str().unwrap()], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    for name in [
        "karpenter.sh_nodepools.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.k8s.aws_ec2nodeclasses.yaml",
        "karpenter.sh_nodeoverlays.yaml",
        "autoscaling.x-k8s.io_capacitybuffers.yaml",
    ] {
        let generated = std::fs::read_to_string(dir.join(name)).unwrap();
        let committed =
            std::fs::read_to_string(repo().join("deploy/crds").join(name)).unwrap_or_default();
        assert!(
            generated == committed,
            "deploy/crds/{name} is stale; regenerate with: cargo run -- crds --dir deploy/crds"
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn validate_v1_seeds_exits_zero_with_summary() {
    let out = karpenter(
        &[
            "validate",
            "-f",
            &format!("{SEEDS}/002-v1-spot.yaml"),
            "-f",
            &format!("{SEEDS}/003-v1-nodepools.yaml"),
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert_eq!(
        text(&out.stdout).trim(),
        "ok: 9 valid, 0 invalid, 0 skipped"
    );
}

#[test]
fn validate_reports_file_document_object_path_message_hint() {
    let out = karpenter(
        &[
            "validate",
            "-f",
            "tests/fixtures/manifests/invalid/np-weight-too-high.yaml",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert_eq!(
        stdout.trim(),
        "tests/fixtures/manifests/invalid/np-weight-too-high.yaml:1 (line 4): NodePool/default: spec.weight: Invalid value: 101: should be less than or equal to 100 (use a value from 1 to 100)"
    );
    assert!(text(&out.stderr).contains("validation failed: 0 valid, 1 invalid, 0 skipped"));
}

#[test]
fn validate_directory_recurses_and_fails_on_invalid_fixtures() {
    let out = karpenter(&["validate", "-f", "tests/fixtures/manifests/invalid"], "");
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    // Every file contributes at least one error line.
    let files = std::fs::read_dir(repo().join("tests/fixtures/manifests/invalid"))
        .unwrap()
        .count();
    for line in stdout.lines() {
        assert!(
            line.starts_with("tests/fixtures/manifests/invalid/"),
            "{line}"
        );
    }
    let failing: std::collections::BTreeSet<&str> =
        stdout.lines().filter_map(|l| l.split(':').next()).collect();
    assert_eq!(failing.len(), files);
}

#[test]
fn validate_stdin_document_index_and_skips_unknown_kinds() {
    let input = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: p\nspec:\n  template:\n    spec:\n      requirements: []\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: ''}\n";
    let out = karpenter(&["validate", "-f", "-"], input);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stdout).trim(),
        "-:2 (line 6): NodePool/p: spec.template.spec.nodeClassRef.name: name may not be empty (name the EC2NodeClass this pool uses)"
    );
    assert!(
        text(&out.stderr).contains("-:1 (line 1): ConfigMap/x: skipped"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn validate_legacy_points_at_convert() {
    let out = karpenter(
        &[
            "validate",
            "-f",
            &format!("{SEEDS}/000-v1alpha5-provisioner-awsnodetemplate.yaml"),
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 2);
    assert!(
        stdout.lines().all(|l| l.contains("run `karpenter convert")),
        "{stdout}"
    );
}

#[test]
fn convert_legacy_seeds_output_validates() {
    // Seed guides are independent (several define a NodePool `default`): together they would make
    // one object twice, which `convert` refuses (see `cli_conventions`), so each guide is
    // converted, and its output validated, on its own.
    let mut valid = 0;
    let mut seeds: Vec<_> = std::fs::read_dir(repo().join(SEEDS))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    seeds.sort();
    for seed in seeds {
        let out = karpenter(&["convert", "-f", seed.to_str().unwrap()], "");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let converted = text(&out.stdout);
        assert!(
            !converted.contains("v1beta1") && !converted.contains("v1alpha"),
            "{converted}"
        );
        let stderr = text(&out.stderr);
        assert!(
            stderr
                .lines()
                .all(|l| l.starts_with("warning: ") || l.starts_with("note: ")),
            "{stderr}"
        );
        let check = karpenter(&["validate", "-f", "-"], &converted);
        assert_eq!(check.status.code(), Some(0), "{}", text(&check.stdout));
        let summary = text(&check.stdout);
        let count: usize = summary
            .trim()
            .strip_prefix("ok: ")
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        valid += count;
    }
    // 8 converted legacy objects + 12 v1 objects passed through.
    assert_eq!(valid, 20);
}

#[test]
fn convert_warns_about_fields_without_v1_equivalent() {
    let input = "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata:\n  name: p\nspec:\n  providerRef:\n    name: nc\n  ttlSecondsAfterEmpty: 30\n  ttlSecondsUntilExpired: 2592000\n  kubeletConfiguration:\n    containerRuntime: dockerd\n    maxPods: 20\n  madeUpField: 1\n---\napiVersion: karpenter.k8s.aws/v1alpha1\nkind: AWSNodeTemplate\nmetadata:\n  name: nc\nspec:\n  amiFamily: Bottlerocket\n  instanceProfile: prof\n  subnetSelector: {aws-ids: 'subnet-1,subnet-2'}\n  securityGroupSelector: {karpenter.sh/discovery: c}\n  launchTemplate: lt\n";
    let out = karpenter(&["convert", "-f", "-"], input);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("-:1: Provisioner/p: spec.madeUpField: has no v1 equivalent"),
        "{stderr}"
    );
    assert!(stderr.contains("containerRuntime"), "{stderr}");
    assert!(
        stderr.contains("-:2: AWSNodeTemplate/nc: spec.launchTemplate"),
        "{stderr}"
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("consolidationPolicy: WhenEmpty\n"),
        "{stdout}"
    );
    assert!(stdout.contains("consolidateAfter: 30s"), "{stdout}");
    assert!(stdout.contains("expireAfter: 720h"), "{stdout}");
    assert!(stdout.contains("maxPods: 20"), "{stdout}");
    assert!(stdout.contains("id: subnet-2"), "{stdout}");
    assert!(stdout.contains("alias: bottlerocket@latest"), "{stdout}");
    let check = karpenter(&["validate", "-f", "-"], &stdout);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stdout));
}

#[test]
fn convert_passes_other_documents_through_unchanged() {
    let input =
        "# keep me\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x   # odd spacing stays\n";
    let out = karpenter(&["convert", "-f", "-"], input);
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), format!("---\n{input}"));
}

#[test]
fn convert_json_output() {
    let out = karpenter(
        &[
            "convert",
            "-f",
            &format!("{SEEDS}/004-v1beta1-eks-workshop.yaml"),
            "-o",
            "json",
        ],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"][0]["apiVersion"], "karpenter.sh/v1");
    assert_eq!(
        list["items"][1]["spec"]["amiSelectorTerms"][0]["alias"],
        "al2023@latest"
    );
}
