//! Label requirements: the algebra scheduling is built on (upstream `pkg/scheduling/requirement*.go`).
//!
//! A [`Requirement`] constrains the values of one label key; [`Requirements`] maps keys to them.
//! Both are generic over the value type so the scheduler's hot path can run the same algebra on
//! interned values ([`RequirementValue`]); the `String` instantiation is the public, user-facing one
//! (aliased keys normalised, errors naming the field).

use std::collections::BTreeMap;
use std::fmt;
use std::hash::Hash;

use smallvec::SmallVec;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};
use karpenter_api::v1::NodeSelectorRequirementWithMinValues;
use karpenter_api::well_known;

/// A label value the algebra can work on: ordered, and readable as an integer for `Gt`/`Lt` bounds.
pub trait RequirementValue: Ord + Clone + Hash + fmt::Debug {
    fn as_int(&self) -> Option<i64>;
}

impl RequirementValue for String {
    fn as_int(&self) -> Option<i64> {
        self.parse().ok()
    }
}

/// Node selector operators, including Karpenter's inclusive `Gte`/`Lte`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

impl Operator {
    pub fn parse(s: &str) -> Option<Operator> {
        Some(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
        }
    }

    /// Operators a node without the label satisfies.
    pub fn tolerates_absence(self) -> bool {
        matches!(self, Operator::NotIn | Operator::DoesNotExist)
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a requirement could not be built from user input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    #[error(
        "requirement on {key:?}: unknown operator {operator:?} (use In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte)"
    )]
    UnknownOperator { key: String, operator: String },
    #[error("requirement {key:?} {operator}: needs exactly one integer value, got {values:?}")]
    NotOneInteger {
        key: String,
        operator: Operator,
        values: Vec<String>,
    },
    #[error("requirement {key:?} {operator}: must not have values, got {values:?}")]
    UnexpectedValues {
        key: String,
        operator: Operator,
        values: Vec<String>,
    },
    #[error("requirement {key:?} In: needs at least one value")]
    NoValues { key: String },
    #[error("requirement {key:?}: minValues {min_values} must be between 1 and 50")]
    BadMinValues { key: String, min_values: i32 },
    #[error("label {key:?} may not be used: {reason}")]
    Restricted { key: String, reason: &'static str },
    #[error("node selector term uses matchFields, which Karpenter does not support")]
    MatchFields,
}

/// The allowed values of one label key.
///
/// `complement` means "every value except `values`"; `gte`/`lte` bound integer values (and only
/// apply to complements). `min_values` asks the scheduler to keep that many distinct values open.
///
/// Laid out small, because the solver holds one per label of every node (~35 on an EC2 node)
/// per provisioning pass and the catalogue one per label of every instance type:
/// a single value is kept inline (most requirements are a label's one value) and the bounds,
/// which only `Gt`/`Lt`-style requirements have, behind a pointer. 56 bytes and no allocation
/// for `In [v]`, where a `Vec` and two inline bounds took 72 bytes plus an allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement<V = String> {
    complement: bool,
    /// Sorted, unique.
    values: ValueList<V>,
    /// `None` when neither bound is set (never `Some` of two `None`s, so equality holds).
    bounds: Option<Box<Bounds>>,
    min_values: Option<u32>,
}

/// A requirement's values: inline up to one.
type ValueList<V> = SmallVec<[V; 1]>;

/// Inclusive integer bounds of a requirement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Bounds {
    gte: Option<i64>,
    lte: Option<i64>,
}

fn bounds(gte: Option<i64>, lte: Option<i64>) -> Option<Box<Bounds>> {
    (gte.is_some() || lte.is_some()).then(|| Box::new(Bounds { gte, lte }))
}

impl<V: RequirementValue> Requirement<V> {
    /// `Exists`: any value.
    pub fn exists() -> Self {
        Requirement {
            complement: true,
            values: ValueList::new(),
            bounds: None,
            min_values: None,
        }
    }

    /// `DoesNotExist`: the label must be absent.
    pub fn does_not_exist() -> Self {
        Requirement {
            complement: false,
            values: ValueList::new(),
            bounds: None,
            min_values: None,
        }
    }

    /// `In values`.
    pub fn is_in(values: impl IntoIterator<Item = V>) -> Self {
        Requirement {
            complement: false,
            values: sorted_unique(values),
            bounds: None,
            min_values: None,
        }
    }

    /// `NotIn values`.
    pub fn not_in(values: impl IntoIterator<Item = V>) -> Self {
        Requirement {
            complement: true,
            values: sorted_unique(values),
            bounds: None,
            min_values: None,
        }
    }

    /// `Gte n` (inclusive lower bound).
    pub fn gte(n: i64) -> Self {
        Requirement {
            bounds: bounds(Some(n), None),
            ..Self::exists()
        }
    }

    /// `Lte n` (inclusive upper bound).
    pub fn lte(n: i64) -> Self {
        Requirement {
            bounds: bounds(None, Some(n)),
            ..Self::exists()
        }
    }

    /// `Gt n`; `Gt i64::MAX` admits nothing.
    pub fn gt(n: i64) -> Self {
        match n.checked_add(1) {
            Some(bound) => Self::gte(bound),
            None => Self::does_not_exist(),
        }
    }

