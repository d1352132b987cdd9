//! Spawning a command in its own network namespace whose only interface is a
//! TAP device held by ustack.
//!
//! A forked child unshares the namespaces (network + mount, and user when not
//! root), brings loopback up, creates and configures the TAP, bind-mounts a
//! private `/etc/resolv.conf`, passes the TAP descriptor back over a Unix
//! socket with `SCM_RIGHTS` and waits for the go-ahead. It then becomes the
//! sandbox's init: it forks and `exec`s the command, delivers the signals
//! ustack forwards over the same socket, and exits with the command's status.
//! The command gets a mount namespace of its own on top, with an empty
//! tmpfs on `/dev/shm`: the control endpoints of running stacks (IPC
//! domains in the host's `/dev/shm`) are out of its sight.
//! So ustack need not be able to signal the command itself (its relay may
//! run as another user than the command).
//! ustack itself never leaves the host namespace.

use std::ffi::{CString, OsString};
use std::io::{self, Write};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::netif;
use crate::sys;
use crate::tapfd::TapFd;

/// Whether to create a user namespace too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserNs {
    /// Only when not running as root (rootless, like `unshare -rn`).
    Auto,
    /// Always (the command sees itself as root of its own user namespace).
    Always,
    /// Never (needs root / CAP_SYS_ADMIN).
    Never,
}

/// How the sandbox's network looks from inside.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Name of the TAP inside the namespace (default `eth0`).
    pub tap_name: String,
    /// Interface MTU (default 1500).
    pub mtu: usize,
    /// The command's address (default 10.0.2.15).
    pub addr: Ipv4Addr,
    /// Prefix length of `addr` (default 24).
    pub prefix_len: u8,
    /// Default route via this address (default 10.0.2.2); `None` = no route.
    pub gateway: Option<Ipv4Addr>,
    /// Nameserver written into the command's private `/etc/resolv.conf`
    /// (default 10.0.2.3); `None` leaves the host's file visible.
    pub dns: Option<Ipv4Addr>,
    /// User namespace policy (default [`UserNs::Auto`]).
    pub userns: UserNs,
    /// Open the TAP with a virtio-net header and offer the command's kernel
    /// checksum offload and TSO/GSO on it (default true): it then hands
    /// over 64 KB segments whatever the MTU.
    pub offload: bool,
    /// The command's IPv6 configuration (default [`SandboxIpv6::default`]);
    /// `None`: none beyond the kernel's link-local address.
    pub ipv6: Option<SandboxIpv6>,
}

/// How the sandbox's IPv6 looks from inside (slirp4netns' conventions,
/// beside the IPv4 10.0.2.0/24 ones): fd00::100/64, default route via
/// fd00::2, nameserver fd00::3. The address is configured statically and
/// without duplicate address detection (usable at once; the link has no
/// one else on it), the link-local address stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxIpv6 {
    pub addr: Ipv6Addr,
    pub prefix_len: u8,
    /// Default route via this address; `None` = no route.
    pub gateway: Option<Ipv6Addr>,
    /// Nameserver listed in the private `/etc/resolv.conf` after the IPv4
    /// one (when [`SandboxConfig::dns`] asks for the file at all).
    pub dns: Option<Ipv6Addr>,
}

impl Default for SandboxIpv6 {
    fn default() -> Self {
        SandboxIpv6 {
            addr: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x100),
            prefix_len: 64,
            gateway: Some(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
            dns: Some(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3)),
        }
    }
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            tap_name: "eth0".into(),
            mtu: 1500,
            addr: Ipv4Addr::new(10, 0, 2, 15),
            prefix_len: 24,
            gateway: Some(Ipv4Addr::new(10, 0, 2, 2)),
            dns: Some(Ipv4Addr::new(10, 0, 2, 3)),
            userns: UserNs::Auto,
            offload: true,
            ipv6: Some(SandboxIpv6::default()),
        }
    }
}

/// Setup step that failed in the child (sent back with its errno).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Stage {
    Unshare = 1,
    UserMap,
    MountPrivate,
    ResolvConf,
    Loopback,
    Tap,
    Configure,
    Route,
    Send,
    Exec,
    Ipv6,
    DevShm,
}

