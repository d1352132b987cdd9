//! `ustack ps`, `ss`, `nstat` and `sysctl`: operate a running stack from
//! another process, through its control endpoint (crates/ctl).

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use clap::Args;
use ustack_ctl::{Client, Request, Response, SocketEntry, StackRef};
use ustack_net::dev::live::RingReader;

/// Which stack to ask.
#[derive(Args, Debug, Clone)]
pub struct StackSel {
    /// The stack to ask: its name (see `ustack ps`) or its PID. Default: the
    /// only one running.
    #[arg(long, value_name = "NAME|PID")]
    pub stack: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

fn connect(sel: &StackSel) -> Result<Client> {
    let s = StackRef::select(sel.stack.as_deref()).map_err(|e| anyhow!(e))?;
    Client::connect(&s.name).map_err(|e| anyhow!(e))
}

fn call(c: &mut Client, r: &Request) -> Result<Response> {
    match c.call(r).map_err(|e| anyhow!(e))? {
        Response::Error { message } => Err(anyhow!(message)),
        other => Ok(other),
    }
}

fn print_json(v: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

// ------------------------------------------------------------------- ps

#[derive(Args, Debug)]
pub struct PsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn ps(a: PsArgs) -> Result<i32> {
    let mut infos = vec![];
    let mut errors = vec![];
    // Every stack is asked at once: one that does not answer (stopped
    // with SIGSTOP, or stuck) costs its 10 s once, not once per stack.
    let answers: Vec<std::result::Result<ustack_ctl::StackInfo, String>> =
        std::thread::scope(|sc| {
            let asks: Vec<_> = ustack_ctl::list()
                .into_iter()
                .map(|name| sc.spawn(move || Client::connect(&name).and_then(|mut c| c.info())))
                .collect();
            asks.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a query thread panicked".into()))
                })
                .collect()
        });
    for a in answers {
        match a {
            Ok(i) => infos.push(i),
            Err(e) => errors.push(e),
        }
    }
    if a.json {
        print_json(&infos)?;
    } else {
        // Columns as wide as their widest entry (a dual-stack stack has
        // three addresses), as ps and ss align theirs.
        let rows: Vec<[String; 7]> = infos
            .iter()
            .map(|i| {
                let addrs: Vec<&str> = i
                    .devices
                    .iter()
                    .flat_map(|d| d.addrs.iter().map(String::as_str))
                    .collect();
                let devs: Vec<String> = i
                    .devices
                    .iter()
                    .map(|d| format!("{} ({}, mtu {})", d.name, d.mac, d.mtu))
                    .collect();
                [
                    i.name.clone(),
                    i.pid.to_string(),
                    i.mode.clone(),
                    addrs.join(","),
                    i.established.to_string(),
                    i.tcp_sockets.to_string(),
                    devs.join(", "),
                ]
            })
            .collect();
        let head = [
            "NAME",
            "PID",
            "MODE",
            "ADDRESSES",
            "ESTAB",
            "TCP",
            "DEVICES",
        ];
        let w: Vec<usize> = (0..head.len())
            .map(|c| {
                rows.iter()
                    .map(|r| r[c].chars().count())
                    .chain([head[c].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |r: [&str; 7]| {
            format!(
                "{:<w0$}  {:>w1$}  {:<w2$}  {:<w3$}  {:>w4$}  {:>w5$}  {}",
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                r[6],
                w0 = w[0],
                w1 = w[1],
                w2 = w[2],
                w3 = w[3],
                w4 = w[4],
                w5 = w[5],
            )
        };
        println!("{}", line(head));
        for r in &rows {
            println!("{}", line(r.each_ref().map(String::as_str)));
        }
    }
    for e in errors {
        eprintln!("ustack ps: {e}");
    }
    Ok(0)
}

// ------------------------------------------------------------------- ss

#[derive(Args, Debug)]
pub struct SsArgs {
    #[command(flatten)]
    pub sel: StackSel,
    /// TCP sockets (the default).
    #[arg(short = 't', long = "tcp")]
    pub tcp: bool,
    /// UDP sockets.
    #[arg(short = 'u', long = "udp")]
    pub udp: bool,
    /// Listening sockets only.
    #[arg(short = 'l', long = "listening")]
    pub listening: bool,
    /// Listening and non-listening sockets.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Numeric addresses (always; accepted for `ss` compatibility).
    #[arg(short = 'n', long = "numeric")]
    pub numeric: bool,
    /// TCP internals (`ss -i`): rtt, rto, cwnd, ssthresh, mss, wscale, ...
    #[arg(short = 'i', long = "info")]
    pub info: bool,
    /// Extended: orphaned sockets and, in `ustack run`, the host socket.
    #[arg(short = 'e', long = "extended")]
    pub extended: bool,
    /// A summary of the stack's sockets instead of a list (as `ss -s`).
    #[arg(short = 's', long = "summary")]
    pub summary: bool,
    /// No header line (as `ss -H`: `ss -Htn | wc -l` counts connections).
    #[arg(short = 'H', long = "no-header")]
    pub no_header: bool,
    /// IPv4 sockets only (as `ss -4`).
    #[arg(short = '4', long = "ipv4", conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// IPv6 sockets only (as `ss -6`; with dual-stack listeners and their
    /// IPv4-mapped connections).
    #[arg(short = '6', long = "ipv6")]
    pub ipv6: bool,
    /// Filter, as `ss`: `state NAME`, `sport = :PORT`, `dport = :PORT`,
    /// `src ADDR[:PORT]`, `dst ADDR[:PORT]` (all must match). ADDR is IPv4
    /// (`10.0.0.1`, `10.0.0.0/24`) or IPv6 (`fd77::2`, `[fd77::2]:80`,
    /// `fd77::/64`).
    #[arg(value_name = "FILTER", trailing_var_arg = true)]
    pub filter: Vec<String>,
}

/// One term of an `ss` filter.
#[derive(Debug, PartialEq)]
enum Term {
    State(String),
    Sport(u16),
    Dport(u16),
    Src(String),
    Dst(String),
}

fn port_of(v: &str) -> Result<u16> {
    v.trim_start_matches(':')
        .parse()
        .map_err(|_| anyhow!("bad port {v:?} in filter (use :PORT)"))
}

/// `ss`'s state names, and its groups `connected` and `all`.
fn state_name(v: &str) -> Result<String> {
    let s = match v.to_ascii_lowercase().as_str() {
        "established" | "estab" => "ESTAB",
        "syn-sent" => "SYN-SENT",
        "syn-recv" => "SYN-RECV",
        "fin-wait-1" => "FIN-WAIT-1",
        "fin-wait-2" => "FIN-WAIT-2",
        "time-wait" => "TIME-WAIT",
        "close-wait" => "CLOSE-WAIT",
        "last-ack" => "LAST-ACK",
        "closing" => "CLOSING",
        "listening" | "listen" => "LISTEN",
        "closed" => "UNCONN",
        "connected" => "connected",
        "synchronized" => "synchronized",
        "bucket" => "bucket",
        "big" => "big",
        "all" => "all",
        _ => bail!("unknown state {v:?} in filter"),
    };
    Ok(s.to_string())
}

fn parse_filter(words: &[String]) -> Result<Vec<Term>> {
    // Accept `sport = :80`, `sport == :80`, `sport eq :80` and `sport=:80`,
    // as separate arguments or as one (`ss 'sport = :80'`, as ss(8) joins
    // its arguments).
    let mut toks: Vec<String> = vec![];
    for w in words.iter().flat_map(|w| w.split_whitespace()) {
        for (i, part) in w.splitn(2, '=').enumerate() {
            if i == 1 {
                toks.push("=".into());
            }
            if !part.is_empty() {
                toks.push(part.to_string());
            }
        }
    }
    let mut out = vec![];
    let mut it = toks.iter().map(String::as_str).peekable();
    while let Some(k) = it.next() {
        if k == "and" || k == "&&" {
            continue;
        }
        while matches!(it.peek(), Some(&"=") | Some(&"==") | Some(&"eq")) {
            it.next();
        }
        let v = it
            .next()
            .ok_or_else(|| anyhow!("filter {k:?} needs a value"))?;
        out.push(match k {
            "state" => Term::State(state_name(v)?),
            "sport" => Term::Sport(port_of(v)?),
            "dport" => Term::Dport(port_of(v)?),
            "src" | "dst" if parse_want(v).is_none() => {
                bail!("bad address {v:?} in filter (e.g. 10.0.0.1:80, [fd77::2]:80, fd77::/64)")
            }
            "src" => Term::Src(v.to_string()),
            "dst" => Term::Dst(v.to_string()),
            _ => bail!(
                "unknown filter {k:?} (use state, sport, dport, src, dst; e.g. `sport = :80`)"
            ),
        });
    }
    Ok(out)
}

/// An `ss` row's address split into host and port text: `10.0.0.1:80`,
/// `[fd77::2]:80`, `*:80`, `0.0.0.0:*`.
fn split_addr(addr: &str) -> (&str, &str) {
    addr.rsplit_once(':').unwrap_or((addr, ""))
}

/// The row's host as an address (`*` is the unspecified IPv6 address);
/// brackets and an IPv6 scope (`[fe80::1]%2`) are dropped.
fn host_ip(host: &str) -> Option<IpAddr> {
    if host == "*" {
        return Some(IpAddr::V6(Ipv6Addr::UNSPECIFIED));
    }
    host.trim_start_matches('[')
        .split([']', '%'])
        .next()?
        .parse()
        .ok()
}

/// A filter's address: `ADDR`, `ADDR/LEN`, `ADDR:PORT`, `[ADDR6]`,
/// `[ADDR6]:PORT`, `[ADDR6/LEN]:PORT`, `:PORT`, `*:PORT`, as `ss` takes
/// them; `(prefix, port)`, either absent meaning any.
type Want = (Option<(IpAddr, u8)>, Option<u16>);

fn parse_want(w: &str) -> Option<Want> {
    let (host, port) = if let Some(rest) = w.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        (h, after.strip_prefix(':'))
    } else if w.parse::<Ipv6Addr>().is_ok() || (w.contains('/') && w.matches(':').count() > 1) {
        (w, None)
    } else {
        match w.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (w, None),
        }
    };
    let port = match port {
        None | Some("*") | Some("") => None,
        Some(p) => Some(p.parse().ok()?),
    };
    let prefix = if host.is_empty() || host == "*" {
        None
    } else {
        let (a, len) = match host.split_once('/') {
            Some((a, l)) => (a, Some(l.parse::<u8>().ok()?)),
            None => (host, None),
        };
        let ip: IpAddr = a.parse().ok()?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len = len.unwrap_or(max);
        if len > max {
            return None;
        }
        Some((ip, len))
    };
    Some((prefix, port))
}

fn in_prefix(ip: IpAddr, (net, len): (IpAddr, u8)) -> bool {
    let bits = |a: IpAddr| -> (u128, u8) {
        match a {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)) << 96, 32),
            IpAddr::V6(v6) => (u128::from(v6), 128),
        }
    };
    // An IPv4-mapped address matches the IPv4 filter too.
    let ip = match ip {
        IpAddr::V6(v6) if net.is_ipv4() => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        _ => ip,
    };
    if ip.is_ipv4() != net.is_ipv4() {
        return false;
    }
    let ((a, _), (n, _)) = (bits(ip), bits(net));
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    };
    a & mask == n & mask
}

