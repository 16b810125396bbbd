//! The in-memory object store: one resourceVersion counter, object metadata bookkeeping,
//! finalizers and graceful deletion, the status subresource, PDB status upkeep and the change
//! history that watches replay.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::error::ApiError;
use crate::patch::{self, PatchKind};
use crate::pdb;
use crate::registry::{Registry, ResourceInfo};
use crate::selector::{FieldSelector, LabelSelector};

mod gc;
pub(crate) mod managed_fields;

/// Supplies `creationTimestamp`/`deletionTimestamp` values; tests may pass a virtual clock.
pub type Clock = Arc<dyn Fn() -> jiff::Timestamp + Send + Sync>;

/// Where an object lives: (group, plural, namespace, name); namespace is "" when cluster-scoped.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ObjectKey {
    pub group: String,
    pub plural: String,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub(crate) fn new(res: &ResourceInfo, namespace: Option<&str>, name: &str) -> Self {
        Self {
            group: res.group.clone(),
            plural: res.plural.clone(),
            namespace: if res.namespaced {
                namespace.unwrap_or_default().to_owned()
            } else {
                String::new()
            },
            name: name.to_owned(),
        }
    }
}

/// What a write did, as a watch reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One committed write, kept in the bounded history and broadcast to open watches.
#[derive(Debug)]
pub(crate) struct Change {
    pub rv: u64,
    pub key: ObjectKey,
    pub kind: ChangeKind,
    pub object: Value,
    /// The object before the write, so selector-filtered watches can tell "left the selection".
    pub previous: Option<Value>,
}

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The main resource: status is kept as it was when the resource has a status subresource.
    Main,
    /// The `/status` subresource: only status changes.
    Status,
    /// Test hooks: everything, status included.
    All,
}

/// Options of a DELETE (or an eviction's `deleteOptions`).
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl DeleteOptions {
    pub(crate) fn from_json(body: &Value) -> Self {
        let text = |pointer: &str| {
            body.pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        Self {
            grace_period_seconds: body.get("gracePeriodSeconds").and_then(Value::as_i64),
            uid: text("/preconditions/uid"),
            resource_version: text("/preconditions/resourceVersion"),
        }
    }
}

/// Where a watch starts.
pub(crate) enum WatchStart {
    /// Replay every current object as ADDED, then follow.
    Snapshot,
    /// Replay history after this resourceVersion, then follow.
    After(u64),
}

/// What a new watch sends before live events.
pub(crate) struct WatchSetup {
    pub snapshot: Vec<Value>,
    pub backlog: Vec<Arc<Change>>,
    pub current_rv: u64,
    pub receiver: broadcast::Receiver<Arc<Change>>,
}

pub(crate) struct Store {
    pub registry: Registry,
    objects: BTreeMap<ObjectKey, Value>,
    rv: u64,
    counter: u64,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// Changes at or below this resourceVersion have been dropped from the history.
    compacted_rv: u64,
    sender: broadcast::Sender<Arc<Change>>,
    clock: Clock,
    pub pods_terminate_immediately: bool,
    /// Who sends the write being served (recorded in `managedFields`); `None` for the
    /// server's own changes (garbage collection, graceful deletion, test set-up).
    writer: Option<managed_fields::Writer>,
}

const GENERATE_NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const CONFLICT: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    let root = ensure_map(object);
    ensure_map(root.entry("metadata").or_insert_with(|| json!({})))
}

/// The value as a JSON object, replacing anything else (callers validate user bodies first).
fn ensure_map(value: &mut Value) -> &mut Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => {
            *other = Value::Object(Map::new());
            ensure_map(other)
        }
    }
}

fn finalizers(object: &Value) -> Vec<&str> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn without_rv(object: &Value) -> Value {
    let mut copy = object.clone();
    metadata_mut(&mut copy).remove("resourceVersion");
    copy
}

/// Everything but metadata and status: what `metadata.generation` tracks.
fn spec_part(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
    }
    copy
}

impl Store {
    pub(crate) fn new(history_limit: usize, clock: Clock) -> Self {
        let (sender, _) = broadcast::channel(history_limit.max(1024));
        Self {
            registry: Registry::default(),
            objects: BTreeMap::new(),
            // Lists report the counter as their resourceVersion, and "0" means "any version"
            // to a watch, so the counter starts past it.
            rv: 1,
            counter: 0,
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted_rv: 0,
            sender,
            clock,
            pods_terminate_immediately: false,
            writer: None,
        }
    }