impl Stage {
    fn from_u8(b: u8) -> Option<Stage> {
        Some(match b {
            1 => Stage::Unshare,
            2 => Stage::UserMap,
            3 => Stage::MountPrivate,
            4 => Stage::ResolvConf,
            5 => Stage::Loopback,
            6 => Stage::Tap,
            7 => Stage::Configure,
            8 => Stage::Route,
            9 => Stage::Send,
            10 => Stage::Exec,
            11 => Stage::Ipv6,
            12 => Stage::DevShm,
            _ => return None,
        })
    }
    fn describe(self) -> &'static str {
        match self {
            Stage::Unshare => "creating the namespaces (unshare)",
            Stage::UserMap => "writing the user namespace uid/gid maps",
            Stage::MountPrivate => "making the mount namespace private",
            Stage::ResolvConf => "bind-mounting /etc/resolv.conf",
            Stage::Loopback => "bringing loopback up",
            Stage::Tap => "creating the TAP device (/dev/net/tun)",
            Stage::Configure => "configuring the TAP address/MTU",
            Stage::Route => "adding the default route",
            Stage::Ipv6 => {
                "configuring the TAP's IPv6 address and route (--no-ipv6 turns IPv6 off)"
            }
            Stage::Send => "passing the TAP descriptor to ustack",
            Stage::DevShm => "mounting the command's private /dev/shm",
            Stage::Exec => "executing the command",
        }
    }
}

/// Everything the child needs, built before `fork` so the child allocates nothing.
struct ChildPlan {
    flags: libc::c_int,
    userns: bool,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    resolv_src: Option<CString>,
    tap_name: [u8; 16],
    addr: [u8; 4],
    netmask: [u8; 4],
    mtu: i32,
    gateway: Option<[u8; 4]>,
    /// IPv6 address and prefix, default route, and the TAP's
    /// `accept_dad` sysctl path (NUL-terminated).
    addr6: Option<([u8; 16], u8)>,
    gateway6: Option<[u8; 16]>,
    accept_dad_path: Vec<u8>,
    offload: bool,
    argv: Vec<CString>,
    parent_pid: libc::pid_t,
}

/// A command running (or about to run) in its own network namespace.
#[derive(Debug)]
pub struct Sandbox {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    sock: Option<OwnedFd>,
    tap: Option<TapFd>,
    status: Option<i32>,
    userns: bool,
    started: bool,
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn netmask(prefix_len: u8) -> [u8; 4] {
    let bits = u32::from(prefix_len.min(32));
    let m = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    m.to_be_bytes()
}

/// The contents of the command's private resolv.conf: our nameserver plus the
/// host's `search`/`domain`/`options` lines.
/// An IPv6 nameserver comes after the IPv4 one.
pub fn resolv_conf_for(dns: Ipv4Addr, dns6: Option<Ipv6Addr>, host: &str) -> String {
    let mut out = format!("# generated by ustack run\nnameserver {dns}\n");
    if let Some(d6) = dns6 {
        out.push_str(&format!("nameserver {d6}\n"));
    }
    for line in host.lines() {
        let t = line.trim_start();
        if t.starts_with("search") || t.starts_with("domain") || t.starts_with("options") {
            out.push_str(t);
            out.push('\n');
        }
    }
    out
}

/// Removes the temporary resolv.conf when dropped.
struct TempFile(PathBuf);
impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn temp_resolv(contents: &str) -> io::Result<TempFile> {
    static N: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "ustack-resolv-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    let guard = TempFile(path);
    f.write_all(contents.as_bytes())?;
    Ok(guard)
}

/// Report a failure to the parent and exit. Allocation-free.
fn child_fail(sock: RawFd, stage: Stage, err: &io::Error) -> ! {
    let errno = err.raw_os_error().unwrap_or(libc::EIO);
    let e = errno.to_le_bytes();
    let msg = [b'E', stage as u8, e[0], e[1], e[2], e[3]];
    let _ = sys::send_msg_fd(sock, &msg, None);
    // SAFETY: _exit is always safe; no destructors run in the forked child.
    unsafe { libc::_exit(127) }
}

fn write_file(path: &[u8], data: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated (callers pass literals ending in \0).
    let fd =
        sys::cvt(unsafe { libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC) })?;
    // SAFETY: `data` is valid for reads; `fd` was just opened.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    let err = io::Error::last_os_error();
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    if n < 0 {
        return Err(err);
    }
    Ok(())
}

