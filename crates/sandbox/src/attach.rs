//! Serving an existing namespace or TAP (`ustack attach`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::netif;
use crate::tapfd::TapFd;

/// Open the existing TAP `name` in the current network namespace; with
/// `offload`, with the virtio-net header and checksum/TSO offloads (if the
/// TAP refuses them, without). A missing TAP is an error (`TUNSETIFF`
/// would create one, down and unaddressed), as is an interface that is
/// not a TAP or a TAP another process holds.
pub fn open_tap(name: &str, offload: bool) -> io::Result<TapFd> {
    let ifname = netif::encode_ifname(name)?;
    let (fd, mtu, vnet) = open_here(&ifname, name, "in this network namespace", offload)?;
    TapFd::new(fd, name, mtu, vnet)
}

/// The TAP descriptor, its MTU, and whether it carries virtio-net headers.
/// `place` says where, for the errors.
fn open_here(
    ifname: &[u8; 16],
    name: &str,
    place: &str,
    offload: bool,
) -> io::Result<(OwnedFd, usize, bool)> {
    let cname = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name with a NUL"))?;
    // SAFETY: `cname` is a valid NUL-terminated string.
    if unsafe { libc::if_nametoindex(cname.as_ptr()) } == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "no network interface named {name} {place}: attach serves a TAP that exists \
                 (create one with `ip tuntap add dev {name} mode tap` and configure it, \
                 or let `ustack run` make a namespace with its TAP)"
            ),
        ));
    }
    let explain = |e: io::Error| match e.raw_os_error() {
        Some(libc::EBUSY) => io::Error::new(
            e.kind(),
            format!("TAP {name} {place} is in use by another process ({e})"),
        ),
        Some(libc::EINVAL) => io::Error::new(
            e.kind(),
            format!("{name} {place} is not a TAP device ({e})"),
        ),
        _ => e,
    };
    let (raw, vnet) = match netif::open_tap(ifname, offload) {
        Ok(fd) => (fd, offload),
        Err(_) if offload => (netif::open_tap(ifname, false).map_err(explain)?, false),
        Err(e) => return Err(explain(e)),
    };
    // SAFETY: `raw` was just opened and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let ctl = netif::ctl_socket()?;
    // SAFETY: `ctl` was just opened and is owned by nobody else.
    let ctl = unsafe { OwnedFd::from_raw_fd(ctl) };
    let mtu = netif::get_mtu(ctl.as_raw_fd(), ifname).unwrap_or(1500);
    Ok((fd, mtu, vnet))
}

/// Open the existing TAP `name` inside the network namespace at `netns`
/// (e.g. `/run/netns/NAME` or `/proc/PID/ns/net`), as [`open_tap`]. A helper thread
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
    let place = format!("in namespace {}", netns.display());
    let name_owned = name.to_string();
    let handle = std::thread::Builder::new()
        .name("ustack-setns".into())
        .spawn(move || -> io::Result<(OwnedFd, usize, bool)> {
            // SAFETY: setns on a namespace fd we own; affects only this thread,
            // which ends right after opening the TAP.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(e.kind(), format!("setns: {e}")));
            }
            open_here(&ifname, &name_owned, &place, offload)
        })?;
    let (fd, mtu, vnet) = handle
        .join()
        .map_err(|_| io::Error::other("setns helper thread panicked"))??;
    TapFd::new(fd, name, mtu, vnet)
}
