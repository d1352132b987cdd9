//! SNMP-style counters with the names Linux uses in `/proc/net/snmp` (and a few
//! `netstat`-like extras), so `ustack nstat` reads like `nstat -a` does.

use crate::tcp::TcpCounters;

macro_rules! counter_group {
    ($(#[$m:meta])* $name:ident, $group:literal, { $($(#[$fm:meta])* $field:ident),* $(,)? }) => {
        $(#[$m])*
        #[allow(non_snake_case)]
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct $name {
            $($(#[$fm])* pub $field: u64,)*
        }
        impl $name {
            /// Group name as printed by `nstat` (e.g. "Ip").
            pub const GROUP: &'static str = $group;
            /// `(name, value)` for every counter, in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                [$((stringify!($field), self.$field)),*].into_iter()
            }
        }
    };
}

counter_group!(
    /// IPv4 counters (`Ip:` in `/proc/net/snmp`).
    IpCounters, "Ip", {
    InReceives, InHdrErrors, InAddrErrors, InUnknownProtos, InDiscards, InDelivers,
    OutRequests, OutDiscards, OutNoRoutes, ReasmTimeout, ReasmReqds, ReasmOKs,
    ReasmFails, FragOKs, FragFails, FragCreates,
    /// Extra (IpExt-like): IPv4 header checksum failures (also counted in InHdrErrors).
    InCsumErrors,
    /// Extra (IpExt-like): frames carrying a destination that is not ours.
    InNotForUs,
});

counter_group!(
    /// ICMP counters (`Icmp:` in `/proc/net/snmp`).
    IcmpCounters, "Icmp", {
    InMsgs, InErrors, InCsumErrors, InDestUnreachs, InTimeExcds, InEchos, InEchoReps,
    OutMsgs, OutErrors, OutDestUnreachs, OutTimeExcds, OutEchos, OutEchoReps,
    /// Extra: ICMP errors not sent because the token bucket was empty.
    OutRateLimited,
});

counter_group!(
    /// UDP counters (`Udp:` in `/proc/net/snmp`).
    UdpCounters, "Udp", {
    InDatagrams, NoPorts, InErrors, OutDatagrams, RcvbufErrors, SndbufErrors, InCsumErrors,
});

counter_group!(
    /// IPv6 counters (`Ip6*` in `/proc/net/snmp6`).
    Ip6Counters, "Ip6", {
    InReceives, InHdrErrors, InTooBigErrors, InNoRoutes, InAddrErrors, InUnknownProtos,
    InTruncatedPkts, InDiscards, InDelivers, OutRequests, OutDiscards, OutNoRoutes,
    ReasmReqds, ReasmFails, InMcastPkts, OutMcastPkts,
    ReasmTimeout, ReasmOKs, FragOKs, FragFails, FragCreates,
    /// Extra: our addresses found in use by another node during duplicate
    /// address detection (RFC 4862 5.4.5; not used).
    DadDuplicates,
});

counter_group!(
    /// ICMPv6 counters (`Icmp6*` in `/proc/net/snmp6`).
    Icmp6Counters, "Icmp6", {
    InMsgs, InErrors, OutMsgs, OutErrors, InCsumErrors,
    InDestUnreachs, InPktTooBigs, InTimeExcds, InParmProblems, InEchos, InEchoReplies,
    InGroupMembQueries, InRouterSolicits, InRouterAdvertisements, InNeighborSolicits,
    InNeighborAdvertisements, InRedirects, InMLDv2Reports,
    OutDestUnreachs, OutParmProblems, OutEchos, OutEchoReplies, OutNeighborSolicits,
    OutNeighborAdvertisements, OutRouterAdvertisements, OutTimeExcds, OutRouterSolicits,
    OutMLDv2Reports,
    /// Extra: ICMPv6 errors not sent because the token bucket was empty.
    OutRateLimited,
});

counter_group!(
    /// UDP over IPv6 counters (`Udp6*` in `/proc/net/snmp6`).
    Udp6Counters, "Udp6", {
    InDatagrams, NoPorts, InErrors, OutDatagrams, RcvbufErrors, SndbufErrors, InCsumErrors,
});

counter_group!(
    /// The DHCPv4 server's counters (ustack extras, `addr_services`):
    /// messages by type, `InErrors` = unparseable, `InDiscards` = parsed
    /// but not served (relayed, foreign or missing fields, unknown type),
    /// `NoAddrs` = the pool was exhausted.
    DhcpCounters, "Dhcp", {
    InDiscovers, InRequests, InDeclines, InReleases, InInforms, InErrors, InDiscards,
    OutOffers, OutAcks, OutNaks, NoAddrs,
});

counter_group!(
    /// The DHCPv6 server's counters (ustack extras, `addr_services`), as
    /// for DHCPv4.
    Dhcp6Counters, "Dhcp6", {
    InSolicits, InRequests, InConfirms, InRenews, InRebinds, InReleases, InDeclines,
    InInformationRequests, InErrors, InDiscards, OutAdvertises, OutReplies,
});

counter_group!(
    /// Link-layer and ARP counters (ustack extras; no `/proc/net/snmp` equivalent).
    LinkCounters, "Link", {
    InFrames, OutFrames, InMalformed, InNotForUs, InUnknownEthertype,
    ArpInRequests, ArpInReplies, ArpOutRequests, ArpOutReplies, ArpInvalid,
    ArpConflicts, ArpResolved, ArpFailed, ArpQueueDrops, ArpUnresolvedDiscards,
    ArpCacheFull, ArpContradictions, ArpRevalidations,
    /// Virtio-net headers refused (malformed, or an offload never
    /// negotiated): the frame is dropped.
    InVnetErrors,
    /// GSO super-frames received (each stands for many segments) and sent.
    InGsoFrames, OutGsoFrames,
    /// Frames sent with their TCP payload by reference to the send buffer
    /// (zero-copy transmit, `Stack::zero_copy_tx`).
    OutZeroCopyFrames,
    /// Software GRO (`Stack::receive_burst`): TCP segments built from two
    /// or more received frames, and the frames that went into them (Linux
    /// reports the same pair for device GRO as `rx-hw-gro-packets` /
    /// `rx-hw-gro-wire-packets`).
    InGroPackets, InGroWirePackets,
});

counter_group!(
    /// Listener counters kept by the socket table (`TcpExt:` in `/proc/net/netstat`).
    TcpStackCounters, "TcpExt", {
    ListenOverflows, ListenDrops, TCPReqQFullDrop,
    /// A SYN found the SYN queue full (or cookies are always on) and is
    /// answered with a SYN cookie (counted with `SyncookiesSent`).
    TCPReqQFullDoCookies,
    /// SYN-ACKs carrying a SYN cookie.
    SyncookiesSent,
    /// Final ACKs whose cookie was valid.
    SyncookiesRecv,
    /// ACKs to a listener that recently sent cookies, whose cookie was not
    /// valid (forged, or older than two minutes); answered with RST.
    SyncookiesFailed,
});

/// The counters of [`TcpCounters`] that Linux keeps in its TCP MIB (the
/// `Tcp:` line of `/proc/net/snmp`); every other one is a `TcpExt:`
/// counter of `/proc/net/netstat` (`TcpExtTCPTimeouts`, `TcpExtDelayedACKs`).
const TCP_MIB: &[&str] = &[
    "ActiveOpens",
    "PassiveOpens",
    "AttemptFails",
    "EstabResets",
    "CurrEstab",
    "InSegs",
    "OutSegs",
    "RetransSegs",
    "InErrs",
    "OutRsts",
    "InCsumErrors",
];

/// The group Linux's `nstat` names TCP counter `name` under.
fn tcp_group(name: &str) -> &'static str {
    if TCP_MIB.contains(&name) {
        "Tcp"
    } else {
        TcpStackCounters::GROUP
    }
}

/// All counters of one stack.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    pub ip: IpCounters,
    pub icmp: IcmpCounters,
    pub udp: UdpCounters,
    pub tcp: TcpCounters,
    pub tcp_ext: TcpStackCounters,
    pub link: LinkCounters,
    pub ip6: Ip6Counters,
    pub icmp6: Icmp6Counters,
    pub udp6: Udp6Counters,
    /// The IPv6 neighbour cache's counters (Neighbor Discovery, RFC 4861),
    /// kept by the same code as ARP's: printed as `Ndisc*` without the
    /// `Arp` prefix (`NdiscResolved`, `NdiscFailed`, `NdiscInvalid`, ...).
    pub nd: LinkCounters,
    /// The address services' servers (`Stack::set_address_services`).
    pub dhcp: DhcpCounters,
    pub dhcp6: Dhcp6Counters,
}

impl Counters {
    /// Every counter as `(group, name, value)`, grouped like `nstat` prints them.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &'static str, u64)> + '_ {
        let ip = self.ip.iter().map(|(n, v)| (IpCounters::GROUP, n, v));
        let icmp = self.icmp.iter().map(|(n, v)| (IcmpCounters::GROUP, n, v));
        let udp = self.udp.iter().map(|(n, v)| (UdpCounters::GROUP, n, v));
        let tcp = self
            .tcp
            .counters_list()
            .into_iter()
            .map(|(n, v)| (tcp_group(n), n, v));
        let ext = self
            .tcp_ext
            .iter()
            .map(|(n, v)| (TcpStackCounters::GROUP, n, v));
        let link = self.link.iter().map(|(n, v)| (LinkCounters::GROUP, n, v));
        let ip6 = self.ip6.iter().map(|(n, v)| (Ip6Counters::GROUP, n, v));
        let icmp6 = self.icmp6.iter().map(|(n, v)| (Icmp6Counters::GROUP, n, v));
        let udp6 = self.udp6.iter().map(|(n, v)| (Udp6Counters::GROUP, n, v));
        let nd = self
            .nd
            .iter()
            .filter_map(|(n, v)| n.strip_prefix("Arp").map(|n| ("Ndisc", n, v)));
        let dhcp = self.dhcp.iter().map(|(n, v)| (DhcpCounters::GROUP, n, v));
        let dhcp6 = self.dhcp6.iter().map(|(n, v)| (Dhcp6Counters::GROUP, n, v));
        ip.chain(icmp)
            .chain(udp)
            .chain(tcp)
            .chain(ext)
            .chain(link)
            .chain(ip6)
            .chain(icmp6)
            .chain(udp6)
            .chain(nd)
            .chain(dhcp)
            .chain(dhcp6)
    }

    /// Look one counter up by group and name (e.g. `("Ip", "ReasmOKs")`).
    pub fn get(&self, group: &str, name: &str) -> Option<u64> {
        self.iter()
            .find(|(g, n, _)| *g == group && *n == name)
            .map(|(_, _, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `Tcp:` line of Linux's `/proc/net/snmp` (RFC 4022's MIB): every
    /// other TCP counter is in `TcpExt:` (`/proc/net/netstat`), so nstat
    /// prints `TcpExtTCPTimeouts`, never `TcpTCPTimeouts`.
    const LINUX_TCP_MIB: &[&str] = &[
        "RtoAlgorithm",
        "RtoMin",
        "RtoMax",
        "MaxConn",
        "ActiveOpens",
        "PassiveOpens",
        "AttemptFails",
        "EstabResets",
        "CurrEstab",
        "InSegs",
        "OutSegs",
        "RetransSegs",
        "InErrs",
        "OutRsts",
        "InCsumErrors",
    ];

    #[test]
    fn tcp_counters_outside_the_mib_are_tcpext_as_in_linux() {
        let c = Counters::default();
        let names: Vec<String> = c.iter().map(|(g, n, _)| format!("{g}{n}")).collect();
        for (g, n, _) in c.iter() {
            if g == "Tcp" {
                assert!(LINUX_TCP_MIB.contains(&n), "Tcp{n} is TcpExt{n} in Linux");
            }
        }
        for want in [
            "TcpActiveOpens",
            "TcpRetransSegs",
            "TcpExtTCPTimeouts",
            "TcpExtDelayedACKs",
            "TcpExtPAWSEstab",
            "TcpExtTCPKeepAlive",
            "TcpExtOutOfWindowIcmps",
            "TcpExtListenDrops",
        ] {
            assert!(names.iter().any(|n| n == want), "no {want} in {names:?}");
        }
        assert_eq!(c.get("TcpExt", "TCPTimeouts"), Some(0));
        assert_eq!(c.get("Tcp", "TCPTimeouts"), None);
    }
}
