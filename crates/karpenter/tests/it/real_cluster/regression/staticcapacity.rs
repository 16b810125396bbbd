//! Upstream `test/suites/regression/staticcapacity_test.go`.
