//! In-flight NodeClaims indexed for the per-pod scan.
//!
//! Pods try in-flight claims fewest pods first (ties: oldest first). A plain ordered list makes
//! every pod walk past every claim its requirements rule out (a zonal affinity pod past all the
//! claims pinned to other zones), which is quadratic at scale. Claims are therefore grouped by
//! *signature* — (NodePool, requirements) — and each group keeps its claims ordered by
//! (pod count, index). Claims of one signature answer the requirement-level checks (pool taints,
//! topology on the keys the requirements pin) identically, so a pod checks each signature once and
//! walks only the groups that can take it, merged back into the global order. A workload has a
//! handful of signatures (one per combination of pinned zone, capacity type, ...), so the merge
//! is cheap, and moving a claim after a placement is two `O(log n)` set operations instead of
//! shifting a vector of every claim.
//!
//! Within a signature, claims are further split by *room class*: the bit length of the CPU they
//! have left. When NodeClaims cannot grow (a pool of one size), most of them end up nearly full,
//! and a pod that needs a new claim would walk past every one; a pod needing `r` millicores skips
//! the classes whose claims all have less than `r` left without looking at them (the order of
//! the claims it does try is unchanged). A claim without room for the smallest queued pod is not
//! in the index at all (see `Engine::claim_add`).
//!
//! Room classes are octaves, so a pod still walked the claims of its own class that had less
//! CPU than it needs, and every claim whose memory was used up: at 100,000 pods ~1,500 claims
//! per pod, growing with the claims. Claims that cannot hold the current pod's CPU or memory are
//! therefore *parked* (kept aside by their room): when filed with less room than the current
//! need, or when a pod walks one and finds it too full. A parked claim comes back when a pod
//! needs no more CPU and memory than it has left ([`ClaimIndex::set_need`]). A pod never sees a
//! parked claim and every parked claim is too full for it, so what a pod tries, and in which
//! order, is unchanged. The queue is ordered by CPU then memory, largest first, so the need
//! changes once per distinct request (plus retries), and a claim is parked at most once per
//! placement or change of need: the walk no longer grows with the claims.
//!
//! A claim's room is not one point: its types may trade CPU for memory (a 4-vCPU type with
//! 30 GiB allocatable next to 8-vCPU types with 28.6 GiB), and the per-resource maximum mixes
//! them, so a claim could have both the CPU and the memory a pod needs, only not on one type. At
//! 200,000 pods such claims were most of the walk. A claim is therefore parked under each of its rooms — one per
//! (CPU, memory) shape of its types that no other shape covers, usually one or two — and comes
//! back as soon as one of them holds the need.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::BinaryHeap;
use std::collections::btree_set;

use super::super::intern::{FxMap, Reqs};

/// A parked claim: (signature, room class, order key).
type ParkedClaim = (u32, u8, (u32, u32));

/// A claim's room (or a pod's need) in (CPU millicores, memory bytes).
pub(super) type Room = (i64, i64);

/// Whether one of `rooms` holds `need`.
pub(super) fn any_fits(rooms: impl IntoIterator<Item = Room>, need: Room) -> bool {
    rooms.into_iter().any(|room| fits(room, need))
}

fn fits(room: Room, need: Room) -> bool {
    room.0 >= need.0 && room.1 >= need.1
}

/// The room class of `room` millicores (or any amount): its bit length, 0 for nothing left.
pub(super) fn room_class(room: i64) -> u8 {
    if room <= 0 {
        0
    } else {
        // At most 64: fits a u8.
        (64 - room.leading_zeros()) as u8
    }
}

/// The lowest room class that can hold a claim with `need` left: classes below hold less.
pub(super) fn first_class_for(need: i64) -> u8 {
    room_class(need)
}

/// One (NodePool, requirements) combination and its claims.
pub(super) struct Signature {
    pub pool: usize,
    pub reqs: Reqs,
    /// Per room class: (pod count, claim index), the order claims are tried in.
    classes: Vec<BTreeSet<(u32, u32)>>,
}