    /// `Lt n`; `Lt i64::MIN` admits nothing.
    pub fn lt(n: i64) -> Self {
        match n.checked_sub(1) {
            Some(bound) => Self::lte(bound),
            None => Self::does_not_exist(),
        }
    }

    pub fn with_min_values(mut self, min_values: Option<u32>) -> Self {
        self.min_values = min_values;
        self
    }

    pub fn min_values(&self) -> Option<u32> {
        self.min_values
    }

    pub fn set_min_values(&mut self, min_values: Option<u32>) {
        self.min_values = min_values;
    }

    pub fn is_complement(&self) -> bool {
        self.complement
    }

    /// The listed values (allowed for `In`, excluded for `NotIn`).
    pub fn values(&self) -> &[V] {
        &self.values
    }

    pub fn bounds(&self) -> (Option<i64>, Option<i64>) {
        (self.lower(), self.upper())
    }

    /// The inclusive lower bound, if any.
    fn lower(&self) -> Option<i64> {
        self.bounds.as_ref().and_then(|b| b.gte)
    }

    /// The inclusive upper bound, if any.
    fn upper(&self) -> Option<i64> {
        self.bounds.as_ref().and_then(|b| b.lte)
    }

    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (true, false) => Operator::NotIn,
            (true, true) => Operator::Exists,
            (false, false) => Operator::In,
            (false, true) => Operator::DoesNotExist,
        }
    }

    /// Number of allowed values (`usize::MAX - excluded` for complements).
    pub fn len(&self) -> usize {
        if self.complement {
            usize::MAX - self.values.len()
        } else {
            self.values.len()
        }
    }

    /// Whether nothing is allowed (not even absence is "a value").
    pub fn is_empty(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    fn within_bounds(&self, value: &V) -> bool {
        within(value, self.lower(), self.upper())
    }

    /// Whether `value` is allowed.
    pub fn has(&self, value: &V) -> bool {
        if !self.within_bounds(value) {
            return false;
        }
        let listed = self.values.binary_search(value).is_ok();
        if self.complement { !listed } else { listed }
    }

    /// The values both allow (minValues: the larger one).
    pub fn intersection(&self, other: &Requirement<V>) -> Requirement<V> {
        let complement = self.complement && other.complement;
        let gte = max_opt(self.lower(), other.lower());
        let lte = min_opt(self.upper(), other.upper());
        let min_values = max_opt(self.min_values, other.min_values);
        if let (Some(lo), Some(hi)) = (gte, lte)
            && lo > hi
        {
            return Self::does_not_exist().with_min_values(min_values);
        }
        let values = match (self.complement, other.complement) {
            (true, true) => union(&self.values, &other.values),
            (true, false) => difference(&other.values, &self.values),
            (false, true) => difference(&self.values, &other.values),
            (false, false) => intersect(&self.values, &other.values),
        };
        let values = if gte.is_some() || lte.is_some() {
            values.into_iter().filter(|v| within(v, gte, lte)).collect()
        } else {
            values
        };
        let (gte, lte) = if complement { (gte, lte) } else { (None, None) };
        Requirement {
            complement,
            values,
            bounds: bounds(gte, lte),
            min_values,
        }
    }

    /// Whether some value satisfies both, without allocating.
    pub fn has_intersection(&self, other: &Requirement<V>) -> bool {
        let gte = max_opt(self.lower(), other.lower());
        let lte = min_opt(self.upper(), other.upper());
        if let (Some(lo), Some(hi)) = (gte, lte)
            && lo > hi
        {
            return false;
        }
        match (self.complement, other.complement) {
            (true, true) => true,
            (true, false) => other
                .values
                .iter()
                .any(|v| self.values.binary_search(v).is_err() && within(v, gte, lte)),
            (false, true) => self
                .values
                .iter()
                .any(|v| other.values.binary_search(v).is_err() && within(v, gte, lte)),
            (false, false) => {
                let (small, large) = if self.values.len() <= other.values.len() {
                    (&self.values, &other.values)
                } else {
                    (&other.values, &self.values)
                };
                small
                    .iter()
                    .any(|v| large.binary_search(v).is_ok() && within(v, gte, lte))
            }
        }
    }

    /// Maps the values to another representation (e.g. interned ids back to strings).
    pub fn map_values<W: RequirementValue>(&self, f: impl FnMut(&V) -> W) -> Requirement<W> {
        Requirement {
            complement: self.complement,
            values: sorted_unique(self.values.iter().map(f)),
            bounds: self.bounds.clone(),
            min_values: self.min_values,
        }
    }
}

