//! Kubernetes resource quantities as exact fixed-point numbers, and lists of them.
//!
//! A [`Quantity`] is an integer count of thousandths ("milli-units"), so `250m` CPU, `1Gi` memory
//! and `110` pods share one cheap, exact representation. Parsing rounds a finer value up to the
//! next milli-unit, as Kubernetes does for `MilliValue()`.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
pub const AMD_GPU: &str = "amd.com/gpu";
pub const AWS_NEURON: &str = "aws.amazon.com/neuron";
pub const AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
pub const HABANA_GAUDI: &str = "habana.ai/gaudi";
pub const AWS_POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
pub const EFA: &str = "vpc.amazonaws.com/efa";

/// Why a quantity string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {input:?}: {reason} (examples: 500m, 2, 1.5Gi, 512Mi, 1e3)")]
pub struct QuantityError {
    pub input: String,
    pub reason: &'static str,
}

/// An exact resource amount in milli-units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity(i64);

impl Quantity {
    pub const ZERO: Quantity = Quantity(0);
    pub const MAX: Quantity = Quantity(i64::MAX);

    pub const fn from_millis(millis: i64) -> Self {
        Quantity(millis)
    }

    /// Whole units (cores, bytes, pods).
    pub const fn from_units(units: i64) -> Self {
        Quantity(units.saturating_mul(1000))
    }

    pub const fn from_mebibytes(mib: i64) -> Self {
        Quantity::from_units(mib.saturating_mul(1024 * 1024))
    }

    pub const fn from_gibibytes(gib: i64) -> Self {
        Quantity::from_units(gib.saturating_mul(1024 * 1024 * 1024))
    }

    pub const fn millis(self) -> i64 {
        self.0
    }

    /// Whole units, rounded up (Kubernetes `Value()`).
    pub const fn units_ceil(self) -> i64 {
        let q = self.0 / 1000;
        if self.0 % 1000 > 0 { q + 1 } else { q }
    }

    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    pub fn as_f64_units(self) -> f64 {
        self.0 as f64 / 1000.0
    }

    pub fn saturating_sub(self, other: Quantity) -> Quantity {
        Quantity(self.0.saturating_sub(other.0))
    }

    /// `self - other`, floored at zero.
    pub fn sub_floor_zero(self, other: Quantity) -> Quantity {
        Quantity(self.0.saturating_sub(other.0).max(0))
    }

    /// Parses a Kubernetes quantity (`100m`, `1.5`, `2Gi`, `1e3`, `128974848`) with the one
    /// quantity parser of the workspace ([`karpenter_api::quantity::parse_millis`], which offline
    /// validation uses too): exact, rounding a finer value up to the next milli-unit, and an
    /// error (never a wrap or a panic) beyond ±i64 milli-units.
    pub fn parse(input: &str) -> Result<Quantity, QuantityError> {
        karpenter_api::quantity::parse_millis(input)
            .map(Quantity)
            .map_err(|reason| QuantityError {
                input: input.to_string(),
                reason,
            })
    }
}

impl fmt::Display for Quantity {
    /// Canonical text: `250m`, `2`, `1Gi`, `1536Mi`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        if m % 1000 != 0 {
            return write!(f, "{m}m");
        }
        let units = m / 1000;
        const BINARY: [(&str, i64); 6] = [
            ("Ei", 1 << 60),
            ("Pi", 1 << 50),
            ("Ti", 1 << 40),
            ("Gi", 1 << 30),
            ("Mi", 1 << 20),
            ("Ki", 1 << 10),
        ];
        if units != 0 {
            for (suffix, size) in BINARY {
                if units % size == 0 {
                    return write!(f, "{}{suffix}", units / size);
                }
            }
        }
        write!(f, "{units}")
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