/// The child between `fork` and `exec`. Only system calls on pre-built data.
fn child_main(plan: &ChildPlan, sock: RawFd) -> ! {
    // SAFETY (whole function): plain system calls with valid pointers to data
    // owned by `plan` or the stack, which outlive each call.
    unsafe {
        // Die with ustack rather than outlive it.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        if libc::getppid() != plan.parent_pid {
            libc::_exit(127);
        }
        // Default signal state for the command (Rust ignores SIGPIPE).
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        for sig in [
            libc::SIGPIPE,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
        ] {
            libc::signal(sig, libc::SIG_DFL);
        }

        if libc::unshare(plan.flags) < 0 {
            child_fail(sock, Stage::Unshare, &io::Error::last_os_error());
        }
        if plan.userns {
            // "deny" must be written before gid_map by an unprivileged process.
            if let Err(e) = write_file(b"/proc/self/setgroups\0", b"deny") {
                child_fail(sock, Stage::UserMap, &e);
            }
            if let Err(e) = write_file(b"/proc/self/uid_map\0", &plan.uid_map) {
                child_fail(sock, Stage::UserMap, &e);
            }
            if let Err(e) = write_file(b"/proc/self/gid_map\0", &plan.gid_map) {
                child_fail(sock, Stage::UserMap, &e);
            }
        }
        // Keep our mounts (resolv.conf here, the command's /dev/shm in
        // `init_main`) out of the host's mount namespace.
        let root = b"/\0";
        if libc::mount(
            std::ptr::null(),
            root.as_ptr().cast(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) < 0
        {
            child_fail(sock, Stage::MountPrivate, &io::Error::last_os_error());
        }
        if let Some(src) = &plan.resolv_src {
            let dst = b"/etc/resolv.conf\0";
            if libc::mount(
                src.as_ptr(),
                dst.as_ptr().cast(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ) < 0
            {
                child_fail(sock, Stage::ResolvConf, &io::Error::last_os_error());
            }
        }
        let ctl = match netif::ctl_socket() {
            Ok(fd) => fd,
            Err(e) => child_fail(sock, Stage::Loopback, &e),
        };
        let mut lo = [0u8; 16];
        lo[..2].copy_from_slice(b"lo");
        if let Err(e) = netif::set_up(ctl, &lo) {
            child_fail(sock, Stage::Loopback, &e);
        }
        // With offloads, the virtio-net header; a kernel that refuses the
        // header or the offloads gets a plain TAP instead ("r" tells ustack
        // so: it then segments and checksums in software).
        let (tap, hello): (RawFd, &[u8]) = match netif::open_tap(&plan.tap_name, plan.offload) {
            Ok(fd) => (fd, if plan.offload { b"R" } else { b"r" }),
            Err(_) if plan.offload => match netif::open_tap(&plan.tap_name, false) {
                Ok(fd) => (fd, b"r"),
                Err(e) => child_fail(sock, Stage::Tap, &e),
            },
            Err(e) => child_fail(sock, Stage::Tap, &e),
        };
        if let Err(e) = netif::configure(ctl, &plan.tap_name, plan.addr, plan.netmask, plan.mtu)
            .and_then(|()| netif::set_up(ctl, &plan.tap_name))
        {
            child_fail(sock, Stage::Configure, &e);
        }
        if let Some(gw) = plan.gateway {
            if let Err(e) = netif::add_default_route(ctl, &plan.tap_name, gw) {
                child_fail(sock, Stage::Route, &e);
            }
        }
        libc::close(ctl);
        if let Some((addr6, prefix6)) = plan.addr6 {
            // No IPv6 in this kernel at all: nothing to configure.
            if let Ok(ctl6) = netif::ctl_socket6() {
                // No duplicate address detection (the link holds only
                // ustack, which never claims the address): usable at
                // once. Best effort: without it the address is usable
                // after DAD's second.
                let _ = netif::write_sysctl(&plan.accept_dad_path, b"0");
                if let Err(e) = netif::add_address6(ctl6, &plan.tap_name, addr6, prefix6) {
                    child_fail(sock, Stage::Ipv6, &e);
                }
                if let Some(gw6) = plan.gateway6 {
                    if let Err(e) = netif::add_default_route6(ctl6, &plan.tap_name, gw6) {
                        child_fail(sock, Stage::Ipv6, &e);
                    }
                }
                libc::close(ctl6);
                // Usable before the command starts (at most 3 s; the
                // kernel makes it usable later otherwise).
                let _ = netif::wait_address6_usable(addr6, 300, 10);
            }
        }
        if let Err(e) = sys::send_msg_fd(sock, hello, Some(tap)) {
            child_fail(sock, Stage::Send, &e);
        }
        // The command must not hold the TAP: only ustack does.
        libc::close(tap);

        // Wait for the go-ahead (the relay is ready); EOF = ustack gave up.
        // A signal forwarded before it ends the command before it started.
        // Before it, ustack may name a file to remove when we end ('P').
        let mut go = [0u8; 2 + MAX_REMOVE_PATH];
        let mut remove = [0u8; MAX_REMOVE_PATH + 1];
        loop {
            let n = libc::recv(sock, go.as_mut_ptr().cast(), go.len(), 0);
            if n == 1 && go[0] == b'G' {
                break;
            }
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            if n == 2 && go[0] == b'S' {
                remove_file(&remove);
                libc::_exit(128 + i32::from(go[1]));
            }
            if n >= 2 && go[0] == b'P' && (n as usize) <= 1 + MAX_REMOVE_PATH {
                let path = &go[1..n as usize];
                if !path.contains(&0) {
                    remove = [0u8; MAX_REMOVE_PATH + 1];
                    remove[..path.len()].copy_from_slice(path);
                }
                continue;
            }
            remove_file(&remove);
            libc::_exit(127);
        }
        init_main(plan, sock, &remove);
    }
}

/// The longest path [`Sandbox::remove_at_exit`] takes.
const MAX_REMOVE_PATH: usize = 255;

/// Unlink the NUL-terminated `path` if it is not empty.
fn remove_file(path: &[u8]) {
    if path.first().is_some_and(|&b| b != 0) && path.contains(&0) {
        // SAFETY: `path` is NUL-terminated (checked above).
        unsafe { libc::unlink(path.as_ptr().cast()) };
    }
}

/// Signals the sandbox's init ignores itself (the command gets them from
/// the terminal directly, or from ustack through the init).
const INIT_IGNORES: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// The sandbox's init: forks the command, tells ustack whether `exec`
/// worked, then only delivers the signals ustack asks for (`S` + number on
/// the socket) and, when the command ends, exits with its status (a death
/// by signal N as exit status 128+N). ustack going away (EOF) kills the
/// command. It is the child subreaper of the command's process tree: the
/// processes the command leaves behind (a server started in the
/// background, a daemon that forked away) become its children, are
/// reaped as they end, and are killed when the command ends, so that
/// nothing outlives the sandbox's network (or keeps its namespace). It
/// stays with the privileges the sandbox was set up with, so that ustack's
/// relay can give up its own and still have the command signalled.
/// Allocation-free, like `child_main`.
fn init_main(plan: &ChildPlan, sock: RawFd, remove: &[u8]) -> ! {
    // SAFETY (whole function): plain system calls with valid pointers to data
    // owned by `plan` or the stack, which outlive each call.
    unsafe {
        libc::prctl(
            libc::PR_SET_NAME,
            c"ustack-init".as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
        let me = libc::getpid();
        // Orphans of the command's tree come to us, not to the host's init
        // (set before the fork: the command could orphan one at once).
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
        // Reports exec's failure (errno) to us; closed by a successful exec.
        let mut ep = [0 as libc::c_int; 2];
        if libc::pipe2(ep.as_mut_ptr(), libc::O_CLOEXEC) < 0 {
            child_fail(sock, Stage::Exec, &io::Error::last_os_error());
        }
        // Ignore the terminal's signals before the command exists: once it
        // runs, a Ctrl-C reaches this process too, and must not kill it
        // (however late the scheduler runs it after `fork`).
        for sig in INIT_IGNORES {
            libc::signal(sig, libc::SIG_IGN);
        }
        let cmd = libc::fork();
        if cmd < 0 {
            child_fail(sock, Stage::Exec, &io::Error::last_os_error());
        }
        if cmd == 0 {
            // The command gets the default dispositions (an ignored signal
            // would stay ignored across exec).
            for sig in INIT_IGNORES {
                libc::signal(sig, libc::SIG_DFL);
            }
            libc::close(ep[0]);
            libc::close(sock);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != me {
                libc::_exit(127);
            }
            if let Err(errno) = private_dev_shm() {
                let e = errno.to_ne_bytes();
                let msg = [Stage::DevShm as u8, e[0], e[1], e[2], e[3]];
                libc::write(ep[1], msg.as_ptr().cast(), msg.len());
                libc::_exit(127);
            }
            let mut ptrs: [*const libc::c_char; 256] = [std::ptr::null(); 256];
            for (slot, arg) in ptrs.iter_mut().zip(plan.argv.iter()).take(255) {
                *slot = arg.as_ptr();
            }
            libc::execvp(ptrs[0], ptrs.as_ptr());
            let e = (*libc::__errno_location()).to_ne_bytes();
            let msg = [Stage::Exec as u8, e[0], e[1], e[2], e[3]];
            libc::write(ep[1], msg.as_ptr().cast(), msg.len());
            libc::_exit(127);
        }
        libc::close(ep[1]);
        // Keep nothing of ustack's but the socket: its other descriptors
        // (another sandbox's TAP or socket when one process runs several)
        // would otherwise live as long as this command.
        close_all_but(sock, ep[0]);
        // The stage that failed and its errno (one write, so one read).
        let mut e = [0u8; 5];
        let n = loop {
            let n = libc::read(ep[0], e.as_mut_ptr().cast(), e.len());
            if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            }
            break n;
        };
        libc::close(ep[0]);
        if n == 5 {
            reap(cmd);
            remove_file(remove);
            let stage = Stage::from_u8(e[0]).unwrap_or(Stage::Exec);
            child_fail(
                sock,
                stage,
                &io::Error::from_raw_os_error(i32::from_ne_bytes([e[1], e[2], e[3], e[4]])),
            );
        }
        let started = b"X";
        libc::send(sock, started.as_ptr().cast(), 1, libc::MSG_NOSIGNAL);
        let pidfd = libc::syscall(libc::SYS_pidfd_open, cmd, 0) as libc::c_int;
        // SIGCHLD (an adopted orphan ended) interrupts the wait below and
        // only it: blocked but while waiting (`ppoll`), no SA_RESTART.
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, std::ptr::null_mut());
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigchld as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigaction(libc::SIGCHLD, &act, std::ptr::null_mut());
        let mut unblocked: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut unblocked);
        let mut ustack_gone = false;
        let mut cmd_status = None;
        loop {
            // Reap what ended: adopted orphans, and the command itself.
            loop {
                let mut status = 0;
                let r = libc::waitpid(-1, &mut status, libc::WNOHANG);
                if r <= 0 {
                    break;
                }
                if r == cmd {
                    cmd_status = Some(status);
                }
            }
            if cmd_status.is_some() {
                break;
            }
            let mut fds = [
                libc::pollfd {
                    fd: if ustack_gone { -1 } else { sock },
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: pidfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // Without a pidfd (an old kernel), look for the command's end
            // every 50 ms.
            let every = libc::timespec {
                tv_sec: 0,
                tv_nsec: 50_000_000,
            };
            let timeout = if pidfd < 0 {
                &every as *const libc::timespec
            } else {
                std::ptr::null()
            };
            let rc = libc::ppoll(fds.as_mut_ptr(), 2, timeout, &unblocked);
            if rc < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                libc::kill(cmd, libc::SIGKILL);
                break;
            }
            if fds[1].revents != 0 {
                break;
            }
            if fds[0].revents != 0 {
                let mut req = [0u8; 2];
                let n = libc::recv(sock, req.as_mut_ptr().cast(), req.len(), libc::MSG_DONTWAIT);
                if n == 2 && req[0] == b'S' && (1..=64).contains(&req[1]) {
                    libc::kill(cmd, libc::c_int::from(req[1]));
                } else if n == 0 || (n < 0 && *libc::__errno_location() != libc::EAGAIN) {
                    // ustack is gone: so is the command.
                    libc::kill(cmd, libc::SIGKILL);
                    ustack_gone = true;
                }
            }
        }
        let code = match cmd_status {
            Some(status) => shell_code(status),
            None => reap(cmd),
        };
        kill_orphans();
        remove_file(remove);
        libc::_exit(code);
    }
}

