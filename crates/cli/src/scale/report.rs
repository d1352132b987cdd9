//! What `ustack bench --scale` prints and draws: the tables (or JSON), the
//! goals of issue 11 with ustack's and the kernel's figures, and one SVG
//! plot per measurement.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use ustack_plot::{Axis, LinePlot, Series};

use super::held::{flatness_before, Established, EstablishedSide, Flows, FlowsSide, Opening};
use super::sweeps::{ratio, ConnPoint, ConnRow, PingPoint, PingRow, CONN_BYTES};

#[derive(Serialize, Default, Debug)]
pub struct Report {
    pub point_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ping: Option<Vec<PingRow>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conns: Option<Vec<ConnRow>>,
    /// How ustack serve was told its connection limit for the sweep.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conns_max_connections: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub established: Option<Established>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_flows: Option<Flows>,
    pub goals: Vec<Goal>,
    /// Parts that could not run at all, and why.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, String>,
    /// SVG files written.
    pub plots: Vec<String>,
}

impl Report {
    /// Whether every part that ran measured both sides everywhere.
    pub fn complete(&self) -> bool {
        let pings = self
            .ping
            .iter()
            .flatten()
            .all(|r| r.ustack.is_some() && r.kernel.is_some());
        let conns = self
            .conns
            .iter()
            .flatten()
            .all(|r| r.ustack.is_some() && r.kernel.is_some());
        let est = self
            .established
            .iter()
            .all(|e| e.ustack.is_some() && e.kernel.is_some());
        let run = self
            .run_flows
            .iter()
            .all(|f| f.ustack.is_some() && f.kernel.is_some());
        self.errors.is_empty() && pings && conns && est && run
    }
}

/// A goal of issue 11: the figure it is about for both sides, and whether
/// ustack meets it.
#[derive(Serialize, Debug)]
pub struct Goal {
    pub part: &'static str,
    pub goal: String,
    pub ustack: Option<f64>,
    pub kernel: Option<f64>,
    /// None when ustack's figure is missing.
    pub met: Option<bool>,
}

/// A goal for ustack, with the (ustack, kernel) figures it is about.
fn goal(
    part: &'static str,
    text: impl Into<String>,
    (ustack, kernel): (Option<f64>, Option<f64>),
    ok: impl Fn(f64) -> bool,
) -> Goal {
    Goal {
        part,
        goal: text.into(),
        ustack,
        kernel,
        met: ustack.map(ok),
    }
}

/// A figure of both sides.
fn both<T>(
    u: &Option<T>,
    k: &Option<T>,
    f: impl Fn(&T) -> Option<f64>,
) -> (Option<f64>, Option<f64>) {
    (u.as_ref().and_then(&f), k.as_ref().and_then(&f))
}

fn held_fraction(o: &Opening) -> Option<f64> {
    (o.requested > 0).then(|| o.alive as f64 / o.requested as f64)
}

