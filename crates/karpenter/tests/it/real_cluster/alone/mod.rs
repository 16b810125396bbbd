//! Tests whose assertion is a duration on the real control plane. `scripts/test.sh` runs them in
//! a step of their own, one at a time and after the other real-cluster tests, so the durations
//! they measure are the cluster's and the controller's, not those of a machine shared with four
//! other control planes and their controllers (on CI's 2 cores the late tail's test failed
//! beside them while it passed alone).

mod late_tail;