pub(super) struct ClaimIndex {
    /// Per pool: requirements → signature id.
    ids: Vec<FxMap<Reqs, u32>>,
    signatures: Vec<Signature>,
    /// The (CPU, memory) the pod being placed needs: claims with less room are parked.
    need: Room,
    /// Parked claims by CPU room, then memory room: (signature, room class, order key), once
    /// per room of the claim.
    parked: BTreeMap<i64, BTreeMap<i64, Vec<ParkedClaim>>>,
    /// Parked claim → the rooms it is parked under.
    parked_room: FxMap<u32, Vec<Room>>,
}

impl Default for ClaimIndex {
    fn default() -> Self {
        ClaimIndex {
            ids: Vec::new(),
            signatures: Vec::new(),
            // Nothing is parked until a pod says what it needs.
            need: (i64::MIN, i64::MIN),
            parked: BTreeMap::new(),
            parked_room: FxMap::default(),
        }
    }
}

impl ClaimIndex {
    pub fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    /// The signature id of (`pool`, `reqs`), created on first use.
    pub fn signature(&mut self, pool: usize, reqs: &Reqs) -> u32 {
        if self.ids.len() <= pool {
            self.ids.resize_with(pool + 1, FxMap::default);
        }
        if let Some(&id) = self.ids[pool].get(reqs) {
            return id;
        }
        let id = u32::try_from(self.signatures.len()).unwrap_or(u32::MAX);
        self.signatures.push(Signature {
            pool,
            reqs: reqs.clone(),
            classes: Vec::new(),
        });
        self.ids[pool].insert(reqs.clone(), id);
        id
    }

    /// Files `claim` (with `pods` pods and `rooms` left, in room class `class`) under
    /// `signature`, or parks it when none of its rooms holds what the current pod needs.
    pub fn insert(&mut self, signature: u32, class: u8, pods: usize, claim: usize, rooms: &[Room]) {
        let key = order_key(pods, claim);
        if any_fits(rooms.iter().copied(), self.need) {
            self.file(signature, class, key);
        } else {
            self.park_key(signature, class, key, rooms);
        }
    }

    /// Parks a filed claim that turned out too full for the current pod (none of `rooms` holds
    /// its need).
    pub fn park(&mut self, signature: u32, class: u8, pods: usize, claim: usize, rooms: &[Room]) {
        let key = order_key(pods, claim);
        if let Some(set) = self
            .signatures
            .get_mut(signature as usize)
            .and_then(|s| s.classes.get_mut(usize::from(class)))
            && set.remove(&key)
        {
            self.park_key(signature, class, key, rooms);
        }
    }

    fn park_key(&mut self, signature: u32, class: u8, key: (u32, u32), rooms: &[Room]) {
        for &room in rooms {
            self.parked
                .entry(room.0)
                .or_default()
                .entry(room.1)
                .or_default()
                .push((signature, class, key));
        }
        self.parked_room.insert(key.1, rooms.to_vec());
    }

    /// Takes the claim of `key` off the list of those parked under `room`.
    fn unlist(&mut self, room: Room, key: (u32, u32)) {
        if let Some(by_memory) = self.parked.get_mut(&room.0) {
            if let Some(list) = by_memory.get_mut(&room.1) {
                list.retain(|&(_, _, k)| k != key);
                if list.is_empty() {
                    by_memory.remove(&room.1);
                }
            }
            if by_memory.is_empty() {
                self.parked.remove(&room.0);
            }
        }
    }

    fn file(&mut self, signature: u32, class: u8, key: (u32, u32)) {
        if let Some(s) = self.signatures.get_mut(signature as usize) {
            let class = usize::from(class);
            if s.classes.len() <= class {
                s.classes.resize_with(class + 1, BTreeSet::new);
            }
            s.classes[class].insert(key);
        }
    }

    /// The pod about to be placed needs `need`: claims parked with at least that much room come
    /// back; claims filed from now on with less are parked.
    pub fn set_need(&mut self, need: Room) {
        if need == self.need {
            return;
        }
        let mut back = Vec::new();
        for by_memory in self.parked.range_mut(need.0..).map(|(_, m)| m) {
            back.extend(by_memory.split_off(&need.1).into_values().flatten());
        }
        self.parked.retain(|_, m| !m.is_empty());
        for (signature, class, key) in back {
            // A claim parked under several rooms that hold the need comes back once; its rooms
            // that do not hold it are still listed.
            let Some(rooms) = self.parked_room.remove(&key.1) else {
                continue;
            };
            for &room in rooms.iter().filter(|&&room| !fits(room, need)) {
                self.unlist(room, key);
            }
            self.file(signature, class, key);
        }
        self.need = need;
    }

