//! What one test leaves, removed before the next one starts: its namespaces (pods forced out,
//! finalizers stripped), every ValidatingAdmissionPolicy (and binding), and every NodePool,
//! NodeClaim, EC2NodeClass, NodeOverlay and Node, finalizers first
//! (the controller that would have removed them was stopped with its test).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Api, Client};
use serde_json::json;

use crate::{Error, OWNED_LABEL, Result, eventually};

/// The cluster-scoped kinds a test creates, by group, version, kind and plural.
const CLUSTER_KINDS: [(&str, &str, &str, &str); 4] = [
    ("karpenter.sh", "v1alpha1", "NodeOverlay", "nodeoverlays"),
    ("karpenter.sh", "v1", "NodePool", "nodepools"),
    ("karpenter.sh", "v1", "NodeClaim", "nodeclaims"),
    ("karpenter.k8s.aws", "v1", "EC2NodeClass", "ec2nodeclasses"),
];

/// The namespaced custom kinds a test creates, outside what deleting its namespace removes (no
/// namespace controller runs here): left in place, the next controller would act on them.
const NAMESPACED_KINDS: [(&str, &str, &str, &str); 1] = [(
    "autoscaling.x-k8s.io",
    "v1beta1",
    "CapacityBuffer",
    "capacitybuffers",
)];

/// The admission policies a test may create (cluster-scoped), bindings first.
const ADMISSION_KINDS: [(&str, &str); 2] = [
    (
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    ),
    ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
];

fn kube_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Kube { what, source }
}

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

/// Strips the finalizers of `name` and deletes it at once; a 404 at either step is fine.
async fn force_delete<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let strip = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    if let Err(err) = api.patch(name, &PatchParams::default(), &strip).await
        && !is_not_found(&err)
    {
        return Err(kube_error(format!("stripping the finalizers of {name}"))(
            err,
        ));
    }
    if let Err(err) = api
        .delete(name, &DeleteParams::default().grace_period(0))
        .await
        && !is_not_found(&err)
    {
        return Err(kube_error(format!("deleting {name}"))(err));
    }
    Ok(())
}

pub(crate) async fn remove_leftovers(client: &Client) -> Result<()> {
    let namespaces = Api::<Namespace>::all(client.clone());
    let owned = namespaces
        .list(&ListParams::default().labels(OWNED_LABEL))
        .await
        .map_err(kube_error("listing test namespaces"))?;
    for ns in owned.items {
        let Some(name) = ns.metadata.name else {
            continue;
        };
        if ns.metadata.deletion_timestamp.is_none()
            && let Err(err) = namespaces.delete(&name, &DeleteParams::default()).await
            && !is_not_found(&err)
        {
            return Err(kube_error(format!("deleting namespace {name}"))(err));
        }
        let pods = Api::<Pod>::namespaced(client.clone(), &name);
        let list = pods
            .list(&ListParams::default())
            .await
            .map_err(kube_error(format!("listing pods in {name}")))?;
        for pod in list.items {
            if let Some(pod_name) = pod.metadata.name {
                force_delete(&pods, &pod_name).await?;
            }
        }
    }
    // Admission policies a test made (upstream's e2e blocks Node registration or NodeClass
    // status writes with them): left in place they would refuse the next test's objects.
    for (kind, plural) in ADMISSION_KINDS {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
            plural,
        );
        let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(kube_error(format!("listing {plural}")))?;
        for object in list.items {
            if let Some(name) = object.metadata.name {
                force_delete(&api, &name).await?;
            }
        }
    }
    for (group, version, kind, plural) in NAMESPACED_KINDS {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let all = Api::<DynamicObject>::all_with(client.clone(), &resource);
        let list = match all.list(&ListParams::default()).await {
            Ok(list) => list,
            Err(err) if is_not_found(&err) => continue,
            Err(err) => return Err(kube_error(format!("listing {plural}"))(err)),
        };
        for object in list.items {
            if let (Some(name), Some(namespace)) = (object.metadata.name, object.metadata.namespace)
            {
                let api =
                    Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &resource);
                force_delete(&api, &name).await?;
            }
        }
    }
    for (group, version, kind, plural) in CLUSTER_KINDS {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
        let list = match api.list(&ListParams::default()).await {
            Ok(list) => list,
            // The CRDs of a binary that installs none.
            Err(err) if is_not_found(&err) => continue,
            Err(err) => return Err(kube_error(format!("listing {plural}"))(err)),
        };
        for object in list.items {
            if let Some(name) = object.metadata.name {
                force_delete(&api, &name).await?;
            }
        }
    }
    let nodes = Api::<Node>::all(client.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .map_err(kube_error("listing nodes"))?;
    for node in list.items {
        if let Some(name) = node.metadata.name {
            force_delete(&nodes, &name).await?;
        }
    }
    eventually(
        "the previous test's nodes to be gone",
        Duration::from_secs(30),
        || {
            let nodes = nodes.clone();
            async move {
                let list = nodes.list(&ListParams::default()).await.ok()?;
                list.items.is_empty().then_some(())
            }
        },
    )
    .await
}