/// SIGCHLD's handler in the sandbox's init: nothing, its delivery only
/// ends the wait.
extern "C" fn on_sigchld(_: libc::c_int) {}

/// In the sandbox's init once the command has ended: kill (SIGKILL) and
/// reap every process it adopted, over and over, as each one's orphans
/// come to it in turn, until it has no child left. The children are read
/// from `/proc/thread-self/children`; without it (a kernel without
/// CONFIG_PROC_CHILDREN) they are left, as before, rather than waited
/// for. Bounded; allocation-free.
fn kill_orphans() {
    // SAFETY: plain system calls with a NUL-terminated literal and a
    // buffer and status on the stack; `kill` only on our own children.
    unsafe {
        for _ in 0..100_000 {
            let fd = libc::open(
                c"/proc/thread-self/children".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return;
            }
            let mut buf = [0u8; 512];
            let (mut pid, mut digits): (libc::pid_t, bool) = (0, false);
            loop {
                let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
                if n < 0 && *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                let Some(got) = usize::try_from(n).ok().filter(|&n| n > 0) else {
                    break;
                };
                // Space-separated PIDs; one may straddle two reads.
                for &b in buf.get(..got).unwrap_or_default() {
                    if b.is_ascii_digit() {
                        pid = pid
                            .saturating_mul(10)
                            .saturating_add(libc::pid_t::from(b - b'0'));
                        digits = true;
                    } else {
                        if digits && pid > 0 {
                            libc::kill(pid, libc::SIGKILL);
                        }
                        (pid, digits) = (0, false);
                    }
                }
            }
            if digits && pid > 0 {
                libc::kill(pid, libc::SIGKILL);
            }
            libc::close(fd);
            let mut status = 0;
            if libc::waitpid(-1, &mut status, 0) < 0 && *libc::__errno_location() != libc::EINTR {
                // ECHILD: nothing left.
                return;
            }
        }
    }
}

