//! Two hosts wired back to back: the socket calls against a real peer.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use ustack_core::time::{Duration, Instant};
use ustack_core::{Config, Limits};
use ustack_wire::ethernet::MacAddr;
use ustack_wire::ipv4::Ipv4Cidr;

use super::*;

fn host(n: u8) -> Host {
    let cfg = Config {
        mac: MacAddr([2, 0, 0, 0, 0, n]),
        addr: Ipv4Cidr {
            address: Ipv4Addr::new(10, 0, 0, n),
            prefix_len: 24,
        },
        gateway: None,
        mtu: 1500,
        tcp: TcpConfig::default(),
        limits: Limits::default(),
        secret: [n; 16],
        seed: u64::from(n),
    };
    Host::new(cfg, Instant::ZERO)
}

/// Move frames both ways until quiet, then let `ms` of time pass.
fn pump(a: &mut Host, b: &mut Host, ms: u64) {
    for _ in 0..1000 {
        let mut moved = false;
        while let Some((_, f)) = a.link_output() {
            b.link_input(&f);
            moved = true;
        }
        while let Some((_, f)) = b.link_output() {
            a.link_input(&f);
            moved = true;
        }
        if !moved {
            break;
        }
    }
    if ms > 0 {
        let t = a.now() + Duration::from_millis(ms);
        a.advance_to(t);
        b.advance_to(t);
        pump(a, b, 0);
    }
}

fn addr(n: u8, port: u16) -> SocketAddr {
    SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, n), port).into()
}

#[test]
fn connect_accept_transfer_close() {
    let (mut a, mut b) = (host(1), host(2));
    let l = b.socket(libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
    assert_eq!(l, FIRST_FD);
    b.bind(l, addr(0, 80)).map_err(|_| ()).ok();
    b.bind(l, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 80).into())
        .unwrap_or(());
    b.listen(l, 5).unwrap();
    assert_eq!(b.accept(l, 0).unwrap_err(), libc::EAGAIN);

    let c = a
        .socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0)
        .unwrap();
    assert_eq!(a.connect(c, addr(2, 80)), Err(libc::EINPROGRESS));
    assert_eq!(a.connect(c, addr(2, 80)), Err(libc::EALREADY));
    assert_eq!(
        a.readiness(c) & POLLOUT,
        0,
        "not writable during the handshake"
    );
    pump(&mut a, &mut b, 1);
    assert_eq!(a.connect_done(c), Ok(()));
    assert_eq!(a.connect(c, addr(2, 80)), Err(libc::EISCONN));
    assert_ne!(a.readiness(c) & POLLOUT, 0);
    assert_ne!(
        b.readiness(l) & POLLIN,
        0,
        "listener readable with a connection queued"
    );
    let (s, peer) = b.accept(l, 0).unwrap();
    assert_eq!(peer.ip(), Ipv4Addr::new(10, 0, 0, 1));

    assert_eq!(a.send(c, b"hello").unwrap(), 5);
    pump(&mut a, &mut b, 1);
    let mut buf = [0u8; 16];
    assert_eq!(b.recv(s, &mut buf, true).unwrap(), 5, "peek");
    assert_eq!(b.queued(s, false).unwrap(), 5);
    assert_eq!(b.recv(s, &mut buf, false).unwrap(), 5);
    assert_eq!(&buf[..5], b"hello");
    assert_eq!(b.recv(s, &mut buf, false), Err(libc::EAGAIN));

    a.shutdown(c, libc::SHUT_WR).unwrap();
    assert_eq!(a.send(c, b"x"), Err(libc::EPIPE));
    pump(&mut a, &mut b, 1);
    assert_eq!(b.recv(s, &mut buf, false).unwrap(), 0, "end of stream");
    assert_ne!(b.readiness(s) & POLLRDHUP, 0);
    b.close(s).unwrap();
    a.close(c).unwrap();
    assert_eq!(a.close(c), Err(libc::EBADF));
    pump(&mut a, &mut b, 100);
}

