//! `--instance-types FILE`: a custom catalogue for tests and what-if studies.
//!
//! ```yaml
//! instanceTypes:
//!   - name: small
//!     capacity: {cpu: "2", memory: 8Gi, pods: "110"}
//!     overhead: {cpu: 100m, memory: 512Mi}        # optional; becomes kube-reserved
//!     labels: {kubernetes.io/arch: arm64}         # optional
//!     offerings:
//!       - {zone: test-1a, capacityType: on-demand, price: 0.1, available: true}
//! ```
//! `node.kubernetes.io/instance-type` is set to the name; `kubernetes.io/arch` defaults to
//! `amd64`, `kubernetes.io/os` to `linux` and `topology.kubernetes.io/region` to the region.

use std::collections::BTreeMap;

use karpenter_api::well_known as wk;
use karpenter_core::instance_type::{InstanceType, Offering, Overhead};
use karpenter_core::resources::{Quantity, ResourceList};
use serde::Deserialize;

/// Why a custom instance-type file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum CustomTypesError {
    #[error(
        "invalid instance-types file: {0} (expected `instanceTypes: [{{name, capacity, overhead, labels, offerings}}]`)"
    )]
    Parse(String),
    #[error("instanceTypes[{index}] ({name}): {message}")]
    Invalid {
        index: usize,
        name: String,
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct File {
    instance_types: Vec<CustomType>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CustomType {
    name: String,
    capacity: ResourceList,
    #[serde(default)]
    overhead: ResourceList,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    offerings: Vec<CustomOffering>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CustomOffering {
    zone: String,
    capacity_type: String,
    price: f64,
    #[serde(default = "available_by_default")]
    available: bool,
}

fn available_by_default() -> bool {
    true
}

/// Parses the YAML (or JSON) of a custom instance-type file.
pub fn parse_instance_types(
    text: &str,
    region: &str,
) -> Result<Vec<InstanceType>, CustomTypesError> {
    // Through the manifest reader's YAML parser (its messages name file lines, without the
    // parser's source snippets), then as a typed value.
    let value = karpenter_api::manifest::parse_yaml(text, 1)
        .map_err(|err| CustomTypesError::Parse(err.to_string()))?;
    if value.is_null() {
        return Err(CustomTypesError::Parse("the file is empty".into()));
    }
    let file: File =
        serde_json::from_value(value).map_err(|e| CustomTypesError::Parse(e.to_string()))?;
    if file.instance_types.is_empty() {
        return Err(CustomTypesError::Parse(
            "instanceTypes is empty: list at least one instance type".into(),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    file.instance_types
        .into_iter()
        .enumerate()
        .map(|(index, t)| {
            let invalid = |message: String| CustomTypesError::Invalid {
                index,
                name: t.name.clone(),
                message,
            };
            if t.name.is_empty() {
                return Err(invalid("name is empty".into()));
            }
            if !seen.insert(t.name.clone()) {
                return Err(invalid("duplicate name".into()));
            }
            for (resource, quantity) in t.capacity.iter() {
                if quantity < Quantity::ZERO {
                    return Err(invalid(format!(
                        "capacity[{resource}]: {quantity} must not be negative"
                    )));
                }
            }
            for (resource, quantity) in t.overhead.iter() {
                if quantity < Quantity::ZERO {
                    return Err(invalid(format!(
                        "overhead[{resource}]: {quantity} must not be negative"
                    )));
                }
                let capacity = t.capacity.get(resource);
                if quantity >= capacity && !quantity.is_zero() {
                    return Err(invalid(format!(
                        "overhead[{resource}]: {quantity} must be less than capacity[{resource}] ({capacity}); nothing would be left for pods"
                    )));
                }
            }
            for (i, o) in t.offerings.iter().enumerate() {
                if !o.zone.starts_with(region) || o.zone.len() == region.len() {
                    return Err(invalid(format!(
                        "offerings[{i}].zone: {:?} is not a zone of region {region:?} (zones are the region plus a letter, e.g. {region}a; set the region with --region)",
                        o.zone
                    )));
                }
            }
            for o in &t.offerings {
                if !wk::CAPACITY_TYPES.contains(&o.capacity_type.as_str()) {
                    return Err(invalid(format!(
                        "offerings: capacityType {:?} must be one of {}",
                        o.capacity_type,
                        wk::CAPACITY_TYPES.join(", ")
                    )));
                }
                if !(o.price.is_finite() && o.price >= 0.0) {
                    return Err(invalid(format!(
                        "offerings: price {} must be a non-negative number",
                        o.price
                    )));
                }
            }
            let mut labels = t.labels.clone();
            labels.insert(wk::INSTANCE_TYPE_LABEL.to_string(), t.name.clone());
            labels
                .entry(wk::ARCH_LABEL.to_string())
                .or_insert_with(|| "amd64".to_string());
            labels
                .entry(wk::OS_LABEL.to_string())
                .or_insert_with(|| "linux".to_string());
            labels
                .entry(wk::REGION_LABEL.to_string())
                .or_insert_with(|| region.to_string());
            Ok(InstanceType {
                name: t.name.clone(),
                labels,
                capacity: t.capacity.clone(),
                overhead: Overhead {
                    kube_reserved: t.overhead.clone(),
                    ..Default::default()
                },
                offerings: t
                    .offerings
                    .iter()
                    .map(|o| Offering {
                        zone: o.zone.clone(),
                        capacity_type: o.capacity_type.clone(),
                        price: o.price,
                        available: o.available,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_shape() {
        let yaml = r#"
instanceTypes:
  - name: small
    capacity: {cpu: "2", memory: 8Gi, pods: 110}
    overhead: {cpu: 100m, memory: 512Mi}
    labels: {kubernetes.io/arch: arm64}
    offerings:
      - {zone: test-1a, capacityType: on-demand, price: 0.1}
      - {zone: test-1a, capacityType: spot, price: 0.03, available: false}
"#;
        let types = parse_instance_types(yaml, "test").unwrap();
        assert_eq!(types.len(), 1);
        let small = &types[0];
        assert_eq!(small.labels[wk::ARCH_LABEL], "arm64");
        assert_eq!(small.labels[wk::INSTANCE_TYPE_LABEL], "small");
        assert_eq!(small.allocatable().get("cpu").millis(), 1900);
        assert!(small.offerings[0].available && !small.offerings[1].available);
    }

    #[test]
    fn rejects_bad_capacity_types_and_unknown_fields() {
        let bad = "instanceTypes: [{name: x, capacity: {cpu: 1}, offerings: [{zone: ra, capacityType: cheap, price: 1}]}]";
        assert!(
            parse_instance_types(bad, "r")
                .unwrap_err()
                .to_string()
                .contains("capacityType")
        );
        let unknown = "instanceTypes: [{name: x, capacity: {cpu: 1}, colour: red}]";
        assert!(parse_instance_types(unknown, "r").is_err());
    }

    #[test]
    fn rejects_impossible_catalogues_naming_the_field() {
        let cases = [
            ("instanceTypes: []", "at least one"),
            (
                "instanceTypes: [{name: x, capacity: {cpu: \"-1\"}}]",
                "capacity[cpu]",
            ),
            (
                "instanceTypes: [{name: x, capacity: {cpu: 1}, overhead: {cpu: 2}}]",
                "overhead[cpu]",
            ),
            (
                "instanceTypes: [{name: x, capacity: {cpu: 1}, overhead: {memory: 1Gi}}]",
                "overhead[memory]",
            ),
            (
                "instanceTypes: [{name: x, capacity: {cpu: 1}, offerings: [{zone: us-east-1a, capacityType: spot, price: 1}]}]",
                "offerings[0].zone",
            ),
            (
                "instanceTypes: [{name: x, capacity: {cpu: 1}, offerings: [{zone: r1a, capacityType: spot, price: -1}]}]",
                "price",
            ),
        ];
        for (yaml, field) in cases {
            let err = parse_instance_types(yaml, "r1").unwrap_err().to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
    }
}
