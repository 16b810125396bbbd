//! A requirement's values, kept as one string.
//!
//! A NodeClaim's `node.kubernetes.io/instance-type` requirement lists up to 600 instance types
//! (upstream's `MaxInstanceTypes`). As 600 `String`s that is ~24 KB per NodeClaim (24 bytes each
//! plus a heap allocation per name), most of what the controller held per node at 1,000 nodes
//! (heaptrack, docs/benchmarks.md); joined into one string with their end offsets it is about
//! half. On the wire and in the CRD schema it is the same list of strings.
//!
//! The storage is shared: a clone is a pointer, and [`ValuesPool`] lets the cluster state keep
//! one copy of a list many NodeClaims carry (the NodeClaims of one plan list the same instance
//! types), instead of one per NodeClaim (heaptrack at 1,000 nodes: ~25 MB of NodeClaims, most
//! of it these lists).

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A list of strings stored in one shared allocation (plus one for their ends).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Values {
    shared: Arc<Joined>,
}

#[derive(Default, PartialEq, Eq, Hash)]
struct Joined {
    joined: Box<str>,
    /// The end of each value in `joined` (its start is the previous end).
    ends: Box<[usize]>,
}

impl Values {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.shared.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shared.ends.is_empty()
    }

    /// The value at `index`.
    pub fn get(&self, index: usize) -> Option<&str> {
        let ends = &self.shared.ends;
        let end = *ends.get(index)?;
        let start = match index.checked_sub(1) {
            Some(before) => ends.get(before).copied().unwrap_or(0),
            None => 0,
        };
        self.shared.joined.get(start..end)
    }

    /// Whether both share one storage (a clone of the other, or given by one [`ValuesPool`]).
    pub fn shares_storage_with(&self, other: &Values) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    pub fn first(&self) -> Option<&str> {
        self.get(0)
    }

    pub fn iter(&self) -> Iter<'_> {
        Iter {
            values: self,
            front: 0,
            back: self.len(),
        }
    }

    pub fn contains(&self, value: &str) -> bool {
        self.iter().any(|v| v == value)
    }

    /// Keeps the values `keep` says yes to, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        *self = self.iter().filter(|v| keep(v)).collect();
    }

    /// The values as owned strings.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_string).collect()
    }
}

/// The values in order.
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    values: &'a Values,
    front: usize,
    back: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.front >= self.back {
            return None;
        }
        let value = self.values.get(self.front);
        self.front += 1;
        value
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.back.saturating_sub(self.front);
        (left, Some(left))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front >= self.back {
            return None;
        }
        self.back -= 1;
        self.values.get(self.back)
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Values {
    type Item = &'a str;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for Values {
    type Item = String;
    type IntoIter = std::vec::IntoIter<String>;

    fn into_iter(self) -> Self::IntoIter {
        self.to_vec().into_iter()
    }
}

/// Like a `Vec`'s: out of range panics (tests read fixed lists this way).
impl std::ops::Index<usize> for Values {
    type Output = str;

    fn index(&self, index: usize) -> &str {
        match self.get(index) {
            Some(value) => value,
            None => panic!("index {index} out of range for {} values", self.len()),
        }
    }
}

impl<S: AsRef<str>> FromIterator<S> for Values {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let mut joined = String::new();
        let mut ends = Vec::new();
        for value in iter {
            joined.push_str(value.as_ref());
            ends.push(joined.len());
        }
        Values {
            shared: Arc::new(Joined {
                joined: joined.into_boxed_str(),
                ends: ends.into_boxed_slice(),
            }),
        }
    }
}

/// One copy of each distinct list handed to [`ValuesPool::share`]: equal lists come back
/// sharing their storage. Lists no one else holds any more leave at [`ValuesPool::prune`].
#[derive(Clone, Debug, Default)]
pub struct ValuesPool {
    lists: HashSet<Values>,
}

impl ValuesPool {
    /// Lists shorter than this are cheaper kept apart than looked up.
    const SHARED_FROM: usize = 2;