impl Requirement<String> {
    /// Builds a requirement from an operator and values, checking arity and integers.
    pub fn new<S: AsRef<str>>(
        key: &str,
        operator: &str,
        values: &[S],
    ) -> Result<Self, RequirementError> {
        let owned = || values.iter().map(|v| v.as_ref().to_string()).collect();
        let op = Operator::parse(operator).ok_or_else(|| RequirementError::UnknownOperator {
            key: key.to_string(),
            operator: operator.to_string(),
        })?;
        let one_int =
            || -> Result<i64, RequirementError> {
                match values {
                    [v] => v.as_ref().trim().parse::<i64>().map_err(|_| {
                        RequirementError::NotOneInteger {
                            key: key.to_string(),
                            operator: op,
                            values: owned(),
                        }
                    }),
                    _ => Err(RequirementError::NotOneInteger {
                        key: key.to_string(),
                        operator: op,
                        values: owned(),
                    }),
                }
            };
        let no_values = || {
            if values.is_empty() {
                Ok(())
            } else {
                Err(RequirementError::UnexpectedValues {
                    key: key.to_string(),
                    operator: op,
                    values: owned(),
                })
            }
        };
        Ok(match op {
            Operator::In => {
                if values.is_empty() {
                    return Err(RequirementError::NoValues {
                        key: key.to_string(),
                    });
                }
                Self::is_in(values.iter().map(|v| v.as_ref().to_string()))
            }
            Operator::NotIn => Self::not_in(values.iter().map(|v| v.as_ref().to_string())),
            Operator::Exists => {
                no_values()?;
                Self::exists()
            }
            Operator::DoesNotExist => {
                no_values()?;
                Self::does_not_exist()
            }
            Operator::Gt => Self::gt(one_int()?),
            Operator::Lt => Self::lt(one_int()?),
            Operator::Gte => Self::gte(one_int()?),
            Operator::Lte => Self::lte(one_int()?),
        })
    }

    /// [`Requirement::new`] over a manifest's [`Values`](karpenter_api::v1::Values).
    pub fn from_values(
        key: &str,
        operator: &str,
        values: &karpenter_api::v1::Values,
    ) -> Result<Self, RequirementError> {
        Self::new(key, operator, &values.iter().collect::<Vec<&str>>())
    }

    /// A value the requirement allows, deterministically: the first `In` value, or the smallest
    /// non-negative integer within bounds that is not excluded (upstream picks a random one).
    pub fn any(&self) -> Option<String> {
        if !self.complement {
            return self.values.first().cloned();
        }
        let mut candidate = self.lower().unwrap_or(0);
        loop {
            if let Some(hi) = self.upper()
                && candidate > hi
            {
                return None;
            }
            let text = candidate.to_string();
            if self.values.binary_search(&text).is_err() {
                return Some(text);
            }
            candidate = candidate.checked_add(1)?;
        }
    }

    /// The node selector requirements this stands for (two when both bounds are set).
    pub fn to_node_selector(&self, key: &str) -> Vec<NodeSelectorRequirementWithMinValues> {
        let min_values = self.min_values.map(|m| m as i32);
        let make = |operator: &str, values: Vec<String>| NodeSelectorRequirementWithMinValues {
            key: key.to_string(),
            operator: operator.to_string(),
            values: values.into(),
            min_values,
        };
        let mut out = Vec::new();
        if self.complement && self.bounds.is_some() {
            if let Some(lo) = self.lower() {
                out.push(make("Gte", vec![lo.to_string()]));
            }
            if let Some(hi) = self.upper() {
                out.push(make("Lte", vec![hi.to_string()]));
            }
            if !self.values.is_empty() {
                out.push(make("NotIn", self.values.to_vec()));
            }
            return out;
        }
        out.push(make(self.operator().as_str(), self.values.to_vec()));
        out
    }
}

impl fmt::Display for Requirement<String> {
    /// `In [a, b]`, `NotIn [a]`, `Exists`, `Exists >=4 <=8`, `DoesNotExist`; more than five values
    /// are elided ("and N others").
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.operator())?;
        if !self.values.is_empty() {
            const SHOWN: usize = 5;
            let shown: Vec<&str> = self.values.iter().take(SHOWN).map(String::as_str).collect();
            write!(f, " [{}", shown.join(", "))?;
            if self.values.len() > SHOWN {
                write!(f, " and {} others", self.values.len() - SHOWN)?;
            }
            write!(f, "]")?;
        }
        if let Some(lo) = self.lower() {
            write!(f, " >={lo}")?;
        }
        if let Some(hi) = self.upper() {
            write!(f, " <={hi}")?;
        }
        Ok(())
    }
}

/// Why two requirement sets cannot both hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incompatibility<K> {
    /// The incoming set requires a key the receiver does not define (and it may not be undefined).
    UndefinedKey(K),
    /// Both constrain the key and no value satisfies both.
    NoCommonValue(K),
}

impl<K> Incompatibility<K> {
    pub fn key(&self) -> &K {
        match self {
            Incompatibility::UndefinedKey(k) | Incompatibility::NoCommonValue(k) => k,
        }
    }
}

/// Requirements on many keys (a conjunction), stored sorted by key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirements<K = String, V = String> {
    entries: Vec<(K, Requirement<V>)>,
}

impl<K, V> Default for Requirements<K, V> {
    fn default() -> Self {
        Requirements {
            entries: Vec::new(),
        }
    }
}

