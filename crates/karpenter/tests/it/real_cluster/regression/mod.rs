//! Upstream Karpenter's kwok regression suite (kubernetes-sigs/karpenter `test/suites/regression`),
//! translated: one test per upstream `It` (or `DescribeTable` entry), named after it, in a module
//! per upstream file, run with the `sim` provider on the real control plane. Upstream's
//! `BeforeEach` (suite_test.go) is `env.rs`.
//! Where an expectation cannot apply here, `docs/conformance.md` ("Upstream's regression suite")
//! says why.

pub(crate) mod env;

mod capacitybuffer;
mod chaos;
mod drift;
mod expiration;
mod integration;
mod nodeclaim;
mod perf;
mod staticcapacity;
mod termination;
