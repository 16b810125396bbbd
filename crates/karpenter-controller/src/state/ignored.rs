//! Objects the API server accepted but karpenter-rs cannot decode (e.g. a NodePool whose
//! `expireAfter` matches the CRD pattern but overflows a duration). Each is decoded on its own,
//! so one bad object never fails the watch of its kind: it is logged when seen, kept out of the
//! state, counted in `karpenter_cluster_state_ignored_objects{kind}` and reported with a Warning
//! event on the object, while everything else keeps working.

use std::sync::Arc;

use crate::context::Context;
use crate::events::{EventRecord, EventType};

use karpenter_core::state::ignored::{IgnoredObject, kind_label};

/// Event reason on an object karpenter-rs skips.
pub const REASON_FAILED_TO_DECODE: &str = "FailedToDecode";

/// Refreshes the ignored-objects gauge and (leader only) publishes a Warning event on each
/// skipped object; the event recorder de-duplicates repeats.
pub async fn report(ctx: &Arc<Context>) {
    let ignored: Vec<IgnoredObject> = {
        let state = ctx.state.read();
        for (kind, count) in state.ignored_objects().counts() {
            ctx.metrics
                .cluster_state_ignored_objects
                .get_or_create(&crate::metrics::KindLabels {
                    kind: kind_label(kind),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        state.ignored_objects().iter().cloned().collect()
    };
    // Events are writes: only the leader publishes them.
    let Some(leader) = ctx.leader() else {
        return;
    };
    for object in ignored {
        leader
            .events
            .publish(EventRecord {
                involved: object.reference.clone(),
                event_type: EventType::Warning,
                reason: REASON_FAILED_TO_DECODE.into(),
                message: format!(
                    "karpenter-rs cannot decode this {} and ignores it: {}",
                    kind_label(object.kind),
                    object.error
                ),
            })
            .await;
    }
}