#[test]
fn refused_connect_reports_once() {
    let (mut a, mut b) = (host(1), host(2));
    let c = a.socket(libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
    assert_eq!(a.connect(c, addr(2, 9)), Err(libc::EINPROGRESS));
    pump(&mut a, &mut b, 1);
    assert_eq!(a.connect_done(c), Err(libc::ECONNREFUSED));
    assert_eq!(a.send(c, b"x"), Err(libc::EPIPE));
}

#[test]
fn options_round_trip_like_linux() {
    let mut a = host(1);
    let s = a
        .socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_TCP)
        .unwrap();
    a.setsockopt(
        s,
        libc::SOL_SOCKET,
        libc::SO_SNDBUF,
        &21000i32.to_ne_bytes(),
    )
    .unwrap();
    assert_eq!(
        a.getsockopt(s, libc::SOL_SOCKET, libc::SO_SNDBUF).unwrap(),
        42000i32.to_ne_bytes()
    );
    assert_eq!(
        a.setsockopt(s, libc::IPPROTO_TCP, libc::TCP_MAXSEG, &10i32.to_ne_bytes()),
        Err(libc::EINVAL)
    );
    assert_eq!(
        a.setsockopt(s, libc::IPPROTO_TCP, libc::TCP_NODELAY, &[1]),
        Err(libc::EINVAL)
    );
    assert_eq!(
        a.setsockopt(s, libc::IPPROTO_TCP, 9999, &1i32.to_ne_bytes()),
        Err(libc::ENOPROTOOPT)
    );
    a.setsockopt(s, libc::IPPROTO_TCP, libc::TCP_CONGESTION, b"reno\0")
        .unwrap();
    assert_eq!(
        &a.getsockopt(s, libc::IPPROTO_TCP, libc::TCP_CONGESTION)
            .unwrap()[..5],
        b"reno\0"
    );
    assert_eq!(
        a.setsockopt(s, libc::IPPROTO_TCP, libc::TCP_CONGESTION, b"bbr"),
        Err(libc::ENOENT)
    );
    let info = a.getsockopt(s, libc::IPPROTO_TCP, libc::TCP_INFO).unwrap();
    assert_eq!(info.len(), tcp_info::TCP_INFO_LEN);
    assert_eq!(info[0], 7, "TCP_CLOSE");
    assert_eq!(
        a.socket(libc::AF_PACKET, libc::SOCK_STREAM, 0),
        Err(libc::EAFNOSUPPORT)
    );
    assert_eq!(
        a.getsockopt(99, libc::SOL_SOCKET, libc::SO_TYPE),
        Err(libc::EBADF)
    );
}

/// Linux's send-buffer accounting: a write takes whole skbs while
/// `sk_wmem_queued < sk_sndbuf` (so more bytes than `SO_SNDBUF` asked
/// for, less than the buffer's double plus an skb), then `EAGAIN` and no
/// `POLLOUT` until the peer's ACKs free a third of the buffer.
#[test]
fn writes_follow_linux_send_buffer_accounting() {
    let (mut a, mut b) = (host(1), host(2));
    let l = b.socket(libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
    b.bind(l, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 80).into())
        .unwrap();
    b.listen(l, 5).unwrap();
    let c = a
        .socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0)
        .unwrap();
    assert_eq!(a.connect(c, addr(2, 80)), Err(libc::EINPROGRESS));
    pump(&mut a, &mut b, 1);
    let (s, _) = b.accept(l, 0).unwrap();
    a.setsockopt(
        c,
        libc::SOL_SOCKET,
        libc::SO_SNDBUF,
        &10_000i32.to_ne_bytes(),
    )
    .unwrap();
    let meminfo = |h: &mut Host| {
        let v = h
            .getsockopt(c, libc::SOL_SOCKET, 55 /* SO_MEMINFO */)
            .unwrap();
        let at = |i: usize| u32::from_ne_bytes(v[i * 4..i * 4 + 4].try_into().unwrap());
        (at(3), at(5))
    };

    let data = vec![7u8; 200_000];
    let n = a.send(c, &data).unwrap();
    assert!((20_000..20_000 + 2 * 65_536).contains(&n), "took {n}");
    let (sndbuf, queued) = meminfo(&mut a);
    assert_eq!(sndbuf, 20_000, "SO_SNDBUF doubled, locked");
    assert!(queued as usize > n, "bytes plus skb overhead: {queued}");
    assert_eq!(a.send(c, &data), Err(libc::EAGAIN));
    assert_eq!(a.readiness(c) & POLLOUT, 0, "no third of the buffer free");

    let mut buf = vec![0u8; 300_000];
    let mut got = 0;
    for _ in 0..100 {
        pump(&mut a, &mut b, 1);
        while let Ok(k) = b.recv(s, &mut buf, false) {
            got += k;
        }
        if got == n {
            break;
        }
    }
    assert_eq!(got, n);
    pump(&mut a, &mut b, 1);
    assert_ne!(a.readiness(c) & POLLOUT, 0, "all acknowledged: writable");
    assert_eq!(meminfo(&mut a).1, 0, "nothing queued");
    assert!(a.send(c, &data).unwrap() > 0);
}

