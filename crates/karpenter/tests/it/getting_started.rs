//! `docs/getting-started-eks.md` is run, not just read: every ```` ```sh runnable ```` block runs as
//! written (bash, from the repository root, `karpenter` on the PATH, `CLUSTER_NAME=demo`), the
//! ```` ```sh helm ```` block's `--set` values render and lint clean with Helm's engine, and every YAML block
//! that names a file under `examples/` shows that file exactly.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (info string, body) of every fenced block.
fn blocks(markdown: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in markdown.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) => current = Some((info.trim().to_string(), String::new())),
            (Some(_), Some("")) => out.extend(current.take()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

fn guide() -> String {
    std::fs::read_to_string(repo().join("docs/getting-started-eks.md")).unwrap()
}

#[test]
fn runnable_blocks_run() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_karpenter"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let dir = std::env::temp_dir().join(format!("karpenter-guide-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let runnable: Vec<_> = blocks(&guide())
        .into_iter()
        .filter(|(info, _)| info == "sh runnable")
        .collect();
    assert!(runnable.len() >= 4, "the guide lost its runnable blocks");
    for (_, body) in runnable {
        let out = Command::new("bash")
            .arg("-euo")
            .arg("pipefail")
            .arg("-c")
            .arg(&body)
            .current_dir(repo())
            .env("PATH", &path)
            .env("CLUSTER_NAME", "demo")
            .env("AWS_PARTITION", "aws")
            .env("TEMPOUT", dir.join("tempout"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "guide block failed:\n{body}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // What the blocks wrote is what the next steps use.
    let template = std::fs::read_to_string(dir.join("tempout")).unwrap();
    assert!(template.contains("KarpenterControllerPolicy"));
    let policy: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tempout.json")).unwrap()).unwrap();
    assert!(
        policy
            .to_string()
            .contains("arn:aws:iam::123456789012:role/KarpenterNodeRole-demo")
    );
    let converted = std::fs::read_to_string(dir.join("tempout.v1.yaml")).unwrap();
    assert!(converted.contains("apiVersion: karpenter.sh/v1"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn yaml_blocks_show_the_example_files() {
    let mut checked = 0;
    for (info, body) in blocks(&guide()) {
        if info != "yaml" {
            continue;
        }
        let Some(first) = body.lines().next() else {
            continue;
        };
        let Some(path) = first
            .strip_prefix("# ")
            .filter(|p| p.starts_with("examples/"))
        else {
            continue;
        };
        let file = std::fs::read_to_string(repo().join(path)).unwrap();
        let shown = &body[first.len() + 1..];
        assert_eq!(
            shown, file,
            "docs/getting-started-eks.md shows a stale {path}"
        );
        checked += 1;
    }
    assert_eq!(checked, 2);
}

#[test]
fn helm_command_renders_and_lints_clean() {
    let (_, body) = blocks(&guide())
        .into_iter()
        .find(|(info, _)| info == "sh helm")
        .expect("the guide's helm block");
    let command = body.replace("\\\n", " ");
    assert!(command.contains("helm upgrade --install karpenter charts/karpenter"));
    let words: Vec<&str> = command.split_whitespace().collect();
    let mut sets = Vec::new();
    for pair in words.windows(2) {
        if pair[0] == "--set" {
            let value = pair[1]
                .trim_matches('"')
                .replace(
                    "${KARPENTER_IAM_ROLE_ARN}",
                    "arn:aws:iam::123456789012:role/demo-karpenter",
                )
                .replace("${CLUSTER_NAME}", "demo")
                .replace(
                    "${REGISTRY}",
                    "123456789012.dkr.ecr.us-west-2.amazonaws.com",
                );
            assert!(!value.contains('$'), "unsubstituted variable in {value}");
            sets.push(value);
        }
    }
    assert!(sets.len() >= 8, "{sets:?}");
    let python = repo().join(".venv-helm/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run ./scripts/test.sh once (it installs helm-python-sdk into .venv-helm/)",
        python.display()
    );
    let mut render = Command::new(python);
    render
        .arg(repo().join("charts/karpenter/tests/render.py"))
        .arg("render");
    for set in &sets {
        render.arg("--set").arg(set);
    }
    let out = render.current_dir(repo()).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rendered["lint"]["errors"], serde_json::json!([]));
    for message in rendered["lint"]["messages"].as_array().unwrap() {
        // 1 = info; 2 = warning, 3 = error.
        assert!(message["severity"].as_i64().unwrap() < 2, "lint {message}");
    }
    let deployment = rendered["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["object"]["kind"] == "Deployment")
        .unwrap();
    let text = deployment.to_string();
    assert!(text.contains("123456789012.dkr.ecr.us-west-2.amazonaws.com/karpenter-rs"));
    assert!(text.contains("\"CLUSTER_NAME\""));
}
