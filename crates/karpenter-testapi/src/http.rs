//! The REST + watch front end: URL routing, verbs, discovery documents and watch streams.
//! One handler serves both the in-process tower service and the loopback TCP listener.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::error::{ApiError, success_status};
use crate::faults::FaultEffect;
use crate::patch::PatchKind;
use crate::registry::ResourceInfo;
use crate::selector::{FieldSelector, LabelSelector};
use crate::server::{Inner, RequestRecord, Verb};
use crate::store::managed_fields::Writer;
use crate::store::{Change, ChangeKind, DeleteOptions, Store, Target, WatchStart};

/// The body type of every response.
pub type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

/// Watches without `timeoutSeconds` end after this long; clients re-watch.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

fn json_response(code: u16, value: &Value) -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed_unsync());
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn error_response(error: &ApiError) -> Response<ResponseBody> {
    json_response(error.code, &error.to_status())
}

/// Decoded query parameters.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(query: Option<&str>) -> Self {
        let pairs = query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (percent_decode(k), percent_decode(v))
            })
            .collect();
        Self(pairs)
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A request aimed at objects of one resource.
struct ObjectsRoute {
    res: ResourceInfo,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

enum Route {
    Version,
    CoreVersions,
    GroupList,
    Group(String),
    ResourceList { group: String, version: String },
    Objects(ObjectsRoute),
}

fn not_found_path() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

fn parse_route(inner: &Inner, path: &str) -> Result<Route, ApiError> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Ok(Route::Version),
        ["api"] => return Ok(Route::CoreVersions),
        ["apis"] => return Ok(Route::GroupList),
        ["apis", group] => return Ok(Route::Group((*group).to_owned())),
        ["api", version] => {
            return Ok(Route::ResourceList {
                group: String::new(),
                version: (*version).to_owned(),
            });
        }
        ["apis", group, version] => {
            return Ok(Route::ResourceList {
                group: (*group).to_owned(),
                version: (*version).to_owned(),
            });
        }
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(not_found_path()),
    };
    let store = inner.store();
    let namespaced_plural = match rest {
        ["namespaces", _, plural, ..] => store
            .registry
            .find(group, version, plural)
            .filter(|r| r.namespaced),
        _ => None,
    };
    let (res, namespace, tail) = match (namespaced_plural, rest) {
        (Some(res), ["namespaces", ns, _, tail @ ..]) => {
            (res.clone(), Some((*ns).to_owned()), tail)
        }
        (_, [plural, tail @ ..]) => {
            let res = store
                .registry
                .find(group, version, plural)
                .ok_or_else(not_found_path)?;
            (res.clone(), None, tail)
        }
        _ => return Err(not_found_path()),
    };
    let (name, subresource) = match tail {
        [] => (None, None),
        [name] => (Some((*name).to_owned()), None),
        [name, sub] => (Some((*name).to_owned()), Some((*sub).to_owned())),
        _ => return Err(not_found_path()),
    };
    Ok(Route::Objects(ObjectsRoute {
        res,
        namespace,
        name,
        subresource,
    }))
}