/// `ustack_sendfile`: a kernel file's bytes from an offset, up to the end
/// of the file, and from the file position when no offset is given.
#[test]
fn sendfile_sends_a_kernel_file() {
    use std::io::Write;
    use std::os::fd::AsRawFd;

    let (a, mut b) = (host(1), host(2));
    let ctx = ffi::Ctx::new_virtual(a);
    let l = b.socket(libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
    b.bind(l, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 80).into())
        .unwrap();
    b.listen(l, 5).unwrap();
    let c = {
        let mut h = ctx.lock();
        let c = h
            .socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0)
            .unwrap();
        assert_eq!(h.connect(c, addr(2, 80)), Err(libc::EINPROGRESS));
        pump(&mut h, &mut b, 1);
        c
    };
    let (s, _) = b.accept(l, 0).unwrap();

    let content: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let path = std::env::temp_dir().join(format!("ustack-sendfile-test-{}", std::process::id()));
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&content).unwrap();
    drop(f);
    let f = std::fs::File::open(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let fd = f.as_raw_fd();
    let p = &ctx as *const ffi::Ctx as *mut std::ffi::c_void;
    let recv_all = |ctx: &ffi::Ctx, b: &mut Host, got: &mut Vec<u8>| {
        pump(&mut ctx.lock(), b, 1);
        let mut buf = [0u8; 8192];
        while let Ok(n) = b.recv(s, &mut buf, false) {
            got.extend_from_slice(&buf[..n]);
        }
    };
    let mut got = Vec::new();

    // From offset 1000, 3000 bytes; the offset moves on, the file
    // position does not.
    let mut off: libc::off_t = 1000;
    // SAFETY: a live Ctx, our socket, a valid off_t.
    assert_eq!(
        unsafe { ffi::ustack_sendfile(p, c, fd, &mut off, 3000) },
        3000
    );
    assert_eq!(off, 4000);
    recv_all(&ctx, &mut b, &mut got);
    // More than the file holds: up to its end; then nothing.
    // SAFETY: as above.
    assert_eq!(
        unsafe { ffi::ustack_sendfile(p, c, fd, &mut off, 9000) },
        1000
    );
    assert_eq!(off, 5000);
    // SAFETY: as above.
    assert_eq!(unsafe { ffi::ustack_sendfile(p, c, fd, &mut off, 10) }, 0);
    recv_all(&ctx, &mut b, &mut got);
    assert_eq!(got, &content[1000..]);

    // No offset: from the file position (0), which moves on.
    got.clear();
    // SAFETY: as above, with a null offset.
    let n = unsafe { ffi::ustack_sendfile(p, c, fd, std::ptr::null_mut(), 700) };
    assert_eq!(n, 700);
    // SAFETY: plain lseek on our file.
    assert_eq!(unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) }, 700);
    recv_all(&ctx, &mut b, &mut got);
    assert_eq!(got, &content[..700]);

    // Not our descriptor, or not a file to read.
    // SAFETY: as above.
    assert_eq!(
        unsafe { ffi::ustack_sendfile(p, c + 100, fd, &mut off, 10) },
        -1
    );
    // SAFETY: as above.
    assert_eq!(unsafe { ffi::ustack_sendfile(p, c, -1, &mut off, 10) }, -1);
    // SAFETY: errno is thread-local.
    assert_eq!(unsafe { *libc::__errno_location() }, libc::EBADF);
}

fn v6(n: u16, port: u16) -> SocketAddr {
    SocketAddrV6::new(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, n), port, 0, 0).into()
}

