//! A pending pod as `simulate` holds it: the replicas of one workload share one `Pod` and differ
//! only by their ordinal, so `replicas: 1000000` costs a few bytes per replica, not a pod each.

use std::borrow::Borrow;
use std::sync::Arc;

use karpenter_core::pod::Pod;
use karpenter_core::pod::pod_key;

/// One pod to schedule: a pod of the input, or replica `ordinal` of a workload whose shared pod
/// carries the workload's name (the replica is named `<workload>-<ordinal>`, as before sharing).
#[derive(Clone, Debug)]
pub struct PendingPod {
    pod: Arc<Pod>,
    replica: Option<u32>,
}

impl PendingPod {
    /// A pod given as such (its own name).
    pub fn single(pod: Pod) -> Self {
        PendingPod {
            pod: Arc::new(pod),
            replica: None,
        }
    }

    /// Replica `ordinal` of the workload whose pod (named after the workload) is `shared`.
    pub fn replica(shared: Arc<Pod>, ordinal: u32) -> Self {
        PendingPod {
            pod: shared,
            replica: Some(ordinal),
        }
    }

    /// The pod's spec and labels (shared between replicas; its name is the workload's).
    pub fn pod(&self) -> &Pod {
        &self.pod
    }

    /// The shared pod, to check sharing.
    pub fn shared(&self) -> &Arc<Pod> {
        &self.pod
    }

    pub fn namespace(&self) -> String {
        pod_key(&self.pod).0
    }

    /// The pod's name: a replica's is `<workload>-<ordinal>`.
    pub fn name(&self) -> String {
        let name = self.pod.metadata.name.as_deref().unwrap_or_default();
        match self.replica {
            Some(ordinal) => format!("{name}-{ordinal}"),
            None => name.to_string(),
        }
    }

    /// `namespace/name`, as the plan names pods.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }
}

impl Borrow<Pod> for PendingPod {
    fn borrow(&self) -> &Pod {
        &self.pod
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Manifests;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn a_replica_is_named_after_its_workload_and_ordinal() {
        let shared = Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some("inflate".into()),
                namespace: Some("apps".into()),
                ..Default::default()
            },
            ..Default::default()
        });
        assert_eq!(
            PendingPod::replica(shared.clone(), 7).key(),
            "apps/inflate-7"
        );
        assert_eq!(PendingPod::single((*shared).clone()).key(), "apps/inflate");
        assert!(
            std::mem::size_of::<PendingPod>() <= 16,
            "a replica costs a pointer and an ordinal"
        );
    }

    fn load(text: &str) -> Manifests {
        let mut m = Manifests::new();
        m.load_str("test.yaml", text).unwrap();
        m
    }

    #[test]
    fn the_replicas_of_a_deployment_share_one_pod() {
        let m = load(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: inflate}
spec:
  replicas: 1000
  template:
    metadata: {labels: {app: inflate}}
    spec: {containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]}
"#,
        );
        assert_eq!(m.pending_pods.len(), 1000);
        let first = m.pending_pods[0].shared();
        assert!(
            m.pending_pods
                .iter()
                .all(|p| Arc::ptr_eq(p.shared(), first))
        );
        assert_eq!(Arc::strong_count(first), 1000, "no other copy is kept");
        assert_eq!(m.pending_pods[0].key(), "default/inflate-0");
        assert_eq!(m.pending_pods[999].key(), "default/inflate-999");
    }

    #[test]
    fn replicas_with_an_ephemeral_volume_keep_their_own_pod() {
        // The claim of a generic ephemeral volume is named after the pod.
        let m = load(
            r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 2
  template:
    spec:
      containers: [{name: c, image: x}]
      volumes:
      - name: scratch
        ephemeral: {volumeClaimTemplate: {spec: {accessModes: [ReadWriteOnce]}}}
"#,
        );
        let pods = &m.pending_pods;
        assert!(!Arc::ptr_eq(pods[0].shared(), pods[1].shared()));
        assert_eq!(pods[1].pod().metadata.name.as_deref(), Some("db-1"));
        assert_eq!(pods[1].key(), "default/db-1");
    }
}
