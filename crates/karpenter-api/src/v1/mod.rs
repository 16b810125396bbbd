//! `karpenter.sh/v1` and `karpenter.k8s.aws/v1` types.

mod duration;
mod ec2nodeclass;
mod nodeclaim;
mod nodepool;
mod shared;

pub use duration::NillableDuration;
pub use ec2nodeclass::*;
pub use nodeclaim::*;
pub use nodepool::*;
pub use shared::*;
