//! Helper modes that run on the *kernel's* sockets, used by `ustack bench`
//! inside the namespaces it creates (hidden subcommands `kserve`, `kclient`):
//! the same service code and the same client measure ustack and the kernel.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::server::{self, Service};
use crate::{services, signals};

/// `ustack kserve --bind ADDR`: the services of `ustack serve` on kernel
/// sockets, until SIGINT/SIGTERM. Prints "ready" on stdout once listening.
pub fn kserve(bind: IpAddr) -> Result<i32> {
    let active = Arc::new(AtomicUsize::new(0));
    let page: server::PageFn = Arc::new(|| "kernel sockets\n".to_string());
    for svc in [
        Service::Echo,
        Service::Discard,
        Service::Chargen,
        Service::Http,
    ] {
        let l = TcpListener::bind(SocketAddr::new(bind, svc.port()))
            .with_context(|| format!("cannot listen on {bind}:{}", svc.port()))?;
        let (p, a) = (page.clone(), active.clone());
        thread::spawn(move || server::run_tcp(l, svc, p, a));
    }
    let u = UdpSocket::bind(SocketAddr::new(bind, 7))
        .with_context(|| format!("cannot bind UDP {bind}:7"))?;
    thread::spawn(move || server::run_udp_echo(u));
    println!("ready");
    std::io::stdout().flush()?;
    signals::wait_termination(None);
    Ok(0)
}

/// What `kclient` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientTest {
    /// 1-byte request/response round trips against echo (port 7).
    Rr,
    /// Bulk send to discard (port 9).
    Send,
    /// Bulk receive from chargen (port 19).
    Recv,
}

#[derive(Serialize)]
pub struct ClientResult {
    /// Round trips (rr) or bytes (send/recv).
    pub count: u64,
    pub seconds: f64,
    /// µs per round trip (rr) or Mbit/s (send/recv).
    pub value: f64,
}

fn connect(addr: SocketAddr) -> Result<TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!("connect {addr}: {e}; retrying");
                thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e).with_context(|| format!("cannot connect to {addr}")),
        }
    }
}

/// Run one measurement against `host` and return it.
pub fn measure(test: ClientTest, host: IpAddr, count: u64, seconds: f64) -> Result<ClientResult> {
    match test {
        ClientTest::Rr => {
            let mut s = connect(SocketAddr::new(host, Service::Echo.port()))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            let mut b = [0u8; 1];
            // Warm up (ARP, slow start).
            for _ in 0..10 {
                s.write_all(b"x")?;
                s.read_exact(&mut b)?;
            }
            let t0 = Instant::now();
            for _ in 0..count {
                s.write_all(b"x").context("echo write")?;
                s.read_exact(&mut b).context("echo read")?;
            }
            let secs = t0.elapsed().as_secs_f64();
            Ok(ClientResult {
                count,
                seconds: secs,
                value: secs * 1e6 / count.max(1) as f64,
            })
        }
        ClientTest::Send => {
            let mut s = connect(SocketAddr::new(host, Service::Discard.port()))?;
            let buf = vec![0x5au8; services::CHUNK];
            let t0 = Instant::now();
            let limit = Duration::from_secs_f64(seconds);
            let mut sent = 0u64;
            while t0.elapsed() < limit {
                s.write_all(&buf).context("bulk send")?;
                sent += buf.len() as u64;
            }
            // Wait until the receiver has taken everything: it closes after our FIN.
            s.shutdown(std::net::Shutdown::Write)?;
            s.set_read_timeout(Some(Duration::from_secs(30)))?;
            let mut b = [0u8; 16];
            let _ = s.read(&mut b);
            let secs = t0.elapsed().as_secs_f64();
            Ok(ClientResult {
                count: sent,
                seconds: secs,
                value: sent as f64 * 8.0 / secs / 1e6,
            })
        }
        ClientTest::Recv => {
            let mut s = connect(SocketAddr::new(host, Service::Chargen.port()))?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            let mut buf = vec![0u8; services::CHUNK];
            let t0 = Instant::now();
            let limit = Duration::from_secs_f64(seconds);
            let mut got = 0u64;
            while t0.elapsed() < limit {
                let n = s.read(&mut buf).context("bulk receive")?;
                if n == 0 {
                    bail!("chargen server closed the connection early");
                }
                got += n as u64;
            }
            let secs = t0.elapsed().as_secs_f64();
            Ok(ClientResult {
                count: got,
                seconds: secs,
                value: got as f64 * 8.0 / secs / 1e6,
            })
        }
    }
}

/// `ustack kclient TEST HOST`: prints one JSON object on stdout.
pub fn kclient(test: ClientTest, host: IpAddr, count: u64, seconds: f64) -> Result<i32> {
    let r = measure(test, host, count, seconds)?;
    println!("{}", serde_json::to_string(&r)?);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_measures_against_kernel_services_on_loopback() {
        // Serve on 127.0.0.x ports 7/9/19 is privileged-free only as root;
        // use a random loopback address in 127/8 to avoid clashing with a real service.
        let host = IpAddr::V4(std::net::Ipv4Addr::new(
            127,
            77,
            (std::process::id() % 250) as u8,
            9,
        ));
        let active = Arc::new(AtomicUsize::new(0));
        let page: server::PageFn = Arc::new(String::new);
        for svc in [Service::Echo, Service::Discard, Service::Chargen] {
            let l = TcpListener::bind(SocketAddr::new(host, svc.port())).unwrap();
            let (p, a) = (page.clone(), active.clone());
            thread::spawn(move || server::run_tcp(l, svc, p, a));
        }
        let rr = measure(ClientTest::Rr, host, 200, 0.0).unwrap();
        assert_eq!(rr.count, 200);
        assert!(rr.value > 0.0);
        let snd = measure(ClientTest::Send, host, 0, 0.2).unwrap();
        assert!(snd.count > 0 && snd.value > 0.0);
        let rcv = measure(ClientTest::Recv, host, 0, 0.2).unwrap();
        assert!(rcv.count > 0 && rcv.value > 0.0);
    }
}