/// Give the calling process (the command, between `fork` and `exec`) a
/// mount namespace of its own whose `/dev/shm` is an empty tmpfs: the
/// shared-memory files of the host's `/dev/shm` (the control endpoints of
/// running stacks, this sandbox's own among them: `ustack ps/ss/ports`) are
/// out of its sight. The sandbox's init keeps the namespace in which
/// `/dev/shm` is the host's, to remove a file there when the command ends
/// ([`Sandbox::remove_at_exit`]). The namespace it leaves was made private
/// in `child_main`, so nothing mounted here reaches the host.
/// Allocation-free; the error is an errno.
fn private_dev_shm() -> Result<(), i32> {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    // SAFETY: plain system calls with NUL-terminated literals.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) < 0 {
            return Err(errno());
        }
        if libc::mount(
            c"ustack-shm".as_ptr(),
            c"/dev/shm".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"mode=1777".as_ptr().cast(),
        ) < 0
        {
            return Err(errno());
        }
    }
    Ok(())
}

/// Close every descriptor above stdio but `a` and `b`. Allocation-free.
fn close_all_but(a: RawFd, b: RawFd) {
    let (lo, hi) = (a.min(b), a.max(b));
    // SAFETY: close_range(2) with integer arguments; the ranges leave out
    // stdio, `a` and `b`. A kernel without it: close(2) each, up to the
    // descriptor limit (at most 1 << 20).
    unsafe {
        let ranges = [(3, lo - 1), (lo + 1, hi - 1), (hi + 1, libc::c_int::MAX)];
        let mut ok = true;
        for (from, to) in ranges {
            if from <= to
                && libc::syscall(
                    libc::SYS_close_range,
                    from as libc::c_uint,
                    to as libc::c_uint,
                    0,
                ) != 0
            {
                ok = false;
            }
        }
        if !ok {
            let mut lim: libc::rlimit = std::mem::zeroed();
            let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                lim.rlim_cur.min(1 << 20) as libc::c_int
            } else {
                1024
            };
            for fd in 3..max {
                if fd != a && fd != b {
                    libc::close(fd);
                }
            }
        }
    }
}

