//! TCP (RFC 9293) — being written.
