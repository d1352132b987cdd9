#![no_main]
//! ARP: new_checked + every accessor + parse; re-emit and re-parse.
use libfuzzer_sys::fuzz_target;
use ustack_wire::arp::{ArpPacket, ArpRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = ArpPacket::new_checked(data) else {
        return;
    };
    let _ = (
        p.hardware_type(),
        p.protocol_type(),
        p.hardware_len(),
        p.protocol_len(),
    );
    let _ = (
        p.operation(),
        p.source_hardware_addr(),
        p.source_protocol_addr(),
    );
    let _ = (p.target_hardware_addr(), p.target_protocol_addr());
    let Ok(repr) = ArpRepr::parse(&p) else { return };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut ArpPacket::new_unchecked(&mut out[..]));
    let again = ArpPacket::new_checked(&out[..]).expect("emitted ARP must be valid");
    assert_eq!(ArpRepr::parse(&again), Ok(repr));
    // Ethernet/IPv4 ARP is exactly the first 28 bytes.
    assert_eq!(&out[..], &data[..out.len()]);
    let _ = repr.to_string();
});
