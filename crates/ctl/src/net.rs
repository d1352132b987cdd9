//! The control endpoint of a stack run by `ustack_net` (the Rust library,
//! `ustack serve`, `ustack bench`: each stack of its comparison while it is
//! measured; not `bench --scale` or `--cc`).

use std::sync::{Arc, Mutex};

use ustack_net::dev::live::CaptureHub;

use ustack_core::tcp::KeepAlive;
use ustack_net::Net;
use ustack_socket::sysctl::Tunables;

use crate::proto::{DeviceInfo, SocketEntry};
use crate::{counter_names, socket_entry, udp_entry, Control, Provider};

impl Control {
    /// The one call a program built on `ustack_net` makes to be operated
    /// like `ustack serve`: register its stack `net` (whose device is called
    /// `device`) as `name` in mode `net`, so that `ustack ps`, `ss`, `nstat`
    /// and `sysctl --stack NAME` see and tune it from another process while
    /// it runs. Keep the returned [`Control`] alive as long as the stack
    /// should be reachable; dropping it unregisters the name.
    ///
    /// ```no_run
    /// # fn demo(net: &ustack_net::Net) -> Result<(), String> {
    /// let _ctl = ustack_ctl::Control::for_net("my-app", net, "tap0")?;
    /// // ... the program's work; meanwhile: `ustack ss --stack my-app`
    /// # Ok(()) }
    /// ```
    pub fn for_net(name: &str, net: &Net, device: &str) -> Result<Control, String> {
        Control::start(name, "net", Arc::new(NetProvider::new(net.clone(), device)))
    }
}

/// [`Provider`] for a [`Net`]. It holds a handle of the stack: drop the
/// [`Control`](crate::Control) that uses it before expecting the stack to stop.
pub struct NetProvider {
    net: Net,
    device: String,
    /// Keep-alive tunables (what a socket uses once it turns keep-alive on
    /// without its own values).
    keepalive: Mutex<KeepAlive>,
    hub: Option<Arc<CaptureHub>>,
}

impl NetProvider {
    /// Serve `net`, whose device is called `device` (`tap0`, `veth-us`).
    pub fn new(net: Net, device: &str) -> NetProvider {
        NetProvider {
            net,
            device: device.to_string(),
            keepalive: Mutex::new(KeepAlive::default()),
            hub: None,
        }
    }

    /// Serve live captures from `hub` (fed by a
    /// [`Tapped`](ustack_net::dev::live::Tapped) device under the stack).
    pub fn with_capture(mut self, hub: Arc<CaptureHub>) -> NetProvider {
        self.hub = Some(hub);
        self
    }
}

impl Provider for NetProvider {
    fn devices(&self) -> Vec<DeviceInfo> {
        let (c, six) = self.net.with_stack(|s| {
            let six: Vec<String> = s
                .ipv6_addresses()
                .iter()
                .map(|a| format!("{}/{}", a.address, a.prefix_len))
                .collect();
            (s.config().clone(), six)
        });
        let mut addrs = vec![c.addr.to_string()];
        addrs.extend(six);
        vec![DeviceInfo {
            name: self.device.clone(),
            mac: c.mac.to_string(),
            addrs,
            mtu: c.mtu as u32,
        }]
    }

    fn sockets(&self, detail: bool) -> Vec<SocketEntry> {
        let now = self.net.now();
        let (tcp, udp) = self
            .net
            .with_stack(|s| (s.tcp_sockets_detailed(detail), s.udp_sockets_addr()));
        let mut v: Vec<SocketEntry> = tcp
            .iter()
            .map(|(_, t, d)| socket_entry(t, d.as_ref(), now))
            .collect();
        v.extend(udp.iter().map(udp_entry));
        v
    }

    fn counters(&self) -> Vec<(String, u64)> {
        counter_names(&self.net.counters())
    }

    fn tunables(&self) -> Tunables {
        let (tcp, ttl) = self
            .net
            .with_stack(|s| (s.config().tcp.clone(), s.ip_default_ttl()));
        let keepalive = tcp
            .keepalive
            .unwrap_or_else(|| *self.keepalive.lock().unwrap_or_else(|e| e.into_inner()));
        Tunables {
            tcp,
            keepalive,
            // ustack_net's sockets have no send-queue low-water mark: no
            // limit, as Linux's default (a change is refused).
            notsent_lowat: None,
            ip_default_ttl: ttl,
        }
    }

    fn capture_hub(&self) -> Option<Arc<CaptureHub>> {
        self.hub.clone()
    }

    fn set_tunables(&self, t: Tunables) -> Result<(), String> {
        crate::sysctl::check_applicable(&t)?;
        *self.keepalive.lock().unwrap_or_else(|e| e.into_inner()) = t.keepalive;
        let mut tcp = t.tcp;
        if tcp.keepalive.is_some() {
            tcp.keepalive = Some(t.keepalive);
        }
        self.net.with_stack(|s| {
            s.set_tcp_config(tcp);
            // Checked above: 1..=255.
            let _ = s.set_ip_default_ttl(t.ip_default_ttl);
        });
        Ok(())
    }
}
