//! A real Kubernetes control plane for tests: etcd, `kube-apiserver`, `kube-controller-manager` and
//! `kube-scheduler`, found through `KUBEBUILDER_ASSETS` (controller-runtime's envtest convention: a
//! directory holding those binaries), and the `karpenter` controller as a child process on it.
//!
//! One test binary starts its own private instances (two by default, [`instances`]), on free
//! loopback ports in temporary directories, when a test asks for one ([`cluster`]). A watchdog
//! process stops each and removes its
//! directory when the test binary exits, however it exits (end of `main`, panic, Ctrl-C, kill):
//! statics are never dropped, so the watchdog polls the test process instead of relying on `Drop`.
//!
//! A test has an instance to itself while it runs: a karpenter controller acts on every NodePool
//! and Node of the cluster, so two tests with their own controllers would fight over them.
//! [`cluster`] returns a [`Cluster`] that holds the instance for the test, in a fresh namespace, after
//! removing what an earlier test left (its namespaces, NodePools, NodeClaims, Nodes, NodeClasses).
//!
//! Without the assets, [`cluster`] prints `skipped: no control plane (KUBEBUILDER_ASSETS)` and
//! returns `None` (the test passes without checking anything); with `CI=true` the absence panics,
//! so CI can never pass by skipping. The scripts that start and stop the instance are in `k8s/`
//! (copied from the project's shared control-plane package; they only need `openssl` and `curl`).

mod cleanup;
mod karpenter;
mod wait;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Config};
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use karpenter::{Karpenter, KarpenterOptions};
pub use wait::eventually;

/// The label every namespace a test gets carries, so the next test's cleanup finds it.
pub const OWNED_LABEL: &str = "karpenter-envtest/owned";

/// The binaries a control plane needs in `KUBEBUILDER_ASSETS`.
pub const BINARIES: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// What can go wrong starting or talking to the control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("KUBEBUILDER_ASSETS={dir}: missing {binary}")]
    MissingBinary { dir: PathBuf, binary: &'static str },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("start.sh failed ({status}): {stderr}")]
    Start { status: String, stderr: String },
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Crd { path: PathBuf, message: String },
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout { what: String, after: Duration },
    #[error("the control plane did not start earlier in this test binary: {0}")]
    EarlierStart(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The control-plane binaries' directory from `KUBEBUILDER_ASSETS`, or `None` when it is unset.
pub fn assets_dir() -> Result<Option<PathBuf>> {
    let Some(dir) = std::env::var_os("KUBEBUILDER_ASSETS").filter(|d| !d.is_empty()) else {
        return Ok(None);
    };
    let dir = PathBuf::from(dir);
    for binary in BINARIES {
        if !dir.join(binary).is_file() {
            return Err(Error::MissingBinary { dir, binary });
        }
    }
    Ok(Some(dir))
}

fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("k8s")
}

/// A running control plane: its directory (kubeconfig, logs), API server URL and version.
#[derive(Debug)]
pub struct ControlPlane {
    dir: PathBuf,
    kubeconfig: PathBuf,
    server: String,
    version: String,
    crds_applied: AtomicBool,
}

impl ControlPlane {
    /// Starts an instance in a new temporary directory, with a watchdog that stops it when this
    /// process exits.
    fn start(assets: &Path) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "karpenter-envtest-{}-{}",
            std::process::id(),
            unique_suffix()
        ));
        std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
            what: format!("creating {}", dir.display()),
            source,
        })?;
        let output = Command::new("bash")
            .arg(scripts_dir().join("start.sh"))
            .arg(&dir)
            .env("KUBEBUILDER_ASSETS", assets)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| Error::Io {
                what: "running k8s/start.sh".into(),
                source,
            })?;
        // The watchdog first: even a failed start may have left processes behind.
        spawn_watchdog(&dir)?;
        if !output.status.success() {
            // Stop what did start now rather than at exit: a retry follows.
            let _ = Command::new("bash")
                .arg(scripts_dir().join("stop.sh"))
                .arg(&dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            return Err(Error::Start {
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        let kubeconfig = dir.join("kubeconfig");
        let env = std::fs::read_to_string(dir.join("env")).map_err(|source| Error::Io {
            what: format!("reading {}/env", dir.display()),
            source,
        })?;
        let server = env
            .lines()
            .find_map(|l| l.strip_prefix("APISERVER="))
            .unwrap_or_default()
            .to_string();
        Ok(Self {
            dir,
            kubeconfig,
            server,
            version: String::new(),
            crds_applied: AtomicBool::new(false),
        })
    }

    /// The admin kubeconfig (`system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The API server's `gitVersion`, e.g. `v1.36.2`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The instance's directory (`logs/`, `kubeconfig`, `pki/`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new client (one per test: a kube client's background tasks belong to the runtime that
    /// made it, and each `#[tokio::test]` has its own).
    pub async fn client(&self) -> Result<Client> {
        client_for(&self.kubeconfig).await
    }
}

async fn client_for(kubeconfig: &Path) -> Result<Client> {
    let text = std::fs::read_to_string(kubeconfig).map_err(|source| Error::Io {
        what: format!("reading {}", kubeconfig.display()),
        source,
    })?;
    let parsed: kube::config::Kubeconfig =
        serde_saphyr::from_str(&text).map_err(|err| Error::Kubeconfig {
            path: kubeconfig.to_path_buf(),
            message: err.to_string(),
        })?;
    let config = Config::from_custom_kubeconfig(parsed, &Default::default())
        .await
        .map_err(|err| Error::Kubeconfig {
            path: kubeconfig.to_path_buf(),
            message: err.to_string(),
        })?;
    Client::try_from(config).map_err(|source| Error::Kube {
        what: "building a client".into(),
        source,
    })
}

/// `bash -c 'wait for PID; stop.sh DIR'` in its own session, so neither Ctrl-C nor the test
/// harness's exit reaches it before it has stopped the instance.
fn spawn_watchdog(dir: &Path) -> Result<()> {
    let script = r#"while kill -0 "$1" 2>/dev/null; do sleep 0.5; done; exec bash "$2" "$3""#;
    Command::new("setsid")
        .args(["bash", "-c", script, "watchdog"])
        .arg(std::process::id().to_string())
        .arg(scripts_dir().join("stop.sh"))
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|source| Error::Io {
            what: "starting the control plane's watchdog (setsid bash)".into(),
            source,
        })?;
    Ok(())
}

fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (u64::from(nanos) << 16) | (NEXT.fetch_add(1, Ordering::Relaxed) & 0xffff)
}

