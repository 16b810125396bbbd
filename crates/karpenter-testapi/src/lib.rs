//! An in-process Kubernetes API server for tests and simulations: a harness, not a Kubernetes.
//!
//! [`TestApiServer`] keeps JSON objects in memory and speaks the REST + watch protocol that
//! `kube::Client`, `kube::Api<K>` and `kube::runtime::watcher` use: list/watch with
//! resourceVersions and bookmarks, get/create/replace, merge/JSON/apply patches, the status
//! subresource, deletion with finalizers and graceful pod termination, `pods/eviction` with
//! PodDisruptionBudgets, and 409/410/422/429 failures shaped as `Status` objects.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kube::Error> {
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{Api, PostParams};
//!
//! let server = karpenter_testapi::TestApiServer::new();
//! let configmaps: Api<ConfigMap> = Api::default_namespaced(server.client());
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("settings".into());
//! configmaps.create(&PostParams::default(), &cm).await?;
//! assert_eq!(server.count::<ConfigMap>(), 1);
//! # Ok(())
//! # }
//! ```
//!
//! CRDs are checked as the API server checks them ([`crd_check`]) before they are served.
//!
//! Endpoints, semantics and non-goals: `docs/testapi.md`.

pub mod crd_check;
mod delay;
mod error;
mod faults;
mod http;
mod patch;
mod pdb;
mod registry;
mod selector;
mod server;
mod store;

pub use error::ApiError;
pub use http::ResponseBody;
pub use patch::PatchKind;
pub use registry::ResourceInfo;
pub use selector::{FieldSelector, LabelSelector};
pub use server::{Builder, RequestRecord, TcpServer, TestApiServer, Verb};
pub use store::MAX_CONFIG_MAP_BYTES;