fn mapped(n: u8, port: u16) -> SocketAddr {
    SocketAddrV6::new(Ipv4Addr::new(10, 0, 0, n).to_ipv6_mapped(), port, 0, 0).into()
}

/// Two hosts with 10.0.0.n/24 and fd00::n/64.
fn hosts6() -> (Host, Host) {
    let (mut a, mut b) = (host(1), host(2));
    for (h, n) in [(&mut a, 1), (&mut b, 2)] {
        let cidr = ustack_wire::ipv6::Ipv6Cidr {
            address: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, n),
            prefix_len: 64,
        };
        h.add_ipv6_address(cidr).unwrap();
    }
    (a, b)
}

/// A listener of `family` on port 80 of `b` (`v6only` set before bind).
fn listener(b: &mut Host, family: i32, v6only: bool) -> i32 {
    let l = b.socket(family, libc::SOCK_STREAM, 0).unwrap();
    if v6only {
        b.setsockopt(
            l,
            libc::IPPROTO_IPV6,
            libc::IPV6_V6ONLY,
            &1i32.to_ne_bytes(),
        )
        .unwrap();
    }
    let any = if family == libc::AF_INET6 {
        SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 80, 0, 0).into()
    } else {
        SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 80).into()
    };
    b.bind(l, any).unwrap();
    b.listen(l, 5).unwrap();
    l
}

#[test]
fn ipv6_sockets_connect_accept_and_name_both_ends() {
    let (mut a, mut b) = hosts6();
    let l = listener(&mut b, libc::AF_INET6, false);
    assert_eq!(
        b.local_addr(l),
        Ok(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 80, 0, 0).into())
    );
    let c = a.socket(libc::AF_INET6, libc::SOCK_STREAM, 0).unwrap();
    assert_eq!(
        a.local_addr(c),
        Ok(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0).into()),
        "an unbound AF_INET6 socket names [::]:0"
    );
    assert_eq!(a.peer_addr(c), Err(libc::ENOTCONN));
    assert_eq!(a.connect(c, v6(2, 80)), Err(libc::EINPROGRESS));
    pump(&mut a, &mut b, 1);
    assert_eq!(a.connect_done(c), Ok(()));
    let (s, peer) = b.accept(l, 0).unwrap();
    assert_eq!(peer.ip(), Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1));
    assert_eq!(a.local_addr(c).unwrap().ip(), peer.ip());
    assert_eq!(a.local_addr(c).unwrap().port(), peer.port());
    assert_eq!(a.peer_addr(c), Ok(v6(2, 80)));
    assert_eq!(b.local_addr(s), Ok(v6(2, 80)));
    assert_eq!(b.peer_addr(s), Ok(peer));
    assert_eq!(
        b.getsockopt(s, libc::SOL_SOCKET, libc::SO_DOMAIN).unwrap(),
        libc::AF_INET6.to_ne_bytes()
    );
    assert_eq!(a.send(c, b"six").unwrap(), 3);
    pump(&mut a, &mut b, 1);
    let mut buf = [0u8; 8];
    assert_eq!(b.recv(s, &mut buf, false).unwrap(), 3);
    assert_eq!(&buf[..3], b"six");
    // An IPv4 address on an AF_INET6 socket, and the reverse.
    let d = a.socket(libc::AF_INET6, libc::SOCK_STREAM, 0).unwrap();
    assert_eq!(a.bind(d, addr(1, 0)), Err(libc::EAFNOSUPPORT));
    let e = a.socket(libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
    assert_eq!(a.connect(e, v6(2, 80)), Err(libc::EAFNOSUPPORT));
    // Not our address.
    assert_eq!(a.bind(d, v6(7, 0)), Err(libc::EADDRNOTAVAIL));
    assert_eq!(a.bind(d, v6(1, 0)), Ok(()));
}

