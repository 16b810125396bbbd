//! A Node's provider ID and readiness (and a pod's), as the kubelet reports them. Pure: the
//! controller, the sim kubelet and the core's own verdicts read them the same way.

use crate::pod::Pod;
use k8s_openapi::api::core::v1::{Node, NodeCondition};

/// `spec.providerID`, when set and not empty.
pub fn node_provider_id(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()?
        .provider_id
        .as_deref()
        .filter(|id| !id.is_empty())
}

/// The Node's `Ready` condition, if the kubelet reported one.
pub fn node_ready_condition(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// Whether the Node's `Ready` condition is `True`.
pub fn node_is_ready(node: &Node) -> bool {
    node_ready_condition(node).is_some_and(|c| c.status == "True")
}

/// Whether the pod runs and its `Ready` condition is `True`.
pub fn pod_is_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use crate::pod::{PodCondition, PodStatus};
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};

    use super::*;

    fn node(provider_id: Option<&str>, ready: Option<&str>) -> Node {
        Node {
            spec: Some(NodeSpec {
                provider_id: provider_id.map(str::to_string),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(
                    ready
                        .into_iter()
                        .map(|status| NodeCondition {
                            type_: "Ready".into(),
                            status: status.into(),
                            ..NodeCondition::default()
                        })
                        .collect(),
                ),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn provider_id_is_absent_when_empty_or_unset() {
        assert_eq!(
            node_provider_id(&node(Some("sim://r/z/i-1"), None)),
            Some("sim://r/z/i-1")
        );
        assert_eq!(node_provider_id(&node(Some(""), None)), None);
        assert_eq!(node_provider_id(&node(None, None)), None);
        assert_eq!(node_provider_id(&Node::default()), None);
    }

    #[test]
    fn only_a_true_ready_condition_is_ready() {
        assert!(node_is_ready(&node(None, Some("True"))));
        assert!(!node_is_ready(&node(None, Some("Unknown"))));
        assert!(!node_is_ready(&node(None, Some("False"))));
        assert!(!node_is_ready(&node(None, None)));
        assert_eq!(
            node_ready_condition(&node(None, Some("Unknown"))).map(|c| c.status.as_str()),
            Some("Unknown")
        );
    }

    #[test]
    fn a_pod_is_ready_when_running_with_a_true_ready_condition() {
        let pod = |phase: &str, ready: &str| Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        assert!(pod_is_ready(&pod("Running", "True")));
        assert!(!pod_is_ready(&pod("Running", "False")));
        assert!(!pod_is_ready(&pod("Pending", "True")));
        assert!(!pod_is_ready(&Pod::default()));
    }
}
