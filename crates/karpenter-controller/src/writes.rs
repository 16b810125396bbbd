//! The one gate on writes: only the leader writes to the API server and the cloud.
//!
//! Every replica reads (watchers, listings, the cloud's catalogue), so [`Context`]'s `client`
//! is a read client: a mutating request sent through it is refused before it leaves the process
//! ([`NotLeader`]), and its `cloud` ([`CloudReads`]) has no `create` or `delete`. What writes
//! takes a [`Leader`] instead: the lease task opens a term when this replica acquires the lease
//! and closes it when it loses or releases it; [`Context::leader`] hands out a `Leader` for the
//! open term only, and a `Leader`'s [`writer`](Leader::writer) client and
//! [`cloud_writes`](Leader::cloud_writes) refuse once their term is closed — also a term taken
//! again later, since it is a new one. So a controller cannot write without having checked
//! leadership, and a write started just before the lease was lost does not go out after it.
//! (The lease itself is written through the raw client, which only the election holds.)

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

use http::{Method, Request, Response};
use karpenter_api::v1::EC2NodeClass;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_core::cloud_provider::{
    CapacityOverlay, CloudError, CloudProvider, DriftReason, NodeClassKind, RepairPolicy,
};
use karpenter_core::instance_type::InstanceType;
use kube::client::Body;
use tokio::sync::watch;

use crate::context::Context;

/// A leadership term: the n-th time this replica acquired the lease (0 is never a term).
pub type Term = u64;

/// Why a write was refused.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}: only the leader writes")]
pub struct NotLeader(&'static str);

/// The terms of this replica as the lease task opens and closes them: `Some(term)` while it
/// leads.
pub(crate) struct Terms {
    tx: watch::Sender<Option<Term>>,
    /// The last term opened, so a term taken again is a new one.
    opened: AtomicU64,
    /// The writer client of the open term, built once per term (a client spawns its buffer
    /// task, so not once per [`Leader`]).
    writer: Mutex<Option<(Term, kube::Client)>>,
}

impl Terms {
    /// A replica leading from the start (leader election disabled) begins in term 1.
    pub(crate) fn new(leading: bool) -> Self {
        Terms {
            tx: watch::Sender::new(leading.then_some(1)),
            opened: AtomicU64::new(u64::from(leading)),
            writer: Mutex::new(None),
        }
    }

    pub(crate) fn current(&self) -> Option<Term> {
        *self.tx.borrow()
    }

    /// Opens a new term (`true`) or closes the current one (`false`); an open term stays open.
    pub(crate) fn set_leading(&self, leading: bool) {
        self.tx.send_if_modified(|term| match (leading, *term) {
            (true, None) => {
                let opened = self.opened.fetch_add(1, Ordering::SeqCst).saturating_add(1);
                *term = Some(opened);
                true
            }
            (false, Some(_)) => {
                *term = None;
                true
            }
            _ => false,
        });
    }

    fn subscribe(&self) -> watch::Receiver<Option<Term>> {
        self.tx.subscribe()
    }

    /// The client that writes while `term` is open.
    fn writer(
        &self,
        raw: &kube::Client,
        term: Term,
        metrics: &Arc<crate::metrics::Metrics>,
    ) -> kube::Client {
        let mut cached = karpenter_kube::lock(&self.writer);
        match cached.as_ref() {
            Some((built_for, client)) if *built_for == term => client.clone(),
            _ => {
                let client = gated(raw, Allow::During(term, self.subscribe()), metrics);
                *cached = Some((term, client.clone()));
                client
            }
        }
    }
}

/// Which mutating requests a gated client lets through.
#[derive(Clone, Debug)]
enum Allow {
    /// None: the shared read client.
    Nothing,
    /// Those sent while any term is open (the event writer, which outlives terms).
    WhileLeading(watch::Receiver<Option<Term>>),
    /// Those sent while `term` is open.
    During(Term, watch::Receiver<Option<Term>>),
}

impl Allow {
    fn permits(&self) -> bool {
        match self {
            Allow::Nothing => false,
            Allow::WhileLeading(terms) => terms.borrow().is_some(),
            Allow::During(term, terms) => *terms.borrow() == Some(*term),
        }
    }
}

/// A `kube::Client` service that sends reads as they are and mutating requests only as
/// [`Allow`] says.
#[derive(Clone)]
struct Gated {
    inner: kube::Client,
    allow: Allow,
    /// client-go's `client_go_request_*` families, recorded for every request sent.
    metrics: Arc<crate::metrics::Metrics>,
}

type Sent = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

impl tower_service::Service<Request<Body>> for Gated {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Sent;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let reads = matches!(
            *request.method(),
            Method::GET | Method::HEAD | Method::OPTIONS
        );
        if !reads && !self.allow.permits() {
            let refused = kube::Error::Service(Box::new(NotLeader("kubernetes API write")));
            return Box::pin(std::future::ready(Err(refused)));
        }
        let inner = self.inner.clone();
        let metrics = self.metrics.clone();
        let call = crate::metrics::ApiCall::of(&request);
        Box::pin(async move {
            let started = std::time::Instant::now();
            let answer = inner.send(request).await;
            let code = match &answer {
                Ok(response) => response.status().as_u16().to_string(),
                Err(kube::Error::Api(status)) => status.code.to_string(),
                Err(_) => "<error>".to_string(),
            };
            metrics.record_api_call(&call, &code, started.elapsed());
            answer
        })
    }
}

