//! The fixed-size IPC message: one 64-byte cache line.

/// Size of a message in bytes (one cache line).
pub const MESSAGE_SIZE: usize = 64;
/// Size of the user payload of a message.
pub const PAYLOAD_SIZE: usize = 56;

/// What kind of message this is; filled in by the IPC, never by the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MsgKind {
    /// Not a delivered message (a freshly built one).
    None = 0,
    /// Sent with `send`.
    Send = 1,
    /// Sent with `sendrec`: the sender is waiting for a reply.
    SendRec = 2,
    /// A notification (from `notify`); payload word 0 holds the delivery time (ns, monotonic).
    Notify = 3,
}

impl MsgKind {
    pub(crate) fn from_u8(v: u8) -> MsgKind {
        match v {
            1 => MsgKind::Send,
            2 => MsgKind::SendRec,
            3 => MsgKind::Notify,
            _ => MsgKind::None,
        }
    }
}

/// A message: an 8-byte header and a 56-byte payload, 64-byte aligned.
///
/// `source` and `kind` are set by the IPC on delivery (a sender cannot forge them);
/// `mtype` and `payload` are the sender's.
///
/// ```
/// use ustack_ipc::Message;
/// let m = Message::new(7).with_u64(0, 42).with_u64(6, 1);
/// assert_eq!(m.mtype, 7);
/// assert_eq!(m.u64_at(0), 42);
/// assert_eq!(std::mem::size_of::<Message>(), 64);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Message {
    /// Source endpoint (filled in by the IPC).
    pub source: i32,
    /// Kind of message (filled in by the IPC), see [`MsgKind`]; raw value.
    pub kind: u8,
    /// Reserved, zero.
    pub flags: u8,
    /// User-defined message type.
    pub mtype: u16,
    /// User payload.
    pub payload: [u8; PAYLOAD_SIZE],
}

impl Default for Message {
    fn default() -> Self {
        Message {
            source: 0,
            kind: 0,
            flags: 0,
            mtype: 0,
            payload: [0; PAYLOAD_SIZE],
        }
    }
}

impl Message {
    /// A zeroed message of user type `mtype`.
    pub fn new(mtype: u16) -> Message {
        Message {
            mtype,
            ..Message::default()
        }
    }

    /// The kind of message, decoded.
    pub fn kind(&self) -> MsgKind {
        MsgKind::from_u8(self.kind)
    }

    /// Is this a notification?
    pub fn is_notify(&self) -> bool {
        self.kind() == MsgKind::Notify
    }

    /// Payload word `i` (0..7) as a little-endian u64; 0 if `i` is out of range.
    pub fn u64_at(&self, i: usize) -> u64 {
        let mut b = [0u8; 8];
        match self.payload.get(i * 8..i * 8 + 8) {
            Some(s) => {
                b.copy_from_slice(s);
                u64::from_le_bytes(b)
            }
            None => 0,
        }
    }

    /// Set payload word `i` (0..7); out-of-range indexes are ignored.
    pub fn set_u64(&mut self, i: usize, v: u64) {
        if let Some(s) = self.payload.get_mut(i * 8..i * 8 + 8) {
            s.copy_from_slice(&v.to_le_bytes());
        }
    }

    /// Builder form of [`Message::set_u64`].
    pub fn with_u64(mut self, i: usize, v: u64) -> Message {
        self.set_u64(i, v);
        self
    }
}

const _: () = assert!(std::mem::size_of::<Message>() == MESSAGE_SIZE);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_words() {
        let mut m = Message::new(3);
        for i in 0..7 {
            m.set_u64(i, i as u64 * 1000 + 1);
        }
        for i in 0..7 {
            assert_eq!(m.u64_at(i), i as u64 * 1000 + 1);
        }
        m.set_u64(7, 99);
        assert_eq!(m.u64_at(7), 0);
        assert_eq!(m.kind(), MsgKind::None);
        assert_eq!(MsgKind::from_u8(3), MsgKind::Notify);
        assert_eq!(MsgKind::from_u8(200), MsgKind::None);
    }
}
