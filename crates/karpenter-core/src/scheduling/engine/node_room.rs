//! Which existing nodes might still have room: a max-tree over the nodes' remaining resources.
//!
//! A pod tries the existing nodes in order and takes the first that passes every check. On a
//! large, busy cluster most nodes fail on resources, and consolidation asks this question for
//! every pod of every candidate, so walking all nodes made the solve pods × nodes. The tree keeps,
//! per range of nodes, the most of each resource any of them has left; a range where even that
//! maximum is short of the pod's request holds no node with room and is skipped whole. Nodes it
//! yields still go through the full check: the tree only skips nodes the resource check would
//! refuse, so the first node found is the same as with the plain walk.

use crate::scheduling::intern::ResVec;

/// Remaining amount recorded for a node taken away: below any request, even a zero one.
const GONE: i64 = -1;

#[derive(Debug, Default)]
pub(super) struct NodeRoom {
    /// Leaves (a power of two, at least the node count).
    leaves: usize,
    /// Resource slots tracked; requests beyond them are not used to skip (the full check sees them).
    width: usize,
    /// Heap-ordered segments (index 1 is the root), `width` amounts each: per resource, the
    /// most any node of the segment has left. Padding leaves hold [`GONE`].
    max: Vec<i64>,
}

impl NodeRoom {
    /// A tree over `remaining` (node order), tracking `width` resource slots.
    pub(super) fn new<'r>(
        remaining: impl ExactSizeIterator<Item = &'r ResVec>,
        width: usize,
    ) -> Self {
        let leaves = remaining.len().max(1).next_power_of_two();
        let mut room = NodeRoom {
            leaves,
            width,
            max: vec![GONE; 2 * leaves * width],
        };
        for (i, r) in remaining.enumerate() {
            let at = (leaves + i) * width;
            for (slot, amount) in room.max[at..at + width].iter_mut().enumerate() {
                *amount = r.get(slot);
            }
        }
        for segment in (1..leaves).rev() {
            room.pull_up(segment);
        }
        room
    }

    /// Node `i` now has `remaining` left (`None`: taken away, no room at all).
    pub(super) fn set(&mut self, i: usize, remaining: Option<&ResVec>) {
        if i >= self.leaves || self.width == 0 {
            return;
        }
        let at = (self.leaves + i) * self.width;
        for (slot, amount) in self.max[at..at + self.width].iter_mut().enumerate() {
            *amount = remaining.map_or(GONE, |r| r.get(slot));
        }
        let mut segment = (self.leaves + i) / 2;
        while segment >= 1 {
            self.pull_up(segment);
            segment /= 2;
        }
    }

    /// The first node at or after `from` that may have room for `requests` (every tracked
    /// resource at least the request); `None` when no later node has. Climbs from the leaf, so
    /// stepping to a neighbour that fits costs one leaf check, and a skip costs the log of its
    /// length.
    pub(super) fn next_fit(&self, from: usize, requests: &ResVec) -> Option<usize> {
        if from >= self.leaves {
            return None;
        }
        if self.width == 0 {
            // Nothing tracked: every node may fit.
            return Some(from);
        }
        let mut segment = self.leaves + from;
        if self.may_fit(segment, requests) {
            return Some(from);
        }
        // Up, searching each right sibling on the way. A segment's maxima may come from
        // different nodes, so a search that finds no leaf goes on climbing.
        while segment > 1 {
            if segment.is_multiple_of(2)
                && let Some(found) = self.search(segment + 1, requests)
            {
                return Some(found);
            }
            segment /= 2;
        }
        None
    }

    /// The leftmost leaf under `segment` with room for `requests`.
    fn search(&self, segment: usize, requests: &ResVec) -> Option<usize> {
        if !self.may_fit(segment, requests) {
            return None;
        }
        if segment >= self.leaves {
            return Some(segment - self.leaves);
        }
        self.search(2 * segment, requests)
            .or_else(|| self.search(2 * segment + 1, requests))
    }

    /// Whether node `i` may have room for `requests` (as [`next_fit`](Self::next_fit) judges).
    pub(super) fn fits_at(&self, i: usize, requests: &ResVec) -> bool {
        i < self.leaves && (self.width == 0 || self.may_fit(self.leaves + i, requests))
    }

    fn may_fit(&self, segment: usize, requests: &ResVec) -> bool {
        let at = segment * self.width;
        self.max[at..at + self.width]
            .iter()
            .enumerate()
            .all(|(slot, &most)| most >= requests.get(slot))
    }

    fn pull_up(&mut self, segment: usize) {
        let w = self.width;
        for slot in 0..w {
            let left = self.max[2 * segment * w + slot];
            let right = self.max[(2 * segment + 1) * w + slot];
            self.max[segment * w + slot] = left.max(right);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(v: &[i64]) -> ResVec {
        ResVec(v.to_vec())
    }

    /// The plain walk the tree stands in for: the first node with every resource covered.
    fn walk(nodes: &[Option<ResVec>], from: usize, req: &ResVec) -> Option<usize> {
        (from..nodes.len()).find(|&i| {
            nodes[i]
                .as_ref()
                .is_some_and(|r| r.first_exceeded_sum(req, &ResVec::default()).is_none())
        })
    }

    #[test]
    fn finds_the_same_node_as_the_walk_through_updates_and_removals() {
        let mut nodes: Vec<Option<ResVec>> = (0..13)
            .map(|i| Some(res(&[(i * 37 % 11) * 100, (i * 53 % 7) * 100])))
            .collect();
        let initial: Vec<ResVec> = nodes.iter().flatten().cloned().collect();
        let mut room = NodeRoom::new(initial.iter(), 2);
        let requests = [
            res(&[0, 0]),
            res(&[300, 0]),
            res(&[500, 400]),
            res(&[1000, 600]),
            res(&[2000, 0]),
        ];
        for step in 0..40i64 {
            let i = usize::try_from(step * 7 % 13).unwrap();
            nodes[i] = match step % 3 {
                0 => None,
                _ => Some(res(&[(step * 29 % 11) * 100, (step % 7) * 100])),
            };
            room.set(i, nodes[i].as_ref());
            for req in &requests {
                for from in [0, 3, 12] {
                    assert_eq!(
                        room.next_fit(from, req),
                        walk(&nodes, from, req),
                        "step {step} req {req:?} from {from}"
                    );
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn next_fit_is_the_first_node_the_walk_finds(
            initial in proptest::collection::vec(proptest::collection::vec(0i64..4, 0..4), 1..40),
            updates in proptest::collection::vec(
                (0usize..40, proptest::option::of(proptest::collection::vec(0i64..4, 0..4))),
                0..30,
            ),
            requests in proptest::collection::vec(proptest::collection::vec(0i64..4, 0..4), 1..5),
            from in 0usize..45,
        ) {
            let mut nodes: Vec<Option<ResVec>> = initial.into_iter().map(|r| Some(ResVec(r))).collect();
            let initial: Vec<ResVec> = nodes.iter().flatten().cloned().collect();
            let mut room = NodeRoom::new(initial.iter(), 3);
            for (i, update) in updates {
                if i < nodes.len() {
                    nodes[i] = update.map(ResVec);
                    room.set(i, nodes[i].as_ref());
                }
            }
            for req in requests {
                // Requests beyond the tracked width may be yielded and refused by the caller;
                // within it the tree and the walk agree exactly.
                let req = ResVec(req.into_iter().take(3).collect());
                let found = room.next_fit(from, &req).filter(|&n| n < nodes.len());
                proptest::prop_assert_eq!(found, walk(&nodes, from, &req));
            }
        }
    }

    #[test]
    fn a_removed_node_has_no_room_even_for_a_pod_that_requests_nothing() {
        let mut room = NodeRoom::new([res(&[0]), res(&[0])].iter(), 1);
        assert_eq!(room.next_fit(0, &res(&[0])), Some(0));
        room.set(0, None);
        assert_eq!(room.next_fit(0, &res(&[0])), Some(1));
        room.set(1, None);
        assert_eq!(room.next_fit(0, &res(&[])), None);
    }
}