#[test]
fn ipv6_socket_reaches_ipv4_through_mapped_addresses() {
    let (mut a, mut b) = hosts6();
    // A dual-stack listener takes an IPv4 client, named IPv4-mapped.
    let l = listener(&mut b, libc::AF_INET6, false);
    let c = a.socket(libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
    assert_eq!(a.connect(c, addr(2, 80)), Err(libc::EINPROGRESS));
    pump(&mut a, &mut b, 1);
    assert_eq!(a.connect_done(c), Ok(()));
    let (s, peer) = b.accept(l, 0).unwrap();
    assert_eq!(peer.ip(), Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped());
    assert_eq!(b.local_addr(s), Ok(mapped(2, 80)));
    assert_eq!(a.local_addr(c).unwrap().port(), peer.port());

    // An AF_INET6 client to an IPv4-mapped address runs over IPv4.
    let l4 = {
        let l = b.socket(libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
        b.bind(l, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 81).into())
            .unwrap();
        b.listen(l, 5).unwrap();
        l
    };
    let d = a.socket(libc::AF_INET6, libc::SOCK_STREAM, 0).unwrap();
    assert_eq!(a.connect(d, mapped(2, 81)), Err(libc::EINPROGRESS));
    pump(&mut a, &mut b, 1);
    assert_eq!(a.connect_done(d), Ok(()));
    let (_, peer4) = b.accept(l4, 0).unwrap();
    assert_eq!(peer4.ip(), Ipv4Addr::new(10, 0, 0, 1));
    assert_eq!(a.peer_addr(d), Ok(mapped(2, 81)));
    assert_eq!(a.local_addr(d), Ok(mapped(1, peer4.port())));
}

#[test]
fn ipv6_v6only_as_linux() {
    let (mut a, mut b) = hosts6();
    let s = a.socket(libc::AF_INET6, libc::SOCK_STREAM, 0).unwrap();
    let get = |h: &mut Host, fd| h.getsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY);
    assert_eq!(
        get(&mut a, s),
        Ok(0i32.to_ne_bytes().to_vec()),
        "bindv6only=0"
    );
    let one = 1i32.to_ne_bytes();
    assert_eq!(
        a.setsockopt(s, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, &one[..2]),
        Err(libc::EINVAL),
        "an int"
    );
    a.setsockopt(s, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, &one)
        .unwrap();
    assert_eq!(get(&mut a, s), Ok(one.to_vec()));
    assert_eq!(a.bind(s, mapped(1, 0)), Err(libc::EINVAL));
    assert_eq!(a.connect(s, mapped(2, 80)), Err(libc::ENETUNREACH));
    a.bind(s, v6(1, 0)).unwrap();
    assert_eq!(
        a.setsockopt(
            s,
            libc::IPPROTO_IPV6,
            libc::IPV6_V6ONLY,
            &0i32.to_ne_bytes()
        ),
        Err(libc::EINVAL),
        "not once bound"
    );
    // IPv6 options are not an AF_INET socket's.
    let four = a.socket(libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
    assert_eq!(
        a.setsockopt(four, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, &one),
        Err(libc::ENOPROTOOPT)
    );
    assert_eq!(get(&mut a, four), Err(libc::EOPNOTSUPP));
    // The traffic class is taken (as Linux takes it) on an AF_INET6 one.
    a.setsockopt(s, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, &one)
        .unwrap();

    // A v6only listener refuses IPv4 clients.
    let l = listener(&mut b, libc::AF_INET6, true);
    let c = a.socket(libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
    assert_eq!(a.connect(c, addr(2, 80)), Err(libc::EINPROGRESS));
    pump(&mut a, &mut b, 1);
    assert_eq!(a.connect_done(c), Err(libc::ECONNREFUSED));
    assert_eq!(b.accept(l, 0).unwrap_err(), libc::EAGAIN);
}

/// Port sharing across families as on Linux: `[::]:p` takes IPv4 too and
/// so collides with `0.0.0.0:p`, unless it is v6only; an `AF_INET6`
/// socket bound to an IPv6 address leaves IPv4 alone.
#[test]
fn ipv6_and_ipv4_share_a_port_only_when_linux_lets_them() {
    let (mut a, _) = hosts6();
    let any4 = SocketAddr::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 80));
    let any6 = SocketAddr::from(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 80, 0, 0));
    let l6 = listener(&mut a, libc::AF_INET6, false);
    let s4 = a.socket(libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
    assert_eq!(
        a.bind(s4, any4),
        Err(libc::EADDRINUSE),
        "dual-stack [::]:80"
    );
    a.close(l6).unwrap();
    let l6 = listener(&mut a, libc::AF_INET6, true);
    a.bind(s4, any4).unwrap();
    a.listen(s4, 5).unwrap();
    let t6 = a.socket(libc::AF_INET6, libc::SOCK_STREAM, 0).unwrap();
    assert_eq!(a.bind(t6, any6), Err(libc::EADDRINUSE), "IPv6 against IPv6");
    a.close(l6).unwrap();
    assert_eq!(
        a.bind(t6, any6),
        Err(libc::EADDRINUSE),
        "dual-stack against IPv4"
    );
    let u6 = a.socket(libc::AF_INET6, libc::SOCK_STREAM, 0).unwrap();
    assert_eq!(
        a.bind(u6, v6(1, 80)),
        Ok(()),
        "an IPv6 address leaves IPv4 alone"
    );
    let m6 = a.socket(libc::AF_INET6, libc::SOCK_STREAM, 0).unwrap();
    assert_eq!(
        a.bind(m6, mapped(1, 80)),
        Err(libc::EADDRINUSE),
        "IPv4-mapped is IPv4"
    );
}

