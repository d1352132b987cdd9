//! ustack-ipc (skeleton; filled in by its owner).
