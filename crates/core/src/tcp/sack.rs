//! The sender's SACK scoreboard (RFC 2018, RFC 6675 terms): which ranges
//! above SND.UNA the receiver reported holding.

use ustack_wire::tcp::SeqNum;

const MAX_BLOCKS: usize = 16;

/// Disjoint, sorted SACKed ranges `[left, right)`, all above SND.UNA.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scoreboard {
    blocks: [(SeqNum, SeqNum); MAX_BLOCKS],
    n: usize,
}

impl Scoreboard {
    pub(crate) fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn as_slice(&self) -> &[(SeqNum, SeqNum)] {
        self.blocks.get(..self.n).unwrap_or(&[])
    }

    /// Record a block reported by the peer. RFC 2018 4 lets a receiver
    /// report blocks below SND.UNA (D-SACK) or garbage: only blocks inside
    /// `(una, max]` are kept.
    pub(crate) fn add(&mut self, left: SeqNum, right: SeqNum, una: SeqNum, max: SeqNum) {
        let left = left.max(una);
        let right = right.min(max);
        if !left.lt(right) {
            return;
        }
        let (mut l, mut r) = (left, right);
        // Merge with every overlapping or adjacent block, rebuilding in order.
        let mut out = [(SeqNum(0), SeqNum(0)); MAX_BLOCKS];
        let mut k = 0;
        let mut placed = false;
        for &(bl, br) in self.as_slice() {
            if br.lt(l) {
                if let Some(s) = out.get_mut(k) {
                    *s = (bl, br);
                    k += 1;
                }
            } else if r.lt(bl) {
                if !placed {
                    if let Some(s) = out.get_mut(k) {
                        *s = (l, r);
                        k += 1;
                    }
                    placed = true;
                }
                if let Some(s) = out.get_mut(k) {
                    *s = (bl, br);
                    k += 1;
                }
            } else {
                l = l.min(bl);
                r = r.max(br);
            }
        }
        if !placed {
            if let Some(s) = out.get_mut(k) {
                *s = (l, r);
                k += 1;
            }
        }
        self.blocks = out;
        self.n = k;
    }

    /// Forget everything at or below the cumulative ACK.
    pub(crate) fn ack(&mut self, una: SeqNum) {
        let mut out = [(SeqNum(0), SeqNum(0)); MAX_BLOCKS];
        let mut k = 0;
        for &(l, r) in self.as_slice() {
            if r.gt(una) {
                if let Some(s) = out.get_mut(k) {
                    *s = (l.max(una), r);
                    k += 1;
                }
            }
        }
        self.blocks = out;
        self.n = k;
    }

    /// If `seq` lies inside a SACKed block, the block's right edge.
    pub(crate) fn sacked_end(&self, seq: SeqNum) -> Option<SeqNum> {
        self.as_slice()
            .iter()
            .find(|(l, r)| seq.ge(*l) && seq.lt(*r))
            .map(|&(_, r)| r)
    }

    /// The highest SACKed sequence number.
    pub(crate) fn highest(&self) -> Option<SeqNum> {
        self.as_slice().last().map(|&(_, r)| r)
    }

    /// The first un-SACKed hole at or after `from` that lies below the
    /// highest SACKed byte (RFC 6675 "NextSeg" rule 1, simplified).
    pub(crate) fn next_hole(&self, from: SeqNum) -> Option<(SeqNum, SeqNum)> {
        let mut pos = from;
        for &(l, r) in self.as_slice() {
            if pos.lt(l) {
                return Some((pos, l));
            }
            pos = pos.max(r);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_and_holes() {
        let mut s = Scoreboard::default();
        let una = SeqNum(100);
        let max = SeqNum(1000);
        s.add(SeqNum(300), SeqNum(400), una, max);
        s.add(SeqNum(500), SeqNum(600), una, max);
        s.add(SeqNum(400), SeqNum(450), una, max); // adjacent merge
        s.add(SeqNum(50), SeqNum(90), una, max); // below una: ignored
        assert_eq!(s.next_hole(una), Some((SeqNum(100), SeqNum(300))));
        assert_eq!(s.next_hole(SeqNum(300)), Some((SeqNum(450), SeqNum(500))));
        assert_eq!(s.next_hole(SeqNum(550)), None);
        assert_eq!(s.sacked_end(SeqNum(420)), Some(SeqNum(450)));
        assert_eq!(s.highest(), Some(SeqNum(600)));
        s.ack(SeqNum(460));
        assert_eq!(s.next_hole(SeqNum(460)), Some((SeqNum(460), SeqNum(500))));
        s.add(SeqNum(440), SeqNum(700), SeqNum(460), max);
        assert_eq!(s.sacked_end(SeqNum(460)), Some(SeqNum(700)));
    }
}