impl<K: Ord + Clone, V: RequirementValue> Requirements<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &Requirement<V>)> {
        self.entries.iter().map(|(k, r)| (k, r))
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.iter().map(|(k, _)| k)
    }

    /// The requirement on `key`, if constrained.
    pub fn get(&self, key: &K) -> Option<&Requirement<V>> {
        self.entries
            .binary_search_by(|(k, _)| k.cmp(key))
            .ok()
            .map(|i| &self.entries[i].1)
    }

    pub fn get_mut(&mut self, key: &K) -> Option<&mut Requirement<V>> {
        match self.entries.binary_search_by(|(k, _)| k.cmp(key)) {
            Ok(i) => Some(&mut self.entries[i].1),
            Err(_) => None,
        }
    }

    pub fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// Adds a requirement, intersecting with any existing one on the same key.
    pub fn add(&mut self, key: K, requirement: Requirement<V>) {
        match self.entries.binary_search_by(|(k, _)| k.cmp(&key)) {
            Ok(i) => {
                let merged = self.entries[i].1.intersection(&requirement);
                self.entries[i].1 = merged;
            }
            Err(i) => self.entries.insert(i, (key, requirement)),
        }
    }

    /// Replaces the requirement on `key`.
    pub fn set(&mut self, key: K, requirement: Requirement<V>) {
        match self.entries.binary_search_by(|(k, _)| k.cmp(&key)) {
            Ok(i) => self.entries[i].1 = requirement,
            Err(i) => self.entries.insert(i, (key, requirement)),
        }
    }

    pub fn remove(&mut self, key: &K) -> Option<Requirement<V>> {
        match self.entries.binary_search_by(|(k, _)| k.cmp(key)) {
            Ok(i) => Some(self.entries.remove(i).1),
            Err(_) => None,
        }
    }

    /// Adds every requirement of `other`.
    pub fn add_all(&mut self, other: &Requirements<K, V>) {
        for (k, r) in &other.entries {
            self.add(k.clone(), r.clone());
        }
    }

    /// `self ∩ other`.
    pub fn intersection(&self, other: &Requirements<K, V>) -> Requirements<K, V> {
        let mut out = self.clone();
        out.add_all(other);
        out
    }

    /// Upstream `Intersects`: for keys both constrain, some value satisfies both (or both only
    /// exclude values, which an absent label satisfies).
    pub fn intersects(&self, other: &Requirements<K, V>) -> Result<(), Incompatibility<K>> {
        let (mut i, mut j) = (0, 0);
        while i < self.entries.len() && j < other.entries.len() {
            let (ka, ra) = &self.entries[i];
            let (kb, rb) = &other.entries[j];
            match ka.cmp(kb) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    let both_tolerate_absence =
                        ra.operator().tolerates_absence() && rb.operator().tolerates_absence();
                    if !ra.has_intersection(rb) && !both_tolerate_absence {
                        return Err(Incompatibility::NoCommonValue(ka.clone()));
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        Ok(())
    }

    /// Upstream `Compatible`: every key `incoming` requires (with In/Exists/bounds) is defined here
    /// unless `allow_undefined(key)`, and the shared keys intersect.
    pub fn compatible(
        &self,
        incoming: &Requirements<K, V>,
        allow_undefined: impl Fn(&K) -> bool,
    ) -> Result<(), Incompatibility<K>> {
        for (key, req) in &incoming.entries {
            if req.operator().tolerates_absence() || allow_undefined(key) {
                continue;
            }
            if !self.contains_key(key) {
                return Err(Incompatibility::UndefinedKey(key.clone()));
            }
        }
        self.intersects(incoming)
    }

    /// Whether some requirement carries `minValues`.
    pub fn has_min_values(&self) -> bool {
        self.entries.iter().any(|(_, r)| r.min_values.is_some())
    }

    /// Maps keys and values to another representation.
    pub fn map<K2: Ord + Clone, W: RequirementValue>(
        &self,
        mut fk: impl FnMut(&K) -> K2,
        mut fv: impl FnMut(&V) -> W,
    ) -> Requirements<K2, W> {
        let mut out = Requirements::new();
        for (k, r) in &self.entries {
            out.add(fk(k), r.map_values(&mut fv));
        }
        out
    }
}

impl Requirements<String, String> {
    /// Adds a requirement given as text, normalising aliased keys (`beta.kubernetes.io/arch`).
    pub fn add_str(&mut self, key: &str, requirement: Requirement<String>) {
        self.add(
            well_known::normalize_label_key(key).to_string(),
            requirement,
        );
    }

    /// `key In [value]` for every label.
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let mut out = Requirements::new();
        for (k, v) in labels {
            out.add_str(k, Requirement::is_in([v.clone()]));
        }
        out
    }

    /// From NodePool/NodeClaim requirements (with minValues).
    pub fn from_node_selector_with_min_values(
        reqs: &[NodeSelectorRequirementWithMinValues],
    ) -> Result<Self, RequirementError> {
        let mut out = Requirements::new();
        for r in reqs {
            let min_values = match r.min_values {
                None => None,
                Some(m) if (1..=50).contains(&m) => Some(m as u32),
                Some(m) => {
                    return Err(RequirementError::BadMinValues {
                        key: r.key.clone(),
                        min_values: m,
                    });
                }
            };
            out.add_str(
                &r.key,
                Requirement::from_values(&r.key, &r.operator, &r.values)?
                    .with_min_values(min_values),
            );
        }
        Ok(out)
    }

    /// From Kubernetes node selector requirements (`matchExpressions`).
    pub fn from_node_selector(reqs: &[NodeSelectorRequirement]) -> Result<Self, RequirementError> {
        let mut out = Requirements::new();
        for r in reqs {
            let values = r.values.clone().unwrap_or_default();
            out.add_str(&r.key, Requirement::new(&r.key, &r.operator, &values)?);
        }
        Ok(out)
    }

    /// From one node selector term (`matchFields` is rejected).
    pub fn from_term(term: &NodeSelectorTerm) -> Result<Self, RequirementError> {
        if term.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
            return Err(RequirementError::MatchFields);
        }
        Self::from_node_selector(term.match_expressions.as_deref().unwrap_or_default())
    }

    /// Rejects keys users may not constrain (`kubernetes.io/hostname`, `karpenter.sh/*`, ...).
    pub fn check_restricted(&self) -> Result<(), RequirementError> {
        for (key, _) in &self.entries {
            if let Some(reason) = well_known::restricted_label_reason(key) {
                return Err(RequirementError::Restricted {
                    key: key.clone(),
                    reason,
                });
            }
        }
        Ok(())
    }

    /// Serialised as NodeSelectorRequirements, sorted by key.
    pub fn to_node_selector(&self) -> Vec<NodeSelectorRequirementWithMinValues> {
        self.entries
            .iter()
            .flat_map(|(k, r)| r.to_node_selector(k))
            .collect()
    }

    /// Single-valued (`In [v]`) requirements as labels.
    pub fn single_valued_labels(&self) -> BTreeMap<String, String> {
        self.entries
            .iter()
            .filter(|(_, r)| !r.complement && r.values.len() == 1)
            .map(|(k, r)| (k.clone(), r.values[0].to_string()))
            .collect()
    }

    /// Human text for an incompatibility between `self` (the existing side) and `incoming`.
    pub fn explain(&self, incoming: &Requirements, err: &Incompatibility<String>) -> String {
        match err {
            Incompatibility::UndefinedKey(k) => {
                let mut text = format!("label {k:?} does not have known values");
                if let Some(hint) = typo_hint(k, self.keys()) {
                    text.push_str(&format!(" (typo of {hint:?}?)"));
                }
                text
            }
            Incompatibility::NoCommonValue(k) => {
                let theirs = incoming.get(k).map(ToString::to_string).unwrap_or_default();
                let ours = self.get(k).map(ToString::to_string).unwrap_or_default();
                format!("key {k}, {theirs} not in {ours}")
            }
        }
    }
}

