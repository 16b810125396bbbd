//! `TestApiServer`: the shared state, its test hooks, the tower service for in-process clients
//! and the loopback TCP listener for out-of-process ones.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
// Poison-tolerant: a panicking test thread must not take the server down with it.
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_kube::lock;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::task::JoinSet;

use crate::error::ApiError;
use crate::faults::{Fault, FaultEffect, Faults};
use crate::http::{ResponseBody, handle};
use crate::registry::ResourceInfo;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Clock, DeleteOptions, Store};

/// Request verbs, as RBAC names them (evictions and bindings are `Create` on a subresource).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
}

impl Verb {
    /// Whether the verb can change stored objects.
    pub fn is_write(self) -> bool {
        !matches!(self, Self::Get | Self::List | Self::Watch)
    }
}

/// One served request, for assertions such as "no write happened".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// The verb.
    pub verb: Verb,
    /// API group ("" for core).
    pub group: String,
    /// Resource plural, e.g. `pods`.
    pub resource: String,
    /// Subresource (`status`, `eviction`, `binding`), if any.
    pub subresource: Option<String>,
    /// Namespace from the URL, if any.
    pub namespace: Option<String>,
    /// Object name from the URL, if any.
    pub name: Option<String>,
    /// HTTP status code of the response.
    pub code: u16,
    /// Who sent it: the name given to [`TestApiServer::client_named`] (`None` otherwise).
    pub client: Option<String>,
    /// The `fieldManager` query parameter, if any.
    pub field_manager: Option<String>,
    /// The `User-Agent` header, if any.
    pub user_agent: Option<String>,
}

pub(crate) struct Inner {
    store: Mutex<Store>,
    closer: tokio::sync::watch::Sender<u64>,
    requests: Mutex<Vec<RequestRecord>>,
    faults: Mutex<Faults>,
    hung: Mutex<Vec<RequestRecord>>,
    pub(crate) delays: crate::delay::Delays,
}

impl Inner {
    pub(crate) fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    pub(crate) fn closer(&self) -> tokio::sync::watch::Receiver<u64> {
        self.closer.subscribe()
    }

    pub(crate) fn log(&self, record: RequestRecord) {
        lock(&self.requests).push(record);
    }

    pub(crate) fn take_fault(&self, record: &RequestRecord) -> Option<FaultEffect> {
        lock(&self.faults).take(record)
    }

    pub(crate) fn log_hung(&self, record: RequestRecord) {
        lock(&self.hung).push(record);
    }
}

/// Configures a [`TestApiServer`].
pub struct Builder {
    history_limit: usize,
    clock: Option<Clock>,
    pods_terminate_immediately: bool,
}

impl Builder {
    /// How many changes the server keeps for watches to resume from (default 10,000); older
    /// resourceVersions get 410 Expired.
    pub fn history_limit(mut self, changes: usize) -> Self {
        self.history_limit = changes;
        self
    }

    /// The clock for `creationTimestamp` and `deletionTimestamp` (default: system time).
    pub fn clock(mut self, clock: impl Fn() -> jiff::Timestamp + Send + Sync + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Delete pods at once instead of waiting for a kubelet to finish graceful termination.
    pub fn pods_terminate_immediately(mut self, immediately: bool) -> Self {
        self.pods_terminate_immediately = immediately;
        self
    }

    /// Builds the server.
    pub fn build(self) -> TestApiServer {
        let clock = self.clock.unwrap_or_else(|| Arc::new(jiff::Timestamp::now));
        let mut store = Store::new(self.history_limit, clock);
        store.pods_terminate_immediately = self.pods_terminate_immediately;
        let (closer, _) = tokio::sync::watch::channel(0);
        TestApiServer {
            inner: Arc::new(Inner {
                store: Mutex::new(store),
                closer,
                requests: Mutex::new(Vec::new()),
                faults: Mutex::new(Faults::default()),
                hung: Mutex::new(Vec::new()),
                delays: Default::default(),
            }),
        }
    }
}

/// An in-memory API server. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct TestApiServer {
    pub(crate) inner: Arc<Inner>,
}

impl Default for TestApiServer {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for TestApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestApiServer")
            .field("resource_version", &self.resource_version())
            .finish_non_exhaustive()
    }
}

fn type_of<K: kube::Resource<DynamicType = ()>>() -> (String, String) {
    (K::api_version(&()).into_owned(), K::kind(&()).into_owned())
}

impl TestApiServer {
    /// A server with default settings.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder for non-default settings.
    pub fn builder() -> Builder {
        Builder {
            history_limit: 10_000,
            clock: None,
            pods_terminate_immediately: false,
        }
    }