fn addr_matches(addr: &str, want: &str) -> bool {
    // `10.0.0.1` matches any port; `10.0.0.1:80` and `:80` match exactly.
    let Some((prefix, port)) = parse_want(want) else {
        return false;
    };
    let (host, p) = split_addr(addr);
    port.is_none_or(|want| p.parse() == Ok(want))
        && prefix.is_none_or(|pre| host_ip(host).is_some_and(|ip| in_prefix(ip, pre)))
}

fn port(addr: &str) -> Option<u16> {
    split_addr(addr).1.parse().ok()
}

/// Whether an `ss` row is an IPv6 socket (its local address is bracketed
/// or a dual-stack `*`).
fn is_ipv6_row(s: &SocketEntry) -> bool {
    s.local.starts_with('[') || s.local.starts_with('*')
}

fn keep(s: &SocketEntry, a: &SsArgs, terms: &[Term]) -> bool {
    let mut state_terms = terms.iter().filter_map(|t| match t {
        Term::State(n) => Some(n.as_str()),
        _ => None,
    });
    // ss counts an unconnected UDP socket as listening (`ss -ul`).
    let listening = s.state == "LISTEN" || s.state == "UNCONN";
    let by_state = match state_terms.next() {
        Some(first) => std::iter::once(first).chain(state_terms).any(|n| {
            // ss(8)'s groups: connected = not listening or closed;
            // synchronized = connected but SYN-SENT; bucket = the
            // minisockets (SYN-RECV, TIME-WAIT); big = all but those.
            let bucket = s.state == "SYN-RECV" || s.state == "TIME-WAIT";
            n == "all"
                || n == s.state
                || (n == "connected" && !listening)
                || (n == "synchronized" && !listening && s.state != "SYN-SENT")
                || (n == "bucket" && bucket)
                || (n == "big" && !bucket)
        }),
        None => a.all || (a.listening == listening),
    };
    by_state
        && terms.iter().all(|t| match t {
            Term::State(_) => true,
            Term::Sport(p) => port(&s.local) == Some(*p),
            Term::Dport(p) => port(&s.peer) == Some(*p),
            Term::Src(w) => addr_matches(&s.local, w),
            Term::Dst(w) => addr_matches(&s.peer, w),
        })
}

