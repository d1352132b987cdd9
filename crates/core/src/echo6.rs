//! ICMPv6 echo from the stack (`ustack ping` to an IPv6 address): the
//! request goes out as `icmp_echo_send` sends an IPv4 one; replies join
//! the same queue ([`Stack::icmp_echo_replies`]).

use std::net::{IpAddr, Ipv6Addr};

use ustack_wire::icmpv6::Icmpv6Repr;

use crate::error::IcmpError;
use crate::iface::TxError;
use crate::stack::{EchoReply, Stack};
use crate::time::Instant;

impl Stack {
    /// The source address the stack picks for IPv6 destination `dst`
    /// (unspecified when it has none).
    pub fn ipv6_source_for(&self, dst: Ipv6Addr) -> Ipv6Addr {
        self.iface.source6(dst)
    }

    /// Send an ICMPv6 echo request to `dst` from the source address chosen
    /// for it; the reply comes back through
    /// [`icmp_echo_replies`](Self::icmp_echo_replies) with `from` set to
    /// `dst` and `ttl` to the reply's hop limit.
    pub fn icmp6_echo_send(
        &mut self,
        now: Instant,
        dst: Ipv6Addr,
        ident: u16,
        seq: u16,
        payload: &[u8],
    ) -> Result<(), IcmpError> {
        if dst.is_unspecified() || dst.to_ipv4_mapped().is_some() {
            return Err(IcmpError::InvalidAddress);
        }
        if payload.len() > 65535 - 8 {
            return Err(IcmpError::TooLarge);
        }
        if !self.txq.has_room(self.frames_bytes(48 + payload.len())) {
            return Err(IcmpError::Exhausted);
        }
        let src = self.iface.source6(dst);
        if src.is_unspecified() || self.iface.route6(dst).is_none() {
            self.counters.ip6.OutNoRoutes += 1;
            return Err(IcmpError::NoRoute);
        }
        let repr = Icmpv6Repr::EchoRequest {
            ident,
            seq_no: seq,
            data: payload,
        };
        let mut q = std::mem::take(&mut self.txq);
        let r = self.send_icmp6(now, src, dst, &repr, &mut |f| q.push(now, f));
        self.txq = q;
        match r {
            Ok(()) => {
                self.counters.icmp6.OutEchos += 1;
                Ok(())
            }
            Err(TxError::NoRoute) => Err(IcmpError::NoRoute),
            Err(TxError::TooLarge) => Err(IcmpError::TooLarge),
        }
    }

    /// Keep an ICMPv6 echo reply for `icmp_echo_replies` (the receive
    /// path's hook).
    pub(crate) fn record_echo6(
        &mut self,
        now: Instant,
        from: Ipv6Addr,
        hop_limit: u8,
        ident: u16,
        seq: u16,
        len: usize,
    ) {
        self.record_echo(EchoReply {
            from: IpAddr::V6(from),
            ident,
            seq,
            len,
            ttl: hop_limit,
            at: now,
        });
    }
}