    pub fn remove(&mut self, signature: u32, class: u8, pods: usize, claim: usize) {
        let key = order_key(pods, claim);
        if let Some(rooms) = self.parked_room.remove(&key.1) {
            for room in rooms {
                self.unlist(room, key);
            }
            return;
        }
        if let Some(set) = self
            .signatures
            .get_mut(signature as usize)
            .and_then(|s| s.classes.get_mut(usize::from(class)))
        {
            set.remove(&key);
        }
    }

    /// The claims of `signatures` in room classes from `min_class` up, fewest pods first (ties:
    /// lowest index), as one sequence.
    pub fn in_order(&self, signatures: &[u32], min_class: u8) -> InOrder<'_> {
        let mut heads: Vec<btree_set::Iter<'_, (u32, u32)>> = signatures
            .iter()
            .filter_map(|&s| self.signatures.get(s as usize))
            .flat_map(|s| s.classes.iter().skip(usize::from(min_class)))
            .filter(|set| !set.is_empty())
            .map(|set| set.iter())
            .collect();
        let next = heads
            .iter_mut()
            .enumerate()
            .filter_map(|(i, h)| h.next().map(|&key| Reverse((key, i))))
            .collect();
        InOrder { heads, next }
    }
}

fn order_key(pods: usize, claim: usize) -> (u32, u32) {
    (
        u32::try_from(pods).unwrap_or(u32::MAX),
        u32::try_from(claim).unwrap_or(u32::MAX),
    )
}

/// A k-way merge of the ordered claim sets (a heap of each set's next claim).
pub(super) struct InOrder<'a> {
    heads: Vec<btree_set::Iter<'a, (u32, u32)>>,
    next: BinaryHeap<Reverse<((u32, u32), usize)>>,
}