/// Wait for `pid` (our child) to end; its shell-style exit code.
fn reap(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: waitpid on our own child with a valid status pointer.
    unsafe {
        while libc::waitpid(pid, &mut status, 0) < 0 {
            if *libc::__errno_location() != libc::EINTR {
                return 127;
            }
        }
    }
    shell_code(status)
}

impl Sandbox {
    /// Prepare the sandbox for `cmd` (empty = `$SHELL` or `/bin/sh`): the child
    /// has created its namespaces and the TAP, which is now ours
    /// ([`Sandbox::take_tap`]); the command runs once [`Sandbox::start`] is called.
    pub fn spawn(cfg: &SandboxConfig, cmd: &[OsString]) -> io::Result<Sandbox> {
        let tap_name = netif::encode_ifname(&cfg.tap_name)?;
        if !(68..=65535).contains(&cfg.mtu) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("MTU {} out of range 68..=65535", cfg.mtu),
            ));
        }
        if cfg.prefix_len > 32 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("prefix length {} > 32", cfg.prefix_len),
            ));
        }
        if let Some(v6) = cfg.ipv6.filter(|v| v.prefix_len > 128) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("IPv6 prefix length {} > 128", v6.prefix_len),
            ));
        }
        let mut argv = Vec::new();
        if cmd.is_empty() {
            let shell = std::env::var_os("SHELL")
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| OsString::from("/bin/sh"));
            argv.push(shell);
        } else {
            argv.extend(cmd.iter().cloned());
        }
        if argv.len() > 255 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "too many arguments (at most 255)",
            ));
        }
        let argv = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "argument contains NUL"))?;

        let userns = match cfg.userns {
            UserNs::Always => true,
            UserNs::Never => false,
            UserNs::Auto => !is_root(),
        };
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let resolv = match cfg.dns {
            Some(dns) => {
                let host = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
                let dns6 = cfg.ipv6.and_then(|v| v.dns);
                Some(temp_resolv(&resolv_conf_for(dns, dns6, &host))?)
            }
            None => None,
        };
        let resolv_src = match &resolv {
            Some(t) => Some(
                CString::new(t.0.as_os_str().as_bytes())
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "temp path"))?,
            ),
            None => None,
        };
        let mut flags = libc::CLONE_NEWNET | libc::CLONE_NEWNS;
        if userns {
            flags |= libc::CLONE_NEWUSER;
        }
        let plan = ChildPlan {
            flags,
            userns,
            uid_map: format!("0 {uid} 1").into_bytes(),
            gid_map: format!("0 {gid} 1").into_bytes(),
            resolv_src,
            tap_name,
            addr: cfg.addr.octets(),
            netmask: netmask(cfg.prefix_len),
            mtu: i32::try_from(cfg.mtu).unwrap_or(1500),
            gateway: cfg.gateway.map(|g| g.octets()),
            addr6: cfg.ipv6.map(|v| (v.addr.octets(), v.prefix_len)),
            gateway6: cfg.ipv6.and_then(|v| v.gateway).map(|g| g.octets()),
            accept_dad_path: format!("/proc/sys/net/ipv6/conf/{}/accept_dad\0", cfg.tap_name)
                .into_bytes(),
            offload: cfg.offload,
            argv,
            // SAFETY: getpid has no preconditions.
            parent_pid: unsafe { libc::getpid() },
        };
        let (ours, theirs) = sys::seqpacket_pair()?;

        // SAFETY: fork(2); the child only runs `child_main`, which uses
        // system calls on data prepared above and never returns.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: closing our copy of the parent's end so EOF is seen.
            unsafe { libc::close(ours.as_raw_fd()) };
            child_main(&plan, theirs.as_raw_fd());
        }
        drop(theirs);
        let pidfd = match sys::pidfd_open(pid) {
            Ok(fd) => fd,
            Err(e) => {
                kill_and_reap(pid);
                return Err(e);
            }
        };
        let mut sb = Sandbox {
            pid,
            pidfd,
            sock: Some(ours),
            tap: None,
            status: None,
            userns,
            started: false,
        };
        let mut buf = [0u8; 16];
        let (n, fd) = match &sb.sock {
            Some(s) => sys::recv_msg_fd(s.as_raw_fd(), &mut buf)?,
            None => (0, None),
        };
        match (buf.get(..n), fd) {
            (Some(b"R"), Some(fd)) => {
                sb.tap = Some(TapFd::new(fd, &cfg.tap_name, cfg.mtu, cfg.offload)?);
            }
            // The kernel refused the header or the offloads (or none were
            // asked for): the TAP's `offloads()` say so.
            (Some(b"r"), Some(fd)) => {
                sb.tap = Some(TapFd::new(fd, &cfg.tap_name, cfg.mtu, false)?);
            }
            (Some(msg), _) => return Err(decode_failure(msg)),
            (None, _) => return Err(io::Error::other("short message from sandbox child")),
        }
        // The bind mount holds the file now; the path can go.
        drop(resolv);
        Ok(sb)
    }

    /// Take the TAP device (once).
    pub fn take_tap(&mut self) -> Option<TapFd> {
        self.tap.take()
    }

    /// Whether a user namespace was created.
    pub fn user_namespace(&self) -> bool {
        self.userns
    }

    /// Let the command run. An error means `exec` failed (kind `NotFound` for
    /// a missing program, `PermissionDenied` for a non-executable one); the
    /// child has then been reaped.
    pub fn start(&mut self) -> io::Result<()> {
        if self.started {
            return Err(io::Error::other("sandbox already started"));
        }
        let Some(sock) = &self.sock else {
            return Err(io::Error::other("sandbox already stopped"));
        };
        self.started = true;
        match sys::write_all(sock, b"G") {
            Ok(()) => {}
            // The init ended first (a signal forwarded before the start):
            // `wait` tells how.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => return Ok(()),
            Err(e) => return Err(e),
        }
        let mut buf = [0u8; 16];
        let (n, _) = sys::recv_msg_fd(sock.as_raw_fd(), &mut buf)?;
        match buf.get(..n) {
            // Started; or the init ended first (killed): `wait` tells.
            Some(b"X") | Some([]) => Ok(()),
            msg => {
                let err = decode_failure(msg.unwrap_or(&[]));
                let _ = self.wait();
                Err(err)
            }
        }
    }

    /// Have the sandbox's init remove `path` when it ends (after the
    /// command): for a file ustack made while privileged that it may not be
    /// able to remove itself once it gave up its privileges. Only before
    /// [`Sandbox::start`]: what ustack asks later is not trusted for this.
    pub fn remove_at_exit(&self, path: &std::path::Path) -> io::Result<()> {
        let bytes = path.as_os_str().as_bytes();
        if self.started || bytes.is_empty() || bytes.len() > MAX_REMOVE_PATH || bytes.contains(&0) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let Some(sock) = &self.sock else {
            return Err(io::Error::other("sandbox already stopped"));
        };
        let mut msg = Vec::with_capacity(1 + bytes.len());
        msg.push(b'P');
        msg.extend_from_slice(bytes);
        sys::write_all(sock, &msg)
    }

    /// The process id of the sandbox's init (in ustack's PID namespace): the
    /// process in the sandbox's namespaces that runs the command as its
    /// child, delivers the signals ustack forwards and exits with the
    /// command's status.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// A pidfd that becomes readable when the command exits (for epoll).
    pub fn exit_fd(&self) -> RawFd {
        self.pidfd.as_raw_fd()
    }

    /// The socket on which [`signals::forward_to_sandbox`] asks the init to
    /// signal the command (`None` once stopped).
    ///
    /// [`signals::forward_to_sandbox`]: crate::signals::forward_to_sandbox
    pub fn signal_fd(&self) -> Option<RawFd> {
        self.sock.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Send `sig` to the command: through its init (which keeps the
    /// privileges to signal it whatever ustack gave up), or, before the
    /// command started, to the init itself.
    pub fn signal(&self, sig: libc::c_int) -> io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        if let (true, Some(sock)) = (self.started, &self.sock) {
            let sig = u8::try_from(sig)
                .ok()
                .filter(|s| (1..=64).contains(s))
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
            return sys::cvt(request_signal(sock.as_raw_fd(), sig)).map(|_| ());
        }
        // SAFETY: pidfd_send_signal with our own pidfd, no siginfo.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The exit code if the command has ended (shell style: killed by signal
    /// N gives 128+N). Does not block.
    pub fn try_wait(&mut self) -> io::Result<Option<i32>> {
        self.wait_inner(libc::WNOHANG)
    }

    /// Wait for the command to end and return its shell-style exit code.
    pub fn wait(&mut self) -> io::Result<i32> {
        match self.wait_inner(0)? {
            Some(code) => Ok(code),
            None => Err(io::Error::other("waitpid returned without a status")),
        }
    }

    fn wait_inner(&mut self, flags: libc::c_int) -> io::Result<Option<i32>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        let mut status = 0;
        loop {
            // SAFETY: waitpid on our own child with a valid status pointer.
            let rc = unsafe { libc::waitpid(self.pid, &mut status, flags) };
            if rc == 0 {
                return Ok(None);
            }
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            break;
        }
        let code = shell_code(status);
        self.status = Some(code);
        Ok(Some(code))
    }
}