/// Whether `terms` select exactly one state (one `state` term naming a
/// state, not a group such as `connected`).
fn single_state(terms: &[Term]) -> bool {
    let mut states = terms.iter().filter_map(|t| match t {
        Term::State(n) => Some(n.as_str()),
        _ => None,
    });
    let groups = ["connected", "synchronized", "bucket", "big", "all"];
    matches!((states.next(), states.next()), (Some(n), None) if !groups.contains(&n))
}

fn detail_line(s: &SocketEntry) -> Option<String> {
    let d = s.info.as_ref()?;
    let mut l = String::new();
    let _ = write!(l, "\t {}", d.congestion_control);
    if d.wscale_snd > 0 || d.wscale_rcv > 0 {
        let _ = write!(l, " wscale:{},{}", d.wscale_snd, d.wscale_rcv);
    }
    let _ = write!(l, " rto:{}", d.rto_ms);
    if let Some(r) = d.rtt_ms {
        let _ = write!(l, " rtt:{r:.3}/{:.3}", d.rttvar_ms);
    }
    let _ = write!(
        l,
        " mss:{} advmss:{} rcvmss:{} cwnd:{}",
        d.mss, d.advmss, d.rcvmss, d.cwnd_segs
    );
    if let Some(t) = d.ssthresh_segs {
        let _ = write!(l, " ssthresh:{t}");
    }
    // Linux's per-connection counters, in ss's order, each only if not 0.
    for (name, v) in [
        ("bytes_sent", d.bytes_sent),
        ("bytes_retrans", d.bytes_retrans),
        ("bytes_acked", d.bytes_acked),
        ("bytes_received", d.bytes_received),
        ("segs_out", d.segs_out),
        ("segs_in", d.segs_in),
        ("data_segs_out", d.data_segs_out),
        ("data_segs_in", d.data_segs_in),
    ] {
        if v > 0 {
            let _ = write!(l, " {name}:{v}");
        }
    }
    if let Some(p) = d.pacing_rate_bps {
        let _ = write!(l, " pacing_rate {}", human_bps(p));
    }
    if let Some(r) = d.delivery_rate_bps {
        let _ = write!(l, " delivery_rate {}", human_bps(r));
    }
    if d.app_limited {
        l.push_str(" app_limited");
    }
    if d.delivered > 0 {
        let _ = write!(l, " delivered:{}", d.delivered);
    }
    let _ = write!(
        l,
        " snd_wnd:{} rcv_wnd:{} lastrcv:{} lastack:{}",
        d.snd_wnd, d.rcv_wnd, d.lastrcv_ms, d.lastack_ms
    );
    if d.unacked > 0 {
        let _ = write!(l, " unacked:{}", d.unacked);
    }
    if d.retrans > 0 || d.retransmits_total > 0 {
        let _ = write!(l, " retrans:{}/{}", d.retrans, d.retransmits_total);
    }
    if d.sacked > 0 {
        let _ = write!(l, " sacked:{}", d.sacked);
    }
    if d.lost > 0 {
        let _ = write!(l, " lost:{}", d.lost);
    }
    if d.notsent > 0 {
        let _ = write!(l, " notsent:{}", d.notsent);
    }
    if d.reordering != 3 {
        let _ = write!(l, " reordering:{}", d.reordering);
    }
    if d.ca_state != "open" {
        let _ = write!(l, " ca_state:{}", d.ca_state);
    }
    if d.timestamps {
        l.push_str(" ts");
    }
    if d.sack {
        l.push_str(" sack");
    }
    Some(l)
}

fn human_bps(b: u64) -> String {
    match b {
        b if b >= 1_000_000_000 => format!("{:.1}Gbps", b as f64 / 1e9),
        b if b >= 1_000_000 => format!("{:.1}Mbps", b as f64 / 1e6),
        b if b >= 1_000 => format!("{:.1}Kbps", b as f64 / 1e3),
        b => format!("{b}bps"),
    }
}

/// `ss -s`'s summary of `socks`, with its layout: the TCP line counts
/// every TCP socket, the transport table those neither closed nor in
/// TIME-WAIT (as ss(8) counts hashed sockets), each by family (a
/// dual-stack socket is IPv6). This stack has no raw sockets and its
/// fragments are not sockets: no RAW or FRAG line.
fn summary(socks: &[SocketEntry]) -> String {
    let tcp: Vec<&SocketEntry> = socks.iter().filter(|s| s.proto == "tcp").collect();
    let udp: Vec<&SocketEntry> = socks.iter().filter(|s| s.proto == "udp").collect();
    let count = |st: &str| tcp.iter().filter(|s| s.state == st).count();
    let (estab, closed, tw) = (count("ESTAB"), count("CLOSED"), count("TIME-WAIT"));
    let orphaned = tcp.iter().filter(|s| s.orphan).count();
    let by_family = |v: &[&&SocketEntry]| {
        let six = v.iter().filter(|s| is_ipv6_row(s)).count();
        (v.len(), v.len() - six, six)
    };
    let live: Vec<&&SocketEntry> = tcp
        .iter()
        .filter(|s| s.state != "CLOSED" && s.state != "TIME-WAIT")
        .collect();
    let udp_all: Vec<&&SocketEntry> = udp.iter().collect();
    let (u, u4, u6) = by_family(&udp_all);
    let (t, t4, t6) = by_family(&live);
    let mut o = String::new();
    let _ = writeln!(o, "Total: {}", tcp.len() + udp.len());
    let _ = writeln!(
        o,
        "TCP:   {} (estab {estab}, closed {closed}, orphaned {orphaned}, timewait {tw})",
        tcp.len()
    );
    let _ = writeln!(o);
    let _ = writeln!(o, "Transport Total     IP        IPv6");
    for (name, (n, four, six)) in [
        ("UDP", (u, u4, u6)),
        ("TCP", (t, t4, t6)),
        ("INET", (u + t, u4 + t4, u6 + t6)),
    ] {
        let _ = writeln!(o, "{name}\t  {n:<9} {four:<9} {six:<9}");
    }
    o
}

