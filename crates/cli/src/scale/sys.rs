//! What the scale benchmark's load generators and kernel server need
//! besides the relay's epoll and socket wrappers (`ustack_relay::sys`):
//! connects from a chosen source address, listeners shared with
//! SO_REUSEPORT, ICMP datagram sockets, RLIMIT_NOFILE, and readings of
//! /proc. Sockets are handed back as std types so that reads, writes and
//! closes go through std.

use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use ustack_relay::sys::{bind, connect, listen as listen_fd, set_int_opt, socket};
pub use ustack_relay::sys::{Epoll, EV_ERR, EV_IN, EV_OUT, EV_RDHUP};

/// Events one `Epoll::wait` returns at most.
pub const WAIT_BATCH: usize = 512;

/// A buffer for `Epoll::wait`.
pub fn event_buffer() -> Vec<libc::epoll_event> {
    vec![libc::epoll_event { events: 0, u64: 0 }; WAIT_BATCH]
}

/// Start a non-blocking TCP connect to `dst`, from `src` if given (the port
/// is chosen at connect time, per destination, with
/// IP_BIND_ADDRESS_NO_PORT, so one source address serves ~28,000
/// connections to each destination). Completion shows as writability; then
/// `take_error` tells the outcome.
pub fn connect_nonblocking(src: Option<Ipv4Addr>, dst: SocketAddrV4) -> io::Result<TcpStream> {
    let fd = socket(libc::SOCK_STREAM, 0)?;
    if let Some(src) = src {
        set_int_opt(&fd, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1)?;
        bind(&fd, SocketAddrV4::new(src, 0))?;
    }
    connect(&fd, dst)?;
    Ok(TcpStream::from(fd))
}

/// A non-blocking listener on `addr`; with `reuseport` several processes
/// can listen on the same address and the kernel spreads connections over
/// them (each process then stays under the per-process descriptor limit).
pub fn listen(addr: SocketAddrV4, reuseport: bool, backlog: i32) -> io::Result<TcpListener> {
    let fd = socket(libc::SOCK_STREAM, 0)?;
    if reuseport {
        set_int_opt(&fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    }
    bind(&fd, addr)?;
    listen_fd(&fd, backlog)?;
    Ok(TcpListener::from(fd))
}

/// An unprivileged ICMP echo socket (`socket(AF_INET, SOCK_DGRAM,
/// IPPROTO_ICMP)`, as ping(8) uses), non-blocking. The kernel picks the
/// echo identifier, fills in the checksum and hands this socket only the
/// replies to its identifier. Returned as a `UdpSocket`: sendto and
/// recvfrom behave the same on it (the port is ignored). Needs the
/// caller's group in `net.ipv4.ping_group_range`.
pub fn icmp_socket() -> io::Result<UdpSocket> {
    socket(libc::SOCK_DGRAM, libc::IPPROTO_ICMP).map(UdpSocket::from)
}

/// Raise the soft RLIMIT_NOFILE to the hard limit (shared with the relay).
pub use ustack_relay::sys::raise_nofile;

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process on the
/// machine (and inside `ip netns exec` and `ustack run`), so that the load
/// generators can time-stamp their progress for the harness.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec the kernel fills in.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Resident set size of process `pid` in bytes (VmRSS).
pub fn rss_bytes(pid: u32) -> io::Result<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/status"))?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| io::Error::other(format!("no VmRSS in /proc/{pid}/status")))
}

/// CPU time (user + system, all threads) of process `pid`.
pub fn cpu_time(pid: u32) -> io::Result<Duration> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let (utime, stime) = parse_stat_times(&s)
        .ok_or_else(|| io::Error::other(format!("cannot parse /proc/{pid}/stat")))?;
    // SAFETY: sysconf takes no pointers.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    Ok(Duration::from_secs_f64((utime + stime) as f64 / hz))
}

/// utime and stime (fields 14 and 15, clock ticks) of a /proc/PID/stat
/// line; the command name (field 2) may contain spaces and parentheses.
fn parse_stat_times(s: &str) -> Option<(u64, u64)> {
    let rest = &s[s.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    // `rest` starts at field 3 (state): utime is the 12th field after it.
    let utime = f.nth(11)?.parse().ok()?;
    let stime = f.next()?.parse().ok()?;
    Some((utime, stime))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    #[test]
    fn stat_times_parse_with_odd_names() {
        let line = "1234 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 111 222 0 0 20 0 1 0";
        assert_eq!(parse_stat_times(line), Some((111, 222)));
        assert_eq!(parse_stat_times("garbage"), None);
        let me = std::process::id();
        assert!(rss_bytes(me).unwrap() > 0);
        assert!(cpu_time(me).is_ok());
    }

    #[test]
    fn nonblocking_connect_and_epoll_on_loopback() {
        let l = listen(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), true, 16).unwrap();
        let addr = match l.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            _ => unreachable!(),
        };
        let ep = Epoll::new().unwrap();
        let mut c = connect_nonblocking(Some(Ipv4Addr::LOCALHOST), addr).unwrap();
        ep.add(c.as_raw_fd(), EV_OUT, 7).unwrap();
        let (mut buf, mut evs) = (event_buffer(), Vec::new());
        ep.wait(&mut buf, Some(Duration::from_secs(5)), &mut evs)
            .unwrap();
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].0, 7);
        assert!(c.take_error().unwrap().is_none());
        l.set_nonblocking(false).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(b"hi").unwrap();
        let mut b = [0u8; 2];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"hi");
        ep.delete(c.as_raw_fd());
        assert!(raise_nofile().unwrap() > 0);
    }
}
