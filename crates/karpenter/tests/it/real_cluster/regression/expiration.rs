//! Upstream `test/suites/regression/expiration_test.go`.
