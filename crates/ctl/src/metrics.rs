//! `--metrics ADDR:PORT`: the stack's counters in Prometheus' text format
//! (version 0.0.4) at `http://ADDR:PORT/metrics`, for monitoring systems.
//!
//! One thread serves one request at a time (a scrape takes a snapshot of
//! the counters: one lock of the stack, or one query to the relay thread);
//! a client gets 5 s to send its request. Counter names are Linux's `nstat`
//! names in snake case with a `ustack_` prefix and the `_total` suffix
//! (`TcpActiveOpens` → `ustack_tcp_active_opens_total`), labelled with the
//! stack's name; gauges (`TcpCurrEstab`, peaks) have no suffix.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::Provider;

/// A running metrics endpoint; dropping it stops it.
pub struct Metrics {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Metrics {
    /// Serve `provider`'s counters on `addr` for the stack called `name`.
    pub fn start(
        addr: SocketAddr,
        name: &str,
        provider: Arc<dyn Provider>,
    ) -> Result<Metrics, String> {
        let l = TcpListener::bind(addr).map_err(|e| format!("--metrics {addr}: {e}"))?;
        let addr = l
            .local_addr()
            .map_err(|e| format!("--metrics {addr}: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let name = name.to_string();
        let thread = std::thread::Builder::new()
            .name("ustack-metrics".into())
            .spawn(move || {
                for c in l.incoming() {
                    if st.load(Ordering::Acquire) {
                        return;
                    }
                    if let Ok(c) = c {
                        let _ = serve(c, &name, &*provider);
                    }
                }
            })
            .map_err(|e| format!("--metrics: {e}"))?;
        Ok(Metrics {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it listens (the port chosen if 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Metrics {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept with a connection of our own.
        let mut a = self.addr;
        if a.ip().is_unspecified() {
            a.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let _ = TcpStream::connect_timeout(&a, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(mut c: TcpStream, name: &str, p: &dyn Provider) -> std::io::Result<()> {
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    c.set_write_timeout(Some(Duration::from_secs(5)))?;
    // Read the request head (bounded).
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 512];
    while !head_ended(&head) && head.len() < 8192 {
        let n = c.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, ctype, body) = if method != "GET" && method != "HEAD" {
        (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_string(),
        )
    } else if path == "/metrics" || path.starts_with("/metrics?") {
        (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            render(name, &p.counters()),
        )
    } else {
        ("404 Not Found", "text/plain", "see /metrics\n".to_string())
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if method != "HEAD" {
        out.push_str(&body);
    }
    c.write_all(out.as_bytes())
}

/// Whether `head` holds a whole request head: an empty line after the
/// request line, its line ends CRLF or a bare LF (RFC 9112 2.2).
fn head_ended(head: &[u8]) -> bool {
    head.windows(2).any(|w| w == b"\n\n") || head.windows(3).any(|w| w == b"\n\r\n")
}

/// `TcpActiveOpens` → `tcp_active_opens`.
fn snake(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 8);
    let b = name.as_bytes();
    for (i, &ch) in b.iter().enumerate() {
        if ch.is_ascii_uppercase() {
            let prev_lower = i > 0 && (b[i - 1].is_ascii_lowercase() || b[i - 1].is_ascii_digit());
            // An acronym's last capital starts the next word ("TCPTimeouts"),
            // unless one lower-case letter is all that follows: a plural
            // or a version ("ACKs", "MLDv2").
            let next_lower = b.get(i + 1).is_some_and(|n| n.is_ascii_lowercase())
                && b.get(i + 2).is_some_and(|n| n.is_ascii_lowercase());
            let prev_upper = i > 0 && b[i - 1].is_ascii_uppercase();
            if i > 0 && (prev_lower || (prev_upper && next_lower)) {
                s.push('_');
            }
            s.push(ch.to_ascii_lowercase() as char);
        } else if ch.is_ascii_alphanumeric() {
            s.push(ch as char);
        } else {
            s.push('_');
        }
    }
    s
}

/// Counters that go up and down (gauges).
fn is_gauge(name: &str) -> bool {
    name == "TcpCurrEstab" || name.contains("Peak") || name == "TcpMaxConn"
}

/// The Prometheus text exposition of `counters` for stack `name`.
pub fn render(name: &str, counters: &[(String, u64)]) -> String {
    let label = name.replace('\\', "\\\\").replace('"', "\\\"");
    let mut out = String::with_capacity(counters.len() * 96);
    for (n, v) in counters {
        let gauge = is_gauge(n);
        let m = format!("ustack_{}{}", snake(n), if gauge { "" } else { "_total" });
        out.push_str(&format!(
            "# HELP {m} {n} (nstat name)\n# TYPE {m} {}\n{m}{{stack=\"{label}\"}} {v}\n",
            if gauge { "gauge" } else { "counter" }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_prometheus_names() {
        assert_eq!(snake("TcpActiveOpens"), "tcp_active_opens");
        assert_eq!(snake("IpInReceives"), "ip_in_receives");
        assert_eq!(
            snake("TcpExtTCPReqQFullDrop"),
            "tcp_ext_tcp_req_q_full_drop"
        );
        assert_eq!(snake("RelayBytesGuestToHost"), "relay_bytes_guest_to_host");
        // A plural acronym stays one word (it was delayed_ac_ks).
        assert_eq!(snake("TcpExtDelayedACKs"), "tcp_ext_delayed_acks");
        assert_eq!(snake("TcpExtTCPTimeouts"), "tcp_ext_tcp_timeouts");
        assert_eq!(snake("Icmp6InMLDv2Reports"), "icmp6_in_mldv2_reports");
        let r = render(
            "a\"b",
            &[("TcpCurrEstab".into(), 3), ("TcpInSegs".into(), 7)],
        );
        assert!(r.contains("# TYPE ustack_tcp_curr_estab gauge\n"));
        assert!(r.contains("ustack_tcp_in_segs_total{stack=\"a\\\"b\"} 7\n"));
    }

    #[test]
    fn a_request_head_ends_at_an_empty_line_of_crlf_or_lf() {
        // `printf 'GET /metrics HTTP/1.0\n\n' | nc` got no answer: the
        // head was read until CRLF CRLF, which never came, then the read
        // timed out and the connection closed without a response.
        assert!(head_ended(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(head_ended(b"GET /metrics HTTP/1.0\n\n"));
        assert!(head_ended(b"GET /metrics HTTP/1.0\nHost: x\r\n\r\n"));
        assert!(!head_ended(b"GET /metrics HTTP/1.0\r\nHost: x\r\n"));
    }
}