impl Add for Quantity {
    type Output = Quantity;
    fn add(self, rhs: Quantity) -> Quantity {
        Quantity(self.0.saturating_add(rhs.0))
    }
}
impl AddAssign for Quantity {
    fn add_assign(&mut self, rhs: Quantity) {
        self.0 = self.0.saturating_add(rhs.0);
    }
}
impl Sub for Quantity {
    type Output = Quantity;
    fn sub(self, rhs: Quantity) -> Quantity {
        Quantity(self.0.saturating_sub(rhs.0))
    }
}
impl SubAssign for Quantity {
    fn sub_assign(&mut self, rhs: Quantity) {
        self.0 = self.0.saturating_sub(rhs.0);
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Str(String),
            Int(i64),
            Float(f64),
        }
        match Raw::deserialize(d)? {
            Raw::Str(s) => Quantity::parse(&s).map_err(serde::de::Error::custom),
            Raw::Int(i) => Ok(Quantity::from_units(i)),
            // Through the one parser, so a float gets the same rounding and range checks.
            Raw::Float(f) => Quantity::parse(&f.to_string()).map_err(serde::de::Error::custom),
        }
    }
}

impl TryFrom<&K8sQuantity> for Quantity {
    type Error = QuantityError;
    fn try_from(q: &K8sQuantity) -> Result<Self, Self::Error> {
        Quantity::parse(&q.0)
    }
}

impl From<Quantity> for K8sQuantity {
    fn from(q: Quantity) -> Self {
        K8sQuantity(q.to_string())
    }
}

/// A set of named resource amounts (`cpu`, `memory`, `pods`, `nvidia.com/gpu`, ...).
/// Missing names count as zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ResourceList(BTreeMap<String, Quantity>);

impl ResourceList {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a list from `(name, quantity)` pairs; parse errors name the resource.
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, QuantityError> {
        let mut list = ResourceList::new();
        for (name, value) in pairs {
            list.set(name, Quantity::parse(value)?);
        }
        Ok(list)
    }

    /// Converts a Kubernetes resource map.
    pub fn from_k8s(map: &BTreeMap<String, K8sQuantity>) -> Result<Self, QuantityError> {
        let mut list = ResourceList::new();
        for (name, q) in map {
            list.set(name, Quantity::try_from(q)?);
        }
        Ok(list)
    }

    pub fn to_k8s(&self) -> BTreeMap<String, K8sQuantity> {
        self.0
            .iter()
            .map(|(k, v)| (k.clone(), (*v).into()))
            .collect()
    }

    pub fn get(&self, name: &str) -> Quantity {
        self.0.get(name).copied().unwrap_or_default()
    }

    pub fn set(&mut self, name: &str, value: Quantity) {
        self.0.insert(name.to_string(), value);
    }

    pub fn remove(&mut self, name: &str) -> Option<Quantity> {
        self.0.remove(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, Quantity)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Adds every entry of `other`.
    pub fn add(&mut self, other: &ResourceList) {
        for (k, v) in &other.0 {
            *self.0.entry(k.clone()).or_default() += *v;
        }
    }

    /// Subtracts every entry of `other`, flooring each at zero.
    pub fn sub_floor_zero(&mut self, other: &ResourceList) {
        for (k, v) in &other.0 {
            let e = self.0.entry(k.clone()).or_default();
            *e = e.sub_floor_zero(*v);
        }
    }

    /// Entry-wise maximum.
    pub fn max_with(&mut self, other: &ResourceList) {
        for (k, v) in &other.0 {
            let e = self.0.entry(k.clone()).or_default();
            if *v > *e {
                *e = *v;
            }
        }
    }

    /// Whether every requested amount fits in `self` (names missing from `self` have zero).
    pub fn fits(&self, requests: &ResourceList) -> bool {
        self.first_exceeded(requests).is_none()
    }

    /// The first resource `requests` needs more of than `self` has, if any.
    pub fn first_exceeded<'a>(&self, requests: &'a ResourceList) -> Option<&'a str> {
        requests
            .0
            .iter()
            .find(|(k, v)| **v > self.get(k))
            .map(|(k, _)| k.as_str())
    }
}