/// Serves one request (body already collected).
pub(crate) async fn handle(inner: Arc<Inner>, request: Request<Bytes>) -> Response<ResponseBody> {
    let (parts, body) = request.into_parts();
    let query = Query::parse(parts.uri.query());
    let route = match parse_route(&inner, parts.uri.path()) {
        Ok(route) => route,
        Err(error) => return error_response(&error),
    };
    let target = match route {
        Route::Objects(target) => target,
        other if parts.method == Method::GET => {
            return match discovery(&inner, &other) {
                Ok(document) => json_response(200, &document),
                Err(error) => error_response(&error),
            };
        }
        _ => {
            return error_response(&ApiError::method_not_allowed(
                "discovery endpoints only answer GET",
            ));
        }
    };
    let verb = match verb_of(&parts.method, &target, &query) {
        Ok(verb) => verb,
        Err(error) => return error_response(&error),
    };
    let mut record = RequestRecord {
        verb,
        group: target.res.group.clone(),
        resource: target.res.plural.clone(),
        subresource: target.subresource.clone(),
        namespace: target.namespace.clone(),
        name: target.name.clone(),
        code: 200,
        client: parts
            .headers
            .get(crate::server::CLIENT_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        field_manager: query.get("fieldManager").map(str::to_owned),
        user_agent: parts
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    };
    match inner.take_fault(&record) {
        Some(FaultEffect::Error(error)) => {
            record.code = error.code;
            inner.log(record);
            return error_response(&error);
        }
        Some(FaultEffect::Hang) => {
            record.code = 0;
            inner.log_hung(record);
            drop(inner);
            return std::future::pending().await;
        }
        None => {}
    }
    let metadata_only = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("as=PartialObjectMetadata"));
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if verb.is_write() && query.get("dryRun").is_some() {
        // Persisting a dry run would be worse than refusing it.
        let error = ApiError::bad_request(
            "dryRun is not supported by the test API server; drop it from the request",
        );
        record.code = error.code;
        inner.log(record);
        return error_response(&error);
    }
    let present = Presenter {
        res: target.res.clone(),
        metadata_only,
    };
    let response = if verb == Verb::Watch {
        watch(&inner, &target, &query, present)
    } else {
        let request = Incoming {
            verb,
            target: &target,
            query: &query,
            content_type: &content_type,
            user_agent: record.user_agent.as_deref(),
            body: &body,
        };
        match execute(&inner, &request, &present) {
            Ok((code, value)) => json_response(code, &value),
            Err(error) => error_response(&error),
        }
    };
    record.code = response.status().as_u16();
    let delay = (verb != Verb::Watch)
        .then(|| inner.delays.take(&record))
        .flatten();
    inner.log(record);
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    response
}

fn verb_of(method: &Method, target: &ObjectsRoute, query: &Query) -> Result<Verb, ApiError> {
    let sub = target.subresource.as_deref();
    let has_name = target.name.is_some();
    let subresource_ok = match sub {
        None => true,
        Some("status") => target.res.has_status,
        Some("eviction" | "binding") => target.res.is("", "pods") && *method == Method::POST,
        Some(_) => false,
    };
    if !subresource_ok {
        return Err(not_found_path());
    }
    let verb = match (method.clone(), has_name) {
        (Method::GET, false) if query.flag("watch") => Verb::Watch,
        (Method::GET, false) => Verb::List,
        (Method::GET, true) => Verb::Get,
        (Method::POST, false) => Verb::Create,
        (Method::POST, true) if sub.is_some() => Verb::Create,
        (Method::PUT, true) => Verb::Update,
        (Method::PATCH, true) => Verb::Patch,
        (Method::DELETE, true) if sub.is_none() => Verb::Delete,
        (Method::DELETE, false) => Verb::DeleteCollection,
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "{method} is not supported on {}",
                target.res.qualified_plural()
            )));
        }
    };
    Ok(verb)
}

fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the request body is not JSON (only JSON bodies are supported): {e}"
        ))
    })
}

fn selectors(query: &Query) -> Result<(LabelSelector, FieldSelector), ApiError> {
    Ok((
        LabelSelector::parse(query.get("labelSelector").unwrap_or_default())?,
        FieldSelector::parse(query.get("fieldSelector").unwrap_or_default())?,
    ))
}

/// How objects are shown for the requested version and media type.
#[derive(Clone)]
struct Presenter {
    res: ResourceInfo,
    metadata_only: bool,
}

impl Presenter {
    fn object(&self, object: &Value) -> Value {
        if self.metadata_only {
            return json!({
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata",
                "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
            });
        }
        let mut shown = object.clone();
        shown["apiVersion"] = json!(self.res.api_version());
        shown
    }

    fn list(&self, items: &[Value], rv: u64) -> Value {
        let (api_version, kind) = if self.metadata_only {
            (
                "meta.k8s.io/v1".to_owned(),
                "PartialObjectMetadataList".to_owned(),
            )
        } else {
            (self.res.api_version(), format!("{}List", self.res.kind))
        };
        json!({
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"resourceVersion": rv.to_string()},
            "items": items.iter().map(|o| self.object(o)).collect::<Vec<_>>(),
        })
    }
}

/// One request to an object endpoint, as [`execute`] serves it.
struct Incoming<'a> {
    verb: Verb,
    target: &'a ObjectsRoute,
    query: &'a Query,
    content_type: &'a str,
    user_agent: Option<&'a str>,
    body: &'a Bytes,
}

