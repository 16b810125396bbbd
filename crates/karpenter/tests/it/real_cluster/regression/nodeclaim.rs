//! Upstream `test/suites/regression/nodeclaim_test.go`.