pub fn goals(r: &Report) -> Vec<Goal> {
    let mut g = Vec::new();
    if let Some(rows) = r.ping.as_ref().filter(|r| r.len() >= 2) {
        let (first, last) = (&rows[0], &rows[rows.len() - 1]);
        let growth = |side: fn(&PingRow) -> Option<&PingPoint>| {
            ratio(
                side(last).map(|p| p.mean_us),
                side(first).map(|p| p.mean_us),
            )
        };
        let text = format!(
            "mean RTT at {} pingers / at {} <= 2 (GoNet 3.1x, tapip 44x)",
            last.pingers, first.pingers
        );
        let figures = (growth(|r| r.ustack.as_ref()), growth(|r| r.kernel.as_ref()));
        g.push(goal("ping", text, figures, |x| x <= 2.0));
    }
    if let Some(rows) = &r.conns {
        let ratios: Vec<f64> = rows.iter().filter_map(|r| r.ratio).collect();
        let lowest = (ratios.len() == rows.len() && !rows.is_empty())
            .then(|| ratios.iter().copied().fold(f64::MAX, f64::min));
        let text = "connections/s ustack/kernel >= 0.5 at every point (lowest)";
        g.push(goal("conns", text, (lowest, None), |x| x >= 0.5));
    }
    if let Some(e) = &r.established {
        let (u, k) = (&e.ustack, &e.kernel);
        let step = u.as_ref().or(k.as_ref()).map_or(0, |s| s.opening.step);
        let text = format!("{} connections held (alive / N) = 1", e.connections);
        g.push(goal(
            "established",
            text,
            both(u, k, |s| held_fraction(&s.opening)),
            |x| x >= 1.0,
        ));
        let text = format!("last {step} take <= 1.5x the first {step}");
        g.push(goal(
            "established",
            text,
            both(u, k, |s| s.opening.last_over_first),
            |x| x <= 1.5,
        ));
        let text = "server RSS per idle connection <= 4096 bytes (kernel: process only)";
        g.push(goal(
            "established",
            text,
            both(u, k, |s| s.rss_per_connection),
            |x| x <= 4096.0,
        ));
        let text = "RR mean with N idle / with none <= 1.2";
        g.push(goal("established", text, both(u, k, |s| s.rr_ratio), |x| {
            x <= 1.2
        }));
    }
    if let Some(fl) = &r.run_flows {
        let (u, k) = (&fl.ustack, &fl.kernel);
        let text = format!("{} flows held (alive / N) = 1", fl.flows);
        g.push(goal(
            "run",
            text,
            both(u, k, |s| held_fraction(&s.opening)),
            |x| x >= 1.0,
        ));
        let text = "connect time per step flat: slowest / fastest <= 1.5";
        g.push(goal(
            "run",
            text,
            both(u, k, |s| s.opening.max_over_min),
            |x| x <= 1.5,
        ));
        if fl.port_cliff < fl.flows {
            let text = format!(
                "the same over the steps up to {} flows (Linux's connect() port cliff)",
                fl.port_cliff
            );
            g.push(goal(
                "run",
                text,
                both(u, k, |s| flatness_before(&s.opening, fl.port_cliff)),
                |x| x <= 1.5,
            ));
        }
        let text = "relay CPU with all flows idle, % of a core <= 1";
        let cpu = both(u, k, |s| {
            Some(s.relay_cpu_seconds? / s.idle_seconds * 100.0)
        });
        g.push(goal("run", text, cpu, |x| x <= 1.0));
    }
    g
}

fn f(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.prec$}"),
        _ => "-".into(),
    }
}