impl Incoming<'_> {
    /// Who the API server records in `managedFields` for this request (writes of objects only:
    /// evictions and bindings change pods, not the object sent).
    fn writer(&self) -> Option<Writer> {
        let sub = self.target.subresource.as_deref();
        let writes_object = matches!(self.verb, Verb::Create | Verb::Update | Verb::Patch)
            && !matches!(sub, Some("eviction" | "binding"));
        writes_object.then(|| {
            let apply = self.verb == Verb::Patch
                && PatchKind::from_content_type(self.content_type) == Some(PatchKind::Apply);
            Writer::new(self.query.get("fieldManager"), self.user_agent, apply, sub)
        })
    }
}

fn execute(
    inner: &Inner,
    request: &Incoming<'_>,
    present: &Presenter,
) -> Result<(u16, Value), ApiError> {
    let mut store = inner.store();
    store.set_writer(request.writer());
    let result = execute_locked(&mut store, request, present);
    store.set_writer(None);
    result
}

fn execute_locked(
    store: &mut Store,
    request: &Incoming<'_>,
    present: &Presenter,
) -> Result<(u16, Value), ApiError> {
    let Incoming {
        verb,
        target,
        query,
        content_type,
        body,
        ..
    } = *request;
    let res = &target.res;
    let ns = target.namespace.as_deref();
    let name = target.name.as_deref().unwrap_or_default();
    let sub = target.subresource.as_deref();
    let write_target = if sub == Some("status") {
        Target::Status
    } else {
        Target::Main
    };
    let strict = query.get("fieldValidation") == Some("Strict");
    match verb {
        Verb::Get => Ok((200, present.object(&store.get(res, ns, name)?))),
        Verb::List => {
            let (labels, fields) = selectors(query)?;
            let items = store.list(res, ns, &labels, &fields);
            Ok((200, present.list(&items, store.resource_version())))
        }
        Verb::Create if sub == Some("eviction") => {
            let eviction = parse_body(body)?;
            let options =
                DeleteOptions::from_json(eviction.get("deleteOptions").unwrap_or(&Value::Null));
            store.evict(ns.unwrap_or_default(), name, &options)?;
            Ok((201, success_status(201)))
        }
        Verb::Create if sub == Some("binding") => {
            store.bind(ns.unwrap_or_default(), name, &parse_body(body)?)?;
            Ok((201, success_status(201)))
        }
        Verb::Create => {
            let object = parse_body(body)?;
            if strict {
                store.check_strict_fields(res, &object)?;
            }
            Ok((201, present.object(&store.create(res, ns, object)?)))
        }
        Verb::Update => {
            let object = parse_body(body)?;
            if strict {
                store.check_strict_fields(res, &object)?;
            }
            Ok((
                200,
                present.object(&store.update(res, ns, name, object, write_target)?),
            ))
        }
        Verb::Patch => {
            let kind = PatchKind::from_content_type(content_type).ok_or_else(|| {
                ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    format!("the body of the request was in an unknown format: {content_type}"),
                )
            })?;
            if kind == PatchKind::Apply && query.get("fieldManager").is_none_or(str::is_empty) {
                return Err(ApiError::bad_request(
                    "fieldManager is required for apply requests",
                ));
            }
            if kind == PatchKind::Strategic && !crate::registry::is_builtin(&res.group, &res.plural)
            {
                return Err(ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    "strategic merge patch is not supported for custom resources; use a merge, JSON or apply patch",
                ));
            }
            let patch_body = parse_body(body)?;
            // A merge or apply patch has the object's shape; JSON patches are not checked.
            if strict && kind != PatchKind::Json {
                store.check_strict_fields(res, &patch_body)?;
            }
            let patched = store.patch(res, ns, name, kind, &patch_body, write_target)?;
            Ok((200, present.object(&patched)))
        }
        Verb::Delete => {
            let mut options = DeleteOptions::from_json(&parse_body(body)?);
            if let Some(grace) = query.get("gracePeriodSeconds").and_then(|g| g.parse().ok()) {
                options.grace_period_seconds = Some(grace);
            }
            Ok((200, present.object(&store.delete(res, ns, name, &options)?)))
        }
        Verb::DeleteCollection => {
            let (labels, fields) = selectors(query)?;
            let options = DeleteOptions::from_json(&parse_body(body)?);
            for object in store.list(res, ns, &labels, &fields) {
                let name = object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let ns = object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str);
                store.delete(res, ns, name, &options)?;
            }
            Ok((200, success_status(200)))
        }
        Verb::Watch => Err(ApiError::internal("watch is served as a stream")),
    }
}