pub fn ss(a: SsArgs) -> Result<i32> {
    let terms = parse_filter(&a.filter)?;
    let mut c = connect(&a.sel)?;
    let Response::Sockets { sockets } = call(&mut c, &Request::Sockets { detail: a.info })? else {
        bail!("unexpected answer from stack {:?}", c.name());
    };
    if a.summary {
        if a.sel.json {
            bail!("ss -s has no --json form (ss --json lists the sockets)");
        }
        print!("{}", summary(&sockets));
        return Ok(0);
    }
    // TCP unless -u alone (UDP: serve's sockets, run's relayed flows).
    let want_tcp = a.tcp || !a.udp;
    let rows: Vec<&SocketEntry> = sockets
        .iter()
        .filter(|s| (s.proto == "tcp" && want_tcp) || (s.proto == "udp" && a.udp))
        .filter(|s| match (a.ipv4, a.ipv6) {
            (true, _) => !is_ipv6_row(s),
            (_, true) => is_ipv6_row(s),
            _ => true,
        })
        .filter(|s| keep(s, &a, &terms))
        .collect();
    if a.sel.json {
        return print_json(&rows).map(|_| 0);
    }
    // Address columns as wide as the longest address (IPv4-mapped and
    // IPv6 ones are longer than IPv4's 21 characters), at least 22.
    let lw = rows.iter().map(|s| s.local.len() + 1).fold(22, usize::max);
    let pw = rows.iter().map(|s| s.peer.len() + 1).fold(22, usize::max);
    // ss(8) names each row's protocol in a first column when it shows more
    // than one (`ss -tua`): a connected UDP socket (run's relayed flow) is
    // ESTAB as a TCP connection is.
    let netid = |p: &str| {
        if want_tcp && a.udp {
            format!("{p:<6}")
        } else {
            String::new()
        }
    };
    // ss(8) leaves the State column out when the filter selects one state
    // (`ss -tn state established`): scripts count its columns.
    let one_state = single_state(&terms);
    let state = |st: &str| {
        if one_state {
            String::new()
        } else {
            format!("{st:<11} ")
        }
    };
    if !a.no_header {
        println!(
            "{}{}{:>7} {:>7} {:>lw$} {:>pw$}{}",
            netid("Netid"),
            state("State"),
            "Recv-Q",
            "Send-Q",
            "Local Address:Port",
            "Peer Address:Port",
            if a.extended { "  Process" } else { "" }
        );
    }
    for s in rows {
        let mut extra = String::new();
        if a.extended {
            if s.orphan {
                extra.push_str("  orphan");
            }
            if let Some(h) = &s.host {
                let _ = write!(extra, "  host:{h}");
            }
        }
        println!(
            "{}{}{:>7} {:>7} {:>lw$} {:>pw$}{extra}",
            netid(&s.proto),
            state(&s.state),
            s.recv_q,
            s.send_q,
            s.local,
            s.peer
        );
        if a.info {
            if let Some(l) = detail_line(s) {
                println!("{l}");
            }
        }
    }
    Ok(0)
}

// ---------------------------------------------------------------- nstat

#[derive(Args, Debug)]
pub struct NstatArgs {
    #[command(flatten)]
    pub sel: StackSel,
    /// Absolute values instead of increments since the last `nstat`.
    #[arg(short = 'a', long = "ignore")]
    pub absolute: bool,
    /// Show counters that are zero too.
    #[arg(short = 'z', long = "zeros")]
    pub zeros: bool,
    /// Do not update the history (the next `nstat` shows increments since
    /// the previous one still).
    #[arg(short = 's', long = "no-update", visible_alias = "noupdate")]
    pub no_update: bool,
    /// Update the history without printing anything (as nstat's `-n`:
    /// `nstat -n; ...; nstat` shows what `...` did).
    #[arg(short = 'n', long = "nooutput", conflicts_with_all = ["no_update", "watch"])]
    pub no_output: bool,
    /// Reset the history: print values since the stack started (as `-a`)
    /// and take them as the history (as nstat's `-r`).
    #[arg(short = 'r', long = "reset", conflicts_with = "no_update")]
    pub reset: bool,
    /// Print JSON (as nstat's `-j`; the same as `--json`).
    #[arg(short = 'j')]
    pub json_short: bool,
    /// Print increments every SECS seconds until interrupted.
    #[arg(long, value_name = "SECS")]
    pub watch: Option<f64>,
    /// Counter names to show (`*` matches any text: `Tcp*`, `*Retrans*`;
    /// case does not matter, as in nstat).
    #[arg(value_name = "PATTERN")]
    pub patterns: Vec<String>,
}

/// Does `name` match shell-like `pat` (`*` only), ignoring ASCII case as
/// nstat's `fnmatch(..., FNM_CASEFOLD)` does?
fn glob(pat: &str, name: &str) -> bool {
    let (pat, name) = (pat.to_ascii_lowercase(), name.to_ascii_lowercase());
    let (pat, name) = (pat.as_str(), name.as_str());
    let parts: Vec<&str> = pat.split('*').collect();
    if parts.len() == 1 {
        return pat == name;
    }
    let mut rest = name;
    for (i, p) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(p) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(p);
        } else if let Some(k) = rest.find(p) {
            rest = &rest[k + p.len()..];
        } else {
            return false;
        }
    }
    true
}

pub fn nstat(a: NstatArgs) -> Result<i32> {
    if let Some(w) = a.watch {
        if !(w.is_finite() && w > 0.0) {
            bail!("--watch needs a positive number of seconds");
        }
    }
    let mut c = connect(&a.sel)?;
    let json = a.sel.json || a.json_short;
    let absolute = a.absolute || a.reset;
    loop {
        let update = !a.no_update || a.watch.is_some();
        let Response::Counters { counters } = call(&mut c, &Request::Counters { update })? else {
            bail!("unexpected answer from stack {:?}", c.name());
        };
        if a.no_output {
            return Ok(0);
        }
        let rows: Vec<(String, u64)> = counters
            .iter()
            .filter(|e| a.patterns.is_empty() || a.patterns.iter().any(|p| glob(p, &e.name)))
            .map(|e| {
                let v = if absolute {
                    e.value
                } else {
                    e.value.wrapping_sub(e.previous)
                };
                (e.name.clone(), v)
            })
            .filter(|(_, v)| a.zeros || *v != 0)
            .collect();
        if json {
            let m: serde_json::Map<String, serde_json::Value> =
                rows.into_iter().map(|(k, v)| (k, v.into())).collect();
            print_json(&m)?;
        } else {
            println!("#ustack {}", c.name());
            for (n, v) in rows {
                println!("{n:<32}{v:>20}");
            }
        }
        match a.watch {
            Some(w) => std::thread::sleep(Duration::from_secs_f64(w)),
            None => return Ok(0),
        }
    }
}

// --------------------------------------------------------------- sysctl

