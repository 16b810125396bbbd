//! Upstream's feature gates (`--feature-gates` / `FEATURE_GATES`, karpenter-core §1.1):
//! `NodeRepair=true,SpotToSpotConsolidation=false,…`. One parser for the controller and
//! `simulate`, so a gate is spelled and defaulted the same everywhere.
//!
//! The syntax is Kubernetes' `featuregate.Set`: comma-separated `Name=bool` pairs, whitespace
//! around names and values ignored, booleans as Go's `strconv.ParseBool` reads them; an unknown
//! name or a value that is not a boolean is an error naming the gate.

use std::fmt;

use thiserror::Error;

/// Every gate upstream knows, with its default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    /// `node.health`: forcefully replace nodes the provider's repair policies call unhealthy.
    pub node_repair: bool,
    pub reserved_capacity: bool,
    /// Single- and multi-node consolidation may replace spot nodes with cheaper spot nodes.
    pub spot_to_spot_consolidation: bool,
    /// NodeOverlays adjust the price and capacity of the instance types they select
    /// ([`crate::node_overlay`]).
    pub node_overlay: bool,
    pub static_capacity: bool,
    /// CapacityBuffers keep spare capacity provisioned as virtual pods
    /// ([`crate::capacity_buffer`]).
    pub capacity_buffer: bool,
}

impl Default for FeatureGates {
    /// Upstream's defaults: only `ReservedCapacity` is on.
    fn default() -> Self {
        FeatureGates {
            node_repair: false,
            reserved_capacity: true,
            spot_to_spot_consolidation: false,
            node_overlay: false,
            static_capacity: false,
            capacity_buffer: false,
        }
    }
}

/// Why a `--feature-gates` value was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum FeatureGateError {
    #[error("unrecognized feature gate {name:?} (known gates: {known})", known = FeatureGates::NAMES.join(", "))]
    Unknown { name: String },
    #[error("invalid value {value:?} for feature gate {name}: want true or false")]
    NotABool { name: String, value: String },
    #[error("missing \"=true\" or \"=false\" for feature gate {name:?}")]
    MissingValue { name: String },
    #[error(
        "feature gate {name}=true is not supported: karpenter-rs does not implement {name} (leave it false)"
    )]
    NotImplemented { name: String },
}

impl FeatureGates {
    /// Gate names as upstream spells them, in upstream's order.
    pub const NAMES: [&'static str; 6] = [
        "NodeRepair",
        "ReservedCapacity",
        "SpotToSpotConsolidation",
        "NodeOverlay",
        "StaticCapacity",
        "CapacityBuffer",
    ];

    /// Gates upstream knows whose feature karpenter-rs does not have: accepted off (so upstream's
    /// Helm values start the controller), refused on, so no one believes the feature runs.
    /// Empty today; a gate upstream adds before karpenter-rs implements it goes here.
    pub const NOT_IMPLEMENTED: &'static [&'static str] = &[];

    /// The defaults overridden by `raw` (an empty string keeps every default). A gate of
    /// [`FeatureGates::NOT_IMPLEMENTED`] turned on is an error naming it.
    pub fn parse(raw: &str) -> Result<Self, FeatureGateError> {
        let mut gates = FeatureGates::default();
        for pair in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((name, value)) = pair.split_once('=') else {
                return Err(FeatureGateError::MissingValue {
                    name: pair.to_string(),
                });
            };
            let name = name.trim();
            let value = value.trim();
            let slot = gates.slot(name).ok_or_else(|| FeatureGateError::Unknown {
                name: name.to_string(),
            })?;
            *slot = parse_bool(value).ok_or_else(|| FeatureGateError::NotABool {
                name: name.to_string(),
                value: value.to_string(),
            })?;
        }
        for (name, on) in Self::NAMES.iter().zip(gates.values()) {
            if on && Self::NOT_IMPLEMENTED.contains(name) {
                return Err(FeatureGateError::NotImplemented {
                    name: name.to_string(),
                });
            }
        }
        Ok(gates)
    }

    fn slot(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "NodeRepair" => &mut self.node_repair,
            "ReservedCapacity" => &mut self.reserved_capacity,
            "SpotToSpotConsolidation" => &mut self.spot_to_spot_consolidation,
            "NodeOverlay" => &mut self.node_overlay,
            "StaticCapacity" => &mut self.static_capacity,
            "CapacityBuffer" => &mut self.capacity_buffer,
            _ => return None,
        })
    }

    fn values(&self) -> [bool; 6] {
        [
            self.node_repair,
            self.reserved_capacity,
            self.spot_to_spot_consolidation,
            self.node_overlay,
            self.static_capacity,
            self.capacity_buffer,
        ]
    }
}

