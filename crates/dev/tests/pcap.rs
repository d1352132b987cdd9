//! The capture file is read back by the real tcpdump.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use ustack_dev::memlink::{pair, Impairments};
use ustack_dev::pcap::{Capture, PcapWriter};
use ustack_dev::Device;

struct RmOnDrop(PathBuf);
impl Drop for RmOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn arp_request(sender: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    let mac = [2, 0, 0, 0, 0, 1];
    let mut f = Vec::new();
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&sender);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target);
    f
}

#[test]
fn tcpdump_reads_capture_of_both_directions() {
    let path = std::env::temp_dir().join(format!("ustack-dev-pcap-{}.pcap", std::process::id()));
    let _rm = RmOnDrop(path.clone());
    let delay = Impairments {
        delay: Duration::from_millis(3),
        ..Impairments::none()
    };
    let (a, mut b) = pair(delay.clone(), delay, 5);
    let clock = a.clock();
    let writer = PcapWriter::create(&path).expect("create pcap");
    let mut a = Capture::with_clock(a, writer, Box::new(move || clock.now()));

    a.set_now_for_test(Duration::from_secs(1));
    a.send(&arp_request([10, 0, 0, 1], [10, 0, 0, 2])).unwrap();
    a.send(&arp_request([10, 0, 0, 1], [10, 0, 0, 3])).unwrap();
    b.send(&arp_request([10, 0, 0, 9], [10, 0, 0, 1])).unwrap();
    let mut buf = [0u8; 1600];
    assert_eq!(a.recv(&mut buf).unwrap(), None);
    b.set_now(Duration::from_millis(1004));
    assert_eq!(a.recv(&mut buf).unwrap(), Some(42));
    drop(a); // flushes

    let out = Command::new("tcpdump")
        .args(["-r"])
        .arg(&path)
        .args(["-nn", "-tt"])
        .output()
        .expect("tcpdump must be installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tcpdump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines[0].starts_with("1.000000 ARP, Request who-has 10.0.0.2 tell 10.0.0.1"),
        "{stdout}"
    );
    assert!(
        lines[1].contains("who-has 10.0.0.3 tell 10.0.0.1"),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("1.004000 ARP, Request who-has 10.0.0.1 tell 10.0.0.9"),
        "{stdout}"
    );
}

/// Tiny helper so the test reads naturally: advance the virtual clock of the
/// wrapped memlink port.
trait SetNow {
    fn set_now_for_test(&self, t: Duration);
}
impl<W: std::io::Write> SetNow for Capture<ustack_dev::memlink::MemPort, W> {
    fn set_now_for_test(&self, t: Duration) {
        self.inner().set_now(t);
    }
}
