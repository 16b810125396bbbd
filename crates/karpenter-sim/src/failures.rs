//! Launch failures declared on an EC2NodeClass (issue 33): the annotation
//! [`INSUFFICIENT_CAPACITY_ANNOTATION`] lists the offerings the sim cloud has no capacity for
//! when a NodeClaim of that NodeClass launches. The controller's launches (`create`) and
//! `simulate`'s ([`crate::SimCloudProvider::launch_choice`]) read the same annotation through
//! the same code, so a replacement that fails to launch fails in both, and both roll its
//! command back.
//!
//! The value is a comma-separated list of offering patterns `<capacity-type>:<instance-type>:<zone>`
//! (the key `set_insufficient_capacity` and the ledger's unavailable offerings use), each part
//! a name or `*`; a lone `*` is every offering. Example: `on-demand:m5.large:*,spot:*:us-east-1a`.

use karpenter_api::v1::EC2NodeClass;
use karpenter_core::cloud_provider::CloudError;

/// The EC2NodeClass annotation listing the offerings whose launches fail.
pub const INSUFFICIENT_CAPACITY_ANNOTATION: &str = "sim.karpenter.sh/insufficient-capacity";

/// One `<capacity-type>:<instance-type>:<zone>` pattern; `None` parts match anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfferingPattern {
    capacity_type: Option<String>,
    instance_type: Option<String>,
    zone: Option<String>,
}

impl OfferingPattern {
    /// Whether the offering of `instance_type` in `zone` with `capacity_type` matches.
    pub fn matches(&self, capacity_type: &str, instance_type: &str, zone: &str) -> bool {
        let part =
            |pattern: &Option<String>, value: &str| pattern.as_deref().is_none_or(|p| p == value);
        part(&self.capacity_type, capacity_type)
            && part(&self.instance_type, instance_type)
            && part(&self.zone, zone)
    }
}

/// The offerings `node_class` declares out of capacity (empty without the annotation). A
/// malformed entry is an error naming the NodeClass, the annotation and the entry.
pub fn declared(node_class: &EC2NodeClass) -> Result<Vec<OfferingPattern>, CloudError> {
    let Some(value) = node_class
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INSUFFICIENT_CAPACITY_ANNOTATION))
    else {
        return Ok(Vec::new());
    };
    let name = node_class.metadata.name.as_deref().unwrap_or_default();
    value
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| parse(entry).ok_or_else(|| invalid(name, entry)))
        .collect()
}

fn parse(entry: &str) -> Option<OfferingPattern> {
    let part = |s: &str| (s != "*").then(|| s.to_string());
    if entry == "*" {
        return Some(OfferingPattern {
            capacity_type: None,
            instance_type: None,
            zone: None,
        });
    }
    let parts: Vec<&str> = entry.split(':').collect();
    let [capacity_type, instance_type, zone] = parts.as_slice() else {
        return None;
    };
    if [capacity_type, instance_type, zone]
        .iter()
        .any(|p| p.is_empty())
    {
        return None;
    }
    Some(OfferingPattern {
        capacity_type: part(capacity_type),
        instance_type: part(instance_type),
        zone: part(zone),
    })
}

fn invalid(node_class: &str, entry: &str) -> CloudError {
    CloudError::NodeClassNotReady(format!(
        "EC2NodeClass {node_class}: annotation {INSUFFICIENT_CAPACITY_ANNOTATION}: entry {entry:?} is not \
         <capacity-type>:<instance-type>:<zone> (each part a name or *) or *"
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn class(annotation: Option<&str>) -> EC2NodeClass {
        let mut metadata = serde_json::json!({"name": "default"});
        if let Some(value) = annotation {
            metadata["annotations"] = serde_json::json!({INSUFFICIENT_CAPACITY_ANNOTATION: value});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": metadata,
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}]}
        }))
        .unwrap()
    }

    #[test]
    fn without_the_annotation_nothing_fails() {
        assert!(declared(&class(None)).unwrap().is_empty());
    }

    #[test]
    fn patterns_match_by_part_and_a_lone_star_matches_everything() {
        let patterns = declared(&class(Some("on-demand:m5.large:*, spot:*:us-east-1a"))).unwrap();
        let fails = |ct, it, zone| patterns.iter().any(|p| p.matches(ct, it, zone));
        assert!(fails("on-demand", "m5.large", "us-east-1b"));
        assert!(!fails("on-demand", "m5.xlarge", "us-east-1b"));
        assert!(fails("spot", "c5.large", "us-east-1a"));
        assert!(!fails("spot", "c5.large", "us-east-1b"));
        let all = declared(&class(Some("*"))).unwrap();
        assert!(all[0].matches("reserved", "x", "y"));
    }

    #[test]
    fn a_malformed_entry_names_the_nodeclass_the_annotation_and_the_entry() {
        let err = declared(&class(Some("on-demand:m5.large")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("EC2NodeClass default"), "{err}");
        assert!(err.contains(INSUFFICIENT_CAPACITY_ANNOTATION), "{err}");
        assert!(err.contains("\"on-demand:m5.large\""), "{err}");
    }
}
