//! Per-run accounting (printed by `--stats`).

use std::fmt;

/// Counters for one relay run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub tcp_opened: u64,
    pub tcp_inbound: u64,
    pub tcp_refused_rst: u64,
    pub tcp_refused_unreachable: u64,
    pub tcp_connect_timeouts: u64,
    pub tcp_closed: u64,
    pub tcp_reset_by_guest: u64,
    pub tcp_reset_by_host: u64,
    pub tcp_idle_reaped: u64,
    pub udp_flows: u64,
    pub udp_inbound_flows: u64,
    pub udp_datagrams_out: u64,
    pub udp_datagrams_in: u64,
    pub udp_idle_reaped: u64,
    pub udp_errors: u64,
    pub dns_queries: u64,
    pub icmp_echo_gateway: u64,
    pub icmp_echo_relayed: u64,
    pub icmp_echo_replies: u64,
    pub icmp_unreachable: u64,
    pub bytes_guest_to_host: u64,
    pub bytes_host_to_guest: u64,
    pub limit_flows: u64,
    pub limit_half_open: u64,
    pub limit_rate: u64,
    pub limit_buffer: u64,
    pub peak_flows: u64,
    pub peak_buffered: u64,
}

impl Stats {
    /// Flows refused because a limit was hit.
    pub fn limits_hit(&self) -> u64 {
        self.limit_flows + self.limit_half_open + self.limit_rate + self.limit_buffer
    }

    /// Every counter with an `nstat`-style name (`RelayTcpOpened`), for
    /// `ustack nstat` on a running `ustack run`.
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("RelayTcpOpened", self.tcp_opened),
            ("RelayTcpInbound", self.tcp_inbound),
            ("RelayTcpRefusedRst", self.tcp_refused_rst),
            ("RelayTcpRefusedUnreachable", self.tcp_refused_unreachable),
            ("RelayTcpConnectTimeouts", self.tcp_connect_timeouts),
            ("RelayTcpClosed", self.tcp_closed),
            ("RelayTcpResetByGuest", self.tcp_reset_by_guest),
            ("RelayTcpResetByHost", self.tcp_reset_by_host),
            ("RelayTcpIdleReaped", self.tcp_idle_reaped),
            ("RelayUdpFlows", self.udp_flows),
            ("RelayUdpInboundFlows", self.udp_inbound_flows),
            ("RelayUdpDatagramsOut", self.udp_datagrams_out),
            ("RelayUdpDatagramsIn", self.udp_datagrams_in),
            ("RelayUdpIdleReaped", self.udp_idle_reaped),
            ("RelayUdpErrors", self.udp_errors),
            ("RelayDnsQueries", self.dns_queries),
            ("RelayIcmpEchoGateway", self.icmp_echo_gateway),
            ("RelayIcmpEchoRelayed", self.icmp_echo_relayed),
            ("RelayIcmpEchoReplies", self.icmp_echo_replies),
            ("RelayIcmpUnreachable", self.icmp_unreachable),
            ("RelayBytesGuestToHost", self.bytes_guest_to_host),
            ("RelayBytesHostToGuest", self.bytes_host_to_guest),
            ("RelayLimitFlows", self.limit_flows),
            ("RelayLimitHalfOpen", self.limit_half_open),
            ("RelayLimitRate", self.limit_rate),
            ("RelayLimitBuffer", self.limit_buffer),
            ("RelayPeakFlows", self.peak_flows),
            ("RelayPeakBuffered", self.peak_buffered),
        ]
    }
}