impl fmt::Display for Requirements<String, String> {
    /// `k1 In [a], k2 Exists`, sorted by key; the hostname placeholder is hidden.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, r) in &self.entries {
            if k == well_known::HOSTNAME_LABEL {
                continue;
            }
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{k} {r}")?;
        }
        Ok(())
    }
}

/// A well-known or already-defined key that `key` looks like a typo of.
pub fn typo_hint<'a>(key: &str, defined: impl Iterator<Item = &'a String>) -> Option<String> {
    let name = key.rsplit('/').next().unwrap_or(key);
    let mut candidates: Vec<&str> = well_known::WELL_KNOWN_LABELS
        .iter()
        .chain(well_known::AWS_WELL_KNOWN_LABELS.iter())
        .copied()
        .collect();
    let defined: Vec<&String> = defined.collect();
    candidates.extend(defined.iter().map(|s| s.as_str()));
    candidates
        .into_iter()
        .find(|c| *c != key && (c.contains(key) || c.ends_with(&format!("/{name}"))))
        .map(str::to_string)
}

fn within<V: RequirementValue>(value: &V, gte: Option<i64>, lte: Option<i64>) -> bool {
    if gte.is_none() && lte.is_none() {
        return true;
    }
    match value.as_int() {
        Some(n) => gte.is_none_or(|lo| n >= lo) && lte.is_none_or(|hi| n <= hi),
        None => false,
    }
}

fn max_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn sorted_unique<V: Ord>(values: impl IntoIterator<Item = V>) -> ValueList<V> {
    let mut v: ValueList<V> = values.into_iter().collect();
    v.sort();
    v.dedup();
    v
}

fn union<V: Ord + Clone>(a: &[V], b: &[V]) -> ValueList<V> {
    let mut out = ValueList::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => {
                out.push(a[i].clone());
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                out.push(b[j].clone());
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                out.push(a[i].clone());
                i += 1;
                j += 1;
            }
        }
    }
    out.extend(a[i..].iter().cloned());
    out.extend(b[j..].iter().cloned());
    out
}

fn intersect<V: Ord + Clone>(a: &[V], b: &[V]) -> ValueList<V> {
    a.iter()
        .filter(|v| b.binary_search(v).is_ok())
        .cloned()
        .collect()
}

