//! Per-solve interning of label keys, label values and resource names to small integers, so the
//! hot path compares integers instead of strings. Nothing here is global: each scheduler owns one.

use std::collections::HashMap;
use std::fmt;

use karpenter_api::well_known;

use crate::requirements::{Requirement, RequirementValue, Requirements};
use crate::resources::{self, Quantity, ResourceList};

/// A fast, non-cryptographic hasher (FxHash) for the solver's internal maps; keys are our own
/// integers and requirement sets, never attacker-chosen strings of unbounded size.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FxBuild = std::hash::BuildHasherDefault<FxHasher>;
pub(crate) type FxMap<K, V> = HashMap<K, V, FxBuild>;

/// An interned label key.
pub(crate) type Key = u32;

/// An interned label value; carries its integer reading so `Gt`/`Lt` bounds need no lookup.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sym {
    pub id: u32,
    pub int: Option<i64>,
}

impl PartialEq for Sym {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl Eq for Sym {}
impl PartialOrd for Sym {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Sym {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.id.cmp(&other.id)
    }
}
impl std::hash::Hash for Sym {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}
impl RequirementValue for Sym {
    fn as_int(&self) -> Option<i64> {
        self.int
    }
}

pub(crate) type Req = Requirement<Sym>;
pub(crate) type Reqs = Requirements<Key, Sym>;

#[derive(Default)]
pub(crate) struct Interner {
    keys: Vec<String>,
    key_ids: FxMap<String, Key>,
    well_known: Vec<bool>,
    values: Vec<String>,
    value_ids: FxMap<String, Sym>,
    extra_well_known: Vec<String>,
    resource_names: Vec<String>,
    resource_ids: FxMap<String, usize>,
}

pub(crate) const CPU: usize = 0;
pub(crate) const MEMORY: usize = 1;
pub(crate) const PODS: usize = 2;

impl Interner {
    pub fn new(extra_well_known: &[String]) -> Self {
        let mut i = Interner {
            extra_well_known: extra_well_known.to_vec(),
            ..Default::default()
        };
        for name in [
            resources::CPU,
            resources::MEMORY,
            resources::PODS,
            resources::EPHEMERAL_STORAGE,
        ] {
            i.resource(name);
        }
        i
    }

    pub fn key(&mut self, key: &str) -> Key {
        if let Some(&id) = self.key_ids.get(key) {
            return id;
        }
        let id = self.keys.len() as Key;
        self.keys.push(key.to_string());
        self.key_ids.insert(key.to_string(), id);
        let wk =
            well_known::is_well_known_label(key) || self.extra_well_known.iter().any(|k| k == key);
        self.well_known.push(wk);
        id
    }

    pub fn value(&mut self, value: &str) -> Sym {
        if let Some(&sym) = self.value_ids.get(value) {
            return sym;
        }
        let sym = Sym {
            id: self.values.len() as u32,
            int: value.parse().ok(),
        };
        self.values.push(value.to_string());
        self.value_ids.insert(value.to_string(), sym);
        sym
    }

    pub fn key_str(&self, key: Key) -> &str {
        &self.keys[key as usize]
    }

    pub fn value_str(&self, sym: Sym) -> &str {
        &self.values[sym.id as usize]
    }

    pub fn is_well_known(&self, key: Key) -> bool {
        self.well_known[key as usize]
    }

    pub fn reqs(&mut self, reqs: &Requirements) -> Reqs {
        let mut out = Reqs::new();
        for (k, r) in reqs.iter() {
            let key = self.key(k);
            out.add(key, r.map_values(|v| self.value(v)));
        }
        out
    }

    pub fn req_to_string(&self, req: &Req) -> Requirement<String> {
        req.map_values(|v| self.value_str(*v).to_string())
    }

    pub fn reqs_to_strings(&self, reqs: &Reqs) -> Requirements {
        reqs.map(
            |k| self.key_str(*k).to_string(),
            |v| self.value_str(*v).to_string(),
        )
    }

    pub fn resource(&mut self, name: &str) -> usize {
        if let Some(&i) = self.resource_ids.get(name) {
            return i;
        }
        let i = self.resource_names.len();
        self.resource_names.push(name.to_string());
        self.resource_ids.insert(name.to_string(), i);
        i
    }

    pub fn resource_name(&self, i: usize) -> &str {
        &self.resource_names[i]
    }

    pub fn resources(&mut self, list: &ResourceList) -> ResVec {
        let mut v = ResVec::default();
        for (name, q) in list.iter() {
            let i = self.resource(name);
            v.set(i, q.millis());
        }
        v
    }

    pub fn resource_list(&self, v: &ResVec) -> ResourceList {
        v.0.iter()
            .enumerate()
            .filter(|(_, m)| **m != 0)
            .map(|(i, m)| (self.resource_names[i].clone(), Quantity::from_millis(*m)))
            .collect()
    }

    /// `cpu=2, memory=4Gi` for messages.
    pub fn resources_text(&self, v: &ResVec) -> String {
        let parts: Vec<String> =
            v.0.iter()
                .enumerate()
                .filter(|(_, m)| **m != 0)
                .map(|(i, m)| format!("{}={}", self.resource_names[i], Quantity::from_millis(*m)))
                .collect();
        parts.join(", ")
    }
}

/// Resource amounts in milli-units, indexed by interned resource name; missing slots are zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct ResVec(pub Vec<i64>);

impl ResVec {
    pub fn get(&self, i: usize) -> i64 {
        self.0.get(i).copied().unwrap_or(0)
    }

    pub fn set(&mut self, i: usize, value: i64) {
        if self.0.len() <= i {
            self.0.resize(i + 1, 0);
        }
        self.0[i] = value;
    }

    pub fn add(&mut self, other: &ResVec) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a = a.saturating_add(*b);
        }
    }

    pub fn sub_floor_zero(&mut self, other: &ResVec) {
        for (i, b) in other.0.iter().enumerate() {
            let a = self.get(i);
            self.set(i, a.saturating_sub(*b).max(0));
        }
    }

    pub fn min_with(&mut self, other: &ResVec) {
        let n = self.0.len().max(other.0.len());
        for i in 0..n {
            let m = self.get(i).min(other.get(i));
            self.set(i, m);
        }
    }

    /// Whether `a + b` fits in `self` for every resource (`b` may be empty).
    pub fn fits_sum(&self, a: &ResVec, b: &ResVec) -> bool {
        let n = a.0.len().max(b.0.len());
        (0..n).all(|i| a.get(i).saturating_add(b.get(i)) <= self.get(i))
    }

    /// The first resource `a + b` needs more of than `self` has.
    pub fn first_exceeded_sum(&self, a: &ResVec, b: &ResVec) -> Option<usize> {
        let n = a.0.len().max(b.0.len());
        (0..n).find(|&i| a.get(i).saturating_add(b.get(i)) > self.get(i))
    }
}

impl fmt::Display for Sym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.id)
    }
}
