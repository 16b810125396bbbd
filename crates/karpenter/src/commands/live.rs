//! Reading a live cluster for `explain`, `diff` and `simulate --from-cluster`: read-only (lists,
//! never a write), paginated, every request bounded. The objects become the same `Manifests`
//! `simulate -f` builds from files, so everything after the read is the offline pipeline; the
//! same objects written as YAML (`--snapshot-out`) are a snapshot `simulate -f` reads again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use karpenter_api::v1::EC2NodeClass;
use karpenter_api::v1alpha1::NodeOverlay;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_simulate::{ManifestError, Manifests};
use kube::Resource;
use kube::api::{ApiResource, ListParams, ObjectList};
use serde_json::Value;

use crate::output;

/// Objects per list request: large clusters are read in pages, as kubectl does.
pub const PAGE_SIZE: u32 = 500;

/// Where the snapshot's objects say they come from in messages.
pub const SNAPSHOT_SOURCE: &str = "cluster";

/// `--kubeconfig` and `--context` of the commands that read a cluster.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClusterArgs {
    /// Kubeconfig to use (default: $KUBECONFIG or ~/.kube/config, else the in-cluster
    /// service account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

/// What was read: the objects, as the API server returned them (minus `managedFields`), in a
/// fixed kind order.
pub struct Snapshot {
    pub objects: Vec<Value>,
    /// `kind: count`, for notes and the benchmark.
    pub counts: Vec<(&'static str, usize)>,
    pub requests: usize,
    pub elapsed: Duration,
}

impl Snapshot {
    /// The objects as `simulate` holds them. An object the checks refuse (a field this version
    /// does not know, say) is left out with a warning: the cluster has it, and one odd object
    /// must not keep every other from being explained. A pod bound to a node the lists did not
    /// return (deleted between two lists) is left out the same way.
    pub fn manifests(&self) -> anyhow::Result<Manifests> {
        let nodes: BTreeSet<&str> = self
            .objects
            .iter()
            .filter(|o| o.get("kind").and_then(Value::as_str) == Some("Node"))
            .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
            .collect();
        let orphan = |o: &Value| {
            o.get("kind").and_then(Value::as_str) == Some("Pod")
                && o.pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .is_some_and(|node| !node.is_empty() && !nodes.contains(node))
        };
        let orphans = self.objects.iter().filter(|o| orphan(o)).count();
        if orphans > 0 {
            output::warning(format!(
                "{orphans} pod(s) bound to nodes the cluster no longer lists are left out"
            ));
        }
        let mut manifests = Manifests::new();
        let objects = self.objects.iter().filter(|o| !orphan(o)).cloned();
        match manifests.load_objects(SNAPSHOT_SOURCE, objects) {
            Ok(()) => {}
            Err(ManifestError::Invalid(problems)) => {
                for problem in &problems {
                    output::warning(format!("{problem} (left out)"));
                }
            }
            Err(err) => return Err(err.into()),
        }
        Ok(manifests)
    }

    /// Writes the snapshot as YAML documents `simulate -f` reads again.
    pub fn write_yaml(&self, path: &Path) -> anyhow::Result<()> {
        let mut text = String::new();
        for object in &self.objects {
            text.push_str("---\n");
            text.push_str(&serde_saphyr::to_string(object)?);
        }
        std::fs::write(path, text)
            .with_context(|| format!("cannot write the snapshot to {}", path.display()))
    }
}

/// Reads the cluster `args` name (the kinds `simulate` uses), on a runtime of its own.
pub fn read(args: &ClusterArgs) -> anyhow::Result<Snapshot> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting tokio")?;
    runtime.block_on(read_async(args))
}

async fn client(args: &ClusterArgs) -> anyhow::Result<(kube::Client, String)> {
    let options = kube::config::KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let mut config = match (&args.kubeconfig, &args.context) {
        (Some(path), _) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| format!("cannot load kubeconfig {}", path.display()))?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options)
            .await
            .context("cannot load the kubeconfig context")?,
        (None, None) => kube::Config::infer().await.context(
            "no cluster configuration found (not in a pod, no ~/.kube/config); pass --kubeconfig",
        )?,
    };
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(60));
    karpenter_controller::identity::identify(&mut config);
    let url = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).context("cannot build the Kubernetes client")?;
    Ok((client, url))
}

