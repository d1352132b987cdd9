//! Initial sequence numbers (RFC 6528).
//!
//! RFC 6528 3: "ISN = M + F(localip, localport, remoteip, remoteport,
//! secretkey) where M is the 4 microsecond timer, and F() is a pseudorandom
//! function (PRF) of the connection-id. F() MUST NOT be computable from the
//! outside, or an attacker could still guess at sequence numbers from the ISN
//! for some other connection." F is SipHash-1-3 keyed with the stack secret;
//! M comes from the injected clock.

use core::hash::Hasher;
use std::net::SocketAddrV4;

use siphasher::sip::SipHasher13;
use ustack_wire::tcp::SeqNum;

use crate::time::Instant;

/// ISN generator keyed by a secret.
#[derive(Clone)]
pub struct Isn {
    k0: u64,
    k1: u64,
}

impl core::fmt::Debug for Isn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Isn { .. }") // never print the key
    }
}

impl Isn {
    pub fn new(secret: [u8; 16]) -> Self {
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        a.copy_from_slice(&secret[..8]);
        b.copy_from_slice(&secret[8..]);
        // Domain-separate from other users of the same secret.
        Isn {
            k0: u64::from_le_bytes(a) ^ 0x7463_705f_6973_6e00,
            k1: u64::from_le_bytes(b),
        }
    }

    /// The keyed function F of the connection id.
    fn f(&self, local: SocketAddrV4, remote: SocketAddrV4) -> u32 {
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        h.write(&local.ip().octets());
        h.write(&local.port().to_be_bytes());
        h.write(&remote.ip().octets());
        h.write(&remote.port().to_be_bytes());
        h.finish() as u32
    }

    pub fn generate(&self, local: SocketAddrV4, remote: SocketAddrV4, now: Instant) -> SeqNum {
        let m = (now.total_micros() / 4) as u32;
        SeqNum(m.wrapping_add(self.f(local, remote)))
    }

    /// A per-connection timestamp offset (RFC 7323 5.4 recommends a random
    /// offset so TSval does not reveal uptime).
    pub fn ts_offset(&self, local: SocketAddrV4, remote: SocketAddrV4) -> u32 {
        self.f(remote, local).rotate_left(7)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn isn_depends_on_tuple_key_and_clock() {
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000);
        let b = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80);
        let c = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 81);
        let g = Isn::new([1; 16]);
        let t = Instant::from_secs(1);
        assert_eq!(g.generate(a, b, t), g.generate(a, b, t));
        assert_ne!(g.generate(a, b, t), g.generate(a, c, t));
        assert_ne!(g.generate(a, b, t), Isn::new([2; 16]).generate(a, b, t));
        // M advances by one every 4 us.
        let d = g.generate(a, b, t + crate::time::Duration::from_micros(400)) - g.generate(a, b, t);
        assert_eq!(d, 100);
    }
}
