//! Upstream `test/suites/regression/drift_test.go`.