fn gated(
    client: &kube::Client,
    allow: Allow,
    metrics: &Arc<crate::metrics::Metrics>,
) -> kube::Client {
    let namespace = client.default_namespace().to_string();
    kube::Client::new(
        Gated {
            inner: client.clone(),
            allow,
            metrics: metrics.clone(),
        },
        namespace,
    )
}

/// The client every replica reads with: mutating requests are refused.
pub(crate) fn read_client(
    raw: &kube::Client,
    metrics: &Arc<crate::metrics::Metrics>,
) -> kube::Client {
    gated(raw, Allow::Nothing, metrics)
}

/// The client of the event writer: events go out while this replica leads.
pub(crate) fn events_client(
    raw: &kube::Client,
    terms: &Terms,
    metrics: &Arc<crate::metrics::Metrics>,
) -> kube::Client {
    gated(raw, Allow::WhileLeading(terms.subscribe()), metrics)
}

/// What every replica may ask the cloud: everything but launching and terminating instances.
#[derive(Clone)]
pub struct CloudReads(Arc<dyn CloudProvider>, Arc<crate::metrics::Metrics>);

impl std::fmt::Debug for CloudReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CloudReads").field(&self.0.name()).finish()
    }
}

impl CloudReads {
    pub(crate) fn new(
        cloud: Arc<dyn CloudProvider>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        CloudReads(cloud, metrics)
    }

    pub fn name(&self) -> &str {
        self.0.name()
    }

    pub async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError> {
        self.1
            .measure_cloud(self.0.name(), "Get", self.0.get(provider_id))
            .await
    }

    pub async fn list(&self) -> Result<Vec<NodeClaim>, CloudError> {
        self.1
            .measure_cloud(self.0.name(), "List", self.0.list())
            .await
    }

    pub async fn instance_types(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        self.1
            .measure_cloud(
                self.0.name(),
                "GetInstanceTypes",
                self.0.instance_types(node_pool, node_class),
            )
            .await
    }

    pub async fn is_drifted(
        &self,
        node_claim: &NodeClaim,
    ) -> Result<Option<DriftReason>, CloudError> {
        self.1
            .measure_cloud(self.0.name(), "IsDrifted", self.0.is_drifted(node_claim))
            .await
    }

    pub fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.0.repair_policies()
    }

    pub fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        self.0.supported_node_classes()
    }
}

