//! Upstream `test/suites/regression/chaos_test.go`.
