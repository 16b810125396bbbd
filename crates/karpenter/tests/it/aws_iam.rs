//! `karpenter aws iam`: the policy printed as JSON, and the CloudFormation template checked by the
//! real linter (PyPI `cfn-lint`, in the `.venv-cfn` that `./scripts/test.sh` installs) — the template
//! the getting-started guide deploys with `aws cloudformation deploy`.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn karpenter(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(args)
        .env_remove("CLUSTER_NAME")
        .output()
        .unwrap()
}

#[test]
fn json_is_the_policy_scoped_to_the_cluster() {
    let out = karpenter(&[
        "aws",
        "iam",
        "--cluster-name",
        "demo",
        "--region",
        "eu-west-1",
        "--account-id",
        "123456789012",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let policy: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(policy["Version"], "2012-10-17");
    let text = policy.to_string();
    assert!(text.contains("arn:aws:sqs:eu-west-1:123456789012:demo"));
    assert!(text.contains("arn:aws:iam::123456789012:role/KarpenterNodeRole-demo"));
    assert!(text.contains("aws:ResourceTag/kubernetes.io/cluster/demo"));
    assert!(karpenter_aws::iam::allows(&policy, "ec2:CreateFleet"));
}

#[test]
fn cluster_name_is_required_and_named() {
    let out = karpenter(&["aws", "iam"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--cluster-name"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn cloudformation_template_passes_cfn_lint() {
    let out = karpenter(&[
        "aws",
        "iam",
        "--cluster-name",
        "demo",
        "-o",
        "cloudformation",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for resource in [
        "KarpenterNodeRole:",
        "KarpenterControllerPolicy:",
        "KarpenterInterruptionQueue:",
        "SpotInterruptionRule:",
    ] {
        assert!(text.contains(resource), "missing {resource}");
    }
    let lint = repo().join(".venv-cfn/bin/cfn-lint");
    assert!(
        lint.exists(),
        "{} is missing: run ./scripts/test.sh once (it installs cfn-lint into .venv-cfn/)",
        lint.display()
    );
    let dir = std::env::temp_dir().join(format!("karpenter-cfn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("karpenter.yaml");
    std::fs::write(&file, &text).unwrap();
    let out = Command::new(&lint)
        .arg("--regions")
        .arg("us-east-1")
        .arg("--")
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "cfn-lint refused the template:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
