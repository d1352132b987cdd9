//! ustack-dev (skeleton; filled in by its owner).
