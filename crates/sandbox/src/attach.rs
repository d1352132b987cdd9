//! Serving an existing namespace or TAP (`ustack attach`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::netif;
use crate::tapfd::TapFd;

/// Open (creating if needed) the TAP `name` in the current network
/// namespace; with `offload`, with the virtio-net header and checksum/TSO
/// offloads (if the TAP refuses them, without).
pub fn open_tap(name: &str, offload: bool) -> io::Result<TapFd> {
    let ifname = netif::encode_ifname(name)?;
    let (fd, mtu, vnet) = open_here(&ifname, offload)?;
    TapFd::new(fd, name, mtu, vnet)
}

/// The TAP descriptor, its MTU, and whether it carries virtio-net headers.
fn open_here(ifname: &[u8; 16], offload: bool) -> io::Result<(OwnedFd, usize, bool)> {
    let (raw, vnet) = match netif::open_tap(ifname, offload) {
        Ok(fd) => (fd, offload),
        Err(_) if offload => (netif::open_tap(ifname, false)?, false),
        Err(e) => return Err(e),
    };
    // SAFETY: `raw` was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let ctl = netif::ctl_socket()?;
    // SAFETY: `ctl` was just opened and is owned by nobody else.
    let ctl = unsafe { OwnedFd::from_raw_fd(ctl) };
    let mtu = netif::get_mtu(ctl.as_raw_fd(), ifname).unwrap_or(1500);
    Ok((fd, mtu, vnet))
}

/// Open (creating if needed) the TAP `name` inside the network namespace at
/// `netns` (e.g. `/run/netns/NAME` or `/proc/PID/ns/net`). A helper thread
/// enters the namespace with `setns` and ends afterwards, so the calling
/// process stays in its own namespace.
pub fn open_tap_in_netns(netns: &Path, name: &str, offload: bool) -> io::Result<TapFd> {
    let ifname = netif::encode_ifname(name)?;
    let ns = std::fs::File::open(netns).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot open namespace {}: {e}", netns.display()),
        )
    })?;
    let handle = std::thread::Builder::new()
        .name("ustack-setns".into())
        .spawn(move || -> io::Result<(OwnedFd, usize, bool)> {
            // SAFETY: setns on a namespace fd we own; affects only this thread,
            // which ends right after opening the TAP.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(e.kind(), format!("setns: {e}")));
            }
            open_here(&ifname, offload)
        })?;
    let (fd, mtu, vnet) = handle
        .join()
        .map_err(|_| io::Error::other("setns helper thread panicked"))??;
    TapFd::new(fd, name, mtu, vnet)
}
