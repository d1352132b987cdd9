//! Line plots written as SVG text by hand: a title, axes (linear or log)
//! with ticks and grid lines, one polyline with markers per series, and a
//! legend. The benchmark harnesses (`ustack ipc bench`, `ustack bench
//! --scale`) draw their figures with it instead of depending on a plotting
//! library; a plot can be a whole document ([`LinePlot::to_svg`]) or one
//! panel of a bigger one ([`LinePlot::render`]).

#![forbid(unsafe_code)]

use std::fmt::Write as _;

/// The series colours, by index (wrapping).
pub const COLORS: [&str; 9] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22",
];

/// How values map to positions along an axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// Base-10 logarithmic; values <= 0 are left out.
    Log,
}

/// One axis: its label, scale and (optionally) fixed ticks.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub label: String,
    pub scale: Scale,
    /// Tick positions and labels. `None` picks them: decades (and 2, 5 within
    /// a short range) on a log axis, 1-2-5 steps from zero on a linear one.
    /// With fixed ticks a log axis spans exactly the data and the ticks.
    pub ticks: Option<Vec<(f64, String)>>,
}

impl Axis {
    pub fn linear(label: impl Into<String>) -> Axis {
        Axis {
            label: label.into(),
            scale: Scale::Linear,
            ticks: None,
        }
    }

    pub fn log(label: impl Into<String>) -> Axis {
        Axis {
            label: label.into(),
            scale: Scale::Log,
            ticks: None,
        }
    }

    pub fn with_ticks(mut self, ticks: Vec<(f64, String)>) -> Axis {
        self.ticks = Some(ticks);
        self
    }
}

/// One line: (x, y) points in the order they are joined.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    /// Index into [`COLORS`].
    pub color: usize,
    pub dashed: bool,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(label: impl Into<String>, color: usize, points: Vec<(f64, f64)>) -> Series {
        Series {
            label: label.into(),
            color,
            dashed: false,
            points,
        }
    }

    pub fn dashed(mut self) -> Series {
        self.dashed = true;
        self
    }
}

/// A plot of several series against shared axes.
#[derive(Clone, Debug, PartialEq)]
pub struct LinePlot {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
}

/// A rectangle in SVG user units (y grows downwards).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

/// The opening of a standalone SVG document with a white background.
pub fn svg_open(width: f64, height: f64) -> String {
    format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n"
    )
}

/// The end of a document begun with [`svg_open`].
pub const SVG_CLOSE: &str = "</svg>\n";

/// Text safe inside SVG text and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '\'' => o.push_str("&apos;"),
            '"' => o.push_str("&quot;"),
            c => o.push(c),
        }
    }
    o
}