async fn read_async(args: &ClusterArgs) -> anyhow::Result<Snapshot> {
    let started = Instant::now();
    let (client, url) = client(args).await?;
    let reader = Reader {
        client: &client,
        url: &url,
    };
    // One kind after another would be twelve round trips in a row; all at once, each paginated.
    // NodeOverlays are read whatever the gate: the commands drop them when `--feature-gates`
    // leaves it off, as `simulate -f` does.
    let lists = tokio::try_join!(
        reader.list::<NodePool>(Required::Yes),
        reader.list::<EC2NodeClass>(Required::No),
        reader.list::<NodeClaim>(Required::Yes),
        reader.list::<Node>(Required::Yes),
        reader.list::<Pod>(Required::Yes),
        reader.list::<PodDisruptionBudget>(Required::Yes),
        reader.list::<DaemonSet>(Required::Yes),
        reader.list::<Namespace>(Required::Yes),
        reader.list::<PersistentVolumeClaim>(Required::Yes),
        reader.list::<PersistentVolume>(Required::Yes),
        reader.list::<StorageClass>(Required::Yes),
        reader.list::<NodeOverlay>(Required::No),
    )?;
    let (
        pools,
        classes,
        claims,
        nodes,
        pods,
        pdbs,
        daemonsets,
        namespaces,
        pvcs,
        pvs,
        storage,
        overlays,
    ) = lists;
    let lists = [
        pools, classes, claims, nodes, pods, pdbs, daemonsets, namespaces, pvcs, pvs, storage,
        overlays,
    ];
    let mut objects = Vec::new();
    let mut counts = Vec::new();
    let mut requests = 0;
    for list in lists {
        counts.push((list.kind, list.objects.len()));
        requests += list.requests;
        objects.extend(list.objects);
    }
    Ok(Snapshot {
        objects,
        counts,
        requests,
        elapsed: started.elapsed(),
    })
}

/// Whether a kind missing from the API server (its CRD not installed) is an error.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Required {
    Yes,
    /// EC2NodeClass: a cluster without the AWS provider has none; NodeOverlay: its CRD is
    /// optional.
    No,
}

struct Listed {
    kind: &'static str,
    objects: Vec<Value>,
    requests: usize,
}

struct Reader<'a> {
    client: &'a kube::Client,
    url: &'a str,
}

impl Reader<'_> {
    /// Every object of kind `K`, page by page, each page bounded by the API call timeout.
    async fn list<K>(&self, required: Required) -> anyhow::Result<Listed>
    where
        K: Resource<DynamicType = ()>,
    {
        let resource = ApiResource::erase::<K>(&());
        let kind: &'static str = leak_kind(&resource.kind);
        // Items as plain JSON: they become manifests, so decoding them into typed metadata
        // first (and encoding them back) would only cost time.
        let request = kube::core::Request::new(K::url_path(&(), None));
        let fetch = |params: ListParams| {
            let built = request.list(&params).map_err(kube::Error::BuildRequest);
            let client = self.client.clone();
            async move {
                karpenter_controller::timeouts::api(client.request::<ObjectList<Value>>(built?))
                    .await
            }
        };
        let (items, requests) = match paginate(fetch).await {
            Ok(read) => read,
            Err(err) if required == Required::No && is_not_found(&err) => (Vec::new(), 1),
            Err(err) => {
                return Err(anyhow::anyhow!(one_line(&err))).with_context(|| {
                    format!(
                        "cannot read {} from the cluster at {}",
                        resource.plural, self.url
                    )
                });
            }
        };
        let objects = items
            .into_iter()
            .filter_map(|item| snapshot_object(item, &resource))
            .collect();
        Ok(Listed {
            kind,
            objects,
            requests,
        })
    }
}

/// Every item of a list, [`PAGE_SIZE`] at a time, following `continue` until the server says the
/// list is complete; returns the items and the number of requests.
async fn paginate<T, F, Fut>(mut fetch: F) -> Result<(Vec<T>, usize), kube::Error>
where
    T: Clone,
    F: FnMut(ListParams) -> Fut,
    Fut: std::future::Future<Output = Result<ObjectList<T>, kube::Error>>,
{
    let mut items = Vec::new();
    let mut requests = 0;
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(PAGE_SIZE);
        if let Some(token) = &token {
            params = params.continue_token(token);
        }
        requests += 1;
        let page = fetch(params).await?;
        items.extend(page.items);
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return Ok((items, requests));
        }
    }
}

/// The kinds read are a fixed handful; their names live for the whole run anyway.
fn leak_kind(kind: &str) -> &'static str {
    match kind {
        "NodePool" => "NodePool",
        "EC2NodeClass" => "EC2NodeClass",
        "NodeClaim" => "NodeClaim",
        "Node" => "Node",
        "Pod" => "Pod",
        "PodDisruptionBudget" => "PodDisruptionBudget",
        "DaemonSet" => "DaemonSet",
        "Namespace" => "Namespace",
        "PersistentVolumeClaim" => "PersistentVolumeClaim",
        "PersistentVolume" => "PersistentVolume",
        "StorageClass" => "StorageClass",
        "NodeOverlay" => "NodeOverlay",
        _ => "object",
    }
}

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

/// kube's errors as one line (some carry the server's multi-line body).
fn one_line(err: &kube::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text.push_str(": ");
            text.push_str(&inner_text);
        }
        source = inner.source();
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The object as a manifest: its `apiVersion` and `kind` (list items may lack them), without
/// `managedFields` (bulk no decision reads). Pods that have finished hold no resources and are
/// left out, as the controller's state leaves them out.
fn snapshot_object(mut value: Value, resource: &ApiResource) -> Option<Value> {
    let object = value.as_object_mut()?;
    object.insert(
        "apiVersion".into(),
        Value::String(resource.api_version.clone()),
    );
    object.insert("kind".into(), Value::String(resource.kind.clone()));
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    if resource.kind == "Pod" {
        let phase = value.pointer("/status/phase").and_then(Value::as_str);
        if matches!(phase, Some("Succeeded" | "Failed")) {
            return None;
        }
    }
    Some(value)
}