    /// A `kube::Client` wired straight to this server (no sockets), default namespace `default`.
    /// Must be called inside a tokio runtime.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.clone(), "default")
    }

    /// Like [`TestApiServer::client`], but every request it sends is recorded with
    /// `client: Some(name)`, so tests can tell who wrote what (e.g. two controller replicas).
    pub fn client_named(&self, name: &str) -> kube::Client {
        let named = NamedClient {
            server: self.clone(),
            name: http::HeaderValue::from_str(name)
                .unwrap_or_else(|_| http::HeaderValue::from_static("invalid-name")),
        };
        kube::Client::new(named, "default")
    }

    /// Serves every version a CRD declares as served.
    pub fn register_crd(&self, crd: &CustomResourceDefinition) -> Result<(), ApiError> {
        self.inner.store().registry.register_crd(crd)
    }

    /// Serves one more resource.
    pub fn register_resource(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
        has_status: bool,
    ) {
        let info = ResourceInfo::new(group, version, kind, plural, namespaced, has_status);
        self.inner.store().registry.register(info);
    }

    /// Switches graceful pod termination off (no kubelet) or back on.
    pub fn set_pods_terminate_immediately(&self, immediately: bool) {
        self.inner.store().pods_terminate_immediately = immediately;
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inner.store().resource_version()
    }

    /// Reads an object without going through HTTP (and without a request record).
    pub fn get<K>(&self, namespace: Option<&str>, name: &str) -> Option<K>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
    {
        let (api_version, kind) = type_of::<K>();
        decode(self.get_value(&api_version, &kind, namespace, name)?)
    }

    /// Reads an object as JSON.
    pub fn get_value(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let store = self.inner.store();
        let res = store.registry.find_kind(api_version, kind)?.clone();
        store.get(&res, namespace, name).ok()
    }

    /// Every object of a kind, in all namespaces.
    pub fn list<K>(&self) -> Vec<K>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
    {
        let (api_version, kind) = type_of::<K>();
        let store = self.inner.store();
        let Some(res) = store.registry.find_kind(&api_version, &kind).cloned() else {
            return Vec::new();
        };
        let all = store.list(
            &res,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
        );
        all.into_iter().filter_map(decode).collect()
    }

    /// How many objects of a kind exist.
    pub fn count<K>(&self) -> usize
    where
        K: kube::Resource<DynamicType = ()>,
    {
        let (api_version, kind) = type_of::<K>();
        let store = self.inner.store();
        store
            .registry
            .find_kind(&api_version, &kind)
            .map_or(0, |res| store.count(&res.group, &res.plural))
    }

    /// Creates or overwrites an object as given, status included, with no resourceVersion
    /// precondition; watches see the change. For test setup and simulated components.
    pub fn put<K: Serialize>(&self, object: &K) -> Result<Value, ApiError> {
        let value = serde_json::to_value(object).map_err(|e| {
            ApiError::bad_request(format!("the object does not serialize to JSON: {e}"))
        })?;
        self.put_value(value)
    }

    /// [`TestApiServer::put`] for a JSON object with `apiVersion` and `kind`.
    pub fn put_value(&self, object: Value) -> Result<Value, ApiError> {
        self.inner.store().put(object)
    }

    /// Deletes an object at once (grace period 0). Finalizers still hold it until removed.
    pub fn delete<K>(&self, namespace: Option<&str>, name: &str) -> Result<(), ApiError>
    where
        K: kube::Resource<DynamicType = ()>,
    {
        let (api_version, kind) = type_of::<K>();
        let mut store = self.inner.store();
        let res = store
            .registry
            .find_kind(&api_version, &kind)
            .cloned()
            .ok_or_else(|| ApiError::bad_request(format!("{kind} is not registered")))?;
        let options = DeleteOptions {
            grace_period_seconds: Some(0),
            ..DeleteOptions::default()
        };
        store.delete(&res, namespace, name, &options).map(|_| ())
    }

    /// Fails the next `times` requests that match `verb` (any when `None`) and `resource`
    /// (a plural like `nodeclaims`, `plural/subresource` like `pods/eviction`, or "" for any).
    pub fn inject_error(&self, verb: Option<Verb>, resource: &str, error: ApiError, times: usize) {
        lock(&self.inner.faults).push(Fault::new(verb, resource, FaultEffect::Error(error), times));
    }

    /// Never answers the next `times` requests that match `verb` and `resource` (as for
    /// [`TestApiServer::inject_error`]) and does not apply them: the client waits until its own
    /// timeout drops the request. They are listed in [`TestApiServer::hung_requests`].
    pub fn inject_hang(&self, verb: Option<Verb>, resource: &str, times: usize) {
        lock(&self.inner.faults).push(Fault::new(verb, resource, FaultEffect::Hang, times));
    }

    /// [`TestApiServer::inject_hang`] for the requests of one [`TestApiServer::client_named`]
    /// client only: that client is cut off (e.g. one replica's lease renewals), others are served.
    pub fn inject_hang_for_client(
        &self,
        client: &str,
        verb: Option<Verb>,
        resource: &str,
        times: usize,
    ) {
        lock(&self.inner.faults)
            .push(Fault::new(verb, resource, FaultEffect::Hang, times).for_client(client));
    }

    /// Forgets every injected fault that has not fired yet (requests already hanging stay hung).
    pub fn clear_faults(&self) {
        lock(&self.inner.faults).clear();
    }

    /// Requests a hang fault swallowed, oldest first (`code` is 0: never answered).
    pub fn hung_requests(&self) -> Vec<RequestRecord> {
        lock(&self.inner.hung).clone()
    }

    /// Every request served so far (discovery excluded), oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.inner.requests).clone()
    }

    /// Forgets the request log.
    pub fn clear_requests(&self) {
        lock(&self.inner.requests).clear();
    }

    /// Ends every open watch stream, as a server restart or timeout would; clients re-watch.
    pub fn close_watches(&self) {
        self.inner.closer.send_modify(|epoch| *epoch += 1);
    }

    /// Drops the change history: watches resuming from an older resourceVersion get 410 Expired.
    pub fn compact_history(&self) {
        self.inner.store().compact();
    }

    /// Listens on 127.0.0.1 (an OS-chosen port) and serves this server over HTTP/1.1 until
    /// the returned handle is dropped. Must be called inside a tokio runtime.
    pub async fn serve_tcp(&self) -> std::io::Result<TcpServer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let inner = Arc::clone(&self.inner);
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let inner = Arc::clone(&inner);
                connections.spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: Request<hyper::body::Incoming>| {
                            serve_one(Arc::clone(&inner), request)
                        },
                    );
                    let io = hyper_util::rt::TokioIo::new(stream);
                    if let Err(error) = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await
                    {
                        tracing::debug!(%error, "test API server connection ended");
                    }
                });
                // Reap finished connections so the set does not grow without bound.
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(TcpServer { addr, task })
    }
}

