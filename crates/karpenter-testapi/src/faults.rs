//! Fault injection: requests that fail with an error, or are never answered.
//!
//! A fault matches by verb and resource and fires for the next `times` matching requests. An
//! injected error is answered at once and logged; a hung request is *not applied* and never
//! answered (its response future stays pending until the client gives up and drops it), and is
//! logged in [`crate::TestApiServer::hung_requests`] instead of the request log. Watches are
//! requests like any other (`Verb::Watch`): a hung watch never sends its first event.

use crate::error::ApiError;
use crate::server::{RequestRecord, Verb};

/// What an injected fault does to a matching request.
#[derive(Debug, Clone)]
pub(crate) enum FaultEffect {
    /// Answer with this error; nothing is applied.
    Error(ApiError),
    /// Never answer; nothing is applied.
    Hang,
}

#[derive(Debug)]
pub(crate) struct Fault {
    /// Only requests of this [`crate::TestApiServer::client_named`] client (any when `None`).
    client: Option<String>,
    verb: Option<Verb>,
    resource: String,
    effect: FaultEffect,
    remaining: usize,
}

impl Fault {
    pub(crate) fn new(
        verb: Option<Verb>,
        resource: &str,
        effect: FaultEffect,
        times: usize,
    ) -> Self {
        Fault {
            client: None,
            verb,
            resource: resource.to_owned(),
            effect,
            remaining: times,
        }
    }

    /// Restricts the fault to one named client (a partitioned replica).
    pub(crate) fn for_client(mut self, client: &str) -> Self {
        self.client = Some(client.to_owned());
        self
    }

    fn matches(&self, record: &RequestRecord) -> bool {
        let client_matches = self
            .client
            .as_ref()
            .is_none_or(|c| record.client.as_ref() == Some(c));
        let resource_matches = self.resource.is_empty()
            || self.resource == record.resource
            || record
                .subresource
                .as_ref()
                .is_some_and(|sub| self.resource == format!("{}/{sub}", record.resource));
        client_matches
            && self.remaining > 0
            && self.verb.is_none_or(|v| v == record.verb)
            && resource_matches
    }
}

/// The injected faults, oldest first; the first matching one fires.
#[derive(Debug, Default)]
pub(crate) struct Faults(Vec<Fault>);

impl Faults {
    pub(crate) fn push(&mut self, fault: Fault) {
        self.0.push(fault);
    }

    /// The effect for this request, if a fault matches (and one use of it is spent).
    pub(crate) fn take(&mut self, record: &RequestRecord) -> Option<FaultEffect> {
        let fault = self.0.iter_mut().find(|f| f.matches(record))?;
        fault.remaining -= 1;
        let effect = fault.effect.clone();
        self.0.retain(|f| f.remaining > 0);
        Some(effect)
    }

    /// Drops every pending fault (a healed server).
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}
