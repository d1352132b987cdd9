#![no_main]
//! UDP: new_checked + every accessor + parse; re-emit (with checksum) and re-parse.
use std::net::Ipv4Addr;

use libfuzzer_sys::fuzz_target;
use ustack_wire::udp::{UdpPacket, UdpRepr};

const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fuzz_target!(|data: &[u8]| {
    let Ok(p) = UdpPacket::new_checked(data) else {
        return;
    };
    let _ = (
        p.src_port(),
        p.dst_port(),
        p.len(),
        p.is_empty(),
        p.checksum(),
    );
    let _ = (
        p.verify_checksum(SRC, DST),
        UdpRepr::parse(&p, SRC, DST, true),
    );
    let Ok(repr) = UdpRepr::parse(&p, SRC, DST, false) else {
        return;
    };
    let payload = p.payload();
    let mut out = vec![0u8; repr.buffer_len(payload.len())];
    let mut q = UdpPacket::new_unchecked(&mut out[..]);
    repr.emit(&mut q, SRC, DST, payload.len(), false);
    q.payload_mut().copy_from_slice(payload);
    q.fill_checksum(SRC, DST);
    let again = UdpPacket::new_checked(&out[..]).expect("emitted UDP must be valid");
    assert_ne!(again.checksum(), 0);
    assert_eq!(UdpRepr::parse(&again, SRC, DST, true), Ok(repr));
    assert_eq!(again.payload(), payload);
    let _ = repr.to_string();
});
