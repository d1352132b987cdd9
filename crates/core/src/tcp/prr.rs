//! Proportional Rate Reduction (RFC 6937): how much a sender in fast
//! recovery may send on each ACK, so that the flight comes down to the
//! ssthresh the congestion controller chose smoothly over one round trip
//! (instead of RFC 6675's half window of silence) and, after heavy
//! losses, climbs back to it no faster than slow start.
//!
//! Counted in bytes, with the proportional part rounded up to whole
//! segments as Linux counts packets (`tcp_cwnd_reduction`): RFC 6937's
//! examples are in segments, and a byte-exact CEIL would allow half
//! segments that sender SWS avoidance then holds back.

/// Which reduction bound applies when pipe has fallen to ssthresh or
/// below (RFC 6937 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReductionBound {
    /// PRR-CRB: "limit = prr_delivered - prr_out" (strict packet
    /// conservation), in RFC 9937's form: at least DeliveredData.
    Conservative,
    /// PRR-SSRB: "limit = MAX(prr_delivered - prr_out, DeliveredData) +
    /// MSS" (slow start during recovery).
    SlowStart,
}

/// Which subexpression determined `sndcnt` (RFC 6937 3.1's "RB" row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Via {
    /// pipe > ssthresh: the proportional part.
    pub(crate) proportional: bool,
    /// "s: sndcnt = ssthresh - pipe".
    pub(crate) ssthresh: bool,
    /// "b: sndcnt = prr_delivered - prr_out [+ SMSS]" (banked).
    pub(crate) banked: bool,
    /// "d: sndcnt = DeliveredData + SMSS".
    pub(crate) delivered: bool,
}

/// The PRR state of one fast recovery episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prr {
    /// "RecoverFS = snd.nxt-snd.una // FlightSize at the start of recovery"
    pub(crate) recover_fs: usize,
    /// "ssthresh = CongCtrlAlg() // Target cwnd after recovery"
    pub(crate) ssthresh: usize,
    /// "prr_delivered = 0 // Total bytes delivered during recovery"
    pub(crate) prr_delivered: usize,
    /// "prr_out = 0 // Total bytes sent during recovery"
    pub(crate) prr_out: usize,
}

impl Prr {
    /// "At the beginning of recovery, initialize the PRR state."
    pub(crate) fn new(recover_fs: usize, ssthresh: usize) -> Prr {
        Prr {
            recover_fs: recover_fs.max(1),
            ssthresh,
            prr_delivered: 0,
            prr_out: 0,
        }
    }

    /// "On any data transmission or retransmission: prr_out += (data
    /// sent) // strictly less than or equal to sndcnt".
    pub(crate) fn on_sent(&mut self, bytes: usize) {
        self.prr_out = self.prr_out.saturating_add(bytes);
    }

