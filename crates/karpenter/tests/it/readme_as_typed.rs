//! The README's commands as a newcomer types them: every `cargo run` line of its `sh` blocks, run
//! through cargo itself (`bash -o pipefail -c LINE` at the repository root), not the binary this
//! test binary was built with. A second binary among the workspace's default members once broke
//! every one of these lines (`cargo run` could not tell which binary to run) while a test of the
//! built binary stayed green.
//!
//! Ignored in the main test step: cargo builds the default members with their own features, and
//! its `karpenter` binary would replace the `--features aws` one the other tests run.
//! `scripts/test.sh` runs it last, in a step of its own (`--ignored readme_as_typed::`), in the
//! run's target directory (`README_TARGET_DIR`, else `CARGO_TARGET_DIR`, else `target`), so only
//! what the default members build differently is compiled again. The line that pipes `crds` into
//! `kubectl apply --server-side` runs against a real control plane (`KUBEBUILDER_ASSETS`).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every line of the README's ```sh blocks that starts with `cargo run`.
pub(crate) fn cargo_run_lines(readme: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        let trimmed = line.trim();
        if let Some(lang) = trimmed.strip_prefix("```") {
            in_sh = !in_sh && lang.trim() == "sh";
            continue;
        }
        if in_sh && trimmed.starts_with("cargo run") {
            lines.push(trimmed.to_string());
        }
    }
    lines
}

#[test]
fn the_readme_has_cargo_run_lines_in_sh_blocks() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let lines = cargo_run_lines(&readme);
    assert!(lines.len() >= 10, "{lines:#?}");
    assert_eq!(lines[0], "cargo run -- simulate -f examples/inflate");
}

#[tokio::test]
#[ignore = "builds the default members with cargo; scripts/test.sh runs it in its own step"]
async fn every_cargo_run_line_of_the_readme_works_as_typed() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let lines = cargo_run_lines(&readme);
    assert!(!lines.is_empty());
    let target = std::env::var_os("README_TARGET_DIR")
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR"))
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    // The one line that needs a cluster gets the real control plane.
    let cluster = if lines.iter().any(|l| l.contains("kubectl")) {
        super::real_cluster::cluster("readme-kubectl").await
    } else {
        None
    };
    let mut failures = Vec::new();
    for line in &lines {
        let started = Instant::now();
        let mut command = Command::new("bash");
        command
            .args(["-o", "pipefail", "-c", line])
            .current_dir(&root)
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("CARGO_BUILD_TARGET_DIR")
            // What cargo test sets for this binary must not leak into the user's cargo.
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_MANIFEST_DIR")
            .env_remove("CARGO_PKG_NAME");
        if line.contains("kubectl") {
            match &cluster {
                Some(cluster) => {
                    command.env("KUBECONFIG", cluster.plane().kubeconfig());
                }
                None => {
                    eprintln!("{line}: {}", karpenter_envtest::SKIPPED);
                    continue;
                }
            }
        }
        let output = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        eprintln!(
            "{line}: exit {:?} in {:.1} s, {} bytes out",
            output.status.code(),
            started.elapsed().as_secs_f64(),
            stdout.len()
        );
        if !output.status.success() || stdout.trim().is_empty() {
            let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
            failures.push(format!(
                "`{line}` exited {:?}; stderr ends:\n{}",
                output.status.code(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