#[derive(Args, Debug)]
pub struct SysctlArgs {
    #[command(flatten)]
    pub sel: StackSel,
    /// Show every tunable.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Every argument changes a tunable (`NAME=VALUE`), as sysctl(8)'s
    /// `-w`; without it `NAME=VALUE` changes one too.
    #[arg(short = 'w', long = "write")]
    pub write: bool,
    /// Print values only, without names (as sysctl(8)'s `-n`).
    #[arg(short = 'n', long = "values")]
    pub values_only: bool,
    /// Do not print the values a change set (as sysctl(8)'s `-q`).
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
    /// `NAME` to read, `NAME=VALUE` to change (all changes apply together,
    /// or none if one is refused). Names as Linux's: `net.ipv4.tcp_wmem`
    /// (or `net/ipv4/tcp_wmem`).
    #[arg(value_name = "NAME[=VALUE]")]
    pub items: Vec<String>,
}

/// A sysctl name as sysctl(8) takes it: `/` in place of `.` is accepted.
fn sysctl_name(name: &str) -> String {
    name.trim().replace('/', ".")
}

pub fn sysctl(a: SysctlArgs) -> Result<i32> {
    if a.items.is_empty() && !a.all {
        bail!("name a tunable (e.g. net.ipv4.tcp_wmem), or -a for all of them");
    }
    if a.write {
        if a.items.is_empty() {
            bail!("-w changes tunables: give NAME=VALUE");
        }
        if let Some(bad) = a.items.iter().find(|s| !s.contains('=')) {
            bail!("{bad:?} must be of the form NAME=VALUE (with -w)");
        }
    }
    let mut c = connect(&a.sel)?;
    let (sets, gets): (Vec<&String>, Vec<&String>) = a.items.iter().partition(|s| s.contains('='));
    let mut values = vec![];
    if !sets.is_empty() {
        let assignments = sets
            .iter()
            .map(|s| {
                let (k, v) = s.split_once('=').unwrap_or((s.as_str(), ""));
                (sysctl_name(k), v.trim().to_string())
            })
            .collect();
        if let Response::Sysctl { values: v } = call(&mut c, &Request::SysctlSet { assignments })? {
            if !a.quiet {
                values.extend(v);
            }
        }
    }
    if !gets.is_empty() || a.all {
        let names = if a.all {
            vec![]
        } else {
            gets.iter().map(|s| sysctl_name(s)).collect()
        };
        if let Response::Sysctl { values: v } = call(&mut c, &Request::SysctlGet { names })? {
            values.extend(v);
        }
    }
    if a.sel.json {
        let m: serde_json::Map<String, serde_json::Value> =
            values.into_iter().map(|(k, v)| (k, v.into())).collect();
        return print_json(&m).map(|_| 0);
    }
    for (k, v) in values {
        if a.values_only {
            println!("{v}");
        } else {
            println!("{k} = {v}");
        }
    }
    Ok(0)
}

// -------------------------------------------------------------- capture

#[derive(Args, Debug)]
pub struct CaptureArgs {
    #[command(flatten)]
    pub sel: StackSel,
    /// The device to capture on (each stack has one; `any` is accepted).
    #[arg(short = 'i', value_name = "DEV")]
    pub interface: Option<String>,
    /// Stop after N frames (at least 1, as tcpdump's -c).
    #[arg(short = 'c', value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Bytes kept of each frame.
    #[arg(short = 's', value_name = "SNAPLEN", default_value_t = 65535,
          value_parser = clap::value_parser!(u32).range(64..=262_144))]
    pub snaplen: u32,
    /// Write a pcap file (`-` for stdout: `ustack capture -w - | tcpdump -r -`);
    /// without it, print one line per frame.
    #[arg(short = 'w', value_name = "FILE")]
    pub write: Option<String>,
    /// KiB of frames the stack holds for a slow reader (the capture ring,
    /// in the stack's shared memory); beyond, frames are dropped (and
    /// counted) rather than slowing the stack.
    #[arg(short = 'B', value_name = "KIB", default_value_t = 8192,
          value_parser = clap::value_parser!(u64).range(64..=262_144))]
    pub buffer_kib: u64,
    /// Filter, as tcpdump's words: `host ADDR` (IPv4 or IPv6), `port N`,
    /// `tcp`, `udp`, `icmp` (ICMPv4), `icmp6`, `arp`, `ip` (IPv4 only),
    /// `ip6` (IPv6 only), joined by `and` (all must hold).
    #[arg(value_name = "FILTER", trailing_var_arg = true)]
    pub filter: Vec<String>,
}

fn parse_capture_filter(words: &[String]) -> Result<ustack_ctl::CaptureSpec> {
    let mut f = ustack_ctl::CaptureSpec::default();
    // Separate words or one quoted expression (`'tcp and port 80'`).
    let mut it = words.iter().flat_map(|w| w.split_whitespace());
    while let Some(w) = it.next() {
        match w {
            "and" | "&&" => {}
            "tcp" | "udp" | "icmp" | "icmp6" | "arp" => {
                if f.proto.replace(w.to_string()).is_some() {
                    bail!("capture filter: one protocol at most");
                }
            }
            "ip" | "ip6" => {
                if f.family.replace(w.to_string()).is_some() {
                    bail!("capture filter: ip or ip6, not both");
                }
            }
            "host" => {
                let v = it
                    .next()
                    .ok_or_else(|| anyhow!("capture filter: host needs an address"))?;
                let a = v.trim_start_matches('[').trim_end_matches(']');
                f.host = Some(
                    a.parse()
                        .map_err(|_| anyhow!("capture filter: bad address {v:?}"))?,
                );
            }
            "port" => {
                let v = it
                    .next()
                    .ok_or_else(|| anyhow!("capture filter: port needs a number"))?;
                f.port = Some(
                    v.parse()
                        .map_err(|_| anyhow!("capture filter: bad port {v:?}"))?,
                );
            }
            _ => bail!(
                "capture filter: unknown word {w:?} \
                 (use host ADDR, port N, tcp, udp, icmp, icmp6, arp, ip, ip6, and)"
            ),
        }
    }
    Ok(f)
}