/// What the tests of one binary install once on their control plane.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// Directories or files of CustomResourceDefinition manifests, applied (server-side) and
    /// waited for until Established.
    pub crds: Vec<PathBuf>,
}

/// The instances of this test binary: at most [`instances`] of them, started when a test needs
/// one and none is idle, each used by one test at a time.
struct Pool {
    idle: std::sync::Mutex<Vec<&'static ControlPlane>>,
    turns: Arc<Semaphore>,
    /// The first failure to start: every later test reports it instead of trying again.
    failed: OnceLock<String>,
}

/// How many instances a test binary runs side by side: `KARPENTER_ENVTEST_INSTANCES`, else 2.
/// Each holds ~500 MB; the tests mostly wait on the cluster, so two halve the wall time on 2 cores.
pub fn instances() -> usize {
    std::env::var("KARPENTER_ENVTEST_INSTANCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(2)
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        idle: std::sync::Mutex::new(Vec::new()),
        turns: Arc::new(Semaphore::new(instances())),
        failed: OnceLock::new(),
    })
}

/// How often one instance's start is tried before the failure stands for the whole binary.
const START_ATTEMPTS: u32 = 3;

fn start_plane(assets: &Path) -> Result<&'static ControlPlane> {
    let pool = pool();
    if let Some(err) = pool.failed.get() {
        return Err(Error::EarlierStart(err.clone()));
    }
    // A start can lose a port to another process between the pick and the bind: try again
    // (new ports) before giving up for the whole binary.
    let mut started = Err(Error::EarlierStart(String::new()));
    for attempt in 1..=START_ATTEMPTS {
        started = ControlPlane::start(assets).and_then(|mut plane| {
            plane.version = server_version(&plane.kubeconfig)?;
            Ok(plane)
        });
        match &started {
            Err(err) if attempt < START_ATTEMPTS => {
                eprintln!("control plane start {attempt}/{START_ATTEMPTS} failed, retrying: {err}");
            }
            _ => break,
        }
    }
    match started {
        Ok(plane) => {
            eprintln!(
                "real control plane: Kubernetes {} at {} (etcd, kube-apiserver, kube-controller-manager, kube-scheduler from {})",
                plane.version,
                plane.server,
                assets.display()
            );
            // Lives as long as the test binary; the watchdog stops the processes.
            Ok(Box::leak(Box::new(plane)))
        }
        Err(err) => {
            let _ = pool.failed.set(err.to_string());
            Err(err)
        }
    }
}

/// The version from `/version`, on a runtime of its own (the caller's may be any test's).
fn server_version(kubeconfig: &Path) -> Result<String> {
    let kubeconfig = kubeconfig.to_path_buf();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| Error::Io {
                what: "a runtime for /version".into(),
                source,
            })?;
        runtime.block_on(async {
            let client = client_for(&kubeconfig).await?;
            let info = client
                .apiserver_version()
                .await
                .map_err(|source| Error::Kube {
                    what: "GET /version".into(),
                    source,
                })?;
            Ok(info.git_version)
        })
    })
    .join()
    .unwrap_or_else(|_| {
        Err(Error::Start {
            status: "panicked".into(),
            stderr: "reading /version".into(),
        })
    })
}

/// The message of a test that runs without a control plane.
pub const SKIPPED: &str = "skipped: no control plane (KUBEBUILDER_ASSETS)";

