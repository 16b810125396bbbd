//! `karpenter controller --cloud-provider aws`, the real binary: a clear error and a non-zero exit
//! when the cluster name, the region or the credentials are missing; against moto (started by
//! `./scripts/test.sh`, `KARPENTER_TEST_AWS_ENDPOINT`) and the test API server it makes an
//! EC2NodeClass Ready, the endpoint, CIDR and version discovered through `eks:DescribeCluster`;
//! with `INTERRUPTION_QUEUE` it consumes the queue and serves upstream's interruption metrics.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::testapi_env::TestApiEnv;
use karpenter_api::v1::{ConditionsExt, EC2NodeClass};
use karpenter_aws::{AwsClients, ClientOptions};
use serde_json::json;

/// Two distinct free ports (both listeners held while the second is picked).
fn free_ports() -> (String, String) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (
        a.local_addr().unwrap().port().to_string(),
        b.local_addr().unwrap().port().to_string(),
    )
}

/// The binary with only `env` (and free ports), expected to stop by itself.
fn run_aws_controller(env: &[(&str, &str)]) -> Output {
    let (metrics_port, health_port) = free_ports();
    let mut command = Command::new(env!("CARGO_BIN_EXE_karpenter"));
    command
        .args([
            "controller",
            "--cloud-provider",
            "aws",
            "--log-format",
            "text",
        ])
        .env_clear()
        .env("HOME", "/nonexistent")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", "/nonexistent/config")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
        .env("METRICS_PORT", &metrics_port)
        .env("HEALTH_PROBE_PORT", &health_port)
        .stdin(Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

fn assert_fails_naming(output: &Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "exited 0; stderr: {stderr}");
    assert!(stderr.contains(expected), "{expected:?} not in: {stderr}");
    assert!(
        !stderr.contains("not available in this build"),
        "still refuses the provider: {stderr}"
    );
}

#[test]
fn start_errors_name_the_missing_cluster_name_region_and_credentials() {
    let output = run_aws_controller(&[]);
    assert_fails_naming(&output, "CLUSTER_NAME is required");

    let output = run_aws_controller(&[("CLUSTER_NAME", "c")]);
    assert_fails_naming(&output, "no AWS region configured");

    let output = run_aws_controller(&[("CLUSTER_NAME", "c"), ("AWS_REGION", "us-west-2")]);
    assert_fails_naming(&output, "no AWS credentials found");

    let output = run_aws_controller(&[("CLUSTER_NAME", "c"), ("VM_MEMORY_OVERHEAD_PERCENT", "-1")]);
    assert_fails_naming(&output, "VM_MEMORY_OVERHEAD_PERCENT");
}

/// moto's endpoint, or `None` when `KARPENTER_SKIP_MOTO=1` (said so); else the test fails.
fn moto_endpoint() -> Option<String> {
    match std::env::var("KARPENTER_TEST_AWS_ENDPOINT") {
        Ok(endpoint) if !endpoint.is_empty() => Some(endpoint),
        _ if std::env::var("KARPENTER_SKIP_MOTO").as_deref() == Ok("1") => {
            eprintln!("skipped: KARPENTER_SKIP_MOTO=1, this test needs moto");
            None
        }
        _ => panic!(
            "KARPENTER_TEST_AWS_ENDPOINT is not set: run ./scripts/test.sh, which starts moto \
             (or set KARPENTER_SKIP_MOTO=1 to skip this test)"
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aws_controller_makes_an_ec2nodeclass_ready_on_moto() {
    let Some(endpoint) = moto_endpoint() else {
        return;
    };
    let cluster = format!(
        "binary-{}-{}",
        std::process::id(),
        jiff::Timestamp::now().subsec_nanosecond()
    );
    let clients = AwsClients::load(&ClientOptions {
        region: Some("us-west-2".into()),
        endpoint_url: Some(endpoint.clone()),
        static_credentials: Some(karpenter_aws::Credentials::new(
            "testing", "testing", None, None, "moto",
        )),
        ..ClientOptions::default()
    })
    .await
    .unwrap();
    clients
        .eks
        .create_cluster()
        .name(&cluster)
        .version("1.32")
        .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
        .send()
        .await
        .unwrap();
    let queue_url = clients
        .sqs
        .create_queue()
        .queue_name(&cluster)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let role = format!("KarpenterNodeRole-{cluster}");
    clients
        .iam
        .create_role()
        .role_name(&role)
        .assume_role_policy_document("{}")
        .send()
        .await
        .unwrap();
    // moto's default VPC: its subnets by ID, its security groups by name.
    let subnets = clients.ec2.describe_subnets().send().await.unwrap();
    let subnet = subnets
        .subnets()
        .iter()
        .find(|s| s.default_for_az() == Some(true))
        .and_then(|s| s.subnet_id())
        .unwrap()
        .to_string();

    let env = TestApiEnv::start("controller-aws").await;
    let TestApiEnv {
        server,
        dir,
        kubeconfig,
        ..
    } = &env;
    env.create_node_class(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": role,
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"id": subnet}],
            "securityGroupSelectorTerms": [{"name": "default"}]
        }
    }))
    .await;

    let (metrics_port, health_port) = free_ports();
    let log = dir.join("controller.log");
    let file = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["controller", "--cloud-provider", "aws", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--log-format", "text"])
        .env_clear()
        .env("CLUSTER_NAME", &cluster)
        .env("INTERRUPTION_QUEUE", &cluster)
        .env("AWS_REGION", "us-west-2")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_ENDPOINT_URL", &endpoint)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("DISABLE_LEADER_ELECTION", "true")
        // moto answers DescribeInstanceTypes in one page of 1,300+ types, slowly under load.
        .env("AWS_API_TIMEOUT", "3m")
        .env("METRICS_PORT", &metrics_port)
        .env("HEALTH_PROBE_PORT", &health_port)
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(180);
    let ready = loop {
        let current = server.get::<EC2NodeClass>(None, "default");
        if let Some(nc) = current.filter(EC2NodeClass::is_ready) {
            break Some(nc);
        }
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // The interruption task consumes the queue: a malformed message is counted and deleted, and
    // upstream's metrics are on /metrics.
    let metrics_port: u16 = metrics_port.parse().unwrap();
    let mut metrics = String::new();
    if ready.is_some() {
        clients
            .sqs
            .send_message()
            .queue_url(&queue_url)
            .message_body("not an EventBridge event")
            .send()
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline
            && !metrics.contains("karpenter_interruption_deleted_messages_total 1")
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
            metrics = crate::controller_e2e::scrape(metrics_port).unwrap_or_default();
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let Some(ready) = ready else {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        let status = server
            .get::<EC2NodeClass>(None, "default")
            .and_then(|nc| nc.status);
        panic!("EC2NodeClass not Ready: {status:#?}\n--- controller log ---\n{log}");
    };
    let status = ready.status.unwrap();
    assert_eq!(status.subnets.len(), 1);
    assert_eq!(status.subnets[0].id, subnet);
    assert!(!status.security_groups.is_empty());
    assert!(!status.amis.is_empty());
    assert!(status.instance_profile.is_some());
    assert!(status.is_condition_true("InstanceProfileReady"));
    assert!(
        ready
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"karpenter.k8s.aws/termination".to_string())
    );
    for line in [
        "karpenter_interruption_received_messages_total{message_type=\"parse_error\"} 1",
        "karpenter_interruption_deleted_messages_total 1",
        "# TYPE karpenter_interruption_message_queue_duration_seconds histogram",
        "karpenter_interruption_message_queue_duration_seconds_count 1",
    ] {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            metrics.contains(line),
            "{line} not on /metrics:\n{metrics}\n--- controller log ---\n{log}"
        );
    }
}
