#![no_main]
//! IPv4: new_checked + every accessor + parse (with and without checksum
//! verification) + the tolerant quoted-header parse; re-emit and re-parse.
use libfuzzer_sys::fuzz_target;
use ustack_wire::ipv4::{Ipv4Packet, Ipv4Repr};

fuzz_target!(|data: &[u8]| {
    let _ = Ipv4Repr::parse_quoted(data);
    let Ok(p) = Ipv4Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.version(),
        p.header_len(),
        p.dscp(),
        p.ecn(),
        p.total_len(),
        p.ident(),
    );
    let _ = (
        p.reserved_flag(),
        p.dont_frag(),
        p.more_frags(),
        p.frag_offset(),
        p.is_fragment(),
    );
    let _ = (
        p.ttl(),
        p.protocol(),
        p.checksum(),
        p.src_addr(),
        p.dst_addr(),
    );
    let _ = (p.options().len(), p.verify_checksum());
    let checked = Ipv4Repr::parse(&p, true);
    let Ok(repr) = Ipv4Repr::parse(&p, false) else {
        assert!(checked.is_err());
        return;
    };
    let payload = p.payload();
    assert_eq!(repr.payload_len, payload.len());
    let mut out = vec![0u8; repr.buffer_len()];
    let mut q = Ipv4Packet::new_unchecked(&mut out[..]);
    repr.emit(&mut q, true);
    q.payload_mut().copy_from_slice(payload);
    let again = Ipv4Packet::new_checked(&out[..]).expect("emitted IPv4 must be valid");
    assert_eq!(Ipv4Repr::parse(&again, true), Ok(repr));
    assert_eq!(again.payload(), payload);
    let _ = repr.to_string();
});
