//! The root queueing discipline of the namespace's `tun0`, as the scripts
//! set it with `tc qdisc ... dev tun0 root ...`: whether it drops every
//! datagram (`pfifo limit 0` or `bfifo limit 0`), which Linux's TCP sees
//! as `NET_XMIT_DROP` from `tcp_transmit_skb` (local congestion).
//!
//! Read with one `RTM_GETQDISC` dump over rtnetlink (no `tc` process), so
//! the adapter can look before each script event.

use std::ffi::CStr;

const RTM_NEWQDISC: u16 = 36;
const RTM_GETQDISC: u16 = 38;
pub(crate) const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
pub(crate) const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
/// `TC_H_ROOT`: the parent of a root qdisc.
const TC_H_ROOT: u32 = 0xffff_ffff;
pub(crate) const NLMSG_HDR: usize = 16;
const TCMSG: usize = 20;
/// Most reads of one dump (each up to the buffer's size).
const MAX_READS: usize = 64;

/// rtnetlink's multicast group of traffic-control changes (`RTMGRP_TC`).
const RTMGRP_TC: u32 = 8;

/// A subscription to the namespace's qdisc changes, so that `tun0` is read
/// again only after one (each look is then one non-blocking `recv`, which
/// keeps the adapter's calls as quick as they were without it).
pub struct Watch {
    fd: i32,
}

impl Watch {
    /// Subscribe; None if rtnetlink refuses.
    pub fn new() -> Option<Watch> {
        Watch::groups(RTMGRP_TC)
    }

