//! `karpenter controller` under faults, as a process: flag values that would overflow are
//! rejected at start with the flag named, and `/healthz` answers while the API server is silent.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): a silent API server (injected hang).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use karpenter_testapi::TestApiServer;

fn controller_with(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .arg("controller")
        .args(args)
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn out_of_range_batch_durations_are_rejected_with_the_flag_named() {
    for (flag, value, why) in [
        (
            "--batch-idle-duration",
            "10000000000000000000s10000000000000000000s",
            "out of range",
        ),
        ("--batch-max-duration", "9999999999999h", "out of range"),
        ("--batch-max-duration", "2h", "out of range"),
        ("--batch-idle-duration", "0s", "out of range"),
        ("--batch-idle-duration", "5", "missing unit"),
    ] {
        let out = controller_with(&[flag, value, "--kubeconfig", "/nonexistent"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
        assert!(stderr.contains(why), "{flag} {value}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // The environment variable goes through the same check.
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .arg("controller")
        .env_clear()
        .env(
            "BATCH_MAX_DURATION",
            "99999999999999999999s99999999999999999999s",
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("BATCH_MAX_DURATION"), "{stderr}");
}

#[test]
fn unknown_or_non_bool_feature_gates_stop_the_start_naming_the_gate() {
    for (value, why) in [
        (
            "NodeRepair=true,Drift=true",
            "unrecognized feature gate \"Drift\"",
        ),
        ("NodeRepair=maybe", "for feature gate NodeRepair"),
    ] {
        let out = controller_with(&["--feature-gates", value, "--kubeconfig", "/nonexistent"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert!(stderr.contains("--feature-gates"), "{value}: {stderr}");
        assert!(stderr.contains(why), "{value}: {stderr}");
    }
    // The chart's value (every gate spelled out) is accepted: the start goes on to the
    // kubeconfig, which is what fails here.
    let chart = "NodeRepair=true,ReservedCapacity=true,SpotToSpotConsolidation=false,\
                 NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false";
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["controller", "--kubeconfig", "/nonexistent"])
        .env_clear()
        .env("FEATURE_GATES", chart)
        .env("HEALTH_PROBE_PORT", "0")
        .env("METRICS_PORT", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("feature gate"), "{stderr}");
    assert!(stderr.contains("/nonexistent"), "{stderr}");
    // CapacityBuffer is implemented now: on, it is accepted like any gate (the start goes on to
    // the kubeconfig).
    let out = controller_with(&[
        "--feature-gates",
        "CapacityBuffer=true",
        "--kubeconfig",
        "/nonexistent",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("feature gate"), "{stderr}");
    assert!(stderr.contains("/nonexistent"), "{stderr}");
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` over HTTP/1.0: the status line and body.
fn get(port: u16, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_while_the_api_server_is_silent() {
    let server = TestApiServer::new();
    server.inject_hang(None, "", usize::MAX);
    let tcp = server.serve_tcp().await.unwrap();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "controller-silent-{}-{}",
        std::process::id(),
        tcp.addr().port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    tcp.write_kubeconfig(&kubeconfig).unwrap();
    let health_port = free_port();
    let log = std::fs::File::create(dir.join("controller.log")).unwrap();
    let _controller = Killed(
        Command::new(env!("CARGO_BIN_EXE_karpenter"))
            .args(["controller", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--log-format", "text"])
            .env_clear()
            .env("HEALTH_PROBE_PORT", health_port.to_string())
            .env("METRICS_PORT", free_port().to_string())
            .env("POD_NAMESPACE", "karpenter")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    let healthz = loop {
        match get(health_port, "/healthz") {
            Ok(response) => break response,
            Err(_) => {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "/healthz not served: {}",
                    std::fs::read_to_string(dir.join("controller.log")).unwrap_or_default()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert!(healthz.starts_with("HTTP/1.0 200"), "{healthz}");
    // Once the controller's first API call is hanging, the probes still answer.
    while server.hung_requests().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no API call made"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let healthz = get(health_port, "/healthz").unwrap();
    assert!(healthz.starts_with("HTTP/1.0 200"), "{healthz}");
    let readyz = get(health_port, "/readyz").unwrap();
    assert!(readyz.starts_with("HTTP/1.0 503"), "{readyz}");
    assert!(readyz.contains("starting"), "{readyz}");
}
