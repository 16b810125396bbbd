//! The seed guide's `inflate` flow on the real control plane, as its user types it: the guide's
//! EC2NodeClass, NodePool and Deployment applied; karpenter launches nodes, the real scheduler
//! binds the pods, the sim kubelet runs them; scaled to zero, consolidation removes the nodes.

use std::time::Duration;

use super::objects::{apply, condition_true, nodeclaims, nodes, pods, running, scale};
use super::{DISRUPT, LAUNCH, eventually, repo_root};

#[tokio::test]
async fn inflate_scales_up_on_new_nodes_and_back_to_none() {
    let Some((cluster, _karpenter)) = super::with_karpenter("inflate", super::options()).await
    else {
        return;
    };
    let client = cluster.client();
    let ns = cluster.namespace();
    let examples = repo_root().join("examples/inflate");
    let read = |f: &str| std::fs::read_to_string(examples.join(f)).unwrap();
    apply(&client, ns, &read("ec2nodeclass.yaml")).await;
    // The guide's consolidateAfter is 1m; the flow is the same at 0s, sooner.
    let nodepool = read("nodepool.yaml").replace("consolidateAfter: 1m", "consolidateAfter: 0s");
    apply(&client, ns, &nodepool).await;
    // The guide's Deployment, in this test's namespace.
    let inflate = read("inflate.yaml").replace("namespace: default", &format!("namespace: {ns}"));
    apply(&client, ns, &inflate).await;

    let running_pods = eventually("5 inflate pods Running", LAUNCH, || {
        let client = client.clone();
        async move {
            let pods = pods(&client, ns, "app=inflate").await;
            (pods.iter().filter(|p| running(p)).count() == 5).then_some(pods)
        }
    })
    .await
    .unwrap();
    let claims = nodeclaims(&client).await;
    assert!(!claims.is_empty());
    for claim in &claims {
        assert!(condition_true(claim, "Launched"), "{claim:?}");
        assert!(condition_true(claim, "Registered"), "{claim:?}");
    }
    let node_names: Vec<String> = nodes(&client)
        .await
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for pod in &running_pods {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
        assert!(
            node_names.contains(&node),
            "{node} not among {node_names:?}"
        );
    }
    eprintln!(
        "inflate: 5 pods on {} node(s): {:?}",
        claims.len(),
        claims
            .iter()
            .map(|c| c
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("node.kubernetes.io/instance-type").cloned()))
            .collect::<Vec<_>>()
    );

    scale(&client, ns, "inflate", 0).await;
    eventually(
        "no NodeClaims and no Nodes after scaling to zero",
        DISRUPT,
        || {
            let client = client.clone();
            async move {
                (nodeclaims(&client).await.is_empty() && nodes(&client).await.is_empty())
                    .then_some(())
            }
        },
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
}
