//! `karpenter controller` as a child process on the test's cluster: the binary a user runs,
//! configured through the environment variables the Helm chart sets.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::{Cluster, Error, Result};

/// How to run the controller; every field has upstream's default unless a test says otherwise.
#[derive(Debug, Clone)]
pub struct KarpenterOptions {
    /// `--cloud-provider` (`sim`).
    pub cloud_provider: String,
    /// A name for the replica (`POD_NAME`, log file).
    pub name: String,
    /// More environment variables (`FEATURE_GATES`, `BATCH_IDLE_DURATION`, ...).
    pub env: Vec<(String, String)>,
}

impl Default for KarpenterOptions {
    fn default() -> Self {
        Self {
            cloud_provider: "sim".into(),
            name: "karpenter".into(),
            env: Vec::new(),
        }
    }
}

impl KarpenterOptions {
    /// Names the replica (`POD_NAME`, its Lease identity, and its log file's name).
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
}

/// The running controller; killed on drop, with the tail of its log printed if the test failed.
#[derive(Debug)]
pub struct Karpenter {
    child: Child,
    log: PathBuf,
    metrics_port: u16,
}

pub(crate) fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|source| Error::Io {
        what: "finding a free loopback port".into(),
        source,
    })?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|source| Error::Io {
            what: "finding a free loopback port".into(),
            source,
        })
}

impl Karpenter {
    pub(crate) fn start(
        binary: &Path,
        cluster: &Cluster,
        options: &KarpenterOptions,
    ) -> Result<Self> {
        let log = cluster.plane().dir().join("logs").join(format!(
            "karpenter-{}-{}.log",
            cluster.namespace(),
            options.name
        ));
        let io = |what: &str| {
            let what = format!("{what} ({})", log.display());
            move |source| Error::Io { what, source }
        };
        let file = File::create(&log).map_err(io("creating the controller's log"))?;
        let metrics_port = free_port()?;
        let mut command = Command::new(binary);
        command
            .args(["controller", "--cloud-provider", &options.cloud_provider])
            .arg("--kubeconfig")
            .arg(cluster.plane().kubeconfig())
            .args(["--log-format", "text"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("METRICS_PORT", metrics_port.to_string())
            .env("HEALTH_PROBE_PORT", free_port()?.to_string())
            .env("POD_NAMESPACE", cluster.namespace())
            .env("POD_NAME", &options.name);
        for (key, value) in &options.env {
            command.env(key, value);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(
                file.try_clone()
                    .map_err(io("opening the controller's log"))?,
            )
            .stderr(file)
            .spawn()
            .map_err(io(&format!("starting {}", binary.display())))?;
        Ok(Self {
            child,
            log,
            metrics_port,
        })
    }

    /// The controller's Prometheus port on 127.0.0.1.
    pub fn metrics_port(&self) -> u16 {
        self.metrics_port
    }

    /// The controller's process id (benchmarks read its memory and CPU from `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills it now (a crash, as far as the cluster can tell).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Karpenter {
    fn drop(&mut self) {
        self.kill();
        // The instance's directory goes when the test binary exits: keep the whole log where
        // `KARPENTER_ENVTEST_KEEP_LOGS` says, to read after a failure.
        if let Some(dir) = std::env::var_os("KARPENTER_ENVTEST_KEEP_LOGS")
            && let Some(name) = self.log.file_name()
        {
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::copy(&self.log, std::path::Path::new(&dir).join(name));
        }
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let from = lines.len().saturating_sub(80);
            eprintln!(
                "--- {} (last {} lines) ---",
                self.log.display(),
                lines.len() - from
            );
            for line in &lines[from..] {
                eprintln!("{line}");
            }
        }
    }
}