    /// Replaces `values` with the pool's equal list, or adds it as the pool's copy.
    pub fn share(&mut self, values: &mut Values) {
        if values.len() < Self::SHARED_FROM {
            return;
        }
        match self.lists.get(values) {
            Some(kept) => *values = kept.clone(),
            None => {
                self.lists.insert(values.clone());
            }
        }
    }

    /// Drops the lists only the pool still holds.
    pub fn prune(&mut self) {
        self.lists.retain(|v| Arc::strong_count(&v.shared) > 1);
    }

    /// How many distinct lists the pool holds.
    pub fn len(&self) -> usize {
        self.lists.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }
}

impl From<Vec<String>> for Values {
    fn from(values: Vec<String>) -> Self {
        values.into_iter().collect()
    }
}

impl From<Vec<&str>> for Values {
    fn from(values: Vec<&str>) -> Self {
        values.into_iter().collect()
    }
}

impl<const N: usize> From<[&str; N]> for Values {
    fn from(values: [&str; N]) -> Self {
        values.into_iter().collect()
    }
}

impl<S: AsRef<str>> PartialEq<Vec<S>> for Values {
    fn eq(&self, other: &Vec<S>) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a == b.as_ref())
    }
}

impl<S: AsRef<str>, const N: usize> PartialEq<[S; N]> for Values {
    fn eq(&self, other: &[S; N]) -> bool {
        self.len() == N && self.iter().zip(other).all(|(a, b)| a == b.as_ref())
    }
}

impl fmt::Debug for Values {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Values {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Values {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<Cow<'de, str>>::deserialize(deserializer).map(Values::from_iter)
    }
}

impl JsonSchema for Values {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        <Vec<String>>::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        <Vec<String>>::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_as_the_list_they_were_made_from() {
        let values = Values::from(vec!["m5.large", "", "c6g.xlarge"]);
        assert_eq!(values.len(), 3);
        assert_eq!(values.get(1), Some(""));
        assert_eq!(values.get(3), None);
        assert_eq!(values.first(), Some("m5.large"));
        assert!(values.contains("c6g.xlarge") && !values.contains("m5"));
        assert_eq!(
            values.iter().rev().collect::<Vec<_>>(),
            ["c6g.xlarge", "", "m5.large"]
        );
        assert_eq!(values, vec!["m5.large", "", "c6g.xlarge"]);
        assert!(Values::new().is_empty());
        assert_eq!(Values::new().first(), None);
    }

    #[test]
    fn a_pool_gives_equal_lists_one_storage_and_forgets_lists_no_one_holds() {
        let mut pool = ValuesPool::default();
        let mut first = Values::from(["m5.large", "m5.xlarge", "c5.large"]);
        let mut second: Values =
            serde_json::from_str(r#"["m5.large","m5.xlarge","c5.large"]"#).unwrap();
        let mut other = Values::from(["m5.large", "c5.large"]);
        pool.share(&mut first);
        pool.share(&mut second);
        pool.share(&mut other);
        assert!(second.shares_storage_with(&first));
        assert!(!other.shares_storage_with(&first));
        assert_eq!(second, ["m5.large", "m5.xlarge", "c5.large"]);
        assert_eq!(pool.len(), 2);
        // One value is kept apart: not worth a lookup.
        let mut single = Values::from(["m5.large"]);
        pool.share(&mut single);
        assert_eq!(pool.len(), 2);
        drop(other);
        pool.prune();
        assert_eq!(pool.len(), 1, "the list no one holds is gone");
        drop((first, second));
        pool.prune();
        assert!(pool.is_empty());
    }

    #[test]
    fn values_are_a_list_of_strings_on_the_wire_and_in_the_schema() {
        let values: Values = serde_json::from_str(r#"["a\"b", "é", "x"]"#).unwrap();
        assert_eq!(values, ["a\"b", "é", "x"]);
        assert_eq!(
            serde_json::to_string(&values).unwrap(),
            r#"["a\"b","é","x"]"#
        );
        assert!(serde_json::from_str::<Values>(r#""a""#).is_err());
        let ours = schemars::schema_for!(Values);
        let list = schemars::schema_for!(Vec<String>);
        assert_eq!(ours.get("type"), list.get("type"));
        assert_eq!(ours.get("items"), list.get("items"));
    }
}
