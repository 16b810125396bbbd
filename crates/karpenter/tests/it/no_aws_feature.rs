//! The default build, without the `aws` feature (no AWS SDK): `controller --cloud-provider aws`
//! stops at once with one line naming the feature, and `aws iam` still prints the policy.
//! `./scripts/test.sh` runs these in a step of their own (`cargo test --workspace --test it --
//! no_aws_feature::`), since its main run enables the feature.

use std::process::Command;

#[test]
fn controller_with_the_aws_provider_names_the_missing_feature_in_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args([
            "controller",
            "--cloud-provider",
            "aws",
            "--cluster-name",
            "demo",
        ])
        .env_remove("CLOUD_PROVIDER")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("`aws` cargo feature"), "{stderr}");
    assert!(
        stderr.contains("cargo build --release --features aws"),
        "{stderr}"
    );
}

#[test]
fn aws_iam_needs_no_sdk() {
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["aws", "iam", "--cluster-name", "demo"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let policy: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(policy["Version"], "2012-10-17");
}
