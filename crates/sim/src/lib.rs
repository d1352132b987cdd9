//! Deterministic simulation harness (being written).