    /// Subscribe to the rtnetlink multicast `groups` (`RTMGRP_*` bits).
    pub fn groups(groups: u32) -> Option<Watch> {
        // SAFETY: plain socket(2); the descriptor lives as long as the
        // process (the adapter's one instance keeps it).
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: a zeroed sockaddr_nl, then filled in.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        sa.nl_groups = groups;
        // SAFETY: sa lives across the call.
        let r = unsafe {
            libc::bind(
                fd,
                (&sa as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if r < 0 {
            close(fd);
            return None;
        }
        Some(Watch { fd })
    }

    /// Whether a qdisc changed since the last call (the notifications are
    /// drained; an overrun counts as a change).
    pub fn changed(&self) -> bool {
        let mut buf = [0u8; 8192];
        let mut any = false;
        for _ in 0..MAX_READS {
            // SAFETY: buf is writable for its length.
            let n = unsafe {
                libc::recv(
                    self.fd,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                any = true;
                continue;
            }
            // EAGAIN: drained. ENOBUFS: notifications were lost.
            let e = std::io::Error::last_os_error().raw_os_error();
            return any || (n < 0 && e == Some(libc::ENOBUFS));
        }
        true
    }
}

/// `close(2)` as the raw system call: this library's own `close`
/// (interposed when preloaded) would look for the descriptor among the
/// engine's, whose lock the caller may hold.
pub(crate) fn close(fd: i32) {
    // SAFETY: our descriptor, closed once.
    unsafe { libc::syscall(libc::SYS_close, libc::c_long::from(fd)) };
}

/// The environment variable naming the file where `scripts/packetdrill.sh`'s
/// `tc` records a root qdisc for `tun0` that this kernel cannot hold
/// (`fq`: no sch_fq here), which the engine then models.
pub const MODELLED_QDISC_ENV: &str = "USTACK_PACKETDRILL_QDISC";

/// Whether `fq` is `tun0`'s root qdisc, as recorded in the file
/// [`MODELLED_QDISC_ENV`] names (or, on a kernel with sch_fq, as the
/// kernel holds it).
pub fn fq_installed() -> bool {
    let modelled = std::env::var_os(MODELLED_QDISC_ENV)
        .and_then(|p| std::fs::read_to_string(p).ok())
        .is_some_and(|s| s.split_whitespace().next() == Some("fq"));
    modelled || tun0_root_kind().is_some_and(|k| k == b"fq")
}

/// The kind of `tun0`'s root qdisc, if there is a `tun0` and the query
/// works.
fn tun0_root_kind() -> Option<Vec<u8>> {
    tun0_root().map(|(kind, _)| kind)
}

/// Whether `tun0`'s root qdisc is a FIFO with a limit of 0 (drops every
/// datagram). False when there is no `tun0` or the query fails.
pub fn tun0_drops_all() -> bool {
    tun0_root().is_some_and(|(kind, opts)| fifo_drops_all(&kind, &opts))
}

/// The kind and options of `tun0`'s root qdisc.
fn tun0_root() -> Option<(Vec<u8>, Vec<u8>)> {
    let name: &CStr = c"tun0";
    // SAFETY: a valid C string.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return None;
    }
    root_qdisc(ifindex as i32)
}

/// A FIFO qdisc (`pfifo`, `bfifo`, `pfifo_head_drop`) whose options
/// (`struct tc_fifo_qopt { __u32 limit; }`) say a limit of 0.
pub fn fifo_drops_all(kind: &[u8], opts: &[u8]) -> bool {
    let fifo = matches!(kind, b"pfifo" | b"bfifo" | b"pfifo_head_drop");
    let limit = opts
        .get(..4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    fifo && limit == Some(0)
}

/// Send the rtnetlink request `req` (its header's length filled in) to
/// the kernel on a socket of its own, and read the answer with `answer`
/// (given the socket); None if the socket or the send fails.
pub(crate) fn rtnl_request<T>(req: &[u8], answer: impl FnOnce(i32) -> Option<T>) -> Option<T> {
    // SAFETY: plain socket(2); the descriptor is closed below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a zeroed sockaddr_nl is the kernel's address.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as u16;
    // SAFETY: req and sa live across the call.
    let n = unsafe {
        libc::sendto(
            fd,
            req.as_ptr().cast(),
            req.len(),
            0,
            (&sa as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    let r = if n == req.len() as isize {
        answer(fd)
    } else {
        None
    };
    close(fd);
    r
}

/// The kind and options of the root qdisc of interface `ifindex`.
fn root_qdisc(ifindex: i32) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut req = [0u8; NLMSG_HDR + TCMSG];
    let len = req.len() as u32;
    req[0..4].copy_from_slice(&len.to_ne_bytes());
    req[4..6].copy_from_slice(&RTM_GETQDISC.to_ne_bytes());
    req[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[NLMSG_HDR] = libc::AF_UNSPEC as u8;
    rtnl_request(&req, |fd| read_dump(fd, ifindex))
}

fn read_dump(fd: i32, ifindex: i32) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut buf = vec![0u8; 32 * 1024];
    let mut found = None;
    for _ in 0..MAX_READS {
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            return None;
        }
        match parse(&buf[..n as usize], ifindex, &mut found) {
            Parsed::More => continue,
            Parsed::Done => return found,
            Parsed::Error => return None,
        }
    }
    None
}

enum Parsed {
    More,
    Done,
    Error,
}

/// Walk the messages of one read, keeping `ifindex`'s root qdisc.
fn parse(mut b: &[u8], ifindex: i32, found: &mut Option<(Vec<u8>, Vec<u8>)>) -> Parsed {
    while b.len() >= NLMSG_HDR {
        let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let ty = u16::from_ne_bytes([b[4], b[5]]);
        if len < NLMSG_HDR || len > b.len() {
            return Parsed::Error;
        }
        match ty {
            NLMSG_DONE => return Parsed::Done,
            NLMSG_ERROR => return Parsed::Error,
            RTM_NEWQDISC => {
                if let Some(q) = root_of(&b[NLMSG_HDR..len], ifindex) {
                    *found = Some(q);
                }
            }
            _ => {}
        }
        b = b.get(align4(len)..).unwrap_or(&[]);
    }
    Parsed::More
}

/// A `tcmsg` and its attributes: kind and options if it is `ifindex`'s
/// root qdisc.
fn root_of(m: &[u8], ifindex: i32) -> Option<(Vec<u8>, Vec<u8>)> {
    let tc = m.get(..TCMSG)?;
    let idx = i32::from_ne_bytes([tc[4], tc[5], tc[6], tc[7]]);
    let parent = u32::from_ne_bytes([tc[12], tc[13], tc[14], tc[15]]);
    if idx != ifindex || parent != TC_H_ROOT {
        return None;
    }
    let mut kind = Vec::new();
    let mut opts = Vec::new();
    let mut a = m.get(TCMSG..)?;
    while a.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([a[0], a[1]]));
        let ty = u16::from_ne_bytes([a[2], a[3]]) & 0x3fff;
        if len < 4 || len > a.len() {
            break;
        }
        let v = &a[4..len];
        match ty {
            TCA_KIND => kind = v.split(|&c| c == 0).next().unwrap_or(&[]).to_vec(),
            TCA_OPTIONS => opts = v.to_vec(),
            _ => {}
        }
        a = a.get(align4(len)..).unwrap_or(&[]);
    }
    Some((kind, opts))
}

pub(crate) fn align4(n: usize) -> usize {
    (n + 3) & !3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_fifo_of_limit_zero_drops_everything() {
        assert!(fifo_drops_all(b"pfifo", &0u32.to_ne_bytes()));
        assert!(fifo_drops_all(b"bfifo", &0u32.to_ne_bytes()));
        assert!(!fifo_drops_all(b"pfifo", &1000u32.to_ne_bytes()));
        assert!(!fifo_drops_all(b"fq_codel", &0u32.to_ne_bytes()));
        assert!(!fifo_drops_all(b"pfifo", &[]));
    }

    #[test]
    fn root_qdisc_of_the_interface_is_picked_from_a_dump() {
        // Two RTM_NEWQDISC messages (another device's, then ours) and DONE.
        fn msg(ifindex: i32, parent: u32, kind: &[u8], limit: u32) -> Vec<u8> {
            let mut m = vec![0u8; NLMSG_HDR + TCMSG];
            m[4..6].copy_from_slice(&RTM_NEWQDISC.to_ne_bytes());
            m[NLMSG_HDR + 4..NLMSG_HDR + 8].copy_from_slice(&ifindex.to_ne_bytes());
            m[NLMSG_HDR + 12..NLMSG_HDR + 16].copy_from_slice(&parent.to_ne_bytes());
            let mut k = kind.to_vec();
            k.push(0);
            let alen = 4 + k.len();
            m.extend_from_slice(&(alen as u16).to_ne_bytes());
            m.extend_from_slice(&TCA_KIND.to_ne_bytes());
            m.extend_from_slice(&k);
            m.resize(align4(m.len()), 0);
            m.extend_from_slice(&8u16.to_ne_bytes());
            m.extend_from_slice(&TCA_OPTIONS.to_ne_bytes());
            m.extend_from_slice(&limit.to_ne_bytes());
            let len = m.len() as u32;
            m[0..4].copy_from_slice(&len.to_ne_bytes());
            m
        }
        let mut b = msg(1, TC_H_ROOT, b"noqueue", 0);
        b.extend(msg(7, 0x1_0000, b"pfifo", 0));
        b.extend(msg(7, TC_H_ROOT, b"pfifo", 0));
        let mut done = vec![0u8; NLMSG_HDR];
        done[0..4].copy_from_slice(&(NLMSG_HDR as u32).to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        b.extend(done);
        let mut found = None;
        assert!(matches!(parse(&b, 7, &mut found), Parsed::Done));
        let (kind, opts) = found.unwrap_or_default();
        assert_eq!(kind, b"pfifo");
        assert!(fifo_drops_all(&kind, &opts));
        let mut none = None;
        assert!(matches!(parse(&b, 9, &mut none), Parsed::Done));
        assert!(none.is_none());
    }
}
