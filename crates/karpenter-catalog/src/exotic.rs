//! Upstream's "exotic" instance-type filter. It is a **launch-time** filter
//! (`pkg/providers/instance/filter/filter.go`, applied after dropping incompatible and unavailable
//! offerings, karpenter-aws.md §3.5), not a catalogue one: the scheduler still sees metal and
//! accelerator types as options (so a pod asking for a GPU gets one), but CreateFleet is given
//! only the generic ones whenever the NodeClaim's options contain any.

use karpenter_api::well_known as wk;
use karpenter_core::instance_type::InstanceType;
use karpenter_core::resources;

/// Resources whose presence makes a type exotic.
pub const ACCELERATOR_RESOURCES: [&str; 5] = [
    resources::NVIDIA_GPU,
    resources::AMD_GPU,
    resources::HABANA_GAUDI,
    resources::AWS_NEURON,
    resources::AWS_NEURON_CORE,
];

/// Bare metal (`instance-size` contains `metal`) or with GPUs / accelerators.
pub fn is_exotic(instance_type: &InstanceType) -> bool {
    let metal = instance_type
        .labels
        .get(wk::AWS_INSTANCE_SIZE_LABEL)
        .is_some_and(|size| size.contains("metal"));
    metal
        || ACCELERATOR_RESOURCES
            .iter()
            .any(|r| !instance_type.capacity.get(r).is_zero())
}

/// Keeps the non-exotic items when there is any; otherwise (only metal/accelerator types fit, or
/// the NodeClaim asked for them) keeps everything.
pub fn prefer_generic<T>(items: &mut Vec<T>, instance_type: impl Fn(&T) -> &InstanceType) {
    if items.iter().any(|item| !is_exotic(instance_type(item))) {
        items.retain(|item| !is_exotic(instance_type(item)));
    }
}