/// Which events one watch sends.
struct WatchFilter {
    group: String,
    plural: String,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    present: Presenter,
}

impl WatchFilter {
    fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }

    fn line(&self, kind: &str, object: &Value) -> Bytes {
        let mut line = json!({"type": kind, "object": self.present.object(object)}).to_string();
        line.push('\n');
        Bytes::from(line)
    }

    /// The event a change becomes for this watch: objects entering or leaving the selection
    /// show up as ADDED or DELETED.
    fn event(&self, change: &Change) -> Option<Bytes> {
        if change.key.group != self.group || change.key.plural != self.plural {
            return None;
        }
        if self
            .namespace
            .as_ref()
            .is_some_and(|ns| *ns != change.key.namespace)
        {
            return None;
        }
        let now = self.matches(&change.object);
        let before = change.previous.as_ref().is_some_and(|p| self.matches(p));
        let kind = match change.kind {
            ChangeKind::Added if now => "ADDED",
            ChangeKind::Modified if now && before => "MODIFIED",
            ChangeKind::Modified if now => "ADDED",
            ChangeKind::Modified if before => "DELETED",
            ChangeKind::Deleted if now || before => "DELETED",
            _ => return None,
        };
        Some(self.line(kind, &change.object))
    }

    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = json!({"apiVersion": self.present.res.api_version(), "kind": self.present.res.kind, "metadata": metadata});
        let mut line = json!({"type": "BOOKMARK", "object": object}).to_string();
        line.push('\n');
        Bytes::from(line)
    }
}

fn error_line(error: &ApiError) -> Bytes {
    let mut line = json!({"type": "ERROR", "object": error.to_status()}).to_string();
    line.push('\n');
    Bytes::from(line)
}