/// One line about a captured Ethernet frame (without -w).
fn frame_line(ts_s: u32, ts_us: u32, frame: &[u8], len: u32) -> String {
    let t = format!(
        "{:02}:{:02}:{:02}.{ts_us:06}",
        (ts_s / 3600) % 24,
        (ts_s / 60) % 60,
        ts_s % 60
    );
    let et = frame.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let ip = frame.get(14..).unwrap_or(&[]);
    match et {
        Some(0x0806) => format!("{t} ARP, length {len}"),
        Some(0x0800) if ip.len() >= 20 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let src = std::net::Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            let dst = std::net::Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            let ports = ip.get(ihl..ihl + 4).map(|p| {
                (
                    u16::from_be_bytes([p[0], p[1]]),
                    u16::from_be_bytes([p[2], p[3]]),
                )
            });
            let total = u16::from_be_bytes([ip[2], ip[3]]);
            match (ip[9], ports) {
                (6, Some((a, b))) => {
                    format!("{t} IP {src}.{a} > {dst}.{b}: tcp, ip length {total}")
                }
                (17, Some((a, b))) => {
                    format!("{t} IP {src}.{a} > {dst}.{b}: udp, ip length {total}")
                }
                (1, _) => format!("{t} IP {src} > {dst}: ICMP, ip length {total}"),
                (p, _) => format!("{t} IP {src} > {dst}: proto {p}, ip length {total}"),
            }
        }
        Some(0x86dd) if ip.len() >= 40 => {
            let addr = |o: usize| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&ip[o..o + 16]);
                std::net::Ipv6Addr::from(a)
            };
            let (src, dst) = (addr(8), addr(24));
            let plen = u16::from_be_bytes([ip[4], ip[5]]);
            // The upper layer when no extension header comes first.
            let ports = ip.get(40..44).map(|p| {
                (
                    u16::from_be_bytes([p[0], p[1]]),
                    u16::from_be_bytes([p[2], p[3]]),
                )
            });
            match (ip[6], ports) {
                (6, Some((a, b))) => {
                    format!("{t} IP6 {src}.{a} > {dst}.{b}: tcp, payload length {plen}")
                }
                (17, Some((a, b))) => {
                    format!("{t} IP6 {src}.{a} > {dst}.{b}: udp, payload length {plen}")
                }
                (58, _) => {
                    let kind = ip.get(40).map_or(0, |k| *k);
                    format!("{t} IP6 {src} > {dst}: ICMP6 type {kind}, payload length {plen}")
                }
                (nh, _) => {
                    format!("{t} IP6 {src} > {dst}: next header {nh}, payload length {plen}")
                }
            }
        }
        _ => format!("{t} ethertype {:#06x}, length {len}", et.unwrap_or(0)),
    }
}

/// Write what the ring holds (at most `want` frames) to `out` as pcap
/// records, or as one line per frame without `out`, and consume it: the
/// frames written, or None when the output is gone (a closed pipe).
fn drain(
    ring: &mut RingReader,
    out: Option<&mut Box<dyn std::io::Write>>,
    want: u64,
) -> std::result::Result<Option<u64>, String> {
    use std::io::Write as _;
    let p = ring.pending(want)?;
    if p.frames == 0 {
        return Ok(Some(0));
    }
    let r = match out {
        Some(o) => {
            // The records go from the ring to the file in one or two writes.
            let (x, y) = ring.slices(&p);
            o.write_all(x)
                .and_then(|()| o.write_all(y))
                .and_then(|()| o.flush())
        }
        None => {
            let mut so = std::io::stdout().lock();
            ring.records(&p).iter().try_for_each(|rec| {
                let w = |i: usize| u32::from_le_bytes([rec[i], rec[i + 1], rec[i + 2], rec[i + 3]]);
                writeln!(so, "{}", frame_line(w(0), w(4), &rec[16..], w(12)))
            })
        }
    };
    if r.is_err() {
        return Ok(None);
    }
    ring.consume(&p);
    Ok(Some(p.frames))
}

pub fn capture(a: CaptureArgs) -> Result<i32> {
    use std::io::Write as _;
    crate::signals::block_termination()?;
    let filter = parse_capture_filter(&a.filter)?;
    let mut c = connect(&a.sel)?;
    if let Some(dev) = &a.interface {
        let info = c.info().map_err(|e| anyhow!(e))?;
        if dev != "any" && !info.devices.iter().any(|d| &d.name == dev) {
            let names: Vec<&str> = info.devices.iter().map(|d| d.name.as_str()).collect();
            bail!(
                "stack {:?} has no device {dev:?} (it has: {})",
                c.name(),
                names.join(", ")
            );
        }
    }
    let mut out: Option<Box<dyn std::io::Write>> = match a.write.as_deref() {
        None => None,
        Some("-") => Some(Box::new(std::io::BufWriter::new(std::io::stdout()))),
        Some(p) => Some(Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| anyhow!("cannot create {p}: {e}"))?,
        ))),
    };
    if let Some(o) = out.as_mut() {
        o.write_all(&ustack_net::dev::live::pcap_header(a.snaplen))?;
        o.flush()?;
    }
    let (offset, len, id) = match c
        .call(&Request::CaptureStart {
            snaplen: a.snaplen,
            filter,
            queue_bytes: a.buffer_kib * 1024,
        })
        .map_err(|e| anyhow!(e))?
    {
        Response::CaptureRing { offset, len, id } => (offset, len, id),
        Response::Error { message } => bail!(message),
        _ => bail!("unexpected answer from stack {:?}", c.name()),
    };
    let base = c.arena_range(offset, len).ok_or_else(|| {
        anyhow!(
            "stack {:?} announced a capture ring outside its arena",
            c.name()
        )
    })?;
    // SAFETY: the range lies inside the domain's arena (checked by
    // arena_range), which stays mapped while `c` lives, longer than `ring`;
    // arena buffers are 64 KiB-aligned.
    let mut ring = unsafe { RingReader::open(base.as_ptr(), len as usize, id) }
        .map_err(|e| anyhow!("stack {:?}: {e}", c.name()))?;
    eprintln!(
        "ustack capture: listening on stack {:?}, snapshot length {} bytes",
        c.name(),
        a.snaplen
    );
    let mut got = 0u64;
    let mut dropped = 0;
    let mut broken_pipe = false;
    let mut alive = Instant::now();
    let mut idle = Duration::from_millis(1);
    loop {
        let want = a.count.map_or(u64::MAX, |n| n.saturating_sub(got));
        // What the stack recorded before it stopped the capture (or exited)
        // is still in the ring, which it keeps as it is for a while: read it
        // before ending. A ring no longer ours (its memory reused) is not read.
        if !ring.is_ours() {
            eprintln!("ustack capture: the stack stopped the capture");
            break;
        }
        let closed = ring.closed();
        dropped = ring.dropped();
        let n = match drain(&mut ring, out.as_mut(), want)
            .map_err(|e| anyhow!("stack {:?}: {e}", c.name()))?
        {
            Some(n) => n,
            None => {
                broken_pipe = true;
                break;
            }
        };
        got += n;
        if a.count.is_some_and(|n| got >= n) {
            break;
        }
        // Tell the stack the reader is alive (it stops an abandoned capture).
        if alive.elapsed() >= Duration::from_secs(1) {
            // A stack that stopped (or gave up on us) ends the capture, with
            // its summary.
            if let Err(e) = call(&mut c, &Request::CaptureAlive) {
                eprintln!("ustack capture: {e}");
                break;
            }
            alive = Instant::now();
        }
        if closed && n == 0 {
            eprintln!("ustack capture: the stack stopped the capture");
            break;
        }
        if n == 0 {
            // Poll every millisecond while frames come, less often (up to
            // every 20 ms) while none do; the stack wakes us only when half
            // the ring waits.
            ring.wait(idle);
            idle = (idle * 2).min(Duration::from_millis(20));
        } else {
            idle = Duration::from_millis(1);
        }
        if crate::signals::wait_termination(Some(Duration::ZERO)).is_some() {
            break;
        }
    }
    // Stopped by a signal (or the stack): what the stack recorded until
    // now is in the ring still, and so is what it records until it hears
    // the stop. Both go to the output, as tcpdump writes what it captured
    // before Ctrl-C.
    let mut stopped = false;
    for _ in 0..2 {
        if broken_pipe || a.count.is_some_and(|n| got >= n) || !ring.is_ours() {
            break;
        }
        let want = a.count.map_or(u64::MAX, |n| n.saturating_sub(got));
        match drain(&mut ring, out.as_mut(), want) {
            Ok(Some(n)) => got += n,
            Ok(None) => broken_pipe = true,
            Err(e) => eprintln!("ustack capture: stack {:?}: {e}", c.name()),
        }
        if !stopped {
            let _ = c.call(&Request::CaptureStop);
            stopped = true;
        }
    }
    // The stack's count, as of now (a stopped capture's ring is kept a while).
    if ring.is_ours() {
        dropped = ring.dropped();
    }
    if !stopped {
        let _ = c.call(&Request::CaptureStop);
    }
    if let Some(mut o) = out {
        let _ = o.flush();
    }
    if !broken_pipe || a.write.as_deref() != Some("-") {
        eprintln!("{got} frames captured, {dropped} dropped by the stack (reader too slow)");
    }
    Ok(0)
}