    /// Names the sender of the writes that follow (until set again), for `managedFields`.
    pub(crate) fn set_writer(&mut self, writer: Option<managed_fields::Writer>) {
        self.writer = writer;
    }

    /// Stamps the current writer into `object`'s `managedFields`, unless the write changes
    /// nothing (`old` equal but for the resourceVersion).
    fn stamp_writer(&self, object: &mut Value, old: Option<&Value>) {
        let Some(writer) = &self.writer else { return };
        if old.is_some_and(|old| without_rv(old) == without_rv(object)) {
            return;
        }
        managed_fields::stamp(object, writer, &self.timestamp(0));
    }

    pub(crate) fn resource_version(&self) -> u64 {
        self.rv
    }

    fn timestamp(&self, offset_seconds: i64) -> String {
        let now = (self.clock)();
        let at = now
            .checked_add(jiff::SignedDuration::from_secs(offset_seconds))
            .unwrap_or(now);
        at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    fn next_id(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    pub(crate) fn get(
        &self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.objects
            .get(&ObjectKey::new(res, ns, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&res.qualified_plural(), name))
    }

    /// Objects of a resource, optionally in one namespace, sorted by namespace and name.
    pub(crate) fn list(
        &self,
        res: &ResourceInfo,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Vec<Value> {
        self.scan(&res.group, &res.plural, ns.filter(|_| res.namespaced))
            .filter(|o| labels.matches(o) && fields.matches(o))
            .cloned()
            .collect()
    }

    fn scan<'a>(
        &'a self,
        group: &'a str,
        plural: &'a str,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        let start = ObjectKey {
            group: group.to_owned(),
            plural: plural.to_owned(),
            namespace: ns.unwrap_or_default().to_owned(),
            name: String::new(),
        };
        self.objects
            .range(start..)
            .take_while(move |(k, _)| {
                k.group == group && k.plural == plural && ns.is_none_or(|n| k.namespace == n)
            })
            .map(|(_, v)| v)
    }

    pub(crate) fn count(&self, group: &str, plural: &str) -> usize {
        self.scan(group, plural, None).count()
    }

    pub(crate) fn create(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        mut object: Value,
    ) -> Result<Value, ApiError> {
        let what = res.qualified_plural();
        if !object.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {what} create must be a JSON object"
            )));
        }
        object["apiVersion"] = json!(res.api_version());
        object["kind"] = json!(res.kind);
        let name = match (meta_str(&object, "name"), meta_str(&object, "generateName")) {
            (Some(name), _) if !name.is_empty() => name.to_owned(),
            (_, Some(prefix)) if !prefix.is_empty() => {
                let prefix = prefix.to_owned();
                self.generated_name(res, ns, &prefix)
            }
            _ => {
                return Err(ApiError::invalid(
                    &what,
                    "",
                    "metadata.name: Required value: name or generateName is required",
                ));
            }
        };
        let namespace = if res.namespaced {
            let url_ns = ns.filter(|n| !n.is_empty()).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "{what} are namespaced: create them under /namespaces/<namespace>/"
                ))
            })?;
            if meta_str(&object, "namespace").is_some_and(|n| !n.is_empty() && n != url_ns) {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            Some(url_ns.to_owned())
        } else {
            None
        };
        let key = ObjectKey::new(res, namespace.as_deref(), &name);
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&what, &name));
        }
        if res.group == "apiextensions.k8s.io" && res.plural == "customresourcedefinitions" {
            let crd = serde_json::from_value(object.clone()).map_err(|e| {
                ApiError::invalid(
                    &what,
                    &name,
                    &format!("not a CustomResourceDefinition: {e}"),
                )
            })?;
            self.registry.register_crd(&crd)?;
        }
        if res.has_status && !crate::registry::is_builtin(&res.group, &res.plural) {
            // Custom resources with a status subresource ignore status on create.
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        let mut object = self.admit(res, &name, object, None)?;
        let uid = self.next_id();
        let created = self.timestamp(0);
        let meta = metadata_mut(&mut object);
        meta.insert("name".into(), json!(name));
        match namespace {
            Some(ns) => meta.insert("namespace".into(), json!(ns)),
            None => meta.remove("namespace"),
        };
        meta.insert(
            "uid".into(),
            json!(format!("00000000-0000-4000-8000-{uid:012x}")),
        );
        meta.insert("creationTimestamp".into(), json!(created));
        meta.insert("generation".into(), json!(1));
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        self.stamp_writer(&mut object, None);
        Ok(self.commit(key, ChangeKind::Added, object, None))
    }

    fn generated_name(&mut self, res: &ResourceInfo, ns: Option<&str>, prefix: &str) -> String {
        loop {
            // A deterministic pseudo-random suffix keeps test runs reproducible.
            let mut n = self.next_id().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20;
            let suffix: String = (0..5)
                .map(|_| {
                    let c =
                        GENERATE_NAME_ALPHABET[(n % GENERATE_NAME_ALPHABET.len() as u64) as usize];
                    n /= GENERATE_NAME_ALPHABET.len() as u64;
                    char::from(c)
                })
                .collect();
            let name = format!("{prefix}{suffix}");
            if !self.objects.contains_key(&ObjectKey::new(res, ns, &name)) {
                return name;
            }
        }
    }

    /// Replaces an object; a non-empty `metadata.resourceVersion` in `object` must match.
    pub(crate) fn update(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        object: Value,
        target: Target,
    ) -> Result<Value, ApiError> {
        let what = res.qualified_plural();
        if !object.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {what} update must be a JSON object"
            )));
        }
        let key = ObjectKey::new(res, ns, name);
        let old = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&what, name))?;
        if meta_str(&object, "name").is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta_str(&object, "name").unwrap_or_default()
            )));
        }
        if meta_str(&object, "resourceVersion")
            .is_some_and(|rv| !rv.is_empty() && Some(rv) != meta_str(&old, "resourceVersion"))
        {
            return Err(ApiError::conflict(&what, name, CONFLICT));
        }
        let new = prepare_update(res, &old, object, target)?;
        let mut new = self.admit(res, name, new, Some(&old))?;
        self.stamp_writer(&mut new, Some(&old));
        Ok(self.commit_update(res, key, old, new))
    }

    /// `fieldValidation=Strict`: a body with fields the CRD schema does not know is a 400, as on
    /// the API server (which otherwise prunes them). Built-in kinds are not checked.
    pub(crate) fn check_strict_fields(
        &self,
        res: &ResourceInfo,
        body: &Value,
    ) -> Result<(), ApiError> {
        let Some(schema) = self.registry.schema(res) else {
            return Ok(());
        };
        let unknown = schema.unknown_fields(body);
        if unknown.is_empty() {
            return Ok(());
        }
        let fields: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field {f:?}"))
            .collect();
        Err(ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
            fields.join(", "),
            kind = res.kind,
            version = res.version,
        )))
    }

    /// Custom objects are pruned, defaulted and validated against their CRD's schema, as the API
    /// server does on every write (422 `Invalid` with its field errors); a ConfigMap is held to
    /// the API server's size limit.
    fn admit(
        &self,
        res: &ResourceInfo,
        name: &str,
        object: Value,
        old: Option<&Value>,
    ) -> Result<Value, ApiError> {
        if res.group.is_empty() && res.kind == "ConfigMap" {
            check_config_map_size(name, &object)?;
        }
        let Some(schema) = self.registry.schema(res) else {
            return Ok(object);
        };
        schema.admit(object, old).map_err(|errors| {
            let message =
                crate::crd_check::admission::invalid_message(&res.kind, &res.group, name, &errors);
            ApiError::new(422, "Invalid", message)
        })
    }

    /// Patches an object. Server-side apply creates a missing object.
    pub(crate) fn patch(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        kind: PatchKind,
        body: &Value,
        target: Target,
    ) -> Result<Value, ApiError> {
        let what = res.qualified_plural();
        let current = match self.get(res, ns, name) {
            Ok(current) => current,
            Err(_) if kind == PatchKind::Apply && target == Target::Main => {
                let mut object = body.clone();
                if !object.is_object() {
                    return Err(ApiError::bad_request(
                        "an apply patch must be a JSON object",
                    ));
                }
                metadata_mut(&mut object).insert("name".into(), json!(name));
                return self.create(res, ns, object);
            }
            Err(not_found) => return Err(not_found),
        };
        let patched = patch::apply(kind, &current, body)
            .map_err(|why| ApiError::invalid(&what, name, &why.to_string()))?;
        self.update(res, ns, name, patched, target)
    }

    fn pod_grace_seconds(&self, pod: &Value, requested: Option<i64>) -> i64 {
        let unbound = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if self.pods_terminate_immediately || unbound || pdb::is_terminal_pod(pod) {
            return 0;
        }
        requested
            .or_else(|| {
                pod.pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(30)
            .max(0)
    }

    /// Deletes an object, or marks it terminating while finalizers (or, for a bound pod, a
    /// graceful termination) hold it. Returns the object as last seen.
    pub(crate) fn delete(
        &mut self,
        res: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let what = res.qualified_plural();
        let key = ObjectKey::new(res, ns, name);
        let old = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&what, name))?;
        if options
            .uid
            .as_deref()
            .is_some_and(|uid| Some(uid) != meta_str(&old, "uid"))
        {
            return Err(ApiError::conflict(
                &what,
                name,
                "Precondition failed: UID in precondition does not match the object",
            ));
        }
        if options
            .resource_version
            .as_deref()
            .is_some_and(|rv| Some(rv) != meta_str(&old, "resourceVersion"))
        {
            return Err(ApiError::conflict(&what, name, CONFLICT));
        }
        let grace = if res.is("", "pods") {
            self.pod_grace_seconds(&old, options.grace_period_seconds)
        } else {
            0
        };
        if pdb::is_terminating(&old) {
            let current_grace = old
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if grace >= current_grace {
                return Ok(old);
            }
            let mut new = old.clone();
            metadata_mut(&mut new).insert("deletionGracePeriodSeconds".into(), json!(grace));
            return Ok(self.commit_update(res, key, old, new));
        }
        if finalizers(&old).is_empty() && grace == 0 {
            return Ok(self.remove(key, old));
        }
        let mut new = old.clone();
        let deletion = self.timestamp(grace);
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let meta = metadata_mut(&mut new);
        meta.insert("deletionTimestamp".into(), json!(deletion));
        meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
        meta.insert("generation".into(), json!(generation + 1));
        Ok(self.commit_update(res, key, old, new))
    }

    /// The eviction subresource: delete the pod unless a PodDisruptionBudget forbids it.
    pub(crate) fn evict(
        &mut self,
        ns: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<(), ApiError> {
        let pods = self.builtin("", "pods")?;
        let pod = self.get(&pods, Some(ns), name)?;
        let mut budgets = Vec::new();
        for budget in self.scan("policy", "poddisruptionbudgets", Some(ns)) {
            if pdb::selects(budget, &pod)? {
                let status = self.pdb_status(budget, ns)?;
                budgets.push((budget, status));
            }
        }
        pdb::check_eviction(&pod, &budgets)?;
        self.delete(&pods, Some(ns), name, options).map(|_| ())
    }

    /// The binding subresource: assigns an unbound pod to a node.
    pub(crate) fn bind(&mut self, ns: &str, name: &str, binding: &Value) -> Result<(), ApiError> {
        let pods = self.builtin("", "pods")?;
        let node = binding
            .pointer("/target/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        let node =
            node.ok_or_else(|| ApiError::invalid("bindings", name, "target.name: Required value"))?;
        let pod = self.get(&pods, Some(ns), name)?;
        if pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty())
        {
            return Err(ApiError::conflict(
                "pods/binding",
                name,
                "pod is already assigned to a node",
            ));
        }
        let mut new = pod.clone();
        let spec = ensure_map(
            ensure_map(&mut new)
                .entry("spec")
                .or_insert_with(|| json!({})),
        );
        spec.insert("nodeName".into(), json!(node));
        let key = ObjectKey::new(&pods, Some(ns), name);
        self.commit_update(&pods, key, pod, new);
        Ok(())
    }

    fn builtin(&self, group: &str, plural: &str) -> Result<ResourceInfo, ApiError> {
        self.registry
            .all()
            .iter()
            .find(|r| r.is(group, plural))
            .cloned()
            .ok_or_else(|| ApiError::internal(format!("resource {plural} is not registered")))
    }

    /// Writes an object as given (status included, no resourceVersion precondition),
    /// creating it if needed. For test setup and simulated components.
    pub(crate) fn put(&mut self, mut object: Value) -> Result<Value, ApiError> {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let res = self
            .registry
            .find_kind(api_version, kind)
            .cloned()
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "no resource is registered for apiVersion {api_version:?} kind {kind:?}"
                ))
            })?;
        let name = meta_str(&object, "name").unwrap_or_default().to_owned();
        let ns = meta_str(&object, "namespace").map(str::to_owned);
        metadata_mut(&mut object).remove("resourceVersion");
        if self
            .objects
            .contains_key(&ObjectKey::new(&res, ns.as_deref(), &name))
        {
            self.update(&res, ns.as_deref(), &name, object, Target::All)
        } else {
            let status = object.get("status").cloned();
            let created = self.create(&res, ns.as_deref(), object)?;
            match status {
                Some(status) if created.get("status") != Some(&status) => {
                    let mut with_status = created;
                    with_status["status"] = status;
                    self.update(&res, ns.as_deref(), &name, with_status, Target::All)
                }
                _ => Ok(created),
            }
        }
    }

    /// Commits an update, or deletes the object when it is terminating and nothing holds it.
    fn commit_update(
        &mut self,
        res: &ResourceInfo,
        key: ObjectKey,
        old: Value,
        new: Value,
    ) -> Value {
        let pod_grace_pending = res.is("", "pods")
            && new
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                > 0;
        if pdb::is_terminating(&new) && finalizers(&new).is_empty() && !pod_grace_pending {
            return self.remove(key, new);
        }
        if without_rv(&new) == without_rv(&old) {
            // No-op writes keep the resourceVersion and wake no watch, as on a real server.
            return old;
        }
        self.commit(key, ChangeKind::Modified, new, Some(old))
    }

    fn remove(&mut self, key: ObjectKey, mut last: Value) -> Value {
        let previous = self.objects.remove(&key);
        self.rv += 1;
        metadata_mut(&mut last).insert("resourceVersion".into(), json!(self.rv.to_string()));
        self.record(key.clone(), ChangeKind::Deleted, last.clone(), previous);
        self.after_change(&key);
        if let Some(uid) = meta_str(&last, "uid").map(str::to_owned) {
            self.collect_dependents(&uid);
        }
        last
    }

    fn commit(
        &mut self,
        key: ObjectKey,
        kind: ChangeKind,
        object: Value,
        previous: Option<Value>,
    ) -> Value {
        let object = self.store_raw(key.clone(), kind, object, previous);
        self.after_change(&key);
        object
    }

    fn store_raw(
        &mut self,
        key: ObjectKey,
        kind: ChangeKind,
        mut object: Value,
        previous: Option<Value>,
    ) -> Value {
        self.rv += 1;
        metadata_mut(&mut object).insert("resourceVersion".into(), json!(self.rv.to_string()));
        self.objects.insert(key.clone(), object.clone());
        self.record(key, kind, object.clone(), previous);
        object
    }

    fn record(&mut self, key: ObjectKey, kind: ChangeKind, object: Value, previous: Option<Value>) {
        let change = Arc::new(Change {
            rv: self.rv,
            key,
            kind,
            object,
            previous,
        });
        self.history.push_back(Arc::clone(&change));
        while self.history.len() > self.history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.compacted_rv = dropped.rv;
            }
        }
        // No open watch is fine: the history still has the change.
        let _ = self.sender.send(change);
    }

    /// Drops the whole change history: watches resuming from an older resourceVersion get 410.
    pub(crate) fn compact(&mut self) {
        self.history.clear();
        self.compacted_rv = self.rv;
    }

    /// Keeps PodDisruptionBudget status current whenever pods, budgets or their controllers change.
    fn after_change(&mut self, key: &ObjectKey) {
        let relevant = matches!(
            (key.group.as_str(), key.plural.as_str()),
            ("", "pods")
                | ("policy", "poddisruptionbudgets")
                | ("apps", "replicasets" | "deployments" | "statefulsets")
        );
        if !relevant {
            return;
        }
        let budgets: Vec<(ObjectKey, Value)> = self
            .scan("policy", "poddisruptionbudgets", Some(&key.namespace))
            .map(|budget| {
                let name = meta_str(budget, "name").unwrap_or_default();
                let key = ObjectKey {
                    group: "policy".into(),
                    plural: "poddisruptionbudgets".into(),
                    namespace: key.namespace.clone(),
                    name: name.to_owned(),
                };
                (key, budget.clone())
            })
            .collect();
        for (budget_key, budget) in budgets {
            let Ok(status) = self.pdb_status(&budget, &key.namespace) else {
                continue; // an invalid budget keeps its old status
            };
            let mut updated = budget.clone();
            status.apply_to(&mut updated);
            if updated != budget {
                self.store_raw(budget_key, ChangeKind::Modified, updated, Some(budget));
            }
        }
    }

    fn pdb_status(&self, budget: &Value, ns: &str) -> Result<pdb::PdbStatus, ApiError> {
        let pods: Vec<&Value> = self.scan("", "pods", Some(ns)).collect();
        pdb::compute_status(budget, &pods, |pod| self.controller_of(pod, ns))
    }

    /// A pod's top-level scaling controller and its desired replicas.
    fn controller_of(&self, pod: &Value, ns: &str) -> Option<(String, i64)> {
        let owner_of = |object: &Value| {
            object
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)?
                .iter()
                .find(|r| r.get("controller") == Some(&json!(true)))
                .and_then(|r| {
                    Some((
                        r.get("kind")?.as_str()?.to_owned(),
                        r.get("name")?.as_str()?.to_owned(),
                    ))
                })
        };
        let lookup = |plural: &str, name: &str| {
            self.objects.get(&ObjectKey {
                group: "apps".into(),
                plural: plural.into(),
                namespace: ns.into(),
                name: name.into(),
            })
        };
        let replicas = |o: &Value| {
            o.pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1)
        };
        let (kind, name) = owner_of(pod)?;
        match kind.as_str() {
            "ReplicaSet" => {
                let rs = lookup("replicasets", &name)?;
                if let Some(("Deployment", deployment)) =
                    owner_of(rs).as_ref().map(|(k, n)| (k.as_str(), n.as_str()))
                    && let Some(d) = lookup("deployments", deployment)
                {
                    return Some((format!("Deployment/{deployment}"), replicas(d)));
                }
                Some((format!("ReplicaSet/{name}"), replicas(rs)))
            }
            "StatefulSet" => {
                lookup("statefulsets", &name).map(|s| (format!("StatefulSet/{name}"), replicas(s)))
            }
            _ => None,
        }
    }

    /// Prepares a watch: a snapshot or the history to replay, plus a live receiver, taken under
    /// one lock so nothing falls between them.
    pub(crate) fn watch(
        &self,
        group: &str,
        plural: &str,
        ns: Option<&str>,
        start: WatchStart,
    ) -> Result<WatchSetup, ApiError> {
        let receiver = self.sender.subscribe();
        let (snapshot, backlog) = match start {
            WatchStart::Snapshot => (self.scan(group, plural, ns).cloned().collect(), Vec::new()),
            WatchStart::After(rv) if rv < self.compacted_rv => {
                return Err(ApiError::expired(format!(
                    "too old resource version: {rv} ({})",
                    self.compacted_rv + 1
                )));
            }
            WatchStart::After(rv) => {
                // The history is ordered by resourceVersion: skip the seen part without a scan.
                let first_unseen = self.history.partition_point(|c| c.rv <= rv);
                let backlog = self
                    .history
                    .range(first_unseen..)
                    .filter(|c| c.key.group == group && c.key.plural == plural)
                    .cloned()
                    .collect();
                (Vec::new(), backlog)
            }
        };
        Ok(WatchSetup {
            snapshot,
            backlog,
            current_rv: self.rv,
            receiver,
        })
    }
}

