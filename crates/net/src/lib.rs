//! ustack-net (skeleton; filled in by its owner).