impl std::str::FromStr for FeatureGates {
    type Err = FeatureGateError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        Self::parse(raw)
    }
}

/// Every gate as `Name=bool`, in upstream's order (what the chart writes).
impl fmt::Display for FeatureGates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, value)) in Self::NAMES.iter().zip(self.values()).enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{name}={value}")?;
        }
        Ok(())
    }
}

/// Go's `strconv.ParseBool`.
fn parse_bool(raw: &str) -> Option<bool> {
    match raw {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn defaults_are_upstreams() {
        let gates = FeatureGates::default();
        assert_eq!(
            gates.to_string(),
            "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false"
        );
        assert_eq!(FeatureGates::parse("").unwrap(), gates);
        assert_eq!(FeatureGates::parse(&gates.to_string()).unwrap(), gates);
    }

    #[test]
    fn named_gates_override_the_defaults_and_keep_the_others() {
        let gates =
            FeatureGates::parse(" NodeRepair=true , SpotToSpotConsolidation=T,ReservedCapacity=0,")
                .unwrap();
        assert!(gates.node_repair && gates.spot_to_spot_consolidation);
        assert!(!gates.reserved_capacity);
        assert!(!gates.node_overlay && !gates.static_capacity && !gates.capacity_buffer);
    }

    #[test]
    fn spot_to_spot_reaches_the_disruption_options() {
        use crate::disruption::DisruptionOptions;
        let off = DisruptionOptions::from_gates(&FeatureGates::default());
        assert!(!off.spot_to_spot_consolidation);
        let on = FeatureGates::parse("SpotToSpotConsolidation=true").unwrap();
        assert!(DisruptionOptions::from_gates(&on).spot_to_spot_consolidation);
    }

    #[test]
    fn unknown_names_and_non_bools_are_errors_naming_the_gate() {
        let unknown = FeatureGates::parse("NodeRepair=true,Drift=true").unwrap_err();
        assert_eq!(
            unknown,
            FeatureGateError::Unknown {
                name: "Drift".into()
            }
        );
        assert!(unknown.to_string().contains("\"Drift\""), "{unknown}");
        assert!(unknown.to_string().contains("SpotToSpotConsolidation"));
        let not_bool = FeatureGates::parse("NodeRepair=maybe").unwrap_err();
        assert_eq!(
            not_bool.to_string(),
            "invalid value \"maybe\" for feature gate NodeRepair: want true or false"
        );
        let bare = FeatureGates::parse("NodeRepair").unwrap_err();
        assert!(bare.to_string().contains("NodeRepair"), "{bare}");
        // Names are case-sensitive, as upstream's.
        assert!(FeatureGates::parse("noderepair=true").is_err());
    }

    #[test]
    fn every_gate_is_implemented_and_accepted_on() {
        let all_on = FeatureGates::NAMES
            .iter()
            .map(|name| format!("{name}=true"))
            .collect::<Vec<_>>()
            .join(",");
        let gates = FeatureGates::parse(&all_on).unwrap();
        assert!(gates.capacity_buffer && gates.node_overlay);
        assert!(FeatureGates::NOT_IMPLEMENTED.is_empty());
        let chart = "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false";
        assert_eq!(FeatureGates::parse(chart).unwrap(), FeatureGates::default());
    }

    #[test]
    fn the_not_implemented_refusal_is_one_line_naming_the_gate() {
        let err = FeatureGateError::NotImplemented {
            name: "FutureGate".into(),
        };
        assert_eq!(
            err.to_string(),
            "feature gate FutureGate=true is not supported: karpenter-rs does not implement FutureGate (leave it false)"
        );
        assert!(!err.to_string().contains('\n'));
    }
}