    /// "On every ACK during recovery": `delivered` is the ACK's
    /// DeliveredData, `pipe` RFC 6675's pipe after it. Returns sndcnt,
    /// the bytes that may be sent in response, and what determined it.
    pub(crate) fn on_ack(
        &mut self,
        delivered: usize,
        pipe: usize,
        mss: usize,
        bound: ReductionBound,
    ) -> (usize, Via) {
        let mss = mss.max(1);
        // "prr_delivered += DeliveredData"
        self.prr_delivered = self.prr_delivered.saturating_add(delivered);
        let mut via = Via::default();
        let mut sndcnt = if pipe > self.ssthresh {
            // "// Proportional Rate Reduction
            //  sndcnt = CEIL(prr_delivered * ssthresh / RecoverFS) - prr_out"
            via.proportional = true;
            let num = self.prr_delivered as u128 * self.ssthresh as u128;
            let segs = num.div_ceil(self.recover_fs as u128 * mss as u128);
            let allowed = usize::try_from(segs.saturating_mul(mss as u128)).unwrap_or(usize::MAX);
            allowed.saturating_sub(self.prr_out)
        } else {
            // "// Two versions of the Reduction Bound ... // Attempt to
            // catch up, as permitted by limit
            //  sndcnt = MIN(ssthresh - pipe, limit)"
            // As RFC 9937 (which obsoletes RFC 6937) and Linux
            // (`tcp_cwnd_reduction`) have it, the conservative bound
            // allows at least what this ACK delivered: "sndcnt =
            // MAX(prr_delivered - prr_out, DeliveredData)", plus one SMSS
            // on a "safe" ACK (PRR-SSRB).
            let banked = self.prr_delivered.saturating_sub(self.prr_out);
            let conservative = banked.max(delivered);
            let limit = match bound {
                ReductionBound::Conservative => conservative,
                ReductionBound::SlowStart => conservative + mss,
            };
            let room = self.ssthresh - pipe;
            let sndcnt = room.min(limit);
            via.ssthresh = sndcnt == room;
            let extra = match bound {
                ReductionBound::Conservative => 0,
                ReductionBound::SlowStart => mss,
            };
            via.banked = sndcnt == banked + extra;
            via.delivered =
                sndcnt == delivered + extra && (bound == ReductionBound::SlowStart || !via.banked);
            sndcnt
        };
        // Linux (tcp_cwnd_reduction): "Force a fast retransmit upon
        // entering fast recovery": RFC 5681 3.2 step 3, "The lost segment
        // starting at SND.UNA MUST be retransmitted".
        if self.prr_out == 0 {
            sndcnt = sndcnt.max(mss);
        }
        (sndcnt, via)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1000;

    /// One row of an RFC 6937 3.1 example: what the algorithm sends in
    /// response to each ACK ("N"ew or "R"etransmitted, `n` segments), and
    /// the "RB" row.
    fn rb(v: Via) -> &'static str {
        match (v.ssthresh, v.banked, v.delivered) {
            _ if v.proportional => "",
            (true, _, _) => "s",
            (false, true, true) => "bd",
            (false, true, false) => "b",
            (false, false, true) => "d",
            _ => "?",
        }
    }

    /// RFC 6937 3.1, first example: "cwnd = FlightSize = pipe = 20
    /// segments, so ssthresh will be set to 10 at the beginning of
    /// recovery. We also assume standard Fast Retransmit and Limited
    /// Transmit [RFC3042], so TCP will send 2 new segments followed by 1
    /// retransmit in response to the first 3 duplicate ACKs following the
    /// losses." Segment 0 is lost; the ACKs of segments 1..19 return.
    ///
    /// ```text
    ///    PRR
    ///    ack#   X  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19
    ///    pipe:    19 19 18 18 18 17 17 16 16 15 15 14 14 13 13 12 12 11 10
    ///    sent:     N  N  R     N     N     N     N     N     N        N  N
    ///    RB:                                                          s  s
    /// ```
    ///
    /// The two limited-transmit segments are in flight when recovery
    /// starts on the third duplicate ACK: FlightSize = RecoverFS = 22, and
    /// AIMD's ssthresh = FlightSize / 2 = 11 (what RFC 6675 row's cwnd of
    /// 11 shows; the "10" of the text is the original window's half). With
    /// those the algorithm sends exactly the "sent" and "RB" rows. The
    /// "pipe" row as printed is not pipe at one fixed point of each ACK's
    /// processing (it shows 18 both before and after ACK 5's
    /// transmission); here pipe is taken after the ACK, before sending,
    /// as the algorithm reads it.
    #[test]
    fn rfc6937_single_loss_example() {
        let expected_sent = [
            "N", "N", "R", "", "N", "", "N", "", "N", "", "N", "", "N", "", "N", "", "", "N", "N",
        ];
        let expected_rb = [
            "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "s", "s",
        ];
        for bound in [ReductionBound::Conservative, ReductionBound::SlowStart] {
            // Segments 0..19 out, segment 0 lost.
            let mut pipe = 20;
            let mut prr: Option<Prr> = None;
            let mut sent = Vec::new();
            let mut rbs = Vec::new();
            let mut pipes = Vec::new();
            for ack in 1..=19 {
                // The ACK of segment `ack` (a SACK): it left the network.
                pipe -= 1;
                if ack == 3 {
                    // The third duplicate ACK: segment 0 is deemed lost.
                    pipe -= 1;
                    prr = Some(Prr::new(22 * MSS, 11 * MSS));
                }
                pipes.push(pipe);
                let (s, via) = match prr.as_mut() {
                    // Limited transmit (RFC 3042) before recovery.
                    None => (1, None),
                    Some(p) => {
                        let (bytes, via) = p.on_ack(MSS, pipe * MSS, MSS, bound);
                        let n = bytes / MSS;
                        p.on_sent(n * MSS);
                        (n, Some(via))
                    }
                };
                pipe += s;
                let what = match (s, ack) {
                    (0, _) => "",
                    (1, 3) => "R",
                    (1, _) => "N",
                    _ => "many",
                };
                sent.push(what);
                rbs.push(match via {
                    Some(v) if s > 0 => rb(v),
                    _ => "",
                });
            }
            assert_eq!(sent, expected_sent, "{bound:?}");
            assert_eq!(rbs, expected_rb, "{bound:?}");
            assert_eq!(
                pipes,
                [19, 19, 18, 18, 17, 17, 16, 16, 15, 15, 14, 14, 13, 13, 12, 12, 11, 10, 10],
                "{bound:?}"
            );
            // "PRR ... converge[s] to the target window chosen by the
            // congestion control algorithm": pipe = ssthresh.
            assert_eq!(pipe, 11, "{bound:?}");
            let p = prr.unwrap();
            assert_eq!((p.prr_delivered, p.prr_out), (17 * MSS, 9 * MSS));
        }
    }

