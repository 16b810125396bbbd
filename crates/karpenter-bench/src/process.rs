//! The controller child process and its memory, as `/proc` reports it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, bail};

use crate::controller::CONTROLLER_NAMESPACE;

/// `VmHWM` and `VmRSS` (KiB) of a process, from `/proc/<pid>/status` (Linux only).
pub fn memory_kib(pid: u32) -> (Option<u64>, Option<u64>) {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return (None, None);
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// The controller child process: killed on drop, its log kept in the work directory.
pub(crate) struct ControllerProcess {
    child: Child,
    pub(crate) log: PathBuf,
}

impl ControllerProcess {
    pub(crate) fn spawn(
        karpenter: &Path,
        kubeconfig: &Path,
        dir: &Path,
        prefix: Option<&str>,
    ) -> anyhow::Result<Self> {
        let log = dir.join("controller.log");
        let file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut prefix = prefix.unwrap_or_default().split_whitespace();
        let mut command = match prefix.next() {
            Some(wrapper) => {
                let mut command = Command::new(wrapper);
                command.args(prefix).arg(karpenter);
                command
            }
            None => Command::new(karpenter),
        };
        let child = command
            .args(["controller", "--cloud-provider", "sim", "--kubeconfig"])
            .arg(kubeconfig)
            .args(["--log-format", "text", "--log-level", "info"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("METRICS_PORT", free_port()?.to_string())
            .env("HEALTH_PROBE_PORT", free_port()?.to_string())
            .env("POD_NAMESPACE", CONTROLLER_NAMESPACE)
            .env("POD_NAME", "karpenter-bench")
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting `{} controller`", karpenter.display()))?;
        Ok(ControllerProcess { child, log })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails when the controller has exited, naming its log.
    pub(crate) fn check_alive(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait()? {
            Some(status) => bail!(
                "the controller exited ({status}); its log: {}",
                self.log.display()
            ),
            None => Ok(()),
        }
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_read_from_proc() {
        let (peak, rss) = memory_kib(std::process::id());
        if cfg!(target_os = "linux") {
            assert!(peak.unwrap() >= rss.unwrap() && rss.unwrap() > 0);
        }
    }
}