fn decode<K: DeserializeOwned>(value: Value) -> Option<K> {
    serde_json::from_value(value)
        .map_err(
            |error| tracing::warn!(%error, "stored object does not decode into the requested type"),
        )
        .ok()
}

async fn serve_one<B>(
    inner: Arc<Inner>,
    request: Request<B>,
) -> Result<Response<ResponseBody>, Infallible>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: std::fmt::Display + Send,
{
    let (parts, body) = request.into_parts();
    match body.collect().await {
        Ok(collected) => Ok(handle(inner, Request::from_parts(parts, collected.to_bytes())).await),
        Err(error) => {
            let error = ApiError::bad_request(format!("could not read the request body: {error}"));
            Ok(Response::builder()
                .status(400)
                .body(
                    http_body_util::Full::new(Bytes::from(error.to_status().to_string()))
                        .boxed_unsync(),
                )
                .unwrap_or_default())
        }
    }
}

impl<B> tower_service::Service<Request<B>> for TestApiServer
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: std::fmt::Display + Send,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        Box::pin(serve_one(Arc::clone(&self.inner), request))
    }
}

/// Header carrying the [`TestApiServer::client_named`] name to the handler.
pub(crate) const CLIENT_HEADER: &str = "x-testapi-client";

/// The in-process service of [`TestApiServer::client_named`]: tags each request with a name.
#[derive(Clone)]
struct NamedClient {
    server: TestApiServer,
    name: http::HeaderValue,
}

impl<B> tower_service::Service<Request<B>> for NamedClient
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: std::fmt::Display + Send,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        request
            .headers_mut()
            .insert(CLIENT_HEADER, self.name.clone());
        Box::pin(serve_one(Arc::clone(&self.server.inner), request))
    }
}

/// A running loopback listener; dropping it stops the listener and its connections.
#[derive(Debug)]
pub struct TcpServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl TcpServer {
    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig whose current context points at this server (namespace `default`).
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: testapi\n  cluster:\n    server: {}\n\
             contexts:\n- name: testapi\n  context:\n    cluster: testapi\n    user: testapi\n    namespace: default\n\
             current-context: testapi\nusers:\n- name: testapi\n  user: {{}}\n",
            self.url()
        )
    }

    /// Writes [`TcpServer::kubeconfig_yaml`] to a file, for `karpenter controller --kubeconfig`.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
