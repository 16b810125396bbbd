//! Carrying out a disruption [`Command`](super::Command) (issue 33): one pure phase machine the
//! controller executes against the API server and `simulate --disruption` applies in virtual
//! time, so the simulation predicts what the controller does.
//!
//! Each phase is a function of what is observed now and `now`; it returns the steps to take and
//! the instant to look again. The caller performs the steps (API writes, or edits of the
//! simulated cluster), observes again and asks again. No I/O, no clock reads, no memory between
//! calls beyond what the caller observes — a restarted controller picks up where it was.
//!
//! - [`command`]: upstream's orchestration queue — mark (taint) the candidates, create the
//!   replacements, wait for them to initialize until a deadline, roll back on timeout or
//!   failure, delete the candidates' NodeClaims;
//! - [`termination`]: upstream's node termination controller — evict pods in drain order
//!   (tiers, do-not-disrupt, PDBs through [`pdb`]), force-delete what the
//!   `terminationGracePeriod` deadline demands, ignore pods stuck terminating, wait out the
//!   minimum drain time, terminate the instance, release the Node;
//! - [`pdb`]: PodDisruptionBudget counts and the Eviction API's verdict on one pod.

pub mod command;
pub mod pdb;
pub mod termination;

#[cfg(test)]
mod properties;

pub use command::{
    CandidateView, CommandPlan, CommandStep, CommandView, Failure, Marking, ReplacementView,
    replacement_timeout,
};
pub use termination::{InstanceView, NodeView, TerminationPlan, TerminationStep};

use jiff::Timestamp;

/// The earlier of two optional instants.
fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
