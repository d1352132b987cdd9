//! ustack-relay (in progress).
