//! Targets for the bytes other processes hand ustack on the host side: the
//! control endpoint's requests (`ustack-ctl`), the relay's configuration
//! inputs (`ustack-relay`) and the IPC domains in shared memory
//! (`ustack-ipc`).

use ustack_ctl::proto::Request;
use ustack_ctl::sysctl;
use ustack_ipc::debug::RawMapping;
use ustack_ipc::{Domain, DomainConfig, Message, MsgKind, ARENA_CHUNK};
use ustack_relay::dns::first_nameserver;
use ustack_relay::PortForward;
use ustack_socket::sysctl::Tunables;

/// Most names or assignments looked at per input.
const MAX_ITEMS: usize = 64;
/// Most port specs per `relay_config` input.
const MAX_SPECS: usize = 8;

/// A tunable `name` set to what `t` prints for it reads back the same:
/// every value the stack shows, it accepts back unchanged.
fn round_trips(t: &Tunables, name: &str) {
    let Some(v) = sysctl::get(t, name) else {
        return;
    };
    let t2 = sysctl::set(t, &[(name.to_string(), v.clone())])
        .unwrap_or_else(|e| panic!("{name} = {v:?} (as printed) refused: {e}"));
    assert_eq!(
        sysctl::get(&t2, name).as_deref(),
        Some(v.as_str()),
        "{name} changed when set to its own value"
    );
}

/// `ctl_request`: a control request as the server decodes it
/// (`serde_json::from_slice::<Request>`), and the sysctl names, values and
/// port specs requests carry. Decoded requests serialize and decode back to
/// the same; a sysctl set either fails changing nothing or every name set
/// reads back a value that sets back to itself; a port spec that parses
/// prints as a spec that parses to the same forward. Input that is not a
/// request is also read as `name=value` lines for `sysctl::set`.
pub fn ctl_request(data: &[u8]) {
    let t = Tunables::default();
    match serde_json::from_slice::<Request>(data) {
        Ok(req) => {
            let j = serde_json::to_vec(&req).expect("a decoded request serializes");
            let back: Request = serde_json::from_slice(&j).expect("a serialized request decodes");
            assert_eq!(back, req, "request round trip");
            match &req {
                Request::SysctlGet { names } => {
                    for n in names.iter().take(MAX_ITEMS) {
                        let _ = sysctl::full(n);
                        round_trips(&t, n);
                    }
                }
                Request::SysctlSet { assignments } => {
                    let a = &assignments[..assignments.len().min(MAX_ITEMS)];
                    sysctl_set(&t, a);
                }
                Request::Ports { add, remove } => {
                    for s in [add, remove].into_iter().flatten() {
                        port_spec(s);
                    }
                }
                _ => {}
            }
        }
        Err(_) => {
            let text = String::from_utf8_lossy(data);
            let a: Vec<(String, String)> = text
                .lines()
                .take(MAX_ITEMS)
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            sysctl_set(&t, &a);
        }
    }
}

fn sysctl_set(t: &Tunables, a: &[(String, String)]) {
    if let Ok(t2) = sysctl::set(t, a) {
        for (k, _) in a {
            assert!(sysctl::get(&t2, k).is_some(), "{k} set but unreadable");
            round_trips(&t2, k);
        }
    }
}

fn port_spec(s: &str) {
    if let Ok(p) = s.parse::<PortForward>() {
        assert!(p.host_port != 0 && p.guest_port != 0, "port 0 accepted");
        let printed = p.to_string();
        let back: PortForward = printed
            .parse()
            .unwrap_or_else(|e| panic!("{printed:?} (printed from {s:?}) refused: {e}"));
        assert_eq!(back, p, "port forward round trip");
    }
}

/// `relay_config`: the relay's resolv.conf parser (`dns::first_nameserver`,
/// which picks where guest DNS is forwarded) and its `-p` port-forward
/// specs. The nameserver found is a usable IPv4 or IPv6 address written in
/// the text, port 53; each of the first 8 lines that parses as a port spec round-trips.
pub fn relay_config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Some(ns) = first_nameserver(&text) {
        assert_eq!(ns.port(), 53);
        assert!(!ns.ip().is_unspecified(), "nameserver {}", ns.ip());
        assert!(!ns.ip().is_multicast(), "nameserver {}", ns.ip());
        // Written in the text (IPv6 has several spellings of one address).
        let written = text
            .split(|c: char| c.is_whitespace() || c == '#' || c == ';')
            .any(|w| w.parse::<std::net::IpAddr>().ok() == Some(ns.ip()));
        assert!(written, "nameserver {} not in the text", ns.ip());
    }
    // A few lines: a refused spec costs a formatted error message (with
    // the spec escaped), most of an execution's time with 64 of them.
    for line in text.lines().take(MAX_SPECS) {
        port_spec(line);
    }
}