impl Stats {
    /// Set the counter with `nstat`-style name `name` (as [`Stats::named`]
    /// gives it); false if there is none.
    pub fn set_named(&mut self, name: &str, value: u64) -> bool {
        let field = match name {
            "RelayTcpOpened" => &mut self.tcp_opened,
            "RelayTcpInbound" => &mut self.tcp_inbound,
            "RelayTcpRefusedRst" => &mut self.tcp_refused_rst,
            "RelayTcpRefusedUnreachable" => &mut self.tcp_refused_unreachable,
            "RelayTcpConnectTimeouts" => &mut self.tcp_connect_timeouts,
            "RelayTcpClosed" => &mut self.tcp_closed,
            "RelayTcpResetByGuest" => &mut self.tcp_reset_by_guest,
            "RelayTcpResetByHost" => &mut self.tcp_reset_by_host,
            "RelayTcpIdleReaped" => &mut self.tcp_idle_reaped,
            "RelayUdpFlows" => &mut self.udp_flows,
            "RelayUdpInboundFlows" => &mut self.udp_inbound_flows,
            "RelayUdpDatagramsOut" => &mut self.udp_datagrams_out,
            "RelayUdpDatagramsIn" => &mut self.udp_datagrams_in,
            "RelayUdpIdleReaped" => &mut self.udp_idle_reaped,
            "RelayUdpErrors" => &mut self.udp_errors,
            "RelayDnsQueries" => &mut self.dns_queries,
            "RelayIcmpEchoGateway" => &mut self.icmp_echo_gateway,
            "RelayIcmpEchoRelayed" => &mut self.icmp_echo_relayed,
            "RelayIcmpEchoReplies" => &mut self.icmp_echo_replies,
            "RelayIcmpUnreachable" => &mut self.icmp_unreachable,
            "RelayBytesGuestToHost" => &mut self.bytes_guest_to_host,
            "RelayBytesHostToGuest" => &mut self.bytes_host_to_guest,
            "RelayLimitFlows" => &mut self.limit_flows,
            "RelayLimitHalfOpen" => &mut self.limit_half_open,
            "RelayLimitRate" => &mut self.limit_rate,
            "RelayLimitBuffer" => &mut self.limit_buffer,
            "RelayPeakFlows" => &mut self.peak_flows,
            "RelayPeakBuffered" => &mut self.peak_buffered,
            _ => return false,
        };
        *field = value;
        true
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "ustack relay statistics")?;
        writeln!(
            f,
            "  tcp:   {} opened ({} inbound), {} closed, refused {} rst / {} unreachable, {} connect timeouts",
            self.tcp_opened, self.tcp_inbound, self.tcp_closed, self.tcp_refused_rst,
            self.tcp_refused_unreachable, self.tcp_connect_timeouts
        )?;
        writeln!(
            f,
            "         resets: {} by guest, {} by host; {} idle reaped",
            self.tcp_reset_by_guest, self.tcp_reset_by_host, self.tcp_idle_reaped
        )?;
        writeln!(
            f,
            "  udp:   {} flows ({} inbound), {} datagrams out, {} in, {} dns queries, {} errors, {} idle reaped",
            self.udp_flows, self.udp_inbound_flows, self.udp_datagrams_out, self.udp_datagrams_in,
            self.dns_queries, self.udp_errors, self.udp_idle_reaped
        )?;
        writeln!(
            f,
            "  icmp:  {} echo to gateway, {} relayed, {} replies, {} unreachable",
            self.icmp_echo_gateway,
            self.icmp_echo_relayed,
            self.icmp_echo_replies,
            self.icmp_unreachable
        )?;
        writeln!(
            f,
            "  bytes: {} guest->host, {} host->guest",
            self.bytes_guest_to_host, self.bytes_host_to_guest
        )?;
        writeln!(
            f,
            "  limits hit: {} flows, {} half-open, {} rate, {} buffer; peak {} flows, {} bytes buffered",
            self.limit_flows, self.limit_half_open, self.limit_rate, self.limit_buffer,
            self.peak_flows, self.peak_buffered
        )
    }
}

/// A memory field of `/proc/self/status` (`VmRSS:`, `VmHWM:`, ...) in KiB;
/// 0 if unreadable. For reports of a relay process's memory.
pub fn self_status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod named_tests {
    use super::Stats;

    #[test]
    fn every_named_counter_can_be_set_back() {
        let mut s = Stats::default();
        for (i, (n, _)) in Stats::default().named().into_iter().enumerate() {
            assert!(s.set_named(n, i as u64 + 1), "{n}");
        }
        let back: Vec<u64> = s.named().into_iter().map(|(_, v)| v).collect();
        assert_eq!(back, (1..=back.len() as u64).collect::<Vec<_>>());
        assert!(!s.set_named("RelayNoSuchCounter", 1));
    }
}
