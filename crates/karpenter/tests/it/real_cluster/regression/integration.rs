//! Upstream `test/suites/regression/integration_test.go`.