/// A control plane for one test, in a fresh namespace named after `test` (with a suffix), after
/// the previous test's objects are gone; `None` (and [`SKIPPED`] printed) when
/// `KUBEBUILDER_ASSETS` is unset. Panics when it is unset and `CI=true`, or when the instance
/// cannot start.
pub async fn cluster(test: &str, setup: &Setup) -> Option<Cluster> {
    let assets = match assets_dir() {
        Ok(Some(dir)) => dir,
        Ok(None) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "{test}: no control plane (KUBEBUILDER_ASSETS) and CI=true: the real-cluster tests must run in CI"
                );
            }
            eprintln!("{test}: {SKIPPED}");
            return None;
        }
        Err(err) => panic!("{test}: {err}"),
    };
    let pool = pool();
    let turn = match pool.turns.clone().acquire_owned().await {
        Ok(turn) => turn,
        Err(err) => panic!("{test}: {err}"),
    };
    let idle = pool.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let plane = match idle {
        Some(plane) => plane,
        // Blocking for a start (seconds) is fine: the test waits for it anyway.
        None => match start_plane(&assets) {
            Ok(plane) => plane,
            Err(err) => panic!("{test}: {err}"),
        },
    };
    match Cluster::prepare(test, plane, setup, turn).await {
        Ok(cluster) => Some(cluster),
        Err(err) => panic!("{test}: preparing the control plane: {err}"),
    }
}

/// One test's hold on the control plane: a client, its own namespace, and the turn (released on
/// drop, after which the next test cleans up).
pub struct Cluster {
    plane: &'static ControlPlane,
    client: Client,
    namespace: String,
    _turn: OwnedSemaphorePermit,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Back to the pool before the turn is released (fields drop after this body).
        pool()
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.plane);
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("server", &self.plane.server)
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl Cluster {
    async fn prepare(
        test: &str,
        plane: &'static ControlPlane,
        setup: &Setup,
        turn: OwnedSemaphorePermit,
    ) -> Result<Self> {
        let client = plane.client().await?;
        if !plane.crds_applied.load(Ordering::Acquire) {
            apply_crds(&client, &setup.crds).await?;
            plane.crds_applied.store(true, Ordering::Release);
        }
        cleanup::remove_leftovers(&client).await?;
        let namespace = namespace_name(test);
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {OWNED_LABEL: "true"}}
        }))
        .map_err(|err| Error::Kubeconfig {
            path: plane.kubeconfig.clone(),
            message: err.to_string(),
        })?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .map_err(|source| Error::Kube {
                what: format!("creating namespace {namespace}"),
                source,
            })?;
        Ok(Self {
            plane,
            client,
            namespace,
            _turn: turn,
        })
    }

    /// A client for this test.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The test's own namespace (also the controller's `POD_NAMESPACE`: its lease, ledger, events).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The control plane (kubeconfig, version, logs).
    pub fn plane(&self) -> &ControlPlane {
        self.plane
    }

    /// Starts `karpenter controller` (the binary at `binary`) on this cluster.
    pub fn start_karpenter(&self, binary: &Path, options: &KarpenterOptions) -> Result<Karpenter> {
        Karpenter::start(binary, self, options)
    }
}

/// A DNS-1123 label: the test's name (lowercase, `-` for anything else), a suffix that tells
/// runs apart.
fn namespace_name(test: &str) -> String {
    let mut base: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    base.truncate(40);
    let base = base.trim_matches('-');
    format!("{base}-{:x}", unique_suffix() & 0xffff_ffff)
}

async fn apply_crds(client: &Client, paths: &[PathBuf]) -> Result<()> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let mut names = Vec::new();
    for path in paths {
        let files = if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|source| Error::Io {
                    what: format!("reading {}", path.display()),
                    source,
                })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
                .collect();
            files.sort();
            files
        } else {
            vec![path.clone()]
        };
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(|source| Error::Io {
                what: format!("reading {}", file.display()),
                source,
            })?;
            let crd: CustomResourceDefinition =
                serde_saphyr::from_str(&text).map_err(|err| Error::Crd {
                    path: file.clone(),
                    message: err.to_string(),
                })?;
            let name = crd.metadata.name.clone().unwrap_or_default();
            api.patch(
                &name,
                &PatchParams::apply("karpenter-envtest").force(),
                &Patch::Apply(&crd),
            )
            .await
            .map_err(|source| Error::Kube {
                what: format!("applying {} from {}", name, file.display()),
                source,
            })?;
            names.push(name);
        }
    }
    for name in names {
        let api = api.clone();
        eventually(
            &format!("CRD {name} Established"),
            Duration::from_secs(30),
            || {
                let api = api.clone();
                let name = name.clone();
                async move {
                    let crd = api.get(&name).await.ok()?;
                    crd.status?
                        .conditions?
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                        .then_some(())
                }
            },
        )
        .await?;
    }
    Ok(())
}