/// A tick label: integers as they are (thousands as "k", millions as "M"
/// when exact), fractions with three significant digits.
pub fn fmt_tick(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 && (v / 1e6).fract() == 0.0 {
        format!("{}M", v / 1e6)
    } else if a >= 1e4 && (v / 1e3).fract() == 0.0 {
        format!("{}k", v / 1e3)
    } else if v.fract() == 0.0 || a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        trim(format!("{v:.1}"))
    } else if a >= 1.0 {
        trim(format!("{v:.2}"))
    } else {
        // Three significant digits below 1.
        let digits = (-a.log10().floor()) as usize + 2;
        trim(format!("{v:.digits$}"))
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 0.0 || raw.is_infinite() {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    let k = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    k * p
}

/// An axis's extent in transformed units (log10 for log axes).
struct Range {
    scale: Scale,
    lo: f64,
    hi: f64,
}

fn usable(scale: Scale, v: f64) -> bool {
    v.is_finite() && (scale == Scale::Linear || v > 0.0)
}

fn tf(scale: Scale, v: f64) -> f64 {
    match scale {
        Scale::Linear => v,
        Scale::Log => v.log10(),
    }
}

impl Range {
    /// The range covering `vals` (all usable on the axis, at least one).
    fn new(axis: &Axis, vals: &[f64]) -> Range {
        let fixed: Vec<f64> = axis
            .ticks
            .iter()
            .flatten()
            .map(|t| t.0)
            .filter(|&v| usable(axis.scale, v))
            .collect();
        let all = vals.iter().chain(fixed.iter()).copied();
        let (min, max) = all.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
        match axis.scale {
            Scale::Linear => {
                let lo = min.min(0.0);
                let hi = if max > lo { max } else { lo + 1.0 };
                if axis.ticks.is_some() {
                    return Range {
                        scale: Scale::Linear,
                        lo,
                        hi,
                    };
                }
                let step = nice_step((hi - lo) / 5.0);
                Range {
                    scale: Scale::Linear,
                    lo: (lo / step).floor() * step,
                    hi: (hi / step).ceil() * step,
                }
            }
            Scale::Log => {
                let (lo, hi) = (min.log10(), max.log10());
                let (lo, hi) = if axis.ticks.is_some() {
                    (lo, hi)
                } else {
                    (lo.floor(), hi.ceil())
                };
                Range {
                    scale: Scale::Log,
                    lo,
                    hi: if hi > lo { hi } else { lo + 1.0 },
                }
            }
        }
    }

    /// 0 at the low end, 1 at the high end.
    fn frac(&self, v: f64) -> f64 {
        (tf(self.scale, v) - self.lo) / (self.hi - self.lo)
    }

    fn auto_ticks(&self) -> Vec<(f64, String)> {
        let mut t = Vec::new();
        match self.scale {
            Scale::Linear => {
                let step = nice_step((self.hi - self.lo) / 5.0);
                let n = ((self.hi - self.lo) / step).round() as i64;
                for k in 0..=n.clamp(0, 50) {
                    let v = self.lo + step * k as f64;
                    // Avoid "-0" and 0.30000000000000004.
                    let v = (v / step).round() * step;
                    t.push((v, fmt_tick(v)));
                }
            }
            Scale::Log => {
                let (a, b) = (self.lo.floor() as i32, self.hi.ceil() as i32);
                let short = self.hi - self.lo <= 1.5;
                for e in a..=b.min(a + 30) {
                    let base = 10f64.powi(e);
                    let mults: &[f64] = if short { &[1.0, 2.0, 5.0] } else { &[1.0] };
                    for m in mults {
                        let v = base * m;
                        let f = self.frac(v);
                        if (-1e-9..=1.0 + 1e-9).contains(&f) {
                            t.push((v, fmt_tick(v)));
                        }
                    }
                }
            }
        }
        t
    }
}

impl LinePlot {
    /// The plot as a standalone SVG document.
    pub fn to_svg(&self, width: f64, height: f64) -> String {
        let mut s = svg_open(width, height);
        self.render(
            &mut s,
            Rect {
                x: 0.0,
                y: 0.0,
                w: width,
                h: height,
            },
        );
        s.push_str(SVG_CLOSE);
        s
    }

    /// Draw the plot (title, axes, labels and all) inside `area` of a
    /// document begun with [`svg_open`].
    pub fn render(&self, out: &mut String, area: Rect) {
        let (ml, mr, mt, mb) = (70.0, 20.0, 32.0, 46.0);
        let (x0, x1) = (area.x + ml, area.x + area.w - mr);
        let (y0, y1) = (area.y + mt, area.y + area.h - mb);
        let _ = writeln!(
            out,
            "<text x='{:.1}' y='{:.1}' text-anchor='middle' font-size='14'>{}</text>",
            area.x + area.w / 2.0,
            area.y + 18.0,
            escape(&self.title)
        );
        let pts = |s: &Series| -> Vec<(f64, f64)> {
            s.points
                .iter()
                .copied()
                .filter(|&(x, y)| usable(self.x.scale, x) && usable(self.y.scale, y))
                .collect()
        };
        let all: Vec<(f64, f64)> = self.series.iter().flat_map(pts).collect();
        let _ = writeln!(
            out,
            "<rect x='{x0:.1}' y='{y0:.1}' width='{:.1}' height='{:.1}' fill='none' stroke='black'/>",
            x1 - x0,
            y1 - y0
        );
        if all.is_empty() {
            let _ = writeln!(
                out,
                "<text x='{:.1}' y='{:.1}' text-anchor='middle'>no data</text>",
                (x0 + x1) / 2.0,
                (y0 + y1) / 2.0
            );
            return;
        }
        let xs: Vec<f64> = all.iter().map(|p| p.0).collect();
        let ys: Vec<f64> = all.iter().map(|p| p.1).collect();
        let (xr, yr) = (Range::new(&self.x, &xs), Range::new(&self.y, &ys));
        let px = |v: f64| x0 + xr.frac(v) * (x1 - x0);
        let py = |v: f64| y1 - yr.frac(v) * (y1 - y0);

        let xt = self.x.ticks.clone().unwrap_or_else(|| xr.auto_ticks());
        for (v, label) in xt.iter().filter(|t| usable(self.x.scale, t.0)) {
            let x = px(*v);
            let _ = writeln!(
                out,
                "<line x1='{x:.1}' y1='{y0:.1}' x2='{x:.1}' y2='{y1:.1}' stroke='#e0e0e0'/><text x='{x:.1}' y='{:.1}' text-anchor='middle'>{}</text>",
                y1 + 15.0,
                escape(label)
            );
        }
        let yt = self.y.ticks.clone().unwrap_or_else(|| yr.auto_ticks());
        for (v, label) in yt.iter().filter(|t| usable(self.y.scale, t.0)) {
            let y = py(*v);
            let _ = writeln!(
                out,
                "<line x1='{x0:.1}' y1='{y:.1}' x2='{x1:.1}' y2='{y:.1}' stroke='#e0e0e0'/><text x='{:.1}' y='{:.1}' text-anchor='end'>{}</text>",
                x0 - 5.0,
                y + 4.0,
                escape(label)
            );
        }
        let _ = writeln!(
            out,
            "<text x='{:.1}' y='{:.1}' text-anchor='middle'>{}</text>",
            (x0 + x1) / 2.0,
            y1 + 34.0,
            escape(&self.x.label)
        );
        let (lx, ly) = (area.x + 16.0, (y0 + y1) / 2.0);
        let _ = writeln!(
            out,
            "<text x='{lx:.1}' y='{ly:.1}' text-anchor='middle' transform='rotate(-90 {lx:.1} {ly:.1})'>{}</text>",
            escape(&self.y.label)
        );

        for s in &self.series {
            let p = pts(s);
            if p.is_empty() {
                continue;
            }
            let c = COLORS[s.color % COLORS.len()];
            let dash = if s.dashed {
                " stroke-dasharray='6,4'"
            } else {
                ""
            };
            let coords: Vec<String> = p
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            let _ = writeln!(
                out,
                "<polyline fill='none' stroke='{c}' stroke-width='2'{dash} points='{}'/>",
                coords.join(" ")
            );
            for &(x, y) in &p {
                let _ = writeln!(
                    out,
                    "<circle cx='{:.1}' cy='{:.1}' r='3' fill='{c}'/>",
                    px(x),
                    py(y)
                );
            }
        }

        // Legend, top left inside the box.
        let shown: Vec<&Series> = self.series.iter().filter(|s| !pts(s).is_empty()).collect();
        if shown.is_empty() {
            return;
        }
        let width = shown
            .iter()
            .map(|s| s.label.chars().count())
            .max()
            .unwrap_or(0) as f64
            * 6.5
            + 40.0;
        let _ = writeln!(
            out,
            "<rect x='{:.1}' y='{:.1}' width='{width:.1}' height='{:.1}' fill='white' fill-opacity='0.85' stroke='#c0c0c0'/>",
            x0 + 6.0,
            y0 + 6.0,
            shown.len() as f64 * 15.0 + 6.0
        );
        for (i, s) in shown.iter().enumerate() {
            let c = COLORS[s.color % COLORS.len()];
            let y = y0 + 18.0 + 15.0 * i as f64;
            let dash = if s.dashed {
                " stroke-dasharray='6,4'"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "<line x1='{:.1}' y1='{:.1}' x2='{:.1}' y2='{:.1}' stroke='{c}' stroke-width='2'{dash}/><text x='{:.1}' y='{:.1}'>{}</text>",
                x0 + 12.0,
                y - 4.0,
                x0 + 34.0,
                y - 4.0,
                x0 + 40.0,
                y,
                escape(&s.label)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plot(x: Axis, y: Axis, series: Vec<Series>) -> LinePlot {
        LinePlot {
            title: "t <&>".into(),
            x,
            y,
            series,
        }
    }

    #[test]
    fn nice_steps_and_tick_labels() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.5), 2.0);
        assert_eq!(nice_step(33.0), 50.0);
        assert_eq!(nice_step(600.0), 1000.0);
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(fmt_tick(0.0), "0");
        assert_eq!(fmt_tick(1000.0), "1000");
        assert_eq!(fmt_tick(20_000.0), "20k");
        assert_eq!(fmt_tick(3_000_000.0), "3M");
        assert_eq!(fmt_tick(12.5), "12.5");
        assert_eq!(fmt_tick(0.25), "0.25");
        assert_eq!(fmt_tick(0.0012), "0.0012");
    }

    #[test]
    fn log_axis_ticks_are_decades() {
        let r = Range::new(&Axis::log("x"), &[1.0, 1000.0]);
        let t: Vec<String> = r.auto_ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(t, ["1", "10", "100", "1000"]);
        // A short range gets 2 and 5 as well.
        let r = Range::new(&Axis::log("x"), &[20.0, 40.0]);
        let t: Vec<String> = r.auto_ticks().into_iter().map(|t| t.1).collect();
        assert_eq!(t, ["10", "20", "50", "100"]);
    }

    #[test]
    fn linear_axis_starts_at_zero_with_round_steps() {
        let r = Range::new(&Axis::linear("y"), &[3.0, 97.0]);
        assert_eq!((r.lo, r.hi), (0.0, 100.0));
        let t: Vec<f64> = r.auto_ticks().into_iter().map(|t| t.0).collect();
        assert_eq!(t, [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
    }

    #[test]
    fn document_has_one_polyline_per_series_and_escapes_text() {
        let p = plot(
            Axis::log("pingers"),
            Axis::linear("µs"),
            vec![
                Series::new("a", 0, vec![(1.0, 10.0), (10.0, 12.0), (100.0, 30.0)]),
                Series::new("b", 1, vec![(1.0, 5.0), (10.0, 6.0)]).dashed(),
                // Nothing usable on a log x axis: left out, and not in the legend.
                Series::new("none", 2, vec![(0.0, 1.0)]),
            ],
        );
        let s = p.to_svg(640.0, 400.0);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert_eq!(s.matches("<circle").count(), 5);
        assert!(s.contains("stroke-dasharray"));
        assert!(s.contains("t &lt;&amp;&gt;"));
        assert!(!s.contains(">none<"));
    }

    #[test]
    fn empty_and_degenerate_data_do_not_panic() {
        let p = plot(Axis::linear("x"), Axis::log("y"), vec![]);
        assert!(p.to_svg(300.0, 200.0).contains("no data"));
        let p = plot(
            Axis::linear("x"),
            Axis::log("y"),
            vec![Series::new("one", 0, vec![(5.0, 5.0), (f64::NAN, 1.0)])],
        );
        let s = p.to_svg(300.0, 200.0);
        assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
    }

    #[test]
    fn fixed_ticks_are_used_as_given() {
        let p = plot(
            Axis::log("size").with_ticks(vec![(64.0, "64".into()), (1024.0, "1K".into())]),
            Axis::log("MB/s"),
            vec![Series::new("copy", 0, vec![(64.0, 100.0), (1024.0, 900.0)])],
        );
        let s = p.to_svg(400.0, 300.0);
        assert!(s.contains(">1K<") && s.contains(">64<"));
    }
}
