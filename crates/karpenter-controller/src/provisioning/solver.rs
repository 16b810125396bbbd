//! The seam between the provisioner and the scheduler: the provisioner builds the scheduler's
//! input with the core pipeline ([`karpenter_core::provisioning`]) and hands it, with the pods,
//! to a [`Solver`]; the production one ([`CoreScheduler`]) is the core's `solve`, tests may plug
//! in their own.

use std::sync::Arc;

use karpenter_core::pod::Pod;
use karpenter_core::scheduling::{SchedulerInput, SchedulingResults, UnschedulablePod};

/// A scheduling simulation. Synchronous and pure: it must not do I/O. The pods are the cluster
/// state's own (shared), not copies.
pub trait Solver: Send + Sync {
    fn solve(&self, input: SchedulerInput, pods: &[Arc<Pod>]) -> SchedulingResults;
}

/// Upstream's scheduler (`karpenter_core::provisioning::solve`), the provisioner's [`Solver`].
#[derive(Clone, Copy, Debug, Default)]
pub struct CoreScheduler;

impl Solver for CoreScheduler {
    fn solve(&self, input: SchedulerInput, pods: &[Arc<Pod>]) -> SchedulingResults {
        karpenter_core::provisioning::solve(input, pods)
    }
}

/// A solver that places nothing and says so. The controller uses [`CoreScheduler`]; this one is
/// for tests of everything around provisioning that must not create NodeClaims.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoScheduler;

impl Solver for NoScheduler {
    fn solve(&self, _input: SchedulerInput, pods: &[Arc<Pod>]) -> SchedulingResults {
        SchedulingResults {
            unschedulable: pods
                .iter()
                .enumerate()
                .map(|(pod, p)| UnschedulablePod {
                    pod,
                    namespace: karpenter_core::pod::namespace(p).to_string(),
                    name: karpenter_core::pod::name(p).to_string(),
                    explanation: "no scheduler is configured (NoScheduler)".into(),
                })
                .collect(),
            ..SchedulingResults::default()
        }
    }
}