/// Ask the init on `sock` to send `sig` to the command (async-signal-safe:
/// one `send(2)`). Returns what `send` returned.
pub(crate) fn request_signal(sock: RawFd, sig: u8) -> libc::c_int {
    let msg = [b'S', sig];
    // SAFETY: `msg` is valid for reads of its length.
    let n = unsafe {
        libc::send(
            sock,
            msg.as_ptr().cast(),
            msg.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    n as libc::c_int
}

/// Shell-style exit code for a `waitpid` status.
pub fn shell_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

fn decode_failure(msg: &[u8]) -> io::Error {
    match msg {
        [b'E', stage, e0, e1, e2, e3] => {
            let errno = i32::from_le_bytes([*e0, *e1, *e2, *e3]);
            let os = io::Error::from_raw_os_error(errno);
            let what = Stage::from_u8(*stage).map_or("setting up the sandbox", Stage::describe);
            let hint = match (Stage::from_u8(*stage), errno) {
                (Some(Stage::Unshare), libc::EPERM) | (Some(Stage::UserMap), libc::EPERM) => {
                    " (unprivileged user namespaces may be disabled: see kernel.unprivileged_userns_clone / user.max_user_namespaces)"
                }
                (Some(Stage::Tap), libc::ENOENT) => " (no /dev/net/tun)",
                _ => "",
            };
            io::Error::new(os.kind(), format!("{what}: {os}{hint}"))
        }
        _ => io::Error::other("sandbox child ended before setting up"),
    }
}

fn kill_and_reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: signalling and reaping our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        while libc::waitpid(pid, &mut status, 0) < 0 && *libc::__errno_location() == libc::EINTR {}
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // Close the TAP first (removes the interface), then make sure the
        // command is gone and reaped: nothing is left behind. Closing the
        // socket makes the init kill the command and exit, also when ustack
        // may no longer signal it (a relay that gave up its privileges).
        self.tap = None;
        self.sock = None;
        if self.status.is_none() {
            kill_and_reap(self.pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netmask_from_prefix() {
        assert_eq!(netmask(24), [255, 255, 255, 0]);
        assert_eq!(netmask(0), [0, 0, 0, 0]);
        assert_eq!(netmask(32), [255; 4]);
        assert_eq!(netmask(17), [255, 255, 128, 0]);
    }

    #[test]
    fn resolv_conf_keeps_search_but_not_nameservers() {
        let host = "nameserver 127.0.0.53\nsearch example.com\noptions edns0\n#c\n";
        let r = resolv_conf_for(Ipv4Addr::new(10, 0, 2, 3), None, host);
        assert!(r.contains("nameserver 10.0.2.3\n"));
        assert_eq!(r.matches("nameserver").count(), 1);
        let fd00_3 = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 3);
        let r6 = resolv_conf_for(Ipv4Addr::new(10, 0, 2, 3), Some(fd00_3), host);
        assert!(
            r6.contains("nameserver 10.0.2.3\nnameserver fd00::3\n"),
            "{r6}"
        );
        assert!(!r.contains("127.0.0.53"));
        assert!(r.contains("search example.com\n"));
        assert!(r.contains("options edns0\n"));
    }

    #[test]
    fn shell_codes() {
        // Exit status 7 encodes as 7<<8; killed by SIGKILL as 9.
        assert_eq!(shell_code(7 << 8), 7);
        assert_eq!(shell_code(libc::SIGKILL), 128 + 9);
    }

    #[test]
    fn failure_messages_name_the_step() {
        let e = decode_failure(&[b'E', Stage::Tap as u8, 2, 0, 0, 0]);
        assert!(e.to_string().contains("TAP"), "{e}");
        assert!(e.to_string().contains("/dev/net/tun"), "{e}");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