/// `pipe` and `splice` from a socket: data moves into the pipe and reads
/// out of it; the pipe's ends close as Linux's do.
#[test]
fn splice_socket_into_pipe() {
    let (mut a, mut b) = (host(1), host(2));
    let l = b.socket(libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
    b.bind(l, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 80).into())
        .unwrap();
    b.listen(l, 5).unwrap();
    let c = a
        .socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0)
        .unwrap();
    assert_eq!(a.connect(c, addr(2, 80)), Err(libc::EINPROGRESS));
    pump(&mut a, &mut b, 1);
    let (s, _) = b.accept(l, 0).unwrap();
    let (r, w) = b.pipe();
    assert!(b.is_pipe(r) && b.is_pipe(w));
    assert_eq!(b.splice_to_pipe(s, w, 100), Err(libc::EAGAIN));
    assert_eq!(b.splice_to_pipe(s, r, 100), Err(libc::EBADF), "read end");
    assert_eq!(a.send(c, b"hello world").unwrap(), 11);
    pump(&mut a, &mut b, 1);
    assert_eq!(b.readiness(r) & POLLIN, 0, "pipe empty");
    assert_eq!(b.splice_to_pipe(s, w, 5), Ok(5));
    assert_ne!(b.readiness(r) & POLLIN, 0);
    assert_eq!(b.splice_to_pipe(s, w, 100), Ok(6));
    let mut buf = [0u8; 32];
    assert_eq!(b.pipe_read(r, &mut buf), Ok(11));
    assert_eq!(&buf[..11], b"hello world");
    assert_eq!(b.pipe_read(r, &mut buf), Err(libc::EAGAIN));
    assert_eq!(b.pipe_write(w, b"xy"), Ok(2));
    b.close(w).unwrap();
    assert_eq!(b.pipe_read(r, &mut buf), Ok(2));
    assert_eq!(b.pipe_read(r, &mut buf), Ok(0), "writer gone: end of file");
    assert_ne!(b.readiness(r) & POLLHUP, 0);
    let (r2, w2) = b.pipe();
    b.close(r2).unwrap();
    assert_eq!(b.pipe_write(w2, b"x"), Err(libc::EPIPE));
    assert_eq!(b.recv(r, &mut buf, false), Err(libc::ENOTSOCK));
}

/// Edge-triggered epoll on a pipe's read end: each write is an event, as
/// Linux's pipe wakes its readers on each.
#[test]
fn edge_triggered_epoll_on_a_pipe() {
    let mut h = host(1);
    let (r, w) = h.pipe();
    let ep = h.epoll_create();
    let et = libc::EPOLLET as u32;
    h.epoll_ctl(ep, libc::EPOLL_CTL_ADD, r, POLLIN | et, 7)
        .unwrap();
    assert!(h.epoll_ready(ep, 4).unwrap().is_empty());
    assert_eq!(h.pipe_write(w, b"ab"), Ok(2));
    assert_eq!(h.epoll_ready(ep, 4).unwrap(), vec![(POLLIN, 7)]);
    assert!(h.epoll_ready(ep, 4).unwrap().is_empty(), "reported once");
    assert_eq!(h.pipe_write(w, b"c"), Ok(1));
    assert_eq!(h.epoll_ready(ep, 4).unwrap(), vec![(POLLIN, 7)]);
}
