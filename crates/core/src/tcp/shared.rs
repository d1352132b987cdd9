//! What the connections of one socket table share, passed to each
//! connection as it runs (rather than kept, once per connection, in each):
//! the stack-wide challenge ACK budget, a scratch buffer, the link's TSO
//! size and the path MTU search's tunables.

use bytes::Bytes;

use crate::hash::keyed_hash;
use crate::time::{Duration, Instant};

use super::TcpConfig;

/// Domain of the keyed hash that draws each second's budget.
const BUDGET_DOMAIN: u64 = 0x6368_616c_6c65_6e67; // "challeng"

/// State shared by all the connections of one socket table (one stack).
#[derive(Debug, Clone)]
pub struct TcpShared {
    /// The stack-wide challenge ACK budget (RFC 5961 7).
    pub(crate) challenge: ChallengeAckLimit,
    /// Where a segment's payload is gathered when it is copied from more
    /// than one chunk of the send buffer. One per table instead of one (of the route MSS,
    /// up to 64 KB) per connection; it grows to the largest segment sent.
    pub(crate) scratch: Vec<u8>,
    /// Largest payload of one TSO super-segment when the link takes TCP
    /// GSO frames (cut into MSS-sized segments by the other side); 0 = one
    /// segment per MSS.
    pub(crate) tso_max: usize,
    /// The link's queue drops every datagram (`Stack::set_local_drop`):
    /// data segments fail to leave.
    pub(crate) local_drop: bool,
    /// The path MTU search's tunables (`TcpConfig::probe_threshold`,
    /// `probe_interval`), read only when a probe may be sent.
    pub(crate) probe: ProbeTunables,
    /// Data payloads go to `emit` by reference to the send buffer (see
    /// `Connection::dispatch_ext`) instead of copied into the segment.
    pub(crate) zero_copy: bool,
    /// Where those references are collected (kept: no allocation per
    /// segment).
    pub(crate) refs: Vec<Bytes>,
}

/// See [`TcpShared::probe`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProbeTunables {
    pub(crate) threshold: usize,
    pub(crate) interval: Duration,
}

impl TcpShared {
    /// `secret` keys the draw of each second's challenge ACK budget.
    pub fn new(cfg: &TcpConfig, secret: [u8; 16]) -> TcpShared {
        TcpShared {
            challenge: ChallengeAckLimit::new(cfg.challenge_ack_limit, secret),
            scratch: Vec::new(),
            tso_max: 0,
            local_drop: false,
            zero_copy: false,
            refs: Vec::new(),
            probe: ProbeTunables {
                threshold: usize::from(cfg.probe_threshold),
                interval: cfg.probe_interval,
            },
        }
    }
}

impl Default for TcpShared {
    /// The default configuration's budget, drawn with an all-zero secret.
    fn default() -> TcpShared {
        TcpShared::new(&TcpConfig::default(), [0; 16])
    }
}

/// RFC 5961 7: "An implementation SHOULD include an ACK throttling
/// mechanism to be conservative. ... the system administrator [can]
/// configure the number of challenge ACKs that can be sent out in a given
/// interval." The stack-wide half of Linux's two limits
/// (`tcp_challenge_ack_limit`); each connection's own (one per 500 ms)
/// comes first. Like Linux since 4.7 (CVE-2016-5696), a second's budget
/// is not `limit` itself but drawn between `limit/2` and `limit*3/2 - 1`,
/// so that an off-path attacker cannot count the challenge ACKs its own
/// probes use up to learn whether its spoofed segments hit a connection.
/// The draw is a keyed hash of the second (the engine has no random
/// source): unpredictable without the secret, reproducible with it.
#[derive(Debug, Clone)]
pub(crate) struct ChallengeAckLimit {
    /// Average per second; `u32::MAX`: no stack-wide limit.
    limit: u32,
    secret: [u8; 16],
    /// The second whose budget `left` is.
    second: Option<u64>,
    left: u32,
}

impl ChallengeAckLimit {
    pub(crate) fn new(limit: u32, secret: [u8; 16]) -> ChallengeAckLimit {
        ChallengeAckLimit {
            limit,
            secret,
            second: None,
            left: 0,
        }
    }

    /// A new limit per second (`tcp_challenge_ack_limit`), from the next
    /// second on.
    pub(crate) fn set_limit(&mut self, limit: u32) {
        self.limit = limit;
    }

    /// May one more challenge ACK go out at `now`? (Takes it if so.)
    pub(crate) fn take(&mut self, now: Instant) -> bool {
        if self.limit == u32::MAX {
            return true;
        }
        let second = now.total_micros() / 1_000_000;
        if self.second != Some(second) {
            self.second = Some(second);
            self.left = self.budget(second);
        }
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        true
    }

    /// Linux: `half + prandom_u32_max(limit)` with `half = (limit + 1) / 2`.
    fn budget(&self, second: u64) -> u32 {
        if self.limit == 0 {
            return 0;
        }
        let half = self.limit.div_ceil(2);
        let draw = keyed_hash(&self.secret, BUDGET_DOMAIN, &second.to_be_bytes());
        half.saturating_add((draw % u64::from(self.limit)) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn per_second(l: &mut ChallengeAckLimit, second: u64) -> u32 {
        let at = Instant::from_secs(second) + crate::time::Duration::from_millis(1);
        (0..10_000).map(|_| l.take(at)).filter(|&ok| ok).count() as u32
    }

    #[test]
    fn budget_is_drawn_per_second_around_the_limit() {
        let mut l = ChallengeAckLimit::new(100, [7; 16]);
        let budgets: Vec<u32> = (0..50).map(|s| per_second(&mut l, s)).collect();
        assert!(
            budgets.iter().all(|&b| (50..150).contains(&b)),
            "{budgets:?}"
        );
        let mean = budgets.iter().sum::<u32>() / 50;
        assert!(
            (80..120).contains(&mean),
            "about the limit on average: {mean}"
        );
        assert!(budgets.windows(2).any(|w| w[0] != w[1]), "not a constant");
        // Reproducible with the same secret, different with another.
        let mut again = ChallengeAckLimit::new(100, [7; 16]);
        assert_eq!(per_second(&mut again, 3), budgets[3]);
        let mut other = ChallengeAckLimit::new(100, [8; 16]);
        let others: Vec<u32> = (0..50).map(|s| per_second(&mut other, s)).collect();
        assert_ne!(others, budgets);
    }

    #[test]
    fn zero_and_unlimited() {
        let mut none = ChallengeAckLimit::new(0, [0; 16]);
        assert_eq!(per_second(&mut none, 1), 0);
        let mut all = ChallengeAckLimit::new(u32::MAX, [0; 16]);
        assert_eq!(per_second(&mut all, 1), 10_000);
        let mut one = ChallengeAckLimit::new(1, [0; 16]);
        assert_eq!(per_second(&mut one, 1), 1);
    }
}
