//! What a NodeClaim's instance types can hold: per type, its allocatable beyond its daemonset
//! overhead (its *room*), summarised once per set of types.
//!
//! A pod walking the in-flight NodeClaims is first checked against this summary, before the
//! full check (requirements merge, topology, the walk of the claim's types). The summary used
//! to be the per-resource maximum over the types; but the largest CPU and the largest memory
//! often come from different types (on c/m `2xlarge`, the 4-vCPU `m2.2xlarge` has the most
//! memory, the 8-vCPU `m5.2xlarge` the most CPU), so a claim whose pods use 4 vCPU and 29 GiB
//! passed for a pod of 1 GiB that no type can hold, and the full check refused it: at 200,000
//! pods of the diverse benchmark mix, 1.4 M such refusals, most of the walk. The summary is now
//! the *Pareto front* of the rooms (those no other room covers in every resource): a total fits
//! some type's room exactly when it fits one room of the front, and the front of a catalogue's
//! types is a handful of shapes. The claim index parks a claim by the (CPU, memory) front (see
//! `claim_index`); the maximum stays the upper bound its room classes are cut by.

use super::super::intern::{CPU, MEMORY, ResVec};
use super::claim_index::Room;

/// The rooms of one set of instance types.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct TypeRooms {
    /// Per resource, the most any of the types has (at least zero): an upper bound on what the
    /// claim can still take, which the claim index parks it by.
    pub max: ResVec,
    /// The rooms no other room covers in every resource, all of one length.
    front: Vec<ResVec>,
    /// The (CPU, memory) of the rooms no other room covers in both.
    pub cpu_memory: Vec<Room>,
}

impl TypeRooms {
    /// The summary of `rooms` (one per type, any lengths; missing slots are zero).
    pub fn new(rooms: impl IntoIterator<Item = ResVec>) -> Self {
        let mut rooms: Vec<ResVec> = rooms.into_iter().collect();
        let width = rooms.iter().map(|r| r.0.len()).max().unwrap_or(0);
        let mut max = ResVec::default();
        for room in &mut rooms {
            room.0.resize(width, 0);
            for (slot, &amount) in room.0.iter().enumerate() {
                if amount > max.get(slot) {
                    max.set(slot, amount);
                }
            }
        }
        rooms.sort_unstable_by(|a, b| b.0.cmp(&a.0));
        let front = uncovered(rooms, covers);
        // Every room is covered by one of the front, so its projection by that one's.
        let mut cpu_memory: Vec<Room> = front
            .iter()
            .map(|room| (room.get(CPU), room.get(MEMORY)))
            .collect();
        cpu_memory.sort_unstable_by(|a, b| b.cmp(a));
        let cpu_memory = uncovered(cpu_memory, |k, room| k.0 >= room.0 && k.1 >= room.1);
        TypeRooms {
            max,
            front,
            cpu_memory,
        }
    }

    /// Whether `a + b` fits the room of at least one of the types.
    pub fn fits_sum(&self, a: &ResVec, b: &ResVec) -> bool {
        self.front.iter().any(|room| room.fits_sum(a, b))
    }
}

/// The items no other item covers, from `sorted` in lexicographically decreasing order: an item
/// that covers another is never after it, so one that nothing kept so far covers is on the front
/// (whatever covers it came first, and is kept or covered by a kept item itself).
fn uncovered<T: PartialEq>(mut sorted: Vec<T>, covers: impl Fn(&T, &T) -> bool) -> Vec<T> {
    sorted.dedup();
    let mut front: Vec<T> = Vec::new();
    for item in sorted {
        if !front.iter().any(|kept| covers(kept, &item)) {
            front.push(item);
        }
    }
    front
}