/// Builds the object an update stores: immutable metadata kept, status kept or replaced
/// according to the target, generation bumped when anything but metadata and status changed.
fn prepare_update(
    res: &ResourceInfo,
    old: &Value,
    new: Value,
    target: Target,
) -> Result<Value, ApiError> {
    let name = meta_str(old, "name").unwrap_or_default();
    let mut result = match target {
        Target::Status => {
            let mut merged = old.clone();
            match new.get("status") {
                Some(status) => merged["status"] = status.clone(),
                None => {
                    if let Some(map) = merged.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
            merged
        }
        Target::Main | Target::All => {
            let mut replaced = new;
            if target == Target::Main && res.has_status {
                match old.get("status") {
                    Some(status) => replaced["status"] = status.clone(),
                    None => {
                        if let Some(map) = replaced.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
            }
            replaced
        }
    };
    for field in ["apiVersion", "kind"] {
        if let Some(value) = old.get(field) {
            result[field] = value.clone();
        }
    }
    let old_meta = old
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let meta = metadata_mut(&mut result);
    managed_fields::keep_when_unset(meta, &old_meta);
    for field in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
    ] {
        match old_meta.get(field) {
            Some(value) => meta.insert(field.into(), value.clone()),
            None => meta.remove(field),
        };
    }
    if pdb::is_terminating(old) {
        let before = finalizers(old);
        if let Some(added) = finalizers(&result)
            .into_iter()
            .find(|f| !before.contains(f))
        {
            return Err(ApiError::invalid(
                &res.qualified_plural(),
                name,
                &format!(
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [\"{added}\"]"
                ),
            ));
        }
    }
    if spec_part(&result) != spec_part(old) {
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        metadata_mut(&mut result).insert("generation".into(), json!(generation + 1));
    }
    Ok(result)
}

/// The API server's limit on a ConfigMap's `data` plus `binaryData` (keys and values), in bytes
/// (`k8s.io/kubernetes/pkg/apis/core/validation`, `MaxConfigMapSize`, etcd's request limit).
pub const MAX_CONFIG_MAP_BYTES: usize = 1024 * 1024;

/// Refuses a ConfigMap whose data is over [`MAX_CONFIG_MAP_BYTES`], with the real server's 422.
fn check_config_map_size(name: &str, object: &Value) -> Result<(), ApiError> {
    let mut total = 0usize;
    for field in ["data", "binaryData"] {
        if let Some(map) = object.get(field).and_then(Value::as_object) {
            for (key, value) in map {
                let text = value.as_str().map_or(0, str::len);
                // binaryData travels base64-encoded; the limit counts the bytes.
                let len = if field == "binaryData" {
                    text / 4 * 3
                } else {
                    text
                };
                total = total.saturating_add(key.len()).saturating_add(len);
            }
        }
    }
    if total > MAX_CONFIG_MAP_BYTES {
        return Err(ApiError::new(
            422,
            "Invalid",
            format!(
                "ConfigMap \"{name}\" is invalid: []: Too long: must have at most {MAX_CONFIG_MAP_BYTES} bytes"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(history_limit: usize) -> Store {
        Store::new(history_limit, Arc::new(|| jiff::Timestamp::UNIX_EPOCH))
    }

    fn configmaps() -> ResourceInfo {
        ResourceInfo::new("", "v1", "ConfigMap", "configmaps", true, false)
    }

    fn create(store: &mut Store, name: &str) -> u64 {
        let object = json!({"metadata": {"name": name}});
        let created = store.create(&configmaps(), Some("ns"), object).unwrap();
        meta_str(&created, "resourceVersion")
            .unwrap()
            .parse()
            .unwrap()
    }

    #[test]
    fn history_bounds_decide_between_replay_and_expired() {
        let mut s = store(2);
        let first = create(&mut s, "a");
        let second = create(&mut s, "b");
        let third = create(&mut s, "c");
        // The history keeps b and c: resuming after a replays both; before a is gone.
        let setup = s
            .watch("", "configmaps", None, WatchStart::After(first))
            .unwrap();
        assert_eq!(
            setup.backlog.iter().map(|c| c.rv).collect::<Vec<_>>(),
            [second, third]
        );
        assert_eq!(
            s.watch("", "configmaps", None, WatchStart::After(first - 1))
                .err()
                .map(|e| e.code),
            Some(410)
        );
        s.compact();
        assert!(
            s.watch("", "configmaps", None, WatchStart::After(third))
                .is_ok()
        );
        assert!(
            s.watch("", "configmaps", None, WatchStart::After(second))
                .is_err()
        );
    }

    #[test]
    fn timestamps_names_and_no_op_updates() {
        let mut s = store(10);
        let object = json!({"metadata": {"generateName": "web-"}, "data": {"k": "v"}});
        let created = s.create(&configmaps(), Some("ns"), object).unwrap();
        assert_eq!(
            meta_str(&created, "creationTimestamp"),
            Some("1970-01-01T00:00:00Z")
        );
        let name = meta_str(&created, "name").unwrap().to_owned();
        assert!(name.starts_with("web-") && name.len() == 9);
        let rv = s.resource_version();
        let same = s
            .update(
                &configmaps(),
                Some("ns"),
                &name,
                created.clone(),
                Target::Main,
            )
            .unwrap();
        assert_eq!((same, s.resource_version()), (created, rv));
    }
}