/// The replica's context while it leads: everything in [`Context`] (through `Deref`) plus the
/// right to write, for one term. Cheap to clone; tasks that write take one.
#[derive(Clone)]
pub struct Leader {
    ctx: Arc<Context>,
    writer: kube::Client,
    term: Term,
    terms: watch::Receiver<Option<Term>>,
}

impl std::fmt::Debug for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leader").field("term", &self.term).finish()
    }
}

impl Deref for Leader {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.ctx
    }
}

impl Leader {
    /// The writer of the term open now, if this replica leads.
    pub(crate) fn of(ctx: &Arc<Context>, raw: &kube::Client, terms: &Terms) -> Option<Self> {
        let term = terms.current()?;
        Some(Leader {
            ctx: ctx.clone(),
            writer: terms.writer(raw, term, &ctx.metrics),
            term,
            terms: terms.subscribe(),
        })
    }

    /// A client whose writes go out while this term lasts (reads always do).
    pub fn writer(&self) -> kube::Client {
        self.writer.clone()
    }

    /// Launching and terminating instances, while this term lasts.
    pub fn cloud_writes(&self) -> CloudWrites<'_> {
        CloudWrites(self)
    }

    /// Whether the term is still open.
    pub fn is_current(&self) -> bool {
        *self.terms.borrow() == Some(self.term)
    }

    pub fn term(&self) -> Term {
        self.term
    }

    /// The shared context, for what needs an `Arc<Context>`.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
}

/// The cloud's writes under a [`Leader`]'s term.
#[derive(Debug)]
pub struct CloudWrites<'l>(&'l Leader);

impl CloudWrites<'_> {
    fn check(&self, what: &'static str) -> Result<&dyn CloudProvider, CloudError> {
        if self.0.is_current() {
            Ok(self.0.ctx.cloud_provider())
        } else {
            Err(CloudError::other_from(what, NotLeader(what)))
        }
    }

    pub async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
        let cloud = self.check("launch an instance")?;
        self.0
            .metrics
            .measure_cloud(cloud.name(), "Create", cloud.create(node_claim))
            .await
    }

    /// [`CloudProvider::create_with_capacity_overlay`], as [`Self::create`].
    pub async fn create_with_capacity_overlay(
        &self,
        node_claim: &NodeClaim,
        overlay: &CapacityOverlay,
    ) -> Result<NodeClaim, CloudError> {
        let cloud = self.check("launch an instance")?;
        self.0
            .metrics
            .measure_cloud(
                cloud.name(),
                "Create",
                cloud.create_with_capacity_overlay(node_claim, overlay),
            )
            .await
    }

    pub async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudError> {
        let cloud = self.check("terminate an instance")?;
        self.0
            .metrics
            .measure_cloud(cloud.name(), "Delete", cloud.delete(node_claim))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_closes_on_loss_and_a_lease_taken_again_is_a_new_term() {
        let terms = Terms::new(false);
        assert_eq!(terms.current(), None);
        terms.set_leading(true);
        assert_eq!(terms.current(), Some(1));
        terms.set_leading(true);
        assert_eq!(terms.current(), Some(1), "renewing keeps the term");
        let first = Allow::During(1, terms.subscribe());
        assert!(first.permits());
        terms.set_leading(false);
        assert_eq!(terms.current(), None);
        assert!(!first.permits(), "losing the lease revokes the term");
        terms.set_leading(true);
        assert_eq!(terms.current(), Some(2));
        assert!(
            !first.permits(),
            "a later term does not revive an earlier one"
        );
        assert!(Allow::During(2, terms.subscribe()).permits());
        assert!(!Allow::Nothing.permits());
        let events = Allow::WhileLeading(terms.subscribe());
        assert!(events.permits());
        terms.set_leading(false);
        assert!(!events.permits());
        assert_eq!(Terms::new(true).current(), Some(1));
    }
}