// ---------------------------------------------------------------- ports

#[derive(Args, Debug)]
pub struct PortsArgs {
    #[command(flatten)]
    pub sel: StackSel,
    /// `add SPEC` or `remove SPEC` (SPEC as `ustack run -p`:
    /// [HOST_IP:]HOST_PORT:GUEST_PORT[/udp], an IPv6 HOST_IP in brackets);
    /// nothing: list them.
    #[arg(value_name = "add|remove SPEC", num_args = 0..=2)]
    pub action: Vec<String>,
}

pub fn ports(a: PortsArgs) -> Result<i32> {
    let (add, remove) = match a.action.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => (None, None),
        ["add", spec] => (Some(spec.to_string()), None),
        ["remove" | "rm" | "del", spec] => (None, Some(spec.to_string())),
        _ => bail!("usage: ustack ports [add SPEC | remove SPEC] (SPEC as ustack run -p)"),
    };
    let mut c = connect(&a.sel)?;
    let Response::Ports { forwards } = call(&mut c, &Request::Ports { add, remove })? else {
        bail!("unexpected answer from stack {:?}", c.name());
    };
    if a.sel.json {
        return print_json(&forwards).map(|_| 0);
    }
    for f in forwards {
        println!("{f}");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_like_ss() {
        let w = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            parse_filter(&w("state established sport = :80 dst 10.0.0.1")).expect("ok"),
            vec![
                Term::State("ESTAB".into()),
                Term::Sport(80),
                Term::Dst("10.0.0.1".into())
            ]
        );
        assert_eq!(
            parse_filter(&w("dport=:443")).expect("ok"),
            vec![Term::Dport(443)]
        );
        // The filter quoted as one argument, as ss(8) is usually given it
        // (`ss -tn 'sport = :22'`): it was "unknown filter \"sport \"".
        assert_eq!(
            parse_filter(&["sport = :7".to_string()]).expect("ok"),
            vec![Term::Sport(7)]
        );
        assert_eq!(
            parse_filter(&[
                "state established  dst 10.0.0.1".to_string(),
                "dport == :80".to_string()
            ])
            .expect("ok"),
            vec![
                Term::State("ESTAB".into()),
                Term::Dst("10.0.0.1".into()),
                Term::Dport(80)
            ]
        );
        assert!(parse_filter(&w("sport")).is_err());
        assert!(parse_filter(&w("bogus 1")).is_err());
        assert!(parse_filter(&w("state nonsense")).is_err());
        assert!(addr_matches("10.0.0.1:80", "10.0.0.1"));
        assert!(addr_matches("10.0.0.1:80", ":80"));
        assert!(!addr_matches("10.0.0.1:80", "10.0.0.1:81"));
    }

    #[test]
    fn ipv6_filters_and_families() {
        assert!(addr_matches("[fd77::2]:80", "fd77::2"));
        assert!(addr_matches("[fd77::2]:80", "[fd77::2]"));
        assert!(addr_matches("[fd77::2]:80", "[fd77::2]:80"));
        assert!(!addr_matches("[fd77::2]:80", "[fd77::2]:81"));
        assert!(addr_matches("[fd77::2]:80", ":80"));
        assert!(addr_matches("[fd77::2]:80", "fd77::/64"));
        assert!(addr_matches("[fd77::2]:80", "[fd77::/64]:80"));
        assert!(!addr_matches("[fd77::2]:80", "fd78::/64"));
        assert!(!addr_matches("[fd77::2]:80", "10.0.0.2"));
        assert!(!addr_matches("10.0.0.2:80", "fd77::2"));
        assert!(addr_matches("10.0.0.2:80", "10.0.0.0/24"));
        assert!(!addr_matches("10.0.1.2:80", "10.0.0.0/24"));
        // A dual-stack listener's IPv4 peers match IPv4 filters.
        assert!(addr_matches("[::ffff:10.0.0.1]:4000", "10.0.0.1"));
        assert!(addr_matches("*:80", ":80"));
        assert!(addr_matches("[fe80::1]%2:22", "fe80::1"));
        let w = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            parse_filter(&w("src [fd77::2]:80")).expect("ok"),
            vec![Term::Src("[fd77::2]:80".into())]
        );
        assert!(parse_filter(&w("dst fd77::zz")).is_err());
        assert!(parse_filter(&w("dst 10.0.0.0/40")).is_err());
        let row = |local: &str| SocketEntry {
            proto: "tcp".into(),
            state: "LISTEN".into(),
            recv_q: 0,
            send_q: 0,
            local: local.into(),
            peer: String::new(),
            orphan: false,
            info: None,
            host: None,
        };
        assert!(is_ipv6_row(&row("[fd77::2]:80")));
        assert!(is_ipv6_row(&row("*:80")));
        assert!(!is_ipv6_row(&row("0.0.0.0:80")));
    }

    #[test]
    fn capture_filters_parse() {
        let w = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let f = parse_capture_filter(&w("tcp and port 80 and host 10.0.0.1")).expect("ok");
        assert_eq!(f.proto.as_deref(), Some("tcp"));
        assert_eq!(f.port, Some(80));
        assert_eq!(f.host, Some(std::net::Ipv4Addr::new(10, 0, 0, 1).into()));
        let f = parse_capture_filter(&w("ip6 and host [fd77::2] and icmp6")).expect("ok");
        assert_eq!(f.family.as_deref(), Some("ip6"));
        assert_eq!(f.proto.as_deref(), Some("icmp6"));
        assert_eq!(f.host, Some("fd77::2".parse().expect("addr")));
        // One quoted argument, as tcpdump's expression usually is
        // (`ustack capture 'tcp and port 80'`): it was "unknown word".
        let f = parse_capture_filter(&["tcp and port 80".to_string()]).expect("ok");
        assert_eq!((f.proto.as_deref(), f.port), (Some("tcp"), Some(80)));
        assert!(parse_capture_filter(&w("ip ip6")).is_err());
        assert!(parse_capture_filter(&w("port")).is_err());
        assert!(parse_capture_filter(&w("host nonsense")).is_err());
        assert!(parse_capture_filter(&w("tcp udp")).is_err());
        assert!(parse_capture_filter(&w("vlan 3")).is_err());
        assert!(frame_line(0, 0, &[0u8; 3], 3).contains("ethertype"));
        let mut f6 = vec![0u8; 14 + 40 + 20];
        f6[12..14].copy_from_slice(&[0x86, 0xdd]);
        f6[14] = 0x60;
        f6[18..20].copy_from_slice(&20u16.to_be_bytes());
        f6[20] = 6;
        f6[37] = 1;
        f6[53] = 2;
        f6[54..56].copy_from_slice(&40000u16.to_be_bytes());
        f6[56..58].copy_from_slice(&80u16.to_be_bytes());
        assert_eq!(
            frame_line(0, 0, &f6, 74),
            "00:00:00.000000 IP6 ::1.40000 > ::2.80: tcp, payload length 20"
        );
        for n in 0..f6.len() {
            let _ = frame_line(0, 0, &f6[..n], n as u32);
        }
    }

    #[test]
    fn state_groups_as_ss() {
        #[derive(clap::Parser)]
        struct W {
            #[command(flatten)]
            a: SsArgs,
        }
        let args = |s: &str| {
            <W as clap::Parser>::try_parse_from(std::iter::once("ss").chain(s.split(' ')))
                .expect("args")
                .a
        };
        let row = |state: &str| SocketEntry {
            proto: "tcp".into(),
            state: state.into(),
            recv_q: 0,
            send_q: 0,
            local: "10.0.0.2:80".into(),
            peer: "10.0.0.1:4000".into(),
            orphan: false,
            info: None,
            host: None,
        };
        let states = [
            "LISTEN",
            "SYN-SENT",
            "SYN-RECV",
            "ESTAB",
            "TIME-WAIT",
            "CLOSE-WAIT",
        ];
        let kept = |filter: &str| -> Vec<&str> {
            let a = args(filter);
            let terms = parse_filter(&a.filter).expect("filter");
            states
                .iter()
                .copied()
                .filter(|st| keep(&row(st), &a, &terms))
                .collect()
        };
        assert_eq!(
            kept("state synchronized"),
            ["SYN-RECV", "ESTAB", "TIME-WAIT", "CLOSE-WAIT"]
        );
        assert_eq!(kept("state bucket"), ["SYN-RECV", "TIME-WAIT"]);
        assert_eq!(
            kept("state big"),
            ["LISTEN", "SYN-SENT", "ESTAB", "CLOSE-WAIT"]
        );
        assert_eq!(kept("state connected").len(), 5);
        assert!(args("-H").no_header);
        // One state selected: no State column, as ss(8).
        let w = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert!(single_state(
            &parse_filter(&w("state established")).expect("ok")
        ));
        assert!(single_state(
            &parse_filter(&w("state time-wait sport = :80")).expect("ok")
        ));
        assert!(!single_state(
            &parse_filter(&w("state connected")).expect("ok")
        ));
        assert!(!single_state(
            &parse_filter(&w("state established state listening")).expect("ok")
        ));
        assert!(!single_state(&parse_filter(&w("sport = :80")).expect("ok")));
    }

    #[test]
    fn summary_as_ss_s() {
        let row = |proto: &str, state: &str, local: &str, orphan: bool| SocketEntry {
            proto: proto.into(),
            state: state.into(),
            recv_q: 0,
            send_q: 0,
            local: local.into(),
            peer: "*:*".into(),
            orphan,
            info: None,
            host: None,
        };
        let socks = vec![
            row("tcp", "LISTEN", "*:80", false),
            row("tcp", "ESTAB", "[::ffff:10.0.0.2]:80", false),
            row("tcp", "ESTAB", "10.0.0.2:4000", false),
            row("tcp", "TIME-WAIT", "10.0.0.2:4001", false),
            row("tcp", "FIN-WAIT-1", "[fd77::2]:80", true),
            row("udp", "UNCONN", "10.0.0.2:7", false),
            row("udp", "UNCONN", "[::]:7", false),
        ];
        assert_eq!(
            summary(&socks),
            "Total: 7\n\
             TCP:   5 (estab 2, closed 0, orphaned 1, timewait 1)\n\
             \n\
             Transport Total     IP        IPv6\n\
             UDP\t  2         1         1        \n\
             TCP\t  4         1         3        \n\
             INET\t  6         2         4        \n"
        );
    }

    #[test]
    fn capture_count_is_at_least_one() {
        #[derive(clap::Parser)]
        struct W {
            #[command(flatten)]
            a: CaptureArgs,
        }
        let parse = |s: &[&str]| {
            <W as clap::Parser>::try_parse_from(std::iter::once("capture").chain(s.iter().copied()))
        };
        // `-c 0` started a capture that stopped at once, "0 frames
        // captured"; tcpdump refuses it.
        assert!(parse(&["-c", "0"]).is_err());
        assert_eq!(parse(&["-c", "1"]).expect("ok").a.count, Some(1));
    }

    #[test]
    fn globs_match_counter_names() {
        assert!(glob("Tcp*", "TcpActiveOpens"));
        assert!(glob("*Retrans*", "TcpRetransSegs"));
        assert!(glob("*Opens", "TcpActiveOpens"));
        assert!(!glob("Ip*", "TcpActiveOpens"));
        assert!(glob("TcpActiveOpens", "TcpActiveOpens"));
        // nstat matches without regard to case.
        assert!(glob("tcp*", "TcpActiveOpens"));
        assert!(glob("TCPEXT*timeouts", "TcpExtTCPTimeouts"));
        assert!(!glob("tcpext*", "TcpActiveOpens"));
    }
}
