//! The interruption queue's consumer on moto's SQS and a real control plane (`karpenter-envtest`,
//! the committed CRDs): a spot interruption warning deletes the instance's NodeClaim, records its
//! events and marks its spot offering unavailable; malformed messages are deleted and the loop
//! keeps going; an empty long poll never calls the API server.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use karpenter_api::NodeClaim;
use karpenter_aws::interruption::consumer::{InterruptionConsumer, Outcome, run_interruption};
use karpenter_aws::unavailable::{OfferingKey, UnavailableOfferings};
use karpenter_core::clock::FakeClock;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;

use crate::harness::{moto_clients, moto_clients_with_timeouts, real_cluster, unique_cluster};

fn node_claim(name: &str, instance_id: &str) -> NodeClaim {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {
                "karpenter.sh/nodepool": "general",
                "node.kubernetes.io/instance-type": "m5.large",
                "topology.kubernetes.io/zone": "us-west-2a",
                "karpenter.sh/capacity-type": "spot"
            }
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []
        },
        "status": {"providerID": format!("aws:///us-west-2a/{instance_id}"), "nodeName": format!("ip-{name}")}
    }))
    .unwrap()
}

/// Creates the NodeClaim, then writes its status (the API server ignores a status on create).
async fn create_node_claim(client: &Client, name: &str, instance_id: &str) {
    let api = Api::<NodeClaim>::all(client.clone());
    let claim = node_claim(name, instance_id);
    let mut created = api.create(&PostParams::default(), &claim).await.unwrap();
    created.status = claim.status;
    api.replace_status(name, &PostParams::default(), &created)
        .await
        .unwrap();
}

async fn node_claim_exists(client: &Client, name: &str) -> bool {
    Api::<NodeClaim>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
        .is_some()
}

fn spot_interruption(instance_id: &str) -> String {
    serde_json::json!({
        "version": "0",
        "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": "2026-11-23T08:00:00Z",
        "region": "us-west-2",
        "resources": [format!("arn:aws:ec2:us-west-2a:instance/{instance_id}")],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"}
    })
    .to_string()
}

async fn queue(clients: &karpenter_aws::AwsClients, name: &str) -> String {
    clients
        .sqs
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap()
}

async fn send(clients: &karpenter_aws::AwsClients, url: &str, body: &str) {
    clients
        .sqs
        .send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .unwrap();
}

async fn consumer(
    clients: &karpenter_aws::AwsClients,
    queue_name: &str,
    unavailable: &UnavailableOfferings,
    clock: Arc<FakeClock>,
) -> InterruptionConsumer {
    let mut consumer = InterruptionConsumer::new(clients, queue_name, unavailable.clone(), clock)
        .await
        .unwrap();
    consumer.wait_time_seconds = 1;
    consumer
}

#[tokio::test]
async fn a_spot_interruption_deletes_the_node_claim_and_marks_the_offering() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let Some(cluster) = real_cluster("interruption-spot").await else {
        return;
    };
    let queue_name = unique_cluster("interruption");
    let url = queue(&clients, &queue_name).await;
    let client = cluster.client();
    create_node_claim(&client, "general-spot", "i-0aaaaaaaaaaaaaaa1").await;
    create_node_claim(&client, "general-other", "i-0aaaaaaaaaaaaaaa2").await;
    let clock = Arc::new(FakeClock::default());
    let unavailable = UnavailableOfferings::new(clock.clone());
    let consumer = consumer(&clients, &queue_name, &unavailable, clock).await;
    assert_eq!(consumer.queue_url(), url);

    send(&clients, &url, &spot_interruption("i-0aaaaaaaaaaaaaaa1")).await;
    let mut outcomes = Vec::new();
    for _ in 0..5 {
        outcomes.extend(consumer.poll_once(&client).await.unwrap());
        if !outcomes.is_empty() {
            break;
        }
    }
    assert_eq!(
        outcomes,
        vec![Outcome::Handled {
            kind: "spot_interrupted",
            deleted_node_claims: vec!["general-spot".to_string()]
        }]
    );
    assert!(!node_claim_exists(&client, "general-spot").await);
    assert!(node_claim_exists(&client, "general-other").await);
    assert_eq!(
        unavailable.marked(),
        vec![OfferingKey::new("spot", "m5.large", "us-west-2a")]
    );
    // Written to the real API server, which validates them.
    let reasons: Vec<(String, String)> = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        // This test's NodeClaim and its Node only: the control plane may hold an earlier test's.
        .filter(|e| {
            matches!(
                e.involved_object.name.as_deref(),
                Some("general-spot" | "ip-general-spot")
            )
        })
        .map(|e| {
            (
                e.involved_object.kind.unwrap_or_default(),
                e.reason.unwrap_or_default(),
            )
        })
        .collect();
    for expected in [
        ("NodeClaim", "SpotInterrupted"),
        ("Node", "SpotInterrupted"),
        ("NodeClaim", "TerminatingOnInterruption"),
    ] {
        assert!(
            reasons.contains(&(expected.0.to_string(), expected.1.to_string())),
            "{expected:?} in {reasons:?}"
        );
    }
    // Handled messages are deleted: nothing comes back.
    assert!(consumer.poll_once(&client).await.unwrap().is_empty());
    assert_eq!(consumer.metrics.deleted.get(), 1);
}