fn stream_response(
    lines: impl futures::Stream<Item = Bytes> + Send + 'static,
) -> Response<ResponseBody> {
    use futures::StreamExt as _;
    let body = StreamBody::new(lines.map(|line| Ok::<_, Infallible>(Frame::data(line))));
    let mut response = Response::new(body.boxed_unsync());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn watch(
    inner: &Inner,
    target: &ObjectsRoute,
    query: &Query,
    present: Presenter,
) -> Response<ResponseBody> {
    let (labels, fields) = match selectors(query) {
        Ok(s) => s,
        Err(error) => return error_response(&error),
    };
    let filter = WatchFilter {
        group: target.res.group.clone(),
        plural: target.res.plural.clone(),
        namespace: target.namespace.clone().filter(|_| target.res.namespaced),
        labels,
        fields,
        present,
    };
    let send_initial_events = query.flag("sendInitialEvents");
    let start = match query
        .get("resourceVersion")
        .filter(|rv| !rv.is_empty() && *rv != "0")
    {
        Some(_) if send_initial_events => WatchStart::Snapshot,
        None => WatchStart::Snapshot,
        Some(rv) => match rv.parse() {
            Ok(rv) => WatchStart::After(rv),
            Err(_) => {
                return error_response(&ApiError::bad_request(format!(
                    "invalid resourceVersion {rv:?}"
                )));
            }
        },
    };
    let setup = {
        let store = inner.store();
        store.watch(
            &filter.group,
            &filter.plural,
            filter.namespace.as_deref(),
            start,
        )
    };
    let setup = match setup {
        Ok(setup) => setup,
        // A real API server answers a too-old watch with 200 and an ERROR event.
        Err(error) => return stream_response(futures::stream::iter([error_line(&error)])),
    };
    let mut pending: VecDeque<Bytes> = VecDeque::new();
    for object in setup.snapshot.iter().filter(|o| filter.matches(o)) {
        pending.push_back(filter.line("ADDED", object));
    }
    if send_initial_events {
        pending.push_back(filter.bookmark(setup.current_rv, true));
    }
    pending.extend(setup.backlog.iter().filter_map(|c| filter.event(c)));
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
    let state = WatchState {
        pending,
        receiver: setup.receiver,
        closer: inner.closer(),
        deadline: Box::pin(tokio::time::sleep(timeout)),
        bookmarks: query.flag("allowWatchBookmarks"),
        latest_rv: setup.current_rv,
        filter,
        done: false,
    };
    stream_response(futures::stream::unfold(state, next_line))
}

struct WatchState {
    pending: VecDeque<Bytes>,
    receiver: tokio::sync::broadcast::Receiver<Arc<Change>>,
    closer: tokio::sync::watch::Receiver<u64>,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    bookmarks: bool,
    latest_rv: u64,
    filter: WatchFilter,
    done: bool,
}

async fn next_line(mut state: WatchState) -> Option<(Bytes, WatchState)> {
    loop {
        if let Some(line) = state.pending.pop_front() {
            return Some((line, state));
        }
        if state.done {
            return None;
        }
        tokio::select! {
            // Closing wins over queued events so tests can make a watch miss changes on purpose.
            biased;
            _ = state.closer.changed() => state.done = true,
            received = state.receiver.recv() => match received {
                Ok(change) => {
                    state.latest_rv = state.latest_rv.max(change.rv);
                    if let Some(line) = state.filter.event(&change) {
                        state.pending.push_back(line);
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    let expired = ApiError::expired("the watch fell behind and its events were dropped; re-list");
                    state.pending.push_back(error_line(&expired));
                    state.done = true;
                }
                Err(RecvError::Closed) => state.done = true,
            },
            () = &mut state.deadline => {
                if state.bookmarks {
                    state.pending.push_back(state.filter.bookmark(state.latest_rv, false));
                }
                state.done = true;
            }
        }
    }
}

fn discovery(inner: &Inner, route: &Route) -> Result<Value, ApiError> {
    let store = inner.store();
    let document = match route {
        Route::Version => json!({
            "major": "1", "minor": "33", "gitVersion": "v1.33.0-testapi", "gitCommit": "", "gitTreeState": "clean",
            "buildDate": "1970-01-01T00:00:00Z", "goVersion": "none", "compiler": "rustc", "platform": "linux/amd64",
        }),
        Route::CoreVersions => json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
        }),
        Route::GroupList => {
            let groups: Vec<Value> = store
                .registry
                .groups()
                .iter()
                .map(|(g, vs)| group_json(g, vs))
                .collect();
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        }
        Route::Group(group) => {
            let groups = store.registry.groups();
            match groups.iter().find(|(g, _)| g == group) {
                Some((g, versions)) => group_json(g, versions),
                None => return Err(not_found_path()),
            }
        }
        Route::ResourceList { group, version } => {
            let mut resources = Vec::new();
            for r in store
                .registry
                .all()
                .iter()
                .filter(|r| r.group == *group && r.version == *version)
            {
                let verbs = json!([
                    "create",
                    "delete",
                    "deletecollection",
                    "get",
                    "list",
                    "patch",
                    "update",
                    "watch"
                ]);
                resources.push(json!({
                    "name": r.plural, "singularName": r.kind.to_lowercase(), "namespaced": r.namespaced,
                    "kind": r.kind, "verbs": verbs,
                }));
                if r.has_status {
                    resources.push(json!({
                        "name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                        "kind": r.kind, "verbs": ["get", "patch", "update"],
                    }));
                }
                if r.is("", "pods") {
                    resources.push(json!({"name": "pods/eviction", "singularName": "", "namespaced": true, "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}));
                    resources.push(json!({"name": "pods/binding", "singularName": "", "namespaced": true, "kind": "Binding", "verbs": ["create"]}));
                }
            }
            if resources.is_empty() {
                return Err(not_found_path());
            }
            let group_version = if group.is_empty() {
                version.clone()
            } else {
                format!("{group}/{version}")
            };
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
        }
        Route::Objects(_) => return Err(not_found_path()),
    };
    Ok(document)
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "kind": "APIGroup", "apiVersion": "v1", "name": group,
        "versions": versions.clone(),
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("app%20in%20%28a%2Cb%29"), "app in (a,b)");
        assert_eq!(percent_decode("a+b%3D1"), "a b=1");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
