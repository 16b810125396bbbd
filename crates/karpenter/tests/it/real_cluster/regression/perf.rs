//! Upstream `test/suites/regression/perf_test.go`.
