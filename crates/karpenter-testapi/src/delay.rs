//! Late answers: a matching request is applied at once (stored, watch events sent) but its
//! response is held back for a while, like an answer lost in a slow network while the watch
//! stream is fast. Lets tests reproduce "the create response arrives after the watch event".

use std::sync::Mutex;
use std::time::Duration;

use crate::server::{RequestRecord, TestApiServer, Verb};

struct Delay {
    verb: Option<Verb>,
    resource: String,
    duration: Duration,
    remaining: usize,
}

impl Delay {
    fn matches(&self, record: &RequestRecord) -> bool {
        let resource_matches = self.resource.is_empty()
            || self.resource == record.resource
            || record
                .subresource
                .as_ref()
                .is_some_and(|sub| self.resource == format!("{}/{sub}", record.resource));
        self.remaining > 0 && self.verb.is_none_or(|v| v == record.verb) && resource_matches
    }
}

/// The pending response delays of one server.
#[derive(Default)]
pub(crate) struct Delays {
    pending: Mutex<Vec<Delay>>,
}

impl Delays {
    /// How long to hold the response to `record`, consuming one use of the first matching delay.
    pub(crate) fn take(&self, record: &RequestRecord) -> Option<Duration> {
        let mut pending = karpenter_kube::lock(&self.pending);
        let delay = pending.iter_mut().find(|d| d.matches(record))?;
        delay.remaining -= 1;
        let duration = delay.duration;
        pending.retain(|d| d.remaining > 0);
        Some(duration)
    }
}

impl TestApiServer {
    /// Applies the next `times` matching requests at once but answers each only after `duration`
    /// (a tokio sleep, so virtual time under a paused clock). `verb` and `resource` match as in
    /// [`TestApiServer::inject_error`]; watches are never delayed.
    pub fn delay_response(
        &self,
        verb: Option<Verb>,
        resource: &str,
        duration: Duration,
        times: usize,
    ) {
        karpenter_kube::lock(&self.inner.delays.pending).push(Delay {
            verb,
            resource: resource.to_string(),
            duration,
            remaining: times,
        });
    }
}
