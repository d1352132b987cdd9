//! Bodies of the fuzz targets, shared by the libFuzzer binaries in
//! `fuzz/fuzz_targets/` and by the stable-toolchain corpus replay test
//! `crates/sim/tests/fuzz_corpus_replay.rs` (both include this directory with
//! `#[path = ...] mod harness;`). No libFuzzer here: the replay test runs
//! on stable without it. `parsers`, `stack`, `services` and `tcp_conn` use only
//! `ustack-wire` and `ustack-core`; `control` also uses the host-side crates
//! whose input it fuzzes (`ustack-ctl`, `ustack-socket`, `ustack-relay`,
//! `ustack-ipc`) and `serde_json`; each of those is a dependency of the
//! fuzz crate and a dev-dependency of `ustack-sim` (the replay test).

pub mod control;
pub mod parsers;
pub mod parsers_v6;
pub mod services;
pub mod stack;
pub mod tcp_conn;

/// A target body: one fuzz input in, a panic on a violated invariant.
pub type Body = fn(&[u8]);

/// Every target: its name (= `fuzz/corpus/<name>/`) and its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("ethernet", parsers::ethernet),
    ("arp", parsers::arp),
    ("ipv4", parsers::ipv4),
    ("icmpv4", parsers::icmpv4),
    ("udp", parsers::udp),
    ("tcp", parsers::tcp),
    ("virtio_net", parsers::virtio_net),
    ("ipv6", parsers_v6::ipv6),
    ("ipv6_ext", parsers_v6::ipv6_ext),
    ("icmpv6", parsers_v6::icmpv6),
    ("ndisc", parsers_v6::ndisc),
    ("mld", parsers_v6::mld),
    ("dhcpv4", parsers_v6::dhcpv4),
    ("dhcpv6", parsers_v6::dhcpv6),
    ("stack_receive", stack::run),
    ("addr_services", services::run),
    ("tcp_conn", tcp_conn::run),
    ("ctl_request", control::ctl_request),
    ("relay_config", control::relay_config),
    ("ipc_domain", control::ipc_domain),
];
