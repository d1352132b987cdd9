//! ustack-sandbox: run a command in a network namespace whose only interface
//! is a TAP device held by ustack (the guest side of `ustack run`).
//!
//! * [`Sandbox::spawn`] forks a child that unshares a network and mount
//!   namespace (and a user namespace when not root, like `unshare -rn`),
//!   brings loopback up, creates the TAP (default `eth0`, 10.0.2.15/24, default
//!   route via 10.0.2.2, MTU 1500), bind-mounts a private `/etc/resolv.conf`
//!   naming 10.0.2.3, and passes the TAP descriptor back with `SCM_RIGHTS`.
//! * [`Sandbox::start`] lets the command run: the child, now the sandbox's
//!   init, forks and `exec`s it, delivers the signals ustack forwards and
//!   exits with its status, so ustack may give up the privileges to signal
//!   the command itself. [`Sandbox::exit_fd`] is a pidfd for the relay's
//!   epoll loop; [`Sandbox::wait`] gives the exit code shell-style (signal
//!   N → 128+N).
//! * [`signals::forward_to_sandbox`] forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT
//!   through the init ([`signals::forward_to`]: to a process with kill(2)).
//! * [`attach::open_tap_in_netns`] serves an existing namespace.
//!
//! Dropping the [`Sandbox`] kills and reaps the command if still running and
//! closes the TAP; the namespace disappears with its last process.

pub mod attach;
mod netif;
pub mod signals;
mod spawn;
mod sys;
mod tapfd;

pub use netif::encode_ifname;
pub use spawn::{resolv_conf_for, shell_code, Sandbox, SandboxConfig, SandboxIpv6, UserNs};
pub use tapfd::TapFd;