    /// The same example with ssthresh = 10, as the RFC's text has it and
    /// RFC 5681 3.2 requires ("additional data sent in limited transmit
    /// MUST NOT be included in this calculation"), and what the sender
    /// here does (`recovery.rs`): RecoverFS is still snd.nxt - snd.una =
    /// 22. The same total is spread the same way, the last two sends a
    /// little earlier, and pipe ends at ssthresh.
    #[test]
    fn rfc6937_single_loss_with_rfc5681_ssthresh() {
        let expected = [
            "N", "N", "R", "", "N", "", "N", "", "N", "", "N", "", "", "N", "", "N", "", "", "N",
        ];
        for bound in [ReductionBound::Conservative, ReductionBound::SlowStart] {
            let mut pipe = 20;
            let mut prr: Option<Prr> = None;
            let mut sent = Vec::new();
            for ack in 1..=19 {
                pipe -= 1;
                if ack == 3 {
                    pipe -= 1;
                    prr = Some(Prr::new(22 * MSS, 10 * MSS));
                }
                let n = match prr.as_mut() {
                    None => 1,
                    Some(p) => {
                        let (bytes, _) = p.on_ack(MSS, pipe * MSS, MSS, bound);
                        p.on_sent(bytes);
                        bytes / MSS
                    }
                };
                pipe += n;
                sent.push(match (n, ack) {
                    (0, _) => "",
                    (1, 3) => "R",
                    (1, _) => "N",
                    _ => "many",
                });
            }
            assert_eq!(sent, expected, "{bound:?}");
            assert_eq!(pipe, 10, "{bound:?}");
        }
    }

