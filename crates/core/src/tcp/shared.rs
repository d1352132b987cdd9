//! What the connections of one socket table share, passed to each
//! connection as it runs (rather than kept, once per connection, in each).

/// State shared by all the connections of one socket table (one stack).
#[derive(Debug, Default)]
pub struct TcpShared {
    /// Where a segment's payload is gathered when it wraps around the end
    /// of the send ring. One per table instead of one (of the route MSS,
    /// up to 64 KB) per connection; it grows to the largest segment sent.
    pub(crate) scratch: Vec<u8>,
}

impl TcpShared {
    pub fn new() -> TcpShared {
        TcpShared::default()
    }
}
