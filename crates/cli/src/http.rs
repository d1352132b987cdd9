//! A small HTTP/1.1 server and client, generic over `Read + Write`.
//!
//! Server routes:
//! - `/` — a short text page (the caller supplies it, e.g. the stack's counters);
//! - `/bytes/N` — `N` bytes where byte `i` is `(i % 251) as u8`
//!   (see [`crate::services::PATTERN_PERIOD`]), with `Content-Length`.
//!
//! `GET` and `HEAD` are served; other methods get 405, unknown paths 404,
//! malformed requests 400. Connections are persistent unless the client asks
//! otherwise (HTTP/1.1 default; HTTP/1.0 only with `Connection: keep-alive`).

use std::fmt::Write as _;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::services;

/// Longest request or response head we accept.
const MAX_HEAD: usize = 16 * 1024;

/// A read buffer in front of a stream, used to find the end of a message
/// head and to hand over any bytes read beyond it to the body (pipelining).
pub struct Conn<S> {
    pub stream: S,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl<S: Read + Write> Conn<S> {
    pub fn new(stream: S) -> Self {
        Conn {
            stream,
            buf: vec![0; services::CHUNK],
            start: 0,
            end: 0,
        }
    }

    fn buffered(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or(&[])
    }

    fn fill(&mut self) -> io::Result<usize> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let dst = self.buf.get_mut(self.end..).unwrap_or(&mut []);
        if dst.is_empty() {
            return Err(io::Error::new(
                ErrorKind::InvalidData,
                "message head too long",
            ));
        }
        loop {
            match self.stream.read(dst) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Read a message head (up to and including the empty line).
    /// `Ok(None)` on a clean EOF before any byte of a new message.
    fn read_head(&mut self) -> io::Result<Option<String>> {
        loop {
            if let Some((pos, end)) = head_end(self.buffered()) {
                let head =
                    String::from_utf8_lossy(self.buffered().get(..pos).unwrap_or(&[])).into_owned();
                self.start += end;
                return Ok(Some(head));
            }
            if self.buffered().len() >= MAX_HEAD {
                return Err(io::Error::new(
                    ErrorKind::InvalidData,
                    "message head too long",
                ));
            }
            if self.fill()? == 0 {
                if self.buffered().is_empty() {
                    return Ok(None);
                }
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "connection closed in the middle of a message head",
                ));
            }
        }
    }

