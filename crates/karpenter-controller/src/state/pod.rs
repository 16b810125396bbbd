//! Pod predicates, from [`karpenter_core::pod`] (one definition for the provisioner, the drain
//! and `simulate`); `pod_key` is the state's `namespace/name` key.

pub use karpenter_core::pod::{
    effective_requests, failed_to_schedule, has_do_not_disrupt, is_gated, is_owned_by,
    is_owned_by_daemonset, is_owned_by_node, is_provisionable, is_terminal, is_terminating,
    key as pod_key, node_name,
};