/// `ipc_domain`: an IPC domain whose shared memory another process wrote.
///
/// The first 64 bytes are also decoded as a [`Message`] (the fixed cache
/// line endpoints exchange): its kind and payload words read as documented.
/// Then a real domain's file image (4 endpoint slots, two bound, one arena
/// chunk; made once per thread and mapped once) has its control part
/// (header, slots, chunk table) restored and patched at input-chosen offsets
/// by plain writes into the thread's mapping of it (the arena after it holds
/// only buffer data, never read as structure, so an input's outcome depends
/// on its own bytes alone), and is opened from that mapping with
/// `RawMapping::open`, the validation and construction `Domain::open` runs
/// once it has mapped the file; every 256th input goes through
/// `Domain::open` itself (open, fstat, mmap). The domain must be refused or
/// serve the introspection (`info`), the liveness scan and an arena
/// allocation, write and read without crashing.
pub fn ipc_domain(data: &[u8]) {
    let mut m = [0u8; 64];
    let n = data.len().min(64);
    m[..n].copy_from_slice(&data[..n]);
    message(&m);

    IPC_FILE.with_borrow_mut(|f| {
        let Some(f) = f else {
            return;
        };
        if f.map.write_at(0, &f.control).is_err() {
            return;
        }
        let control = f.control.len();
        let mut inp = super::stack::Input::new(data);
        let mut patches = 0;
        while !inp.is_empty() && patches < 64 {
            patches += 1;
            let off = usize::from(inp.u16()) % control;
            let len = usize::from(inp.u8() % 32);
            let b = inp.bytes(len);
            let end = (off + b.len()).min(control);
            if f.map.write_at(off, &b[..end - off]).is_err() {
                return;
            }
        }
        f.opens = f.opens.wrapping_add(1);
        let dom = if f.opens % 256 == 0 {
            Domain::open(&f.name)
        } else {
            f.map.open()
        };
        open_domain(dom, &mut inp);
    });
}

/// `Domain::open` on a patched image: refused, or every read-side call and
/// one arena round trip work.
fn open_domain(dom: ustack_ipc::Result<Domain>, inp: &mut super::stack::Input) {
    if let Ok(dom) = dom {
        let info = dom.info();
        assert_eq!(info.max_endpoints, dom.max_endpoints());
        assert!(info.endpoints.len() <= dom.max_endpoints() as usize);
        let _ = dom.has_live_endpoints();
        let _ = (dom.arena_size(), dom.arena_used(), dom.is_ended());
        let want = usize::from(inp.u16()).max(1);
        if let Ok(mut buf) = dom.alloc(want) {
            assert!(buf.capacity() >= want && buf.len() >= want);
            let bytes = [0xa5u8; 64];
            let k = bytes.len().min(buf.len());
            buf.write_at(0, &bytes[..k])
                .expect("write into a fresh buffer");
            let mut back = [0u8; 64];
            buf.read_at(0, &mut back[..k])
                .expect("read from a fresh buffer");
            assert_eq!(back[..k], bytes[..k]);
        }
    }
}

fn message(b: &[u8; 64]) {
    let m = Message {
        source: i32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        kind: b[4],
        flags: b[5],
        mtype: u16::from_le_bytes([b[6], b[7]]),
        payload: b[8..].try_into().unwrap_or([0; 56]),
    };
    let k = m.kind();
    assert_eq!(k == MsgKind::Notify, m.is_notify());
    assert_eq!(k as u8 == m.kind, m.kind <= 3, "kind {}", m.kind);
    for i in 0..8 {
        let want = b
            .get(8 + i * 8..16 + i * 8)
            .filter(|_| i < 7)
            .map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
        assert_eq!(m.u64_at(i), want, "payload word {i}");
    }
}

fn thread_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local!(static ID: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    ID.with(|i| *i)
}

/// One thread's domain file: a real domain's image (4 endpoint slots, two
/// bound, one arena chunk) left in /dev/shm under `name` and mapped once, and
/// the pristine bytes of its control part (all but the arena's chunk), which
/// every input writes back over the mapping's start and patches.
struct IpcFile {
    name: String,
    map: RawMapping,
    control: Vec<u8>,
    /// Inputs run so far (every 256th opens the file with `Domain::open`).
    opens: u32,
}

impl Drop for IpcFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(format!("/dev/shm/ustack-ipc-{}", self.name));
    }
}

/// Make the thread's domain file, or None if /dev/shm is unusable here.
fn ipc_file() -> Option<IpcFile> {
    let name = format!("fz{}-{}", std::process::id(), thread_id());
    let path = format!("/dev/shm/ustack-ipc-{name}");
    let cfg = DomainConfig {
        max_endpoints: 4,
        max_copy: 1 << 16,
        arena_size: ARENA_CHUNK as u64,
    };
    let dom = Domain::create(&name, cfg).ok()?;
    let a = dom.bind("a").ok()?;
    let b = dom.bind("b").ok()?;
    let buf = dom.alloc(100).ok()?;
    let image = std::fs::read(&path).ok();
    drop(buf);
    a.unbind();
    let _b = b; // stays bound in the image
    let _ = dom.end();
    drop(dom);
    let _ = std::fs::remove_file(&path);
    let image = image?;
    let control = image
        .len()
        .saturating_sub(ARENA_CHUNK)
        .max(1)
        .min(image.len());
    // The file every input of this thread opens: the whole image once.
    std::fs::write(&path, &image).ok()?;
    let map = RawMapping::map(&name).ok()?;
    Some(IpcFile {
        name,
        map,
        control: image[..control].to_vec(),
        opens: 0,
    })
}

thread_local! {
    static IPC_FILE: std::cell::RefCell<Option<IpcFile>> =
        std::cell::RefCell::new(ipc_file());
}