/// Whether `big` has at least `small` in every slot (both of one length).
fn covers(big: &ResVec, small: &ResVec) -> bool {
    big.0.iter().zip(&small.0).all(|(b, s)| b >= s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: i64 = 1 << 30;

    fn res(v: &[i64]) -> ResVec {
        ResVec(v.to_vec())
    }

    #[test]
    fn a_total_within_the_maximum_of_two_types_but_fitting_neither_is_refused() {
        // (CPU millicores, memory, pods): an m2.2xlarge-like and an m5.2xlarge-like type.
        let rooms = TypeRooms::new([res(&[3920, 30 * GI, 118]), res(&[7910, 28 * GI, 58])]);
        assert_eq!(rooms.max, res(&[7910, 30 * GI, 118]));
        let claim = res(&[3000, 27 * GI, 8]);
        assert!(
            !rooms.fits_sum(&claim, &res(&[1000, 2 * GI, 1])),
            "the CPU only the m5 has with the memory only the m2 has"
        );
        assert!(
            rooms.fits_sum(&claim, &res(&[1000, 0, 1])),
            "the m5 holds it"
        );
        assert!(
            rooms.fits_sum(&claim, &res(&[0, 2 * GI, 1])),
            "the m2 holds it"
        );
    }

    #[test]
    fn covered_and_repeated_rooms_leave_the_front() {
        let rooms = TypeRooms::new([
            res(&[4, 4]),
            res(&[2, 2]),
            res(&[4, 4]),
            res(&[1, 8]),
            res(&[4]),
            res(&[8, 1, 0]),
        ]);
        assert_eq!(
            rooms.front,
            vec![res(&[8, 1, 0]), res(&[4, 4, 0]), res(&[1, 8, 0])]
        );
        assert_eq!(rooms.max, res(&[8, 8]));
        assert_eq!(rooms.cpu_memory, vec![(8, 1), (4, 4), (1, 8)]);
        let rooms = TypeRooms::new([res(&[4, 4, 1]), res(&[4, 4, 2]), res(&[2, 8, 0])]);
        assert_eq!(rooms.front.len(), 2, "[4, 4, 1] is covered");
        assert_eq!(rooms.cpu_memory, vec![(4, 4), (2, 8)]);
    }

    #[test]
    fn no_types_hold_nothing_and_negative_rooms_do_not_lower_the_maximum() {
        let none = TypeRooms::new([]);
        assert!(!none.fits_sum(&res(&[]), &res(&[])));
        assert_eq!(none.max, res(&[]));
        // Overhead beyond allocatable: the room is negative, the maximum stays at zero.
        let short = TypeRooms::new([res(&[-5, 3])]);
        assert_eq!(short.max, res(&[0, 3]));
        assert!(!short.fits_sum(&res(&[0]), &res(&[])));
        assert!(short.fits_sum(&res(&[-5]), &res(&[0, 3])));
    }

    proptest::proptest! {
        #[test]
        fn a_total_fits_the_front_exactly_when_it_fits_some_type(
            rooms in proptest::collection::vec(proptest::collection::vec(-2i64..6, 0..4), 0..12),
            a in proptest::collection::vec(0i64..6, 0..5),
            b in proptest::collection::vec(0i64..6, 0..5),
        ) {
            let rooms: Vec<ResVec> = rooms.into_iter().map(ResVec).collect();
            let (a, b) = (ResVec(a), ResVec(b));
            let summary = TypeRooms::new(rooms.iter().cloned());
            let any_type = rooms.iter().any(|room| room.fits_sum(&a, &b));
            proptest::prop_assert_eq!(summary.fits_sum(&a, &b), any_type);
            // The maximum stays an upper bound: whatever fits a type fits it.
            if any_type {
                proptest::prop_assert!(summary.max.fits_sum(&a, &b));
            }
            // The (CPU, memory) front holds a need exactly when some type does.
            let need = (a.get(0), a.get(1));
            proptest::prop_assert_eq!(
                super::super::claim_index::any_fits(summary.cpu_memory.iter().copied(), need),
                rooms.iter().any(|room| room.get(0) >= need.0 && room.get(1) >= need.1)
            );
            // The front is made of rooms none of which covers another.
            for (i, x) in summary.front.iter().enumerate() {
                for (j, y) in summary.front.iter().enumerate() {
                    proptest::prop_assert!(i == j || !covers(x, y));
                }
            }
        }
    }
}