fn difference<V: Ord + Clone>(a: &[V], b: &[V]) -> ValueList<V> {
    a.iter()
        .filter(|v| b.binary_search(v).is_err())
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_one_value_requirement_is_small_and_needs_no_allocation() {
        assert!(std::mem::size_of::<Requirement<String>>() <= 56);
        let one = Requirement::is_in(["m5.large".to_string()]);
        assert!(!one.values.spilled(), "one value is kept inline");
        assert!(one.bounds.is_none());
        // Bounds that end up unset compare equal to never-set ones.
        let bounded = Requirement::<String>::gte(4).intersection(&Requirement::is_in(["8".into()]));
        assert_eq!(bounded, Requirement::is_in(["8".to_string()]));
        assert_eq!(Requirement::<String>::gte(4).bounds(), (Some(4), None));
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }
    fn req(op: &str, v: &[&str]) -> Requirement {
        Requirement::new("k", op, &s(v)).unwrap()
    }

    #[test]
    fn operators_round_trip_through_construction() {
        assert_eq!(req("In", &["a"]).operator(), Operator::In);
        assert_eq!(req("NotIn", &["a"]).operator(), Operator::NotIn);
        assert_eq!(req("Exists", &[]).operator(), Operator::Exists);
        assert_eq!(req("DoesNotExist", &[]).operator(), Operator::DoesNotExist);
        assert_eq!(req("Gt", &["1"]).operator(), Operator::Exists);
        assert_eq!(req("Gt", &["1"]).to_string(), "Exists >=2");
        assert_eq!(req("Lt", &["1"]).to_string(), "Exists <=0");
    }

    #[test]
    fn gte_and_lte_are_inclusive_and_equivalent_to_adjusted_gt_lt() {
        assert!(req("Gte", &["5"]).has(&"5".into()));
        assert!(!req("Gte", &["5"]).has(&"4".into()));
        assert!(req("Lte", &["5"]).has(&"5".into()));
        assert!(!req("Lte", &["5"]).has(&"6".into()));
        assert_eq!(req("Gt", &["4"]), req("Gte", &["5"]));
        assert_eq!(req("Lt", &["6"]), req("Lte", &["5"]));
        assert!(
            !req("Gt", &["1"]).has(&"abc".into()),
            "non-integers never satisfy bounds"
        );
    }

    #[test]
    fn gt_max_int_does_not_exist() {
        assert_eq!(
            req("Gt", &[&i64::MAX.to_string()]).operator(),
            Operator::DoesNotExist
        );
    }

    #[test]
    fn intersect_gte_and_lte_correctly_and_collapse_conflicts() {
        let r = req("Gte", &["2"]).intersection(&req("Lte", &["4"]));
        assert!(r.has(&"2".into()) && r.has(&"4".into()) && !r.has(&"5".into()));
        assert_eq!(r.bounds(), (Some(2), Some(4)));
        let conflict = req("Gte", &["5"]).intersection(&req("Lte", &["4"]));
        assert_eq!(conflict.operator(), Operator::DoesNotExist);
        assert!(!req("Gte", &["5"]).has_intersection(&req("Lte", &["4"])));
        // the more restrictive bound wins
        assert_eq!(
            req("Gt", &["1"]).intersection(&req("Gt", &["3"])).bounds(),
            (Some(4), None)
        );
        // In values outside bounds are dropped, bounds removed from a concrete result
        let r = req("In", &["1", "5", "x"]).intersection(&req("Gte", &["3"]));
        assert_eq!(r.values(), &["5".to_string()]);
        assert_eq!(r.bounds(), (None, None));
    }

    #[test]
    fn gte_lte_zero_boundaries() {
        assert!(req("Gte", &["0"]).has(&"0".into()));
        assert!(!req("Lte", &["0"]).has(&"1".into()));
        assert!(req("Lte", &["0"]).has(&"-1".into()));
    }

    #[test]
    fn any_returns_a_value_within_bounds() {
        assert_eq!(req("In", &["b", "a"]).any().as_deref(), Some("a"));
        let r = req("Gt", &["10"]).intersection(&req("Lt", &["13"]));
        let v = r.any().unwrap();
        assert!(r.has(&v), "{v}");
        assert!(req("NotIn", &["0", "1"]).any().is_some_and(|v| v == "2"));
        assert_eq!(req("DoesNotExist", &[]).any(), None);
    }

    #[test]
    fn intersection_table_for_every_operator_pair() {
        use Operator::*;
        // (a, b, expected operator of a∩b, expected has_intersection)
        let cases: &[(Requirement, Requirement, Operator, bool)] = &[
            (req("In", &["a", "b"]), req("In", &["b", "c"]), In, true),
            (req("In", &["a"]), req("In", &["c"]), DoesNotExist, false),
            (req("In", &["a", "b"]), req("NotIn", &["a"]), In, true),
            (req("In", &["a"]), req("NotIn", &["a"]), DoesNotExist, false),
            (req("In", &["a"]), req("Exists", &[]), In, true),
            (
                req("In", &["a"]),
                req("DoesNotExist", &[]),
                DoesNotExist,
                false,
            ),
            (req("NotIn", &["a"]), req("NotIn", &["b"]), NotIn, true),
            (req("NotIn", &["a"]), req("Exists", &[]), NotIn, true),
            (
                req("NotIn", &["a"]),
                req("DoesNotExist", &[]),
                DoesNotExist,
                false,
            ),
            (req("Exists", &[]), req("Exists", &[]), Exists, true),
            (
                req("Exists", &[]),
                req("DoesNotExist", &[]),
                DoesNotExist,
                false,
            ),
            (
                req("DoesNotExist", &[]),
                req("DoesNotExist", &[]),
                DoesNotExist,
                false,
            ),
            (req("Gt", &["1"]), req("Lt", &["5"]), Exists, true),
            (req("Gt", &["5"]), req("Lt", &["1"]), DoesNotExist, false),
            (req("In", &["3"]), req("Gt", &["1"]), In, true),
            (req("In", &["3"]), req("Lt", &["1"]), DoesNotExist, false),
            (req("Gte", &["3"]), req("Lte", &["3"]), Exists, true),
            (req("NotIn", &["3"]), req("Gte", &["3"]), NotIn, true),
        ];
        for (a, b, op, has) in cases {
            assert_eq!(a.intersection(b).operator(), *op, "{a} ∩ {b}");
            assert_eq!(b.intersection(a).operator(), *op, "{b} ∩ {a}");
            assert_eq!(a.has_intersection(b), *has, "{a} has∩ {b}");
            assert_eq!(b.has_intersection(a), *has, "{b} has∩ {a}");
        }
    }

    #[test]
    fn len_counts_values_or_the_complement() {
        assert_eq!(req("In", &["a", "b"]).len(), 2);
        assert_eq!(req("DoesNotExist", &[]).len(), 0);
        assert_eq!(req("NotIn", &["a", "b"]).len(), usize::MAX - 2);
        assert_eq!(req("Exists", &[]).len(), usize::MAX);
        assert_eq!(
            req("Gt", &["1"]).len(),
            usize::MAX,
            "bounds are not counted"
        );
        assert!(req("DoesNotExist", &[]).is_empty() && !req("NotIn", &["a"]).is_empty());
    }

    #[test]
    fn has_for_every_operator() {
        let a = "a".to_string();
        assert!(req("In", &["a"]).has(&a) && !req("In", &["b"]).has(&a));
        assert!(!req("NotIn", &["a"]).has(&a) && req("NotIn", &["b"]).has(&a));
        assert!(req("Exists", &[]).has(&a) && !req("DoesNotExist", &[]).has(&a));
        assert!(req("Gt", &["1"]).has(&"2".into()) && !req("Gt", &["1"]).has(&"1".into()));
        assert!(req("Lt", &["1"]).has(&"0".into()) && !req("Lt", &["1"]).has(&"1".into()));
    }

    #[test]
    fn min_values_keeps_the_max_in_intersection() {
        let a = req("In", &["a", "b", "c"]).with_min_values(Some(2));
        let b = req("NotIn", &["z"]).with_min_values(Some(3));
        assert_eq!(a.intersection(&b).min_values(), Some(3));
    }

    #[test]
    fn requirements_normalize_aliased_labels() {
        let mut r = Requirements::new();
        r.add_str("beta.kubernetes.io/arch", req("In", &["arm64"]));
        assert!(r.get(&"kubernetes.io/arch".to_string()).is_some());
        let labels = BTreeMap::from([(
            "failure-domain.beta.kubernetes.io/zone".to_string(),
            "z1".to_string(),
        )]);
        assert!(
            Requirements::from_labels(&labels).contains_key(&well_known::ZONE_LABEL.to_string())
        );
    }

    fn reqs(entries: &[(&str, Requirement)]) -> Requirements {
        let mut r = Requirements::new();
        for (k, v) in entries {
            r.add_str(k, v.clone());
        }
        r
    }

    #[test]
    fn compatible_with_undefined_well_known_labels_only_when_allowed() {
        let node = reqs(&[("custom", req("In", &["a"]))]);
        let pod = reqs(&[(well_known::ZONE_LABEL, req("In", &["z1"]))]);
        let allow_wk = |k: &String| well_known::is_well_known_label(k);
        assert!(
            node.compatible(&pod, allow_wk).is_ok(),
            "undefined well-known label allowed"
        );
        assert_eq!(
            node.compatible(&pod, |_| false),
            Err(Incompatibility::UndefinedKey(
                well_known::ZONE_LABEL.to_string()
            )),
            "strictly compatible: node must define the key"
        );
        let pod = reqs(&[("other", req("In", &["x"]))]);
        assert!(
            node.compatible(&pod, allow_wk).is_err(),
            "custom undefined key In"
        );
        let pod = reqs(&[("other", req("NotIn", &["x"]))]);
        assert!(
            node.compatible(&pod, allow_wk).is_ok(),
            "NotIn tolerates absence"
        );
        let pod = reqs(&[("other", req("DoesNotExist", &[]))]);
        assert!(node.compatible(&pod, allow_wk).is_ok());
        let pod = reqs(&[("other", req("Exists", &[]))]);
        assert!(node.compatible(&pod, allow_wk).is_err());
    }

    #[test]
    fn displays_an_error_message_for_unknown_labels_with_typo_hint() {
        let node = reqs(&[("custom", req("In", &["a"]))]);
        let pod = reqs(&[("topology.kubernetes.io/zon", req("In", &["z"]))]);
        let err = node.compatible(&pod, |_| false).unwrap_err();
        let text = node.explain(&pod, &err);
        assert!(text.contains("does not have known values"), "{text}");
        assert!(
            text.contains("typo of \"topology.kubernetes.io/zone\""),
            "{text}"
        );
    }

    #[test]
    fn converts_to_node_selector_requirements_including_both_bounds() {
        let r = reqs(&[
            ("n", req("Gte", &["2"]).intersection(&req("Lte", &["9"]))),
            ("a", req("In", &["x", "y"])),
        ]);
        let ns = r.to_node_selector();
        assert_eq!(ns.len(), 3);
        assert_eq!((ns[0].key.as_str(), ns[0].operator.as_str()), ("a", "In"));
        assert_eq!(
            (
                ns[1].operator.as_str(),
                ns[1].values.first().unwrap_or_default()
            ),
            ("Gte", "2")
        );
        assert_eq!(
            (
                ns[2].operator.as_str(),
                ns[2].values.first().unwrap_or_default()
            ),
            ("Lte", "9")
        );
        let back = Requirements::from_node_selector_with_min_values(&ns).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn stringifies_in_key_order_and_elides_long_lists() {
        let r = reqs(&[
            ("b", req("In", &["1", "2", "3", "4", "5", "6", "7"])),
            ("a", req("Exists", &[])),
        ]);
        assert_eq!(r.to_string(), "a Exists, b In [1, 2, 3, 4, 5 and 2 others]");
    }

    #[test]
    fn rejects_bad_input_naming_the_key() {
        let e = Requirement::new("k", "Gt", &s(&["x"])).unwrap_err();
        assert!(e.to_string().contains("\"k\""), "{e}");
        assert!(Requirement::new("k", "Has", &[] as &[&str]).is_err());
        assert!(Requirement::new("k", "In", &[] as &[&str]).is_err());
        assert!(Requirement::new("k", "Exists", &s(&["a"])).is_err());
        let r = reqs(&[(well_known::HOSTNAME_LABEL, req("In", &["n"]))]);
        assert!(r.check_restricted().is_err());
        let r = reqs(&[("karpenter.sh/foo", req("In", &["n"]))]);
        assert!(r.check_restricted().is_err());
        let r = reqs(&[("kubernetes.io/custom", req("In", &["n"]))]);
        assert!(
            r.check_restricted().is_ok(),
            "kubernetes domains allowed (v1.9+)"
        );
    }

    // ---- property tests -----------------------------------------------------------------------

    fn arb_requirement() -> impl Strategy<Value = Requirement> {
        let values = prop::collection::vec(
            prop::sample::select(vec!["0", "1", "2", "3", "a", "b"]),
            0..4,
        );
        (0usize..8, values, -1i64..5).prop_map(|(op, vals, n)| {
            let vals: Vec<String> = vals.into_iter().map(String::from).collect();
            match op {
                0 if !vals.is_empty() => Requirement::is_in(vals),
                0 | 1 => Requirement::not_in(vals),
                2 => Requirement::exists(),
                3 => Requirement::does_not_exist(),
                4 => Requirement::gt(n),
                5 => Requirement::lt(n),
                6 => Requirement::gte(n),
                _ => Requirement::lte(n),
            }
        })
    }

    fn arb_value() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["-1", "0", "1", "2", "3", "4", "5", "a", "b", "c"])
            .prop_map(String::from)
    }

    proptest! {
        #[test]
        fn intersection_is_commutative(a in arb_requirement(), b in arb_requirement()) {
            let (ab, ba) = (a.intersection(&b), b.intersection(&a));
            for v in ["-1", "0", "1", "2", "3", "4", "a", "b", "c"] {
                prop_assert_eq!(ab.has(&v.to_string()), ba.has(&v.to_string()));
            }
            prop_assert_eq!(ab.operator(), ba.operator());
        }

        #[test]
        fn intersection_is_idempotent(a in arb_requirement()) {
            let aa = a.intersection(&a);
            for v in ["-1", "0", "1", "2", "3", "4", "a", "b", "c"] {
                prop_assert_eq!(aa.has(&v.to_string()), a.has(&v.to_string()));
            }
        }

        #[test]
        fn membership_of_intersection_is_conjunction(a in arb_requirement(), b in arb_requirement(), v in arb_value()) {
            prop_assert_eq!(a.intersection(&b).has(&v), a.has(&v) && b.has(&v));
        }

        #[test]
        fn intersection_is_associative(a in arb_requirement(), b in arb_requirement(), c in arb_requirement(), v in arb_value()) {
            prop_assert_eq!(a.intersection(&b).intersection(&c).has(&v), a.intersection(&b.intersection(&c)).has(&v));
        }

        #[test]
        fn concrete_has_intersection_agrees_with_intersection(a in arb_requirement(), b in arb_requirement()) {
            // For concrete (In) sides the allocation-free check is exact.
            if !a.is_complement() || !b.is_complement() {
                let i = a.intersection(&b);
                prop_assert_eq!(a.has_intersection(&b), !i.values().is_empty());
            }
        }

        #[test]
        fn serialization_round_trips(a in arb_requirement()) {
            let mut r = Requirements::new();
            r.add_str("k", a.clone());
            let back = Requirements::from_node_selector_with_min_values(&r.to_node_selector()).unwrap();
            for v in ["-1", "0", "1", "2", "3", "4", "a", "b", "c"] {
                let v = v.to_string();
                prop_assert_eq!(back.get(&"k".to_string()).map(|x| x.has(&v)), Some(a.has(&v)));
            }
        }
    }
}