fn mb(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

pub fn tables(r: &Report) -> String {
    let mut s = String::new();
    if let Some(rows) = &r.ping {
        let _ = writeln!(
            s,
            "\nPing sweep: concurrent pingers (ICMP echo: request, reply, 200 ms pause; {} s per point)",
            r.point_seconds
        );
        let _ = writeln!(
            s,
            "{:>8} | {:>11} {:>9} {:>6} | {:>11} {:>9} {:>6} | {:>10} {:>9}",
            "pingers",
            "ustack mean",
            "p99",
            "lost",
            "kernel mean",
            "p99",
            "lost",
            "ratio mean",
            "ratio p99"
        );
        for row in rows {
            let side = |p: &Option<PingPoint>| match p {
                Some(p) => format!("{:>11.1} {:>9.1} {:>6}", p.mean_us, p.p99_us, p.lost),
                None => format!("{:>11} {:>9} {:>6}", "failed", "-", "-"),
            };
            let _ = writeln!(
                s,
                "{:>8} | {} | {} | {:>10} {:>9}",
                row.pingers,
                side(&row.ustack),
                side(&row.kernel),
                f(row.ratio_mean, 2),
                f(row.ratio_p99, 2)
            );
        }
        let _ = writeln!(s, "(RTT in µs; ratio = ustack / kernel)");
    }
    if let Some(rows) = &r.conns {
        let _ = writeln!(
            s,
            "\nConnection sweep: concurrent clients that connect, send {} KB to discard and close ({} s per point)",
            CONN_BYTES / 1024,
            r.point_seconds
        );
        if let Some(note) = &r.conns_max_connections {
            let _ = writeln!(s, "ustack serve: {note}");
        }
        let _ = writeln!(
            s,
            "{:>8} | {:>13} {:>8} {:>7} | {:>13} {:>8} {:>7} | {:>6}",
            "clients",
            "ustack conn/s",
            "Mbit/s",
            "failed",
            "kernel conn/s",
            "Mbit/s",
            "failed",
            "ratio"
        );
        for row in rows {
            let side = |p: &Option<ConnPoint>| match p {
                Some(p) => format!(
                    "{:>13.0} {:>8.1} {:>7}",
                    p.conns_per_s, p.mbit_per_s, p.failed
                ),
                None => format!("{:>13} {:>8} {:>7}", "failed", "-", "-"),
            };
            let _ = writeln!(
                s,
                "{:>8} | {} | {} | {:>6}",
                row.clients,
                side(&row.ustack),
                side(&row.kernel),
                f(row.ratio, 2)
            );
        }
        let _ = writeln!(
            s,
            "(ratio = ustack / kernel connections per second; failures by kind in --json)"
        );
    }
    if let Some(e) = &r.established {
        established_table(&mut s, e);
    }
    if let Some(fl) = &r.run_flows {
        flows_table(&mut s, fl);
    }
    if !r.goals.is_empty() {
        let _ = writeln!(s, "\nGoals (issue 11), ustack; the kernel for reference");
        for g in &r.goals {
            let met = match g.met {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "n/a",
            };
            let _ = writeln!(
                s,
                "  {:<12} {:<66} ustack {:>8}  kernel {:>8}  {met}",
                g.part,
                g.goal,
                f(g.ustack, 2),
                f(g.kernel, 2)
            );
        }
    }
    for (part, e) in &r.errors {
        let _ = writeln!(s, "\n{part}: could not run: {e}");
    }
    if !r.plots.is_empty() {
        let _ = writeln!(s, "\nplots: {}", r.plots.join(", "));
    }
    s
}

/// Rows of a two-column (ustack, kernel) table.
fn two_col(s: &mut String, rows: &[(String, String, String)]) {
    for (label, u, k) in rows {
        let _ = writeln!(s, "  {label:<38} {u:>14} {k:>14}");
    }
}

fn opening_rows<T>(
    u: Option<&T>,
    k: Option<&T>,
    o: fn(&T) -> &Opening,
    unit: &str,
) -> Vec<(String, String, String)> {
    let both = |g: &dyn Fn(&Opening) -> String| {
        (
            u.map_or("-".into(), |x| g(o(x))),
            k.map_or("-".into(), |x| g(o(x))),
        )
    };
    let step = u.or(k).map_or(0, |x| o(x).step);
    let mut rows = Vec::new();
    let mut push = |label: String, g: &dyn Fn(&Opening) -> String| {
        let (a, b) = both(g);
        rows.push((label, a, b));
    };
    push("opened / failed".into(), &|o| {
        format!("{} / {}", o.opened, o.failed)
    });
    push("alive when released / dropped".into(), &|o| {
        format!("{} / {}", o.alive, o.dropped)
    });
    push("time to open all, s".into(), &|o| {
        format!("{:.2}", o.seconds)
    });
    push(format!("first {step} {unit}, s"), &|o| {
        f(o.step_seconds.first().copied(), 3)
    });
    push(format!("last {step} {unit}, s"), &|o| {
        f(o.step_seconds.last().copied(), 3)
    });
    push("last / first".into(), &|o| f(o.last_over_first, 2));
    push("slowest / fastest step".into(), &|o| f(o.max_over_min, 2));
    rows
}

fn notes_of(s: &mut String, side: &str, o: &Opening) {
    if !o.errors.is_empty() {
        let _ = writeln!(s, "  {side} failures: {:?}", o.errors);
    }
    for g in &o.gave_up {
        let _ = writeln!(s, "  {side} gave up: {g}");
    }
}

fn established_table(s: &mut String, e: &Established) {
    let (u, k) = (e.ustack.as_ref(), e.kernel.as_ref());
    let _ = writeln!(
        s,
        "\nEstablished: {} idle connections to echo (port 7); ustack serve: {}",
        e.connections, e.max_connections
    );
    let _ = writeln!(s, "  {:<38} {:>14} {:>14}", "", "ustack", "kernel");
    let mut rows = opening_rows(u, k, |x: &EstablishedSide| &x.opening, "connections");
    let col =
        |g: &dyn Fn(&EstablishedSide) -> String| (u.map_or("-".into(), g), k.map_or("-".into(), g));
    let mut push = |label: &str, g: &dyn Fn(&EstablishedSide) -> String| {
        let (a, b) = col(g);
        rows.push((label.to_string(), a, b));
    };
    push("server processes", &|x| x.server_processes.to_string());
    push("server RSS before, MiB", &|x| {
        format!("{:.1}", mb(x.rss_before))
    });
    push("server RSS with all open, MiB", &|x| {
        format!("{:.1}", mb(x.rss_after))
    });
    push("RSS per connection, bytes", &|x| f(x.rss_per_connection, 0));
    push("1-byte RR mean, none idle, µs", &|x| {
        f(x.rr_idle_none.as_ref().map(|r| r.mean_us), 1)
    });
    push("1-byte RR p99, none idle, µs", &|x| {
        f(x.rr_idle_none.as_ref().map(|r| r.p99_us), 1)
    });
    push("1-byte RR mean, all idle, µs", &|x| {
        f(x.rr_idle_all.as_ref().map(|r| r.mean_us), 1)
    });
    push("1-byte RR p99, all idle, µs", &|x| {
        f(x.rr_idle_all.as_ref().map(|r| r.p99_us), 1)
    });
    push("RR mean all idle / none idle", &|x| f(x.rr_ratio, 2));
    two_col(s, &rows);
    for (name, side) in [("ustack", u), ("kernel", k)] {
        if let Some(x) = side {
            let steps: Vec<String> = x
                .opening
                .step_seconds
                .iter()
                .map(|&t| ustack_plot::fmt_tick(t))
                .collect();
            let _ = writeln!(
                s,
                "  {name} seconds per {}: {}",
                x.opening.step,
                steps.join(" ")
            );
            notes_of(s, name, &x.opening);
            for n in &x.rr_errors {
                let _ = writeln!(s, "  {name} request/response {n}");
            }
        }
    }
    for (name, err) in [("ustack", &e.ustack_error), ("kernel", &e.kernel_error)] {
        if let Some(err) = err {
            let _ = writeln!(s, "  {name}: failed: {err}");
        }
    }
    let _ = writeln!(
        s,
        "  (kernel RSS is its server processes' only: the kernel's socket memory lives in the kernel, not in the process)"
    );
}

fn flows_table(s: &mut String, fl: &Flows) {
    let (u, k) = (fl.ustack.as_ref(), fl.kernel.as_ref());
    let _ = writeln!(
        s,
        "\nustack run flows: {} connections opened one after another from the sandbox (kernel: from a namespace over veth) and held",
        fl.flows
    );
    let _ = writeln!(s, "  {:<38} {:>14} {:>14}", "", "ustack run", "kernel");
    let mut rows = opening_rows(u, k, |x: &FlowsSide| &x.opening, "flows");
    let col = |g: &dyn Fn(&FlowsSide) -> String| (u.map_or("-".into(), g), k.map_or("-".into(), g));
    let mut push = |label: &str, g: &dyn Fn(&FlowsSide) -> String| {
        let (a, b) = col(g);
        rows.push((label.to_string(), a, b));
    };
    push("idle window, s", &|x| format!("{:.1}", x.idle_seconds));
    push("relay CPU while idle, s", &|x| f(x.relay_cpu_seconds, 3));
    push("relay CPU while idle, % of a core", &|x| {
        f(x.relay_cpu_seconds.map(|c| c / x.idle_seconds * 100.0), 2)
    });
    push("relay RSS, MiB", &|x| f(x.relay_rss.map(mb), 1));
    push("host server CPU while idle, s", &|x| {
        format!("{:.3}", x.server_cpu_seconds)
    });
    two_col(s, &rows);
    for (name, side) in [("ustack", u), ("kernel", k)] {
        if let Some(x) = side {
            let steps: Vec<String> = x
                .opening
                .step_seconds
                .iter()
                .map(|&t| ustack_plot::fmt_tick(t * 1000.0))
                .collect();
            let _ = writeln!(s, "  {name} ms per {}: {}", x.opening.step, steps.join(" "));
            notes_of(s, name, &x.opening);
        }
    }
    for (name, err) in [("ustack", &fl.ustack_error), ("kernel", &fl.kernel_error)] {
        if let Some(err) = err {
            let _ = writeln!(s, "  {name}: failed: {err}");
        }
    }
    let _ = writeln!(
        s,
        "  (the kernel has no relay process: its work is not a process's CPU time)"
    );
}

/// (x, y) points: step k at k * step connections, y = f(seconds).
fn step_points(o: &Opening, y: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
    o.step_seconds
        .iter()
        .enumerate()
        .map(|(i, &t)| (((i + 1) * o.step) as f64, y(t)))
        .collect()
}

fn sweep_axis(label: &str, points: impl Iterator<Item = usize>) -> Axis {
    Axis::log(label).with_ticks(points.map(|n| (n as f64, n.to_string())).collect())
}

/// The plots of the parts that ran.
pub fn plots(r: &Report) -> Vec<(&'static str, LinePlot)> {
    let mut v = Vec::new();
    if let Some(rows) = &r.ping {
        let pts = |side: fn(&PingRow) -> Option<&PingPoint>, y: fn(&PingPoint) -> f64| {
            rows.iter()
                .filter_map(|r| side(r).map(|p| (r.pingers as f64, y(p))))
                .collect()
        };
        v.push((
            "scale-ping.svg",
            LinePlot {
                title: "Ping RTT vs concurrent pingers (200 ms between exchanges)".into(),
                x: sweep_axis("concurrent pingers", rows.iter().map(|r| r.pingers)),
                y: Axis::linear("RTT (µs)"),
                series: vec![
                    Series::new("ustack mean", 0, pts(|r| r.ustack.as_ref(), |p| p.mean_us)),
                    Series::new("ustack p99", 0, pts(|r| r.ustack.as_ref(), |p| p.p99_us)).dashed(),
                    Series::new("kernel mean", 1, pts(|r| r.kernel.as_ref(), |p| p.mean_us)),
                    Series::new("kernel p99", 1, pts(|r| r.kernel.as_ref(), |p| p.p99_us)).dashed(),
                ],
            },
        ));
    }
    if let Some(rows) = &r.conns {
        let pts = |side: fn(&ConnRow) -> Option<&ConnPoint>| {
            rows.iter()
                .filter_map(|r| side(r).map(|p| (r.clients as f64, p.mbit_per_s)))
                .collect()
        };
        v.push((
            "scale-conns.svg",
            LinePlot {
                title: format!(
                    "Connect, send {} KB, close: throughput vs concurrent clients",
                    CONN_BYTES / 1024
                ),
                x: sweep_axis("concurrent clients", rows.iter().map(|r| r.clients)),
                y: Axis::linear("Mbit/s"),
                series: vec![
                    Series::new("ustack", 0, pts(|r| r.ustack.as_ref())),
                    Series::new("kernel", 1, pts(|r| r.kernel.as_ref())),
                ],
            },
        ));
    }
    if let Some(e) = &r.established {
        let step = e
            .ustack
            .as_ref()
            .or(e.kernel.as_ref())
            .map_or(0, |s| s.opening.step);
        v.push((
            "scale-established.svg",
            LinePlot {
                title: format!(
                    "Opening {} idle connections: time per {step}",
                    e.connections
                ),
                x: Axis::linear("connections open"),
                y: Axis::log(format!("seconds per {step} (log)")),
                series: vec![
                    Series::new(
                        "ustack serve",
                        0,
                        e.ustack
                            .as_ref()
                            .map_or(vec![], |s| step_points(&s.opening, |t| t)),
                    ),
                    Series::new(
                        "kernel",
                        1,
                        e.kernel
                            .as_ref()
                            .map_or(vec![], |s| step_points(&s.opening, |t| t)),
                    ),
                ],
            },
        ));
    }
    if let Some(fl) = &r.run_flows {
        let step = fl
            .ustack
            .as_ref()
            .or(fl.kernel.as_ref())
            .map_or(0, |s| s.opening.step);
        let ms = |t: f64| t * 1000.0;
        v.push((
            "scale-run.svg",
            LinePlot {
                title: format!("Flows opened one after another: time per {step}"),
                x: Axis::linear("flows open"),
                y: Axis::log(format!("ms per {step} (log)")),
                series: vec![
                    Series::new(
                        "ustack run",
                        0,
                        fl.ustack
                            .as_ref()
                            .map_or(vec![], |s| step_points(&s.opening, ms)),
                    ),
                    Series::new(
                        "kernel (veth)",
                        1,
                        fl.kernel
                            .as_ref()
                            .map_or(vec![], |s| step_points(&s.opening, ms)),
                    ),
                ],
            },
        ));
    }
    v
}

/// Write the plots into `dir`; the paths written.
pub fn write_plots(r: &Report, dir: &Path) -> Result<Vec<String>> {
    plots(r)
        .into_iter()
        .map(|(name, p)| {
            let path = dir.join(name);
            std::fs::write(&path, p.to_svg(720.0, 440.0))
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok(path.display().to_string())
        })
        .collect()
}
