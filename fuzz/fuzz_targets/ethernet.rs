#![no_main]
//! Ethernet II: new_checked + every accessor + parse; re-emit and re-parse.
use libfuzzer_sys::fuzz_target;
use ustack_wire::ethernet::{EthernetFrame, EthernetRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = EthernetFrame::new_checked(data) else {
        return;
    };
    let _ = (
        frame.src_addr(),
        frame.dst_addr(),
        frame.ethertype(),
        frame.payload().len(),
    );
    let Ok(repr) = EthernetRepr::parse(&frame) else {
        return;
    };
    let payload = frame.payload();
    let mut out = vec![0u8; repr.buffer_len(payload.len())];
    let mut f = EthernetFrame::new_unchecked(&mut out[..]);
    repr.emit(&mut f);
    f.payload_mut().copy_from_slice(payload);
    let again = EthernetFrame::new_checked(&out[..]).expect("emitted frame must be valid");
    assert_eq!(EthernetRepr::parse(&again), Ok(repr));
    assert_eq!(&out[..], data);
    let _ = repr.to_string();
});