impl Iterator for InOrder<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let Reverse(((_, claim), head)) = self.next.pop()?;
        if let Some(&key) = self.heads[head].next() {
            self.next.push(Reverse((key, head)));
        }
        Some(claim as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_signatures_in_pod_count_then_index_order() {
        let mut index = ClaimIndex::default();
        let a = index.signature(0, &Reqs::new());
        let mut pinned = Reqs::new();
        pinned.add(
            1,
            crate::requirements::Requirement::is_in([super::super::super::intern::Sym {
                id: 7,
                int: None,
            }]),
        );
        let b = index.signature(0, &pinned);
        assert_eq!(
            index.signature(0, &Reqs::new()),
            a,
            "same requirements, same signature"
        );
        assert_ne!(a, b);
        index.insert(a, 3, 2, 0, &[(5, 0)]);
        index.insert(b, 3, 1, 1, &[(6, 0)]);
        index.insert(a, 5, 1, 2, &[(20, 0)]);
        index.insert(b, 3, 3, 3, &[(7, 0)]);
        let all: Vec<usize> = index.in_order(&[a, b], 0).collect();
        assert_eq!(all, vec![1, 2, 0, 3]);
        let only_b: Vec<usize> = index.in_order(&[b], 0).collect();
        assert_eq!(only_b, vec![1, 3]);
        // A placement moves claim 2 from (1 pod) to (2 pods) in another signature and class.
        index.remove(a, 5, 1, 2);
        index.insert(b, 4, 2, 2, &[(10, 0)]);
        let all: Vec<usize> = index.in_order(&[a, b], 0).collect();
        assert_eq!(all, vec![1, 0, 2, 3]);
        // Claims in classes below the pod's need are skipped, the others keep their order.
        let roomy: Vec<usize> = index.in_order(&[a, b], 4).collect();
        assert_eq!(roomy, vec![2]);
    }

    #[test]
    fn claims_with_less_room_than_the_pod_needs_are_parked_until_a_smaller_pod_comes() {
        let mut index = ClaimIndex::default();
        let a = index.signature(0, &Reqs::new());
        const GI: i64 = 1 << 30;
        index.set_need((1000, GI));
        index.insert(a, room_class(300), 4, 0, &[(300, 8 * GI)]);
        index.insert(a, room_class(1200), 2, 1, &[(1200, 8 * GI)]);
        index.insert(a, room_class(700), 3, 2, &[(700, 8 * GI)]);
        index.insert(a, room_class(2000), 1, 3, &[(2000, GI / 2)]);
        assert_eq!(index.in_order(&[a], 0).collect::<Vec<_>>(), vec![1]);
        // A bigger pod parks nothing that is already filed; a walk that finds a claim too full
        // parks it.
        index.set_need((1500, GI));
        assert_eq!(index.in_order(&[a], 0).collect::<Vec<_>>(), vec![1]);
        index.park(a, room_class(1200), 2, 1, &[(1200, 8 * GI)]);
        assert_eq!(index.in_order(&[a], 0).count(), 0);
        // A 500m pod brings back the 700m and 1200m claims, not the 300m one nor the one
        // without memory; the order is pod count.
        index.set_need((500, GI));
        assert_eq!(index.in_order(&[a], 0).collect::<Vec<_>>(), vec![1, 2]);
        // Less memory brings the memory-full claim back.
        index.set_need((500, GI / 4));
        assert_eq!(index.in_order(&[a], 0).collect::<Vec<_>>(), vec![3, 1, 2]);
        // A parked claim that is removed (placed elsewhere) never comes back.
        index.remove(a, room_class(300), 4, 0);
        index.set_need((0, 0));
        assert_eq!(index.in_order(&[a], 0).collect::<Vec<_>>(), vec![3, 1, 2]);
        index.insert(a, room_class(300), 5, 0, &[(300, GI)]);
        assert_eq!(
            index.in_order(&[a], 0).collect::<Vec<_>>(),
            vec![3, 1, 2, 0]
        );
    }

    #[test]
    fn a_claim_with_two_shapes_is_parked_until_one_of_them_holds_the_need() {
        let mut index = ClaimIndex::default();
        let a = index.signature(0, &Reqs::new());
        const GI: i64 = 1 << 30;
        // A 4-vCPU type with the most memory, an 8-vCPU one with less.
        let two_shapes = [(3000, 3 * GI), (7000, GI)];
        index.set_need((4000, 2 * GI));
        index.insert(a, room_class(7000), 1, 0, &two_shapes);
        index.insert(a, room_class(5000), 2, 1, &[(5000, 4 * GI)]);
        assert_eq!(
            index.in_order(&[a], 0).collect::<Vec<_>>(),
            vec![1],
            "both resources are there, not on one type"
        );
        // Either shape that holds the need brings it back, once.
        index.set_need((2000, 2 * GI));
        assert_eq!(index.in_order(&[a], 0).collect::<Vec<_>>(), vec![0, 1]);
        index.park(a, room_class(7000), 1, 0, &two_shapes);
        index.set_need((6000, GI));
        assert_eq!(
            index.in_order(&[a], 0).collect::<Vec<_>>(),
            vec![0, 1],
            "the 8-vCPU shape holds it (claim 1 stays filed until a walk parks it)"
        );
        // Removed while parked: gone from under both its rooms.
        index.set_need((8000, 4 * GI));
        index.park(a, room_class(7000), 1, 0, &two_shapes);
        index.remove(a, room_class(7000), 1, 0);
        assert!(index.parked_room.is_empty());
        assert_eq!(index.parked.values().map(BTreeMap::len).sum::<usize>(), 0);
        index.set_need((0, 0));
        assert_eq!(index.in_order(&[a], 0).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn a_class_below_the_need_never_has_room_for_it() {
        for need in [1_i64, 2, 3, 100, 1000, 1500, 4096, 8000] {
            let first = first_class_for(need);
            for room in 0..need.saturating_mul(3) {
                if room_class(room) < first {
                    assert!(room < need, "room {room} skipped for need {need}");
                }
            }
            assert_eq!(room_class(need / 2), first - 1, "half the need is skipped");
        }
        assert_eq!(first_class_for(0), 0);
        assert_eq!(room_class(-5), 0);
    }
}
