//! Per-run limits and the new-flow rate limiter.

use std::time::{Duration, Instant};

/// Limits on what one guest may make the relay hold. Hitting one refuses the
/// new flow (TCP: RST; UDP/ICMP: dropped) and is counted in [`crate::Stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Concurrent flows (TCP + UDP + ICMP). Default 16384.
    pub max_flows: usize,
    /// TCP connections whose host-side connect (or guest-side handshake for
    /// inbound forwards) has not completed. Default 256.
    pub max_half_open: usize,
    /// Bytes buffered per flow and direction. Default 256 KiB. The relay
    /// keeps no queues of its own: the bytes sit in the guest stack's TCP
    /// buffers. The relay stops reading a host socket while the guest holds
    /// this much for the flow unacknowledged; the other direction is the
    /// guest connection's receive buffer. `ustack run` sizes the guest's
    /// send and receive buffers to this (a guest send buffer larger than it
    /// works too, but the flow is then re-pumped on every iteration while
    /// at the limit, since only a full buffer is reported by the guest).
    pub flow_buffer: usize,
    /// The most a flow's host -> guest buffer grows to. It starts at
    /// `flow_buffer` and grows with the guest-side connection's congestion
    /// window (twice its bytes, Linux's send-buffer autotuning), so a guest
    /// that reads fast gets a buffer covering its bandwidth-delay product
    /// and a slow one does not hold megabytes. Default 4 MiB (Linux
    /// `tcp_wmem[2]`); at most `flow_buffer` keeps the buffer fixed. A flow
    /// grows past `flow_buffer` only into what is left below half of
    /// `total_buffer` (memory pressure beyond), so a few fast flows cannot
    /// take the whole budget and shut new flows out.
    pub flow_buffer_max: usize,
    /// Bytes buffered in all flows together ([`crate::Relay::buffered`]).
    /// Default 64 MiB. Reached, new flows are refused and host sockets are
    /// not read until it frees up; the guest's data still drains to the
    /// host. What the guest itself sends is bounded by the windows it was
    /// offered (`flow_buffer` per flow, `max_flows` flows), not by this, so
    /// a guest writing to hosts that do not read can take `buffered` past
    /// it by up to that much.
    pub total_buffer: usize,
    /// New flows per second (token bucket, burst of the same size). Default 10,000.
    pub new_flows_per_sec: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_flows: 16_384,
            max_half_open: 256,
            flow_buffer: 256 * 1024,
            flow_buffer_max: 4 * 1024 * 1024,
            total_buffer: 64 * 1024 * 1024,
            new_flows_per_sec: 10_000,
        }
    }
}

/// Timeouts for flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Host-side connect (then ICMP host unreachable). Default 30 s.
    pub tcp_connect: Duration,
    /// Established TCP flow with no traffic either way. Default 2 h.
    pub tcp_idle: Duration,
    /// A TCP flow half-closed (one FIN) with no traffic. Default 120 s.
    pub tcp_half_closed: Duration,
    /// UDP flow with no traffic. Default 60 s.
    pub udp_idle: Duration,
    /// ICMP echo flow with no traffic. Default 10 s.
    pub icmp_idle: Duration,
    /// After the command exits, how long the relay keeps serving so that
    /// what the guest's kernel still sends for closed sockets (the rest of
    /// an upload, the FIN) reaches the host. It stops earlier once every
    /// TCP flow has finished on the guest side. Default 2 s.
    pub exit_drain: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tcp_connect: Duration::from_secs(30),
            tcp_idle: Duration::from_secs(7200),
            tcp_half_closed: Duration::from_secs(120),
            udp_idle: Duration::from_secs(60),
            icmp_idle: Duration::from_secs(10),
            exit_drain: Duration::from_secs(2),
        }
    }
}

/// Token bucket: `rate` tokens per second, at most `rate` stored.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: u32,
    tokens_milli: u64,
    last: Option<Instant>,
}

impl TokenBucket {
    pub fn new(rate: u32) -> TokenBucket {
        TokenBucket {
            rate,
            tokens_milli: u64::from(rate) * 1000,
            last: None,
        }
    }

    /// Take one token if available.
    pub fn take(&mut self, now: Instant) -> bool {
        let cap = u64::from(self.rate) * 1000;
        if let Some(last) = self.last {
            let elapsed_ms = now.saturating_duration_since(last).as_millis();
            let add = u64::try_from(elapsed_ms)
                .unwrap_or(u64::MAX)
                .saturating_mul(u64::from(self.rate));
            self.tokens_milli = self.tokens_milli.saturating_add(add).min(cap);
        }
        self.last = Some(now);
        if self.tokens_milli >= 1000 {
            self.tokens_milli -= 1000;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_burst_then_refills_at_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10);
        for _ in 0..10 {
            assert!(b.take(t0));
        }
        assert!(!b.take(t0), "burst exhausted");
        assert!(!b.take(t0 + Duration::from_millis(50)), "half a token");
        assert!(
            b.take(t0 + Duration::from_millis(110)),
            "one token after 100 ms"
        );
        assert!(!b.take(t0 + Duration::from_millis(110)));
        // A long pause refills only up to the burst.
        let later = t0 + Duration::from_secs(100);
        for _ in 0..10 {
            assert!(b.take(later));
        }
        assert!(!b.take(later));
    }

    #[test]
    fn zero_rate_refuses_everything() {
        let mut b = TokenBucket::new(0);
        assert!(!b.take(Instant::now()));
    }
}
