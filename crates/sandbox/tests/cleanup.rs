//! Cleanup check, alone in its test binary so descriptor counts are not
//! disturbed by other tests running in parallel.

use std::ffi::OsString;
use std::os::fd::AsRawFd;

use ustack_dev::Device;
use ustack_sandbox::{Sandbox, SandboxConfig};

fn args(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn guest_frames_reach_the_tap_holder_and_cleanup_leaves_nothing() {
    let cfg = SandboxConfig::default();
    let fds_before = open_fds();
    // The command pings a neighbour: its ARP requests must arrive on our TAP fd.
    let mut sb = match Sandbox::spawn(
        &cfg,
        &args(&[
            "sh",
            "-c",
            "ping -c 3 -i 0.2 -W 1 10.0.2.2 >/dev/null 2>&1; sleep 0.2; exit 0",
        ]),
    ) {
        Ok(sb) => sb,
        Err(e) => panic!("spawn: {e}"),
    };
    let netns = std::fs::read_link(format!("/proc/{}/ns/net", sb.pid())).ok();
    let host_netns = std::fs::read_link("/proc/self/ns/net").ok();
    assert!(netns.is_some());
    assert_ne!(netns, host_netns, "command is in its own network namespace");
    let mut tap = match sb.take_tap() {
        Some(t) => t,
        None => panic!("no tap"),
    };
    if let Err(e) = sb.start() {
        panic!("start: {e}");
    }
    let mut arp_seen = false;
    let mut buf = [0u8; 2048];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        let mut pfd = libc::pollfd {
            fd: tap.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, 100) };
        // Frames come behind a virtio-net header when the TAP has one.
        let h = if tap.offloads().vnet_hdr {
            ustack_dev::VNET_HDR_LEN
        } else {
            0
        };
        while let Ok(Some(n)) = tap.recv(&mut buf) {
            // Ethertype 0x0806 = ARP, target IP at bytes 38..42.
            if n >= h + 42
                && buf[h + 12..h + 14] == [0x08, 0x06]
                && buf[h + 38..h + 42] == [10, 0, 2, 2]
            {
                arp_seen = true;
            }
        }
        if arp_seen {
            break;
        }
    }
    assert!(
        arp_seen,
        "ARP for the gateway arrived on the TAP held in the host namespace"
    );
    assert_eq!(sb.wait().ok(), Some(0));
    // The namespace is kept alive only by its process and our TAP fd.
    drop(tap);
    drop(sb);
    assert_eq!(open_fds(), fds_before, "no descriptor leaked");
    if let Some(ns) = netns {
        // No process is left in the command's namespace.
        let still: Vec<_> = std::fs::read_dir("/proc")
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| {
                        std::fs::read_link(e.path().join("ns/net")).ok().as_ref() == Some(&ns)
                    })
                    .map(|e| e.file_name())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            still.is_empty(),
            "processes left in the sandbox netns: {still:?}"
        );
    }
}