    /// RFC 6937 3.1, second example: "the first 15 packets (0-14) are
    /// lost. During the remainder of the lossy RTT, only 5 ACKs are
    /// returned to the sender."
    ///
    /// ```text
    ///    PRR-CRB
    ///    ack#   X  X  X  X  X  X  X  X  X  X  X  X  X  X  X 15 16 17 18 19
    ///    pipe:                                              19 19  4  4  4
    ///    sent:                                               N  N  R  R  R
    ///    RB:                                                       b  b  b
    ///
    ///    PRR-SSRB
    ///    ack#   X  X  X  X  X  X  X  X  X  X  X  X  X  X  X 15 16 17 18 19
    ///    pipe:                                              19 19  4  5  6
    ///    sent:                                               N  N 2R 2R 2R
    ///    RB:                                                      bd  d  d
    /// ```
    #[test]
    fn rfc6937_burst_loss_example() {
        for (bound, pipes, sent, rbs) in [
            (
                ReductionBound::Conservative,
                [19, 19, 4, 4, 4],
                [1, 1, 1, 1, 1],
                ["", "", "b", "b", "b"],
            ),
            (
                ReductionBound::SlowStart,
                [19, 19, 4, 5, 6],
                [1, 1, 2, 2, 2],
                ["", "", "bd", "d", "d"],
            ),
        ] {
            let mut pipe: usize = 20;
            let mut prr: Option<Prr> = None;
            let (mut got_pipes, mut got_sent, mut got_rb) = (vec![], vec![], vec![]);
            for ack in 15..=19 {
                pipe -= 1;
                if ack == 17 {
                    // Three segments SACKed above them: 0..14 are lost.
                    pipe -= 15;
                    prr = Some(Prr::new(22 * MSS, 11 * MSS));
                }
                got_pipes.push(pipe);
                let (n, via) = match prr.as_mut() {
                    None => (1, None),
                    Some(p) => {
                        let (bytes, via) = p.on_ack(MSS, pipe * MSS, MSS, bound);
                        p.on_sent(bytes);
                        (bytes / MSS, Some(via))
                    }
                };
                pipe += n;
                got_sent.push(n);
                got_rb.push(via.map_or("", rb));
            }
            assert_eq!(got_pipes, pipes, "{bound:?}");
            assert_eq!(got_sent, sent, "{bound:?}");
            assert_eq!(got_rb, rbs, "{bound:?}");
        }
    }

    /// The proportional part spreads a 30% reduction (CUBIC's beta) over
    /// the round trip: 7 segments sent for every 10 delivered.
    #[test]
    fn proportional_part_follows_ssthresh_over_recover_fs() {
        let mut p = Prr::new(100 * MSS, 70 * MSS);
        let mut pipe = 99 * MSS;
        let mut total = 0;
        for _ in 0..60 {
            pipe -= MSS;
            let (n, via) = p.on_ack(MSS, pipe, MSS, ReductionBound::SlowStart);
            assert!(via.proportional);
            p.on_sent(n);
            pipe += n;
            total += n;
        }
        assert_eq!(total, 42 * MSS, "ceil(60 * 0.7) segments");
        // Until something was sent, an ACK allows the fast retransmit
        // even when the conservative bound would not (nothing banked).
        let mut q = Prr::new(100 * MSS, 50 * MSS);
        let c = ReductionBound::Conservative;
        assert_eq!(q.on_ack(0, 40 * MSS, MSS, c).0, MSS);
        q.on_sent(MSS);
        assert_eq!(q.on_ack(0, 40 * MSS, MSS, c).0, 0);
        // RFC 9937 / Linux: the conservative bound sends at least what
        // the ACK delivered, even with nothing banked (1 delivered, 1 sent).
        assert_eq!(q.on_ack(MSS, 40 * MSS, MSS, c).0, MSS);
        q.on_sent(2 * MSS);
        // 2 delivered, 3 sent: nothing banked, the ACK's 2 segments go.
        assert_eq!(q.on_ack(2 * MSS, 40 * MSS, MSS, c).0, 2 * MSS);
        // Nothing sent since: 4, then 5 delivered, 3 sent. The banked
        // 2 segments exceed the ACK's 1; the slow start bound adds one.
        assert_eq!(q.on_ack(MSS, 40 * MSS, MSS, c).0, MSS);
        let mut r = q;
        assert_eq!(r.on_ack(MSS, 40 * MSS, MSS, c).0, 2 * MSS, "banked");
        assert_eq!(
            q.on_ack(MSS, 40 * MSS, MSS, ReductionBound::SlowStart).0,
            3 * MSS,
            "banked + 1 SMSS"
        );
    }
}