#[tokio::test]
async fn malformed_messages_are_deleted_and_the_loop_keeps_going() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let Some(cluster) = real_cluster("interruption-malformed").await else {
        return;
    };
    let queue_name = unique_cluster("interruption-bad");
    let url = queue(&clients, &queue_name).await;
    let client = cluster.client();
    create_node_claim(&client, "general-after-malformed", "i-0bbbbbbbbbbbbbbb1").await;
    let clock = Arc::new(FakeClock::default());
    let unavailable = UnavailableOfferings::new(clock.clone());
    let consumer = consumer(&clients, &queue_name, &unavailable, clock).await;
    let metrics = consumer.metrics.clone();

    for body in ["not json", "{\"source\":\"aws.ec2\"}", "[]"] {
        send(&clients, &url, body).await;
    }
    let (stop, shutdown) = watch::channel(false);
    let running = tokio::spawn(run_interruption(consumer, client.clone(), shutdown));
    send(&clients, &url, &spot_interruption("i-0bbbbbbbbbbbbbbb1")).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    // SQS does not keep order: wait for all four messages.
    while node_claim_exists(&client, "general-after-malformed").await || metrics.deleted.get() < 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the loop did not handle the spot interruption after the malformed messages"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.send_replace(true);
    tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .expect("the loop stops on shutdown")
        .unwrap();
    let parse_errors = metrics
        .received
        .get_or_create(&karpenter_aws::interruption::consumer::MessageTypeLabels {
            message_type: "parse_error".into(),
        })
        .get();
    assert_eq!(parse_errors, 3);
    assert_eq!(metrics.deleted.get(), 4);
    // The queue is empty: malformed messages were deleted, not left to come back.
    let left = clients
        .sqs
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    assert!(left.messages().is_empty(), "{:?}", left.messages());
}

#[tokio::test]
async fn an_empty_queue_long_polls_past_the_clients_attempt_timeout() {
    // Clients whose attempts time out (1 s) before the long poll ends (2 s): as the binary's
    // defaults (10 s per attempt, 20 s long poll), scaled down.
    let Some(clients) =
        moto_clients_with_timeouts(Duration::from_secs(3), Duration::from_secs(1)).await
    else {
        return;
    };
    let queue_name = unique_cluster("interruption-empty");
    queue(&clients, &queue_name).await;
    // A client of an address nothing serves: an empty poll has nothing to ask the API server,
    // and a call would fail the poll.
    let unserved =
        Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let clock = Arc::new(FakeClock::default());
    let unavailable = UnavailableOfferings::new(clock.clone());
    let mut consumer = consumer(&clients, &queue_name, &unavailable, clock).await;
    consumer.wait_time_seconds = 2;
    let started = std::time::Instant::now();
    let outcomes = consumer.poll_once(&unserved).await;
    assert!(
        matches!(&outcomes, Ok(o) if o.is_empty()),
        "an empty long poll is not an error: {outcomes:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "the poll waited for messages: {:?}",
        started.elapsed()
    );
}
