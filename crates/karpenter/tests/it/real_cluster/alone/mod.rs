//! Tests whose assertion is a duration on the real control plane: the late tail of a burst
//! (issue 34) and `simulate`'s rollout times against the controller's (issue 33's parity).
//! `scripts/test.sh` runs them in a step of their own, after the other real-cluster tests and
//! two at a time, so what they time is the cluster's and the controller's, not a machine shared
//! with four control planes running upstream's heavier specs.

mod late_tail;
mod parity;
