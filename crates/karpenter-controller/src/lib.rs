//! The controller runtime: watchers feeding one in-memory cluster state, the provisioner, the
//! NodePool controllers, leader election, metrics, health probes, events and logging.
//! Cloud providers plug in through [`karpenter_core::cloud_provider::CloudProvider`] and bring
//! their background tasks through [`run::ProviderTask`].
//!
//! Every replica runs the watchers and keeps its state warm; only the leader writes (see
//! [`leader`] for the election and [`writes`] for the one gate: writes need a
//! [`writes::Leader`], which only the leader gets). Controllers get an `Arc<Context>` ([`context::Context`]) holding everything they
//! share. Time comes from a [`karpenter_core::clock::Clock`] and tokio timers, so tests drive it
//! with `#[tokio::test(start_paused = true)]`.

pub mod backoff;
pub mod capacitybuffer;
pub mod context;
pub mod disruption;
pub mod events;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod nodeclaim;
pub mod nodeoverlay;
pub mod nodepool;
pub mod provisioning;
pub mod run;
pub mod server;
pub mod settings;
pub mod state;
pub mod termination;
pub mod timeouts;
pub mod workers;
pub mod writes;

pub use context::{Context, TokioClock};
/// Who the controller is on the wire (User-Agent, field manager); the binary identifies its client
/// with it.
pub use karpenter_kube::identity;
pub use settings::Settings;

/// Errors of the controller runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API request failed: {action}")]
    Kube {
        action: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("cloud provider call failed: {action}")]
    Cloud {
        action: String,
        #[source]
        source: karpenter_core::cloud_provider::CloudError,
    },
    #[error("invalid setting {name}: {message}")]
    Settings { name: &'static str, message: String },
    #[error("failed to serve {what} on {address}")]
    Serve {
        what: &'static str,
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("controller replica failed: {0}")]
    ControllerFailed(String),
    #[error("failed to set up logging: {0}")]
    Logging(String),
}

impl Error {
    pub(crate) fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Error::Kube {
            action: action.into(),
            source: Box::new(source),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
