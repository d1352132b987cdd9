#![no_main]
//! TCP: new_checked + accessors + TcpRepr::parse; re-emit into buffer_len and re-parse.
use std::net::Ipv4Addr;

use libfuzzer_sys::fuzz_target;
use ustack_wire::tcp::{TcpPacket, TcpRepr};

const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fuzz_target!(|data: &[u8]| {
    let Ok(p) = TcpPacket::new_checked(data) else {
        return;
    };
    let _ = (
        p.src_port(),
        p.dst_port(),
        p.seq_number(),
        p.ack_number(),
        p.header_len(),
    );
    let _ = (
        p.flags(),
        p.window_len(),
        p.checksum(),
        p.urgent_at(),
        p.options().len(),
    );
    let _ = (p.payload().len(), p.verify_checksum(SRC, DST));
    let _ = TcpRepr::parse(&p, SRC, DST, true);
    let Ok(repr) = TcpRepr::parse(&p, SRC, DST, false) else {
        return;
    };
    let _ = (repr.header_len(), repr.seq_len());
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut TcpPacket::new_unchecked(&mut out[..]), SRC, DST, true);
    let again = TcpPacket::new_checked(&out[..]).expect("emitted TCP must be valid");
    let back = TcpRepr::parse(&again, SRC, DST, true).expect("emitted TCP must parse");
    assert_eq!(back.payload, repr.payload);
    assert_eq!(
        (back.src_port, back.dst_port, back.seq, back.ack),
        (repr.src_port, repr.dst_port, repr.seq, repr.ack)
    );
    assert_eq!(
        (back.syn, back.fin, back.rst, back.psh, back.window),
        (repr.syn, repr.fin, repr.rst, repr.psh, repr.window)
    );
});
