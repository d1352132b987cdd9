#![no_main]
//! ICMPv4: new_checked + every accessor + parse; re-emit and re-parse.
use libfuzzer_sys::fuzz_target;
use ustack_wire::icmpv4::{Icmpv4Packet, Icmpv4Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Icmpv4Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.msg_type(),
        p.msg_code(),
        p.checksum(),
        p.echo_ident(),
        p.echo_seq_no(),
    );
    let _ = (
        p.next_hop_mtu(),
        p.ext_length(),
        p.rest_of_header(),
        p.data().len(),
    );
    let _ = (p.verify_checksum(), Icmpv4Repr::parse(&p, true));
    let Ok(repr) = Icmpv4Repr::parse(&p, false) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Icmpv4Packet::new_unchecked(&mut out[..]));
    let again = Icmpv4Packet::new_checked(&out[..]).expect("emitted ICMP must be valid");
    assert_eq!(Icmpv4Repr::parse(&again, true), Ok(repr));
    let _ = repr.to_string();
});