    /// Read one CRLF-terminated line (for chunk sizes).
    fn read_line(&mut self) -> io::Result<String> {
        loop {
            if let Some(pos) = find(self.buffered(), b"\r\n") {
                let line =
                    String::from_utf8_lossy(self.buffered().get(..pos).unwrap_or(&[])).into_owned();
                self.start += pos + 2;
                return Ok(line);
            }
            if self.buffered().len() >= MAX_HEAD {
                return Err(io::Error::new(ErrorKind::InvalidData, "line too long"));
            }
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "connection closed mid-line",
                ));
            }
        }
    }

    /// Read up to `max` body bytes, from the buffer first. Ok(0) = EOF.
    fn read_some(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if !self.buffered().is_empty() {
            let n = out.len().min(self.buffered().len());
            out.get_mut(..n)
                .unwrap_or(&mut [])
                .copy_from_slice(self.buffered().get(..n).unwrap_or(&[]));
            self.start += n;
            return Ok(n);
        }
        loop {
            match self.stream.read(out) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Copy exactly `len` body bytes to `sink`.
    fn copy_body(&mut self, mut len: u64, sink: &mut dyn Write) -> io::Result<()> {
        let mut tmp = vec![0u8; services::CHUNK];
        while len > 0 {
            let want = usize::try_from(len).unwrap_or(usize::MAX).min(tmp.len());
            let n = self.read_some(tmp.get_mut(..want).unwrap_or(&mut []))?;
            if n == 0 {
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    format!("connection closed with {len} body bytes still expected"),
                ));
            }
            sink.write_all(tmp.get(..n).unwrap_or(&[]))?;
            len -= n as u64;
        }
        Ok(())
    }

    /// Copy everything until EOF to `sink`; returns bytes copied.
    fn copy_to_eof(&mut self, sink: &mut dyn Write) -> io::Result<u64> {
        let mut tmp = vec![0u8; services::CHUNK];
        let mut total = 0;
        loop {
            let n = self.read_some(&mut tmp)?;
            if n == 0 {
                return Ok(total);
            }
            sink.write_all(tmp.get(..n).unwrap_or(&[]))?;
            total += n as u64;
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Where a message head in `buf` ends: `(head_len, consumed)`, the head
/// being `buf[..head_len]` and the empty line that ends it running to
/// `consumed`. Lines end with CRLF or, as RFC 9112 2.2 allows ("a
/// recipient MAY recognize a single LF as a line terminator and ignore any
/// preceding CR"), a bare LF.
fn head_end(buf: &[u8]) -> Option<(usize, usize)> {
    let mut from = 0;
    while let Some(i) = buf.get(from..)?.iter().position(|&b| b == b'\n') {
        let lf = from + i;
        match buf.get(lf + 1..) {
            Some([b'\n', ..]) => return Some((lf, lf + 2)),
            Some([b'\r', b'\n', ..]) => return Some((lf, lf + 3)),
            _ => from = lf + 1,
        }
    }
    None
}

/// How many bytes of empty lines (CRLF or LF) start `buf`: RFC 9112 2.2,
/// "a server that is expecting to receive and parse a request-line SHOULD
/// ignore at least one empty line (CRLF) received prior to the
/// request-line".
fn leading_empty_lines(buf: &[u8]) -> usize {
    let mut n = 0;
    loop {
        match buf.get(n..) {
            Some([b'\n', ..]) => n += 1,
            Some([b'\r', b'\n', ..]) => n += 2,
            _ => return n,
        }
    }
}

/// A parsed message head: first line and headers.
struct Head {
    first: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn parse(text: &str) -> Option<Head> {
        // Lines end with CRLF or a bare LF (see `head_end`).
        let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let first = lines.next()?.to_string();
        let mut headers = Vec::new();
        for line in lines {
            // RFC 9112 5.2: obsolete line folding — reject (a server MAY reject with 400).
            if line.starts_with(' ') || line.starts_with('\t') {
                return None;
            }
            let (name, value) = line.split_once(':')?;
            // RFC 9112 5.1: "No whitespace is allowed between the field name and colon."
            if name.is_empty() || name.ends_with(' ') || name.ends_with('\t') {
                return None;
            }
            headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
        }
        Some(Head { first, headers })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn all(&self, name: &str) -> impl Iterator<Item = &str> {
        let name = name.to_string();
        self.headers
            .iter()
            .filter(move |(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    fn has_token(&self, name: &str, token: &str) -> bool {
        self.all(name)
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    /// Content-Length, if present and valid; Err if present but invalid or conflicting.
    fn content_length(&self) -> Result<Option<u64>, ()> {
        let mut found: Option<u64> = None;
        for v in self.all("content-length") {
            for part in v.split(',') {
                let n: u64 = part.trim().parse().map_err(|_| ())?;
                if found.is_some_and(|f| f != n) {
                    return Err(());
                }
                found = Some(n);
            }
        }
        Ok(found)
    }
}

/// A request line's method, target and whether it is HTTP/1.1 (else
/// 1.0); else the status and body to refuse it with.
fn request_line(first: &str) -> Result<(&str, &str, bool), (u16, &'static str)> {
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err((400, "malformed request line\n"));
    };
    match version {
        "HTTP/1.1" => Ok((method, target, true)),
        "HTTP/1.0" => Ok((method, target, false)),
        v if v.starts_with("HTTP/") => Err((505, "only HTTP/1.x\n")),
        _ => Err((400, "malformed request line\n")),
    }
}

/// What the server does with one request.
enum Route {
    Page,
    Bytes(u64),
}

fn route(path: &str) -> Option<Route> {
    // Ignore a query string.
    let path = path.split('?').next().unwrap_or("");
    if path == "/" {
        return Some(Route::Page);
    }
    let n = path.strip_prefix("/bytes/")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok().map(Route::Bytes)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        501 => "Not Implemented",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// A response with a short text body (errors, 405).
fn simple_response(status: u16, extra: &str, body: &str, head_only: bool, close: bool) -> Vec<u8> {
    let mut msg = String::with_capacity(256 + body.len());
    let _ = write!(
        msg,
        "HTTP/1.1 {status} {}\r\nServer: ustack\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n{extra}{}\r\n",
        reason(status),
        body.len(),
        if close { "Connection: close\r\n" } else { "" }
    );
    if !head_only {
        msg.push_str(body);
    }
    msg.into_bytes()
}

/// Whether a read or write error means "try again later".
fn would_block(e: &io::Error) -> bool {
    e.kind() == ErrorKind::WouldBlock
}

/// Where an [`HttpSession`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HttpState {
    /// Reading a request head.
    Head,
    /// Discarding `left` bytes of request body before answering.
    Body { left: u64 },
    /// Sending the response prepared in `out` (and the `/bytes/N` body).
    Send,
    /// An error answer is out and our side shut: discarding what the
    /// client still sends (at most `left` bytes more) until it closes, so
    /// that our close is no reset that could destroy the answer before
    /// the client reads it (nginx's "lingering close").
    Linger { left: u64 },
}

/// The most a client still sending after an error answer may send before
/// the connection is closed anyway (then with a reset).
const LINGER_BYTES: u64 = 1 << 20;

/// One HTTP/1.1 server connection as a state machine: it makes as much
/// progress as the stream allows and stops at `WouldBlock`, so the same
/// code serves a blocking stream (from a thread per connection, see
/// [`serve_connection`]) and a non-blocking one (from an event loop).
/// Memory while idle: the struct and a small input buffer.
#[derive(Debug)]
pub struct HttpSession {
    /// Input: `buf[start..end]` not consumed yet (pipelined requests too).
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The response head (and a short body) being sent.
    out: Vec<u8>,
    out_pos: usize,
    /// `/bytes/N` body still to send.
    pattern: services::Pattern,
    /// Close after this response.
    close: bool,
    /// The response is an error answer to a request not read whole: shut
    /// our side and linger after it (see [`HttpState::Linger`]).
    linger: bool,
    state: HttpState,
    served: u64,
}

impl Default for HttpSession {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpSession {
    pub fn new() -> Self {
        HttpSession {
            buf: Vec::new(),
            start: 0,
            end: 0,
            out: Vec::new(),
            out_pos: 0,
            pattern: services::Pattern::default(),
            close: false,
            linger: false,
            state: HttpState::Head,
            served: 0,
        }
    }

    fn buffered(&self) -> &[u8] {
        self.buf.get(self.start..self.end).unwrap_or(&[])
    }

    /// Read more input. `Ok(0)` = end of stream.
    fn fill<S: Read>(&mut self, stream: &mut S) -> io::Result<usize> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            // Grow on demand: 4 KB, then up to the head limit.
            let want = if self.buf.is_empty() { 4096 } else { MAX_HEAD };
            if self.buf.len() >= want {
                return Err(io::Error::new(
                    ErrorKind::InvalidData,
                    "message head too long",
                ));
            }
            self.buf.resize(want, 0);
        }
        let dst = self.buf.get_mut(self.end..).unwrap_or(&mut []);
        loop {
            match stream.read(dst) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Prepare an answer that closes the connection.
    fn fail(&mut self, status: u16, body: &str, head_only: bool) {
        self.out = simple_response(status, "", body, head_only, true);
        self.out_pos = 0;
        self.pattern = services::Pattern::default();
        self.close = true;
        self.linger = true;
        self.state = HttpState::Send;
    }

    /// A complete request head arrived: decide the response.
    fn on_head(&mut self, head_text: &str, page: &dyn Fn() -> String) {
        self.served += 1;
        let Some(head) = Head::parse(head_text) else {
            return self.fail(400, "malformed request\n", false);
        };
        let (method, target, http11) = match request_line(&head.first) {
            Ok(l) => l,
            Err((status, body)) => return self.fail(status, body, false),
        };
        let head_only = method == "HEAD";
        // RFC 9112 9.3: "A server that does not support persistent connections
        // ... HTTP/1.1 defaults to the use of persistent connections".
        let close = if http11 {
            head.has_token("connection", "close")
        } else {
            !head.has_token("connection", "keep-alive")
        };
        let keep_alive_hdr = if !http11 && !close {
            "Connection: keep-alive\r\n"
        } else {
            ""
        };
        // RFC 9112 3.2: "A server MUST respond with a 400 (Bad Request) status
        // code to any HTTP/1.1 request message that lacks a Host header field".
        if http11 && head.get("host").is_none() {
            return self.fail(400, "missing Host header\n", head_only);
        }
        // RFC 9112 6.1: "A server that receives a request message with a
        // transfer coding it does not understand SHOULD respond with 501".
        if head.get("transfer-encoding").is_some() {
            return self.fail(
                501,
                "request transfer codings are not supported\n",
                head_only,
            );
        }
        let body_len = match head.content_length() {
            Ok(n) => n.unwrap_or(0),
            // RFC 9112 6.3: invalid Content-Length -> "the server MUST respond
            // with a 400 (Bad Request) status code and then close the connection".
            Err(()) => return self.fail(400, "bad Content-Length\n", head_only),
        };
        self.close = close;
        self.out_pos = 0;
        self.pattern = services::Pattern::default();
        self.out = if method != "GET" && method != "HEAD" {
            simple_response(
                405,
                &format!("Allow: GET, HEAD\r\n{keep_alive_hdr}"),
                "method not allowed\n",
                false,
                close,
            )
        } else {
            // RFC 9112 3.2.2: "a server MUST accept the absolute-form in
            // requests": its path is what is routed.
            let target = match target.strip_prefix("http://") {
                Some(rest) => rest.find('/').map_or("/", |i| rest.get(i..).unwrap_or("/")),
                None => target,
            };
            match route(target) {
                None => simple_response(
                    404,
                    keep_alive_hdr,
                    "not found; try / or /bytes/N\n",
                    head_only,
                    close,
                ),
                Some(Route::Page) => {
                    let body = page();
                    let mut msg = format!(
                        "HTTP/1.1 200 OK\r\nServer: ustack\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n{keep_alive_hdr}{}\r\n",
                        body.len(),
                        if close { "Connection: close\r\n" } else { "" }
                    );
                    if !head_only {
                        msg.push_str(&body);
                    }
                    msg.into_bytes()
                }
                Some(Route::Bytes(n)) => {
                    if !head_only {
                        self.pattern = services::Pattern::new(n);
                    }
                    format!(
                        "HTTP/1.1 200 OK\r\nServer: ustack\r\nContent-Type: application/octet-stream\r\nContent-Length: {n}\r\n{keep_alive_hdr}{}\r\n",
                        if close { "Connection: close\r\n" } else { "" }
                    )
                    .into_bytes()
                }
            }
        };
        // The request body is read (and discarded) before the answer goes out.
        self.state = HttpState::Body { left: body_len };
    }

    /// Make as much progress as `stream` allows: `Ok(Some(requests))` when
    /// the connection is finished (the client closed it or asked to),
    /// `Ok(None)` when the stream said `WouldBlock`.
    pub fn drive<S: Read + Write + services::Skip>(
        &mut self,
        stream: &mut S,
        page: &dyn Fn() -> String,
    ) -> io::Result<Option<u64>> {
        loop {
            match self.state {
                HttpState::Head => {
                    self.start += leading_empty_lines(self.buffered());
                    if let Some((pos, end)) = head_end(self.buffered()) {
                        let head =
                            String::from_utf8_lossy(self.buffered().get(..pos).unwrap_or(&[]))
                                .into_owned();
                        self.start += end;
                        self.on_head(&head, page);
                        continue;
                    }
                    // A whole request line that cannot be served is
                    // answered at once: a client that sent none (HTTP/0.9's
                    // `GET /`) would never send the empty line that ends
                    // a head.
                    let line = self
                        .buffered()
                        .iter()
                        .position(|&b| b == b'\n')
                        .and_then(|i| self.buffered().get(..i));
                    if let Some(line) = line {
                        let line = String::from_utf8_lossy(line);
                        if let Err((status, body)) =
                            request_line(line.strip_suffix('\r').unwrap_or(&line))
                        {
                            self.served += 1;
                            self.fail(status, body, false);
                            continue;
                        }
                    }
                    if self.buffered().len() >= MAX_HEAD {
                        self.fail(400, "request head too long\n", false);
                        continue;
                    }
                    match self.fill(stream) {
                        Ok(0) if self.buffered().is_empty() => return Ok(Some(self.served)),
                        Ok(0) => {
                            return Err(io::Error::new(
                                ErrorKind::UnexpectedEof,
                                "connection closed in the middle of a message head",
                            ))
                        }
                        Ok(_) => {}
                        Err(e) if e.kind() == ErrorKind::InvalidData => {
                            self.fail(400, "request head too long\n", false);
                        }
                        Err(e) if would_block(&e) => return Ok(None),
                        Err(e) => return Err(e),
                    }
                }
                HttpState::Body { left } => {
                    if left == 0 {
                        self.state = HttpState::Send;
                        continue;
                    }
                    let have = self.buffered().len() as u64;
                    if have > 0 {
                        let take = have.min(left);
                        self.start += take as usize;
                        self.state = HttpState::Body { left: left - take };
                        continue;
                    }
                    match self.fill(stream) {
                        Ok(0) => {
                            return Err(io::Error::new(
                                ErrorKind::UnexpectedEof,
                                format!("connection closed with {left} body bytes still expected"),
                            ))
                        }
                        Ok(_) => {}
                        Err(e) if would_block(&e) => return Ok(None),
                        Err(e) => return Err(e),
                    }
                }
                HttpState::Send => {
                    while let Some(rest) = self.out.get(self.out_pos..).filter(|r| !r.is_empty()) {
                        match stream.write(rest) {
                            Ok(0) => return Err(ErrorKind::WriteZero.into()),
                            Ok(n) => self.out_pos += n,
                            Err(e) if e.kind() == ErrorKind::Interrupted => {}
                            Err(e) if would_block(&e) => return Ok(None),
                            Err(e) => return Err(e),
                        }
                    }
                    if !self.pattern.drive(stream)? {
                        return Ok(None);
                    }
                    stream.flush()?;
                    self.out = Vec::new();
                    self.out_pos = 0;
                    if self.linger {
                        stream.shutdown_write()?;
                        self.buf = Vec::new();
                        (self.start, self.end) = (0, 0);
                        self.state = HttpState::Linger { left: LINGER_BYTES };
                        continue;
                    }
                    if self.close {
                        return Ok(Some(self.served));
                    }
                    self.state = HttpState::Head;
                }
                HttpState::Linger { left } => {
                    let mut scratch = [0u8; 4096];
                    match stream.skip(&mut scratch) {
                        Ok(0) => return Ok(Some(self.served)),
                        Ok(n) if n as u64 >= left => return Ok(Some(self.served)),
                        Ok(n) => {
                            self.state = HttpState::Linger {
                                left: left - n as u64,
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) if would_block(&e) => return Ok(None),
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
}

/// A parsed `http://` URL. Only IPv4 literals: ustack has no resolver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// IPv4 or IPv6 (`http://[fd77::1]:8080/`).
    pub addr: SocketAddr,
    pub host_header: String,
    pub path: String,
}

impl std::str::FromStr for Url {
    type Err = String;

    fn from_str(s: &str) -> Result<Url, String> {
        let rest = s
            .strip_prefix("http://")
            .ok_or_else(|| format!("'{s}': only http:// URLs are supported"))?;
        // RFC 3986 has no space or control character in a URL; sent as
        // they are they would break the request line (or add a header).
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "{s:?}: a space or control character in the URL (write a space as %20)"
            ));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        // Drop a fragment; the server never sees it.
        let path = path.split('#').next().unwrap_or("/");
        let port_of = |p: &str| {
            p.parse::<u16>()
                .map_err(|_| format!("'{s}': bad port '{p}'"))
        };
        // RFC 3986 3.2.2: an IPv6 literal is in brackets.
        let addr = if let Some(rest) = authority.strip_prefix('[') {
            let (h, after) = rest
                .split_once(']')
                .ok_or_else(|| format!("'{s}': missing ']' after the IPv6 address"))?;
            let port = match after {
                "" => 80,
                p => port_of(
                    p.strip_prefix(':')
                        .ok_or_else(|| format!("'{s}': bad text after ']'"))?,
                )?,
            };
            let ip: Ipv6Addr = h
                .parse()
                .map_err(|_| format!("'{s}': '{h}' is not an IPv6 address"))?;
            SocketAddr::new(IpAddr::V6(ip), port)
        } else {
            let (host, port) = match authority.rsplit_once(':') {
                Some((h, p)) if !h.contains(':') => (h, port_of(p)?),
                Some(_) => {
                    return Err(format!(
                        "'{s}': put an IPv6 address in brackets: http://[{authority}]/"
                    ))
                }
                None => (authority, 80),
            };
            let ip: Ipv4Addr = host.parse().map_err(|_| {
                format!(
                    "'{s}': host must be an IPv4 address or a bracketed IPv6 one \
                     (ustack does not resolve names)"
                )
            })?;
            SocketAddr::new(IpAddr::V4(ip), port)
        };
        Ok(Url {
            addr,
            host_header: authority.to_string(),
            path: if path.is_empty() {
                "/".into()
            } else {
                path.into()
            },
        })
    }
}

/// Result of a GET.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub reason: String,
    /// Body bytes received (written to the sink only for 2xx).
    pub body_len: u64,
    /// The first bytes of the body of a non-2xx response, for the error message.
    pub error_body: Vec<u8>,
}

impl Response {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// A `Write` that counts and keeps at most `cap` bytes.
struct Capped {
    kept: Vec<u8>,
    cap: usize,
}

impl Write for Capped {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let room = self.cap.saturating_sub(self.kept.len());
        self.kept
            .extend_from_slice(b.get(..room.min(b.len())).unwrap_or(&[]));
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A `Write` that counts bytes passing through.
struct Counting<'a> {
    inner: &'a mut dyn Write,
    n: u64,
}

impl Write for Counting<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(b)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, msg.into())
}

/// Send `GET url.path` on `stream` and read the response. The body of a 2xx
/// response goes to `sink`; other bodies are kept (truncated) in the result.
pub fn get<S: Read + Write>(stream: S, url: &Url, sink: &mut dyn Write) -> io::Result<Response> {
    let mut conn = Conn::new(stream);
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: ustack\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        url.path, url.host_header
    );
    conn.stream.write_all(req.as_bytes())?;
    conn.stream.flush()?;
    let head = loop {
        let text = conn.read_head()?.ok_or_else(|| {
            io::Error::new(
                ErrorKind::UnexpectedEof,
                "server closed the connection without a response",
            )
        })?;
        let head = Head::parse(&text).ok_or_else(|| invalid("malformed response head"))?;
        // Skip interim 1xx responses (RFC 9110 15.2).
        if head
            .first
            .split(' ')
            .nth(1)
            .is_some_and(|s| s.starts_with('1'))
        {
            continue;
        }
        break head;
    };
    let mut parts = head.first.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(invalid(format!(
            "not an HTTP/1.x response: '{}'",
            head.first
        )));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid(format!("bad status line: '{}'", head.first)))?;
    let reason = parts.next().unwrap_or("").to_string();
    let ok = (200..300).contains(&status);
    let mut capped = Capped {
        kept: Vec::new(),
        cap: 512,
    };
    let target: &mut dyn Write = if ok { sink } else { &mut capped };
    let mut counting = Counting {
        inner: target,
        n: 0,
    };
    // RFC 9112 6.3: 204 and 304 have no body; chunked takes precedence over
    // Content-Length; otherwise Content-Length; otherwise read until close.
    if status == 204 || status == 304 {
    } else if head.has_token("transfer-encoding", "chunked") {
        loop {
            let line = conn.read_line()?;
            let size_txt = line.split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(size_txt, 16)
                .map_err(|_| invalid(format!("bad chunk size '{size_txt}'")))?;
            if size == 0 {
                // Trailer section, ended by an empty line.
                while !conn.read_line()?.is_empty() {}
                break;
            }
            conn.copy_body(size, &mut counting)?;
            if !conn.read_line()?.is_empty() {
                return Err(invalid("chunk not followed by CRLF"));
            }
        }
    } else if let Some(len) = head
        .content_length()
        .map_err(|()| invalid("bad Content-Length in response"))?
    {
        conn.copy_body(len, &mut counting)?;
    } else {
        conn.copy_to_eof(&mut counting)?;
    }
    counting.flush()?;
    let body_len = counting.n;
    Ok(Response {
        status,
        reason,
        body_len,
        error_body: capped.kept,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddrV4;

    /// Serve HTTP requests on one connection until the client closes it or asks to.
    /// `page` renders the body of `/`. Returns the number of requests answered.
    /// A read timeout on a blocking stream ends it with `WouldBlock`.
    fn serve_connection<S: Read + Write + services::Skip>(
        mut stream: S,
        page: &dyn Fn() -> String,
    ) -> io::Result<u64> {
        let mut session = HttpSession::new();
        match session.drive(&mut stream, page)? {
            Some(n) => Ok(n),
            None => Err(ErrorKind::WouldBlock.into()),
        }
    }

    use std::net::{TcpListener, TcpStream};
    use std::thread;

    fn server() -> (SocketAddrV4, thread::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(addr) = l.local_addr().unwrap() else {
            panic!("v4 expected")
        };
        let h = thread::spawn(move || {
            for s in l.incoming().take(8) {
                let s = s.unwrap();
                thread::spawn(move || {
                    let _ = serve_connection(s, &|| "counters here\n".to_string());
                });
            }
        });
        (addr, h)
    }

    fn raw_bytes(addr: SocketAddrV4, req: &str) -> Vec<u8> {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        out
    }

    fn raw(addr: SocketAddrV4, req: &str) -> String {
        String::from_utf8_lossy(&raw_bytes(addr, req)).into_owned()
    }

    #[test]
    fn url_parsing() {
        let u: Url = "http://10.0.0.1:8080/a/b?x=1#frag".parse().unwrap();
        assert_eq!(u.addr, "10.0.0.1:8080".parse().unwrap());
        assert_eq!(u.path, "/a/b?x=1");
        assert_eq!(u.host_header, "10.0.0.1:8080");
        let u: Url = "http://10.0.0.1".parse().unwrap();
        assert_eq!(u.addr.port(), 80);
        assert_eq!(u.path, "/");
        assert!("https://10.0.0.1/".parse::<Url>().is_err());
        assert!("http://example.com/".parse::<Url>().is_err());
        assert!("http://10.0.0.1:99999/".parse::<Url>().is_err());
        let u: Url = "http://[fd77::1]:8080/x".parse().unwrap();
        assert_eq!(u.addr, "[fd77::1]:8080".parse().unwrap());
        assert_eq!(
            (u.host_header.as_str(), u.path.as_str()),
            ("[fd77::1]:8080", "/x")
        );
        let u: Url = "http://[fd77::1]".parse().unwrap();
        assert_eq!((u.addr.port(), u.path.as_str()), (80, "/"));
        assert!("http://fd77::1/".parse::<Url>().is_err());
        assert!("http://[fd77::1/".parse::<Url>().is_err());
        assert!("http://[fd77::zz]/".parse::<Url>().is_err());
        assert!("http://[fd77::1]x/".parse::<Url>().is_err());
        assert!("http://[fd77::1]:70000/".parse::<Url>().is_err());
        // A space or a control character would break the request line
        // (`GET /a b HTTP/1.1` was sent as it was): refused, as curl does.
        for bad in [
            "http://10.0.0.1/a b",
            "http://10.0.0.1/a\tb",
            "http://10.0.0.1/\r\nX: y",
        ] {
            let e = bad.parse::<Url>().expect_err(bad);
            assert!(e.contains("space or control character"), "{bad:?}: {e}");
        }
        let u: Url = "http://10.0.0.1/a%20b".parse().unwrap();
        assert_eq!(u.path, "/a%20b");
    }

    #[test]
    fn routes_and_errors_over_kernel_tcp() {
        let (addr, _h) = server();
        // Keep-alive: three requests on one connection, including pipelining and HEAD.
        let out = raw_bytes(
            addr,
            "GET /bytes/300 HTTP/1.1\r\nHost: x\r\n\r\nHEAD /bytes/5 HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        let first_body_at = find(&out, b"\r\n\r\n").unwrap() + 4;
        let head1 = String::from_utf8_lossy(&out[..first_body_at]);
        assert!(head1.starts_with("HTTP/1.1 200 OK\r\n"), "{head1}");
        assert!(head1.contains("Content-Length: 300\r\n"));
        let body = &out[first_body_at..first_body_at + 300];
        for (i, b) in body.iter().enumerate() {
            assert_eq!(*b, (i % 251) as u8);
        }
        let rest = String::from_utf8_lossy(&out[first_body_at + 300..]).into_owned();
        assert!(rest.starts_with("HTTP/1.1 200 OK\r\n"), "{rest}");
        assert!(rest.contains("Content-Length: 5\r\n"));
        let after_head = rest.find("\r\n\r\n").unwrap() + 4;
        // HEAD has no body: the next thing is the 404.
        assert!(
            rest[after_head..].starts_with("HTTP/1.1 404 Not Found\r\n"),
            "{rest}"
        );
        assert!(rest.contains("Connection: close\r\n"));

        let out = raw(
            addr,
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
        );
        assert!(
            out.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{out}"
        );
        assert!(out.contains("Allow: GET, HEAD\r\n"));

        let out = raw(addr, "GET / HTTP/1.1\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
        let out = raw(addr, "garbage\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
        let out = raw(addr, "GET / HTTP/1.0\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.ends_with("counters here\n"));
        let out = raw(addr, "GET /bytes/12x HTTP/1.0\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 404"), "{out}");
    }

    #[test]
    fn bare_lf_lines_and_absolute_targets_are_served() {
        // RFC 9112 2.2: "a recipient MAY recognize a single LF as a line
        // terminator and ignore any preceding CR", which is what
        // `printf 'GET / HTTP/1.0\n\n' | nc` sends (it waited forever);
        // 3.2.2: "a server MUST accept the absolute-form in requests" (it
        // answered 404).
        let (addr, _h) = server();
        // What came back within 10 s (the server used to wait for a CRLF
        // forever).
        let raw = |addr: SocketAddrV4, req: &str| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            s.write_all(req.as_bytes()).unwrap();
            let mut out = Vec::new();
            let r = s.read_to_end(&mut out);
            let out = String::from_utf8_lossy(&out).into_owned();
            assert!(r.is_ok(), "{req:?}: no end of answer ({r:?}): {out}");
            out
        };
        let out = raw(addr, "GET /bytes/3 HTTP/1.0\n\n");
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.contains("Content-Length: 3\r\n"), "{out}");
        let out = raw(
            addr,
            "GET /bytes/2 HTTP/1.1\nHost: x\r\nConnection: close\n\r\n",
        );
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.contains("Content-Length: 2\r\n"), "{out}");
        // Pipelined, bare LF, with the empty line a client may send first
        // (RFC 9112 2.2: "SHOULD ignore at least one empty line").
        let out = raw(
            addr,
            "\r\nGET /bytes/1 HTTP/1.1\nHost: x\n\nGET /bytes/4 HTTP/1.1\nHost: x\nConnection: close\n\n",
        );
        assert_eq!(out.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{out}");
        assert!(out.contains("Content-Length: 4\r\n"), "{out}");
        let out = raw(
            addr,
            "GET http://10.77.0.2/bytes/5?x=1 HTTP/1.1\r\nHost: 10.77.0.2\r\nConnection: close\r\n\r\n",
        );
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.contains("Content-Length: 5\r\n"), "{out}");
        let out = raw(
            addr,
            "GET http://10.77.0.2 HTTP/1.1\r\nHost: 10.77.0.2\r\nConnection: close\r\n\r\n",
        );
        assert!(out.ends_with("counters here\n"), "{out}");
    }

    #[test]
    fn a_bad_request_line_is_answered_without_waiting_for_headers() {
        // `GET /` and Enter in telnet or nc (HTTP/0.9's form, no version)
        // waited forever for the empty line that ends a head: a request
        // line that cannot be served is answered as soon as it is whole.
        let (addr, _h) = server();
        for (line, status) in [
            ("GET /\r\n", "400 Bad Request"),
            ("GET /\n", "400 Bad Request"),
            ("GET / HTTP/2.0\r\n", "505 HTTP Version Not Supported"),
            ("garbage\r\n", "400 Bad Request"),
        ] {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            s.write_all(line.as_bytes()).unwrap();
            // The client does not close: the answer must come anyway.
            let mut out = Vec::new();
            let r = s.read_to_end(&mut out);
            let out = String::from_utf8_lossy(&out).into_owned();
            assert!(r.is_ok(), "{line:?}: no answer ({r:?})");
            assert!(
                out.starts_with(&format!("HTTP/1.1 {status}\r\n")),
                "{line:?}: {out}"
            );
        }
        // A good request line still waits for its headers.
        let out = raw(
            addr,
            "GET /bytes/2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    }

    #[test]
    fn an_error_answer_reaches_a_client_still_sending() {
        // A head past the limit (a 40 kB cookie) from a client that sends
        // it all before reading: the 400 used to be followed at once by a
        // close with the rest unread, which is a reset, and the client
        // saw "connection reset" instead of the answer.
        let (addr, _h) = server();
        for round in 0..5 {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            let mut w = s.try_clone().unwrap();
            let writer = thread::spawn(move || {
                let mut req = b"GET / HTTP/1.1\r\nHost: x\r\nCookie: ".to_vec();
                req.extend(std::iter::repeat_n(b'a', 40_000));
                req.extend_from_slice(b"\r\n\r\n");
                let r = w.write_all(&req);
                let _ = w.shutdown(std::net::Shutdown::Write);
                r
            });
            let mut out = Vec::new();
            let r = s.read_to_end(&mut out);
            let sent = writer.join().unwrap();
            let out = String::from_utf8_lossy(&out).into_owned();
            assert!(r.is_ok(), "round {round}: {r:?} (sent: {sent:?}): {out}");
            assert!(sent.is_ok(), "round {round}: {sent:?}: {out}");
            assert!(
                out.starts_with("HTTP/1.1 400 Bad Request\r\n"),
                "round {round}: {out}"
            );
        }
    }

    #[test]
    fn client_against_server_and_chunked() {
        let (addr, _h) = server();
        let url: Url = format!("http://{addr}/bytes/1000003").parse().unwrap();
        let s = TcpStream::connect(addr).unwrap();
        let mut body = Vec::new();
        let r = get(s, &url, &mut body).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body_len, 1_000_003);
        assert_eq!(body.len(), 1_000_003);
        assert!(body.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));

        let url404: Url = format!("http://{addr}/missing").parse().unwrap();
        let s = TcpStream::connect(addr).unwrap();
        let mut body = Vec::new();
        let r = get(s, &url404, &mut body).unwrap();
        assert_eq!(r.status, 404);
        assert!(!r.is_success());
        assert!(body.is_empty());
        assert!(String::from_utf8_lossy(&r.error_body).contains("not found"));

        // Chunked response from a hand-written server.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let caddr = l.local_addr().unwrap();
        let t = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).unwrap();
            s.write_all(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: y\r\n\r\n").unwrap();
        });
        let url: Url = format!("http://{caddr}/").parse().unwrap();
        let mut body = Vec::new();
        let r = get(TcpStream::connect(caddr).unwrap(), &url, &mut body).unwrap();
        t.join().unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(body, b"hello world");
    }

    #[test]
    fn client_detects_truncated_body() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let caddr = l.local_addr().unwrap();
        let t = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
                .unwrap();
        });
        let url: Url = format!("http://{caddr}/").parse().unwrap();
        let mut body = Vec::new();
        let e = get(TcpStream::connect(caddr).unwrap(), &url, &mut body).unwrap_err();
        t.join().unwrap();
        assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    }
}