/// Reads the cluster and prints what was read on stderr (for tables; JSON/YAML stay clean).
pub fn read_manifests(args: &ClusterArgs, verbose: bool) -> anyhow::Result<(Snapshot, Manifests)> {
    let snapshot = read(args)?;
    report_read(&snapshot, verbose);
    let manifests = snapshot.manifests()?;
    Ok((snapshot, manifests))
}

/// `simulate --from-cluster`: the cluster's manifests, the snapshot written to `snapshot_out`
/// first when asked (so a snapshot that does not load can still be reported).
pub fn snapshot_manifests(
    args: &ClusterArgs,
    snapshot_out: Option<&Path>,
    verbose: bool,
) -> anyhow::Result<Manifests> {
    let snapshot = read(args)?;
    if let Some(path) = snapshot_out {
        snapshot.write_yaml(path)?;
        if verbose {
            output::note(format!("snapshot written to {}", path.display()));
        }
    }
    report_read(&snapshot, verbose);
    snapshot.manifests()
}

fn report_read(snapshot: &Snapshot, verbose: bool) {
    if !verbose {
        return;
    }
    let counts: Vec<String> = snapshot
        .counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect();
    output::note(format!(
        "read {} from the cluster in {:.1} s ({} list requests)",
        counts.join(", "),
        snapshot.elapsed.as_secs_f64(),
        snapshot.requests
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list of 1,200 pods served in pages: every page asks for [`PAGE_SIZE`], each next page
    /// passes the previous page's `continue`, and the read stops when it is empty.
    #[test]
    fn lists_follow_continue_until_the_last_page() {
        let total = 1_200usize;
        let mut seen: Vec<(Option<u32>, Option<String>)> = Vec::new();
        let fetch = |params: ListParams| {
            seen.push((params.limit, params.continue_token.clone()));
            let start: usize = params
                .continue_token
                .as_deref()
                .map_or(0, |t| t.parse().unwrap_or(usize::MAX));
            let limit = params.limit.map_or(total, |l| l as usize);
            let end = start.saturating_add(limit).min(total);
            let items: Vec<Value> = (start..end)
                .map(|i| serde_json::json!({"metadata": {"name": format!("p{i}")}}))
                .collect();
            let next = if end < total {
                end.to_string()
            } else {
                String::new()
            };
            let page: ObjectList<Value> = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "PodList",
                "metadata": {"continue": next},
                "items": items
            }))
            .unwrap_or_else(|e| panic!("{e}"));
            std::future::ready(Ok(page))
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let (items, requests) = runtime
            .block_on(paginate(fetch))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(items.len(), total);
        assert_eq!(requests, 3);
        assert_eq!(
            seen,
            [
                (Some(PAGE_SIZE), None),
                (Some(PAGE_SIZE), Some("500".to_string())),
                (Some(PAGE_SIZE), Some("1000".to_string())),
            ]
        );
        let last = items.last().and_then(|i| i.pointer("/metadata/name"));
        assert_eq!(last, Some(&Value::from("p1199")));
    }

    /// A race between lists (a pod bound to a node listed no more) and an object the checks
    /// refuse each leave out that object only.
    #[test]
    fn odd_objects_are_left_out_and_the_rest_is_kept() {
        let pod = |name: &str, node: &str| {
            serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}})
        };
        let snapshot = Snapshot {
            objects: vec![
                serde_json::json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                    "metadata": {"name": "bad"},
                    "spec": {"disruption": {"consolidationPolicy": "Sometimes"}}}),
                serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
                pod("here", "n1"),
                pod("orphan", "gone"),
            ],
            counts: Vec::new(),
            requests: 0,
            elapsed: Duration::ZERO,
        };
        let manifests = snapshot.manifests().unwrap_or_else(|e| panic!("{e}"));
        assert!(manifests.node_pools.is_empty());
        assert_eq!(manifests.nodes.len(), 1);
        let bound: Vec<_> = manifests
            .bound_pods
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        assert_eq!(bound, ["here"]);
    }

    #[test]
    fn finished_pods_are_left_out_and_managed_fields_dropped() {
        let resource = ApiResource::erase::<Pod>(&());
        let pod = |phase: &str| -> Value {
            serde_json::json!({
                "metadata": {"name": "p", "namespace": "default",
                             "managedFields": [{"manager": "kubectl"}]},
                "status": {"phase": phase}
            })
        };
        assert!(snapshot_object(pod("Succeeded"), &resource).is_none());
        assert!(snapshot_object(pod("Failed"), &resource).is_none());
        let kept = snapshot_object(pod("Running"), &resource);
        let kept = kept.as_ref();
        assert_eq!(
            kept.and_then(|v| v.pointer("/kind")),
            Some(&Value::from("Pod"))
        );
        assert_eq!(
            kept.and_then(|v| v.pointer("/apiVersion")),
            Some(&Value::from("v1"))
        );
        assert!(
            kept.and_then(|v| v.pointer("/metadata/managedFields"))
                .is_none()
        );
    }
}
