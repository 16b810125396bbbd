//! Isolation: objects the API server accepted but karpenter-rs cannot decode are skipped and
//! reported; every other object keeps working and the state still syncs.
//!
//! Stays on `karpenter-testapi` (docs/testing.md): objects a real API server would refuse
//! (malformed NodePools and NodeClaims).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use karpenter_api::NodeClaim;
use karpenter_controller::provisioning::CoreScheduler;
use karpenter_core::state::Kind;
use kube::ResourceExt;
use serde_json::json;

use crate::sim_cluster::{SimCluster, inflate_pod};

#[tokio::test(start_paused = true)]
async fn undecodable_objects_are_reported_and_skipped() {
    let cluster = SimCluster::with_catalogue("us-east-1").await;
    cluster.put_default_nodepool();
    // Matches the CRD pattern ^(([0-9]+(s|m|h))+|Never)$ but overflows any duration.
    let overflow = "99999999999999999999h";
    cluster
        .server
        .put_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "broken", "uid": "broken-uid"},
            "spec": {"weight": 100, "template": {"spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "expireAfter": overflow
            }}}
        }))
        .unwrap();
    cluster
        .server
        .put_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "broken-claim"},
            "spec": {"requirements": [],
                     "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "expireAfter": overflow}
        }))
        .unwrap();
    cluster
        .server
        .put_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "broken-pod", "namespace": "default"},
            "spec": {"containers": "not a list"}
        }))
        .unwrap();
    let controller = cluster.start_controller_with(Arc::new(CoreScheduler)).await;
    let ctx = controller.ctx.clone();
    cluster
        .eventually("state synced", Duration::from_secs(5), || {
            ctx.state.read().synced().then_some(())
        })
        .await;
    {
        let state = ctx.state.read();
        let counts = state.ignored_objects().counts();
        for kind in [Kind::NodePool, Kind::NodeClaim, Kind::Pod] {
            assert!(counts.contains(&(kind, 1)), "{kind:?} in {counts:?}");
        }
        assert!(state.nodepool("broken").is_none());
        assert!(state.nodepool("default").is_some());
    }

    // The good pool provisions (the heavier broken one would have been preferred).
    for i in 0..3 {
        cluster.server.put(&inflate_pod(i)).unwrap();
    }
    let claims = cluster
        .eventually(
            "a NodeClaim of the good pool",
            Duration::from_secs(15),
            || {
                let claims: Vec<NodeClaim> = cluster
                    .server
                    .list::<NodeClaim>()
                    .into_iter()
                    .filter(|c| c.name_any() != "broken-claim")
                    .collect();
                (!claims.is_empty()).then_some(claims)
            },
        )
        .await;
    assert!(claims.iter().all(|c| c.nodepool_name() == Some("default")));

    // Reported: a Warning event on the bad NodePool and the gauge.
    let event = cluster
        .eventually("FailedToDecode event", Duration::from_secs(10), || {
            cluster.server.list::<Event>().into_iter().find(|e| {
                e.reason.as_deref() == Some("FailedToDecode")
                    && e.involved_object.name.as_deref() == Some("broken")
            })
        })
        .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        event
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("expireAfter")
            || event
                .message
                .as_deref()
                .unwrap_or_default()
                .contains("duration"),
        "{:?}",
        event.message
    );
    let text = ctx.metrics.encode();
    assert!(
        text.contains("karpenter_cluster_state_ignored_objects{kind=\"NodePool\"} 1"),
        "{text}"
    );

    // Fixing the object brings it back; deleting the others clears the record.
    cluster
        .server
        .put_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "broken", "uid": "broken-uid"},
            "spec": {"template": {"spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "expireAfter": "720h"
            }}}
        }))
        .unwrap();
    cluster
        .server
        .delete::<NodeClaim>(None, "broken-claim")
        .unwrap();
    cluster
        .eventually("records cleared", Duration::from_secs(5), || {
            let state = ctx.state.read();
            (state.nodepool("broken").is_some()
                && state
                    .ignored_objects()
                    .counts()
                    .contains(&(Kind::NodePool, 0))
                && state
                    .ignored_objects()
                    .counts()
                    .contains(&(Kind::NodeClaim, 0)))
            .then_some(())
        })
        .await;
    controller.stop().await;
    cluster.shutdown().await;
}
