//! `karpenter.sh/v1alpha1`: NodeOverlay (alpha upstream, used behind the `NodeOverlay` gate).

mod nodeoverlay;

pub use nodeoverlay::*;
