//! The command line on bad input: every file of the corpus `tests/bad-input/` (see its
//! `expected.tsv`) through the real binary, plus inputs made on the spot (a symbolic link loop, a
//! FIFO, an over-size file, empty stdin, a `kubectl get pods -A -o yaml` List of 10,000 pods).
//! Each run must end in time with the expected exit code, name the field or text it is about, and
//! never panic.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A finished run: exit code and stdout + stderr.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs the binary with `args` from the repository root, feeding `stdin`; kills it and fails
/// the test if it runs longer than `limit` (a hang on bad input is a bug).
fn run(args: &[&str], stdin: &[u8], limit: Duration) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        // The command may exit before reading everything (e.g. over the size cap).
        let _ = pipe.write_all(&input);
    });
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).ok();
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).ok();
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            child.kill().ok();
            child.wait().ok();
            panic!("karpenter {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    writer.join().ok();
    Run {
        code: status.code(),
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

const LIMIT: Duration = Duration::from_secs(60);

fn assert_no_panic(what: &str, run: &Run) {
    assert_ne!(
        run.code,
        Some(101),
        "{what}: exit code 101 (panic)\n{}",
        run.output()
    );
    assert!(
        !run.stderr.contains("panicked"),
        "{what}: panicked\n{}",
        run.stderr
    );
}

#[test]
fn every_corpus_file_fails_clearly_with_its_expected_exit_code() {
    let manifest = std::fs::read_to_string(repo().join("tests/bad-input/expected.tsv")).unwrap();
    let mut checked = 0;
    let mut failures = Vec::new();
    for line in manifest
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let fields: Vec<&str> = line.split('\t').collect();
        let [file, command, code, expect] = fields[..] else {
            panic!("expected.tsv: 4 tab-separated fields per line: {line}");
        };
        let path = format!("tests/bad-input/{file}");
        assert!(repo().join(&path).exists(), "{path} is listed but missing");
        let command = command.replace("{}", &path);
        let args: Vec<&str> = command.split_whitespace().collect();
        let run = run(&args, b"", LIMIT);
        assert_no_panic(file, &run);
        let want: i32 = code.parse().unwrap();
        if run.code != Some(want) || !run.output().contains(expect) {
            failures.push(format!(
                "{file}: `karpenter {command}` exited {:?} (want {want}), output must contain {expect:?}:\n{}",
                run.code,
                run.output()
            ));
        }
        checked += 1;
    }
    assert!(
        checked >= 100,
        "the corpus has {checked} cases; keep at least 100"
    );
    // Every file of the corpus is in the manifest.
    let listed = manifest.lines().filter(|l| !l.starts_with('#')).count();
    let files = std::fs::read_dir(repo().join("tests/bad-input"))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name != "expected.tsv" && name != "README.md"
        })
        .count();
    assert_eq!(
        files, listed,
        "every file in tests/bad-input is listed in expected.tsv"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A scratch directory under the target directory, fresh per test.
fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("karpenter-bad-input-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn copy_nodepool(dir: &Path) {
    std::fs::copy(
        repo().join("examples/inflate/nodepool.yaml"),
        dir.join("nodepool.yaml"),
    )
    .unwrap();
}

#[cfg(unix)]
#[test]
fn a_symbolic_link_loop_is_read_once_with_a_note() {
    let dir = scratch("loop");
    copy_nodepool(&dir);
    std::os::unix::fs::symlink(&dir, dir.join("again")).unwrap();
    for command in ["validate", "convert"] {
        let run = run(&[command, "-f", dir.to_str().unwrap()], b"", LIMIT);
        assert_no_panic(command, &run);
        assert_eq!(run.code, Some(0), "{command}: {}", run.output());
        assert!(run.stderr.contains("symbolic link loop"), "{}", run.stderr);
    }
    let run = run(&["validate", "-f", dir.to_str().unwrap()], b"", LIMIT);
    assert!(
        run.stdout.contains("ok: 1 valid"),
        "read once: {}",
        run.stdout
    );
    std::fs::remove_dir_all(dir).ok();
}

#[cfg(unix)]
#[test]
fn a_fifo_is_skipped_with_a_note_not_waited_on() {
    let dir = scratch("fifo");
    let fifo = dir.join("pipe.yaml");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    // Alone: nothing was checked, so not a success.
    let alone = run(&["validate", "-f", fifo.to_str().unwrap()], b"", LIMIT);
    assert_no_panic("fifo", &alone);
    assert_eq!(alone.code, Some(2), "{}", alone.output());
    assert!(alone.stderr.contains("FIFO"), "{}", alone.stderr);
    // Inside a directory next to a real manifest: skipped, the rest is checked.
    copy_nodepool(&dir);
    for command in ["validate", "simulate"] {
        let run = run(&[command, "-f", dir.to_str().unwrap()], b"", LIMIT);
        assert_no_panic(command, &run);
        assert_eq!(run.code, Some(0), "{command}: {}", run.output());
        assert!(
            run.stderr.contains("pipe.yaml: skipped: a FIFO"),
            "{}",
            run.stderr
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn an_over_size_file_is_an_error_naming_the_file_and_the_cap() {
    let dir = scratch("big");
    let big = dir.join("huge.yaml");
    // Sparse: the size is checked before anything is read.
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(128 * 1024 * 1024 + 1).unwrap();
    for command in ["validate", "convert", "simulate"] {
        let run = run(&[command, "-f", big.to_str().unwrap()], b"", LIMIT);
        assert_no_panic(command, &run);
        assert_eq!(run.code, Some(1), "{command}: {}", run.output());
        assert!(
            run.stderr.contains("huge.yaml") && run.stderr.contains("128 MiB"),
            "{command}: {}",
            run.stderr
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn empty_stdin_and_missing_files_are_never_a_silent_success() {
    for (command, code) in [("validate", 2), ("convert", 2), ("simulate", 1)] {
        let run = run(&[command, "-f", "-"], b"", LIMIT);
        assert_no_panic(command, &run);
        assert_eq!(run.code, Some(code), "{command}: {}", run.output());
        assert!(
            run.stderr.contains("-: empty input"),
            "{command}: {}",
            run.stderr
        );
    }
    let run = run(
        &["validate", "-f", "tests/bad-input/no-such-file.yaml"],
        b"",
        LIMIT,
    );
    assert_no_panic("missing", &run);
    assert_eq!(run.code, Some(1));
    assert!(run.stderr.contains("no-such-file.yaml"), "{}", run.stderr);
}

/// What `kubectl get pods -A -o yaml` prints for `count` pending pods, `managedFields` and all.
fn kubectl_pod_list(count: usize) -> String {
    let mut out = String::from("apiVersion: v1\nitems:\n");
    for i in 0..count {
        let namespace = format!("team-{}", i % 20);
        out.push_str(&format!(
            r#"- apiVersion: v1
  kind: Pod
  metadata:
    creationTimestamp: "2024-05-01T10:00:00Z"
    generateName: web-7d9f8b6c5d-
    labels:
      app: web
      pod-template-hash: 7d9f8b6c5d
    managedFields:
    - apiVersion: v1
      fieldsType: FieldsV1
      fieldsV1:
        f:metadata:
          f:generateName: {{}}
          f:labels:
            .: {{}}
            f:app: {{}}
            f:pod-template-hash: {{}}
          f:ownerReferences:
            .: {{}}
            k:{{"uid":"5f0c6d1e-0000-4000-8000-000000000001"}}: {{}}
        f:spec:
          f:containers:
            k:{{"name":"app"}}:
              .: {{}}
              f:image: {{}}
              f:name: {{}}
              f:resources:
                .: {{}}
                f:requests:
                  .: {{}}
                  f:cpu: {{}}
                  f:memory: {{}}
      manager: kube-controller-manager
      operation: Update
      time: "2024-05-01T10:00:00Z"
    - apiVersion: v1
      fieldsType: FieldsV1
      fieldsV1:
        f:status:
          f:conditions:
            .: {{}}
            k:{{"type":"PodScheduled"}}:
              .: {{}}
              f:lastProbeTime: {{}}
              f:lastTransitionTime: {{}}
              f:message: {{}}
              f:reason: {{}}
              f:status: {{}}
              f:type: {{}}
      manager: kube-scheduler
      operation: Update
      subresource: status
      time: "2024-05-01T10:00:01Z"
    name: web-7d9f8b6c5d-{i:05}
    namespace: {namespace}
    ownerReferences:
    - apiVersion: apps/v1
      blockOwnerDeletion: true
      controller: true
      kind: ReplicaSet
      name: web-7d9f8b6c5d
      uid: 5f0c6d1e-0000-4000-8000-000000000001
    resourceVersion: "{version}"
    uid: 9a8b7c6d-0000-4000-8000-{i:012}
  spec:
    containers:
    - image: nginx:1.27
      imagePullPolicy: IfNotPresent
      name: app
      resources:
        requests:
          cpu: 100m
          memory: 128Mi
      terminationMessagePath: /dev/termination-log
      terminationMessagePolicy: File
      volumeMounts:
      - mountPath: /var/run/secrets/kubernetes.io/serviceaccount
        name: kube-api-access-x7k2p
        readOnly: true
    dnsPolicy: ClusterFirst
    enableServiceLinks: true
    preemptionPolicy: PreemptLowerPriority
    priority: 0
    restartPolicy: Always
    schedulerName: default-scheduler
    securityContext: {{}}
    serviceAccountName: default
    terminationGracePeriodSeconds: 30
    tolerations:
    - effect: NoExecute
      key: node.kubernetes.io/not-ready
      operator: Exists
      tolerationSeconds: 300
    volumes:
    - name: kube-api-access-x7k2p
      projected:
        defaultMode: 420
        sources:
        - serviceAccountToken:
            expirationSeconds: 3607
            path: token
  status:
    conditions:
    - lastProbeTime: null
      lastTransitionTime: "2024-05-01T10:00:01Z"
      message: '0/3 nodes are available: 3 Insufficient cpu.'
      reason: Unschedulable
      status: "False"
      type: PodScheduled
    phase: Pending
    qosClass: Burstable
"#,
            version = 100_000 + i,
        ));
    }
    out.push_str("kind: List\nmetadata:\n  resourceVersion: \"\"\n");
    out
}

#[test]
fn kubectl_get_pods_of_ten_thousand_pods_with_managed_fields_loads() {
    let dir = scratch("kubectl");
    let pods = dir.join("pods.yaml");
    let text = kubectl_pod_list(10_000);
    assert!(
        text.len() > 20_000_000,
        "realistic size: {} bytes",
        text.len()
    );
    std::fs::write(&pods, text).unwrap();
    let run = run(
        &[
            "simulate",
            "-f",
            pods.to_str().unwrap(),
            "-f",
            "examples/inflate/nodepool.yaml",
            "-f",
            "examples/inflate/ec2nodeclass.yaml",
            "-o",
            "json",
        ],
        b"",
        Duration::from_secs(300),
    );
    assert_no_panic("kubectl list", &run);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let plan: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(plan["summary"]["pods"], 10_000);
    assert!(plan["summary"]["scheduled"].as_u64().unwrap() > 0);
    assert_eq!(plan["ignored"], serde_json::json!([]));
    std::fs::remove_dir_all(dir).ok();
}