impl FromIterator<(String, Quantity)> for ResourceList {
    fn from_iter<T: IntoIterator<Item = (String, Quantity)>>(iter: T) -> Self {
        ResourceList(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn parses_kubernetes_quantities() {
        assert_eq!(q("100m").millis(), 100);
        assert_eq!(q("1").millis(), 1000);
        assert_eq!(q("1.5").millis(), 1500);
        assert_eq!(q("0.1").millis(), 100);
        assert_eq!(q("1Ki").millis(), 1024 * 1000);
        assert_eq!(q("1.5Gi").millis(), 1536 * 1024 * 1024 * 1000);
        assert_eq!(q("1e3").millis(), 1_000_000);
        assert_eq!(q("1k").millis(), 1_000_000);
        assert_eq!(q("1M").millis(), 1_000_000_000);
        assert_eq!(q("1n").millis(), 1, "sub-milli values round up");
        assert_eq!(q("-1").millis(), -1000);
        assert_eq!(q("128974848").units_ceil(), 128_974_848);
        for bad in ["", "abc", "1Qi", "1..2", "Gi", "1e"] {
            assert!(Quantity::parse(bad).is_err(), "{bad} should not parse");
        }
        for bad in [
            "1e999999999",
            "99999999999999999999999Ei",
            "1e9223372036854775807",
            "170000000000000000000000000000000000000000000",
            "9223372036854775808m",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn extreme_inputs_are_exact_or_errors() {
        assert_eq!(
            q("-0.000000000000000000001m").millis(),
            -1,
            "rounds away from zero"
        );
        assert_eq!(q("1e-999999999").millis(), 1);
        assert_eq!(q("0e999999999"), Quantity::ZERO);
        assert_eq!(
            q("170000000000000000000000000000000000000e-40").millis(),
            17
        );
        assert_eq!(q("9223372036854775807m").millis(), i64::MAX);
        assert_eq!(q("0.1e1").millis(), 1000);
        let err = Quantity::parse("1e999999999").unwrap_err();
        assert!(err.to_string().contains("too large"), "{err}");
    }

    #[test]
    fn formats_canonically() {
        assert_eq!(q("250m").to_string(), "250m");
        assert_eq!(q("2").to_string(), "2");
        assert_eq!(q("1024Mi").to_string(), "1Gi");
        assert_eq!(q("1536Mi").to_string(), "1536Mi");
        assert_eq!(q("0").to_string(), "0");
        assert_eq!(q("1000").to_string(), "1000");
    }

    #[test]
    fn resource_lists_add_sub_and_fit() {
        let mut a = ResourceList::parse([("cpu", "1"), ("memory", "1Gi")]).unwrap();
        let b = ResourceList::parse([("cpu", "500m"), ("nvidia.com/gpu", "1")]).unwrap();
        assert!(!a.fits(&b), "a has no GPU");
        assert_eq!(a.first_exceeded(&b), Some("nvidia.com/gpu"));
        a.add(&b);
        assert_eq!(a.get("cpu"), q("1500m"));
        assert!(a.fits(&b));
        a.sub_floor_zero(&ResourceList::parse([("cpu", "5")]).unwrap());
        assert_eq!(a.get("cpu"), Quantity::ZERO);
    }

    proptest! {
        #[test]
        fn display_round_trips(millis in -1_000_000_000_000i64..1_000_000_000_000_000) {
            let q = Quantity::from_millis(millis);
            prop_assert_eq!(Quantity::parse(&q.to_string()).unwrap(), q);
        }

        #[test]
        fn parse_never_panics_or_wraps(
            sign in "[-+]?",
            int in "[0-9]{0,45}",
            frac in "(\\.[0-9]{0,45})?",
            suffix in "(|m|n|u|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e-?[0-9]{1,12}|E-?[0-9]{1,12})",
        ) {
            let input = format!("{sign}{int}{frac}{suffix}");
            if let Ok(q) = Quantity::parse(&input) {
                // No wrap: a value that parses has the input's sign (or is zero).
                if sign == "-" {
                    prop_assert!(q.millis() <= 0, "{input} -> {q:?}");
                } else {
                    prop_assert!(q.millis() >= 0, "{input} -> {q:?}");
                }
            }
        }

        #[test]
        fn binary_suffixes_are_exact(n in 0i64..8_000, s in 0usize..4) {
            let (suffix, mult) = [("Ki", 1i64 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("Ti", 1 << 40)][s];
            prop_assert_eq!(q(&format!("{n}{suffix}")), Quantity::from_units(n * mult));
        }
    }
}
