//! Invariants of the orchestration machine over random commands and nodes.
