//! Upstream `test/suites/regression/termination_test.go`.
