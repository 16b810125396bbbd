//! How karpenter-rs lists: every watch through [`config`], every one-off list of a kind that
//! grows with the cluster through [`list_paged`].

use std::fmt::Debug;

use kube::Api;
use kube::api::ListParams;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;

/// Objects per page of a watch's (re)list. kube-runtime's default is 500, and a watcher holds
/// a whole page while it hands the objects out one by one: 500 Pods or NodeClaims are ~5 MB
/// held at once, a twentieth of what the controller holds in all at 1,000 nodes (heaptrack of
/// upstream's interference scenario, docs/benchmarks.md). 100 keeps a relist of 10,000 pods
/// to 100 requests.
pub const LIST_PAGE_SIZE: u32 = 100;

/// `watcher::Config::default()` listing [`LIST_PAGE_SIZE`] objects per page.
pub fn config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE_SIZE)
}

/// Every object `params` selects, read [`LIST_PAGE_SIZE`] at a time, each turned by `keep`
/// into what the caller needs (`None` drops it) before the next page is read. One request
/// for all would hold the whole response and every decoded object at once: for 2,000
/// NodeClaims with their instance-type lists, tens of MB (heaptrack of the garbage
/// collection's list, docs/benchmarks.md). Each page has its own timeout; the pages come from
/// one consistent snapshot (the API server's continue token), or the list fails.
pub async fn list_paged<K, T>(
    api: &Api<K>,
    params: &ListParams,
    mut keep: impl FnMut(K) -> Option<T>,
) -> Result<Vec<T>, kube::Error>
where
    K: Clone + DeserializeOwned + Debug,
{
    let mut params = params.clone().limit(LIST_PAGE_SIZE);
    let mut kept = Vec::new();
    loop {
        let page = crate::timeouts::api(api.list(&params)).await?;
        kept.extend(page.items.into_iter().filter_map(&mut keep));
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(kept),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};

    use http::{Request, Response};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::client::Body;

    #[test]
    fn watches_list_in_pages_of_a_hundred() {
        assert_eq!(config().page_size, Some(LIST_PAGE_SIZE));
        assert_eq!(watcher::Config::default().page_size, Some(500));
    }

    /// An API server holding `total` ConfigMaps that answers lists a page at a time, as the
    /// real one does (`limit`, then `continue` = the offset of the next page), recording the
    /// query of each request.
    #[derive(Clone)]
    struct PagingServer {
        total: usize,
        queries: Arc<Mutex<Vec<String>>>,
    }

    impl tower_service::Service<Request<Body>> for PagingServer {
        type Response = Response<Body>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Response<Body>, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<Body>) -> Self::Future {
            let query = request.uri().query().unwrap_or_default().to_string();
            let param = |name: &str| {
                query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                    .and_then(|v| v.parse::<usize>().ok())
            };
            let limit = param("limit").unwrap_or(self.total);
            let start = param("continue").unwrap_or(0);
            let end = (start + limit).min(self.total);
            let items: Vec<serde_json::Value> = (start..end)
                .map(|i| serde_json::json!({"metadata": {"name": format!("cm-{i}")}}))
                .collect();
            let next = if end < self.total {
                end.to_string()
            } else {
                String::new()
            };
            let body = serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMapList",
                "metadata": {"resourceVersion": "1", "continue": next},
                "items": items
            });
            self.queries
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(query);
            std::future::ready(Ok(Response::new(Body::from(
                serde_json::to_vec(&body).unwrap_or_default(),
            ))))
        }
    }

    #[tokio::test]
    async fn a_paged_list_reads_every_page_and_keeps_what_the_caller_maps() {
        let queries = Arc::new(Mutex::new(Vec::new()));
        let server = PagingServer {
            total: 250,
            queries: queries.clone(),
        };
        let api: Api<ConfigMap> = Api::all(kube::Client::new(server, "default"));
        let names = list_paged(
            &api,
            &ListParams::default().labels("a=b"),
            |cm: ConfigMap| cm.metadata.name.filter(|n| !n.ends_with('7')),
        )
        .await
        .unwrap();
        assert_eq!(
            names.len(),
            250 - 25,
            "every page read, the dropped ones gone"
        );
        assert_eq!(names.first().map(String::as_str), Some("cm-0"));
        assert_eq!(names.last().map(String::as_str), Some("cm-249"));
        let queries = queries.lock().unwrap().clone();
        assert_eq!(queries.len(), 3, "{queries:?}");
        assert!(
            queries
                .iter()
                .all(|q| q.contains("limit=100") && q.contains("labelSelector=a%3Db"))
        );
        assert!(queries[1].contains("continue=100") && queries[2].contains("continue=200"));
    }
}
