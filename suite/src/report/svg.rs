//! The few plot shapes the HTML report needs, drawn as inline SVG: a line chart (optionally log-scaled, with
//! threshold and marker lines) and a paired bar chart. Self-contained: no script, no font, no network.

use std::fmt::Write;

use super::markup::escape;

const W: f64 = 640.0;
const H: f64 = 220.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 26.0;
const BOTTOM: f64 = 36.0;

/// One line of a chart: `points[i]` is the value at x = i (`None`: no value there, the line breaks).
pub struct Series<'a> {
    pub label: &'a str,
    pub color: &'a str,
    pub points: Vec<Option<f64>>,
}

pub struct LineChart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    /// x = i is drawn at `x_scale * i` in axis units (a bucketed profile shows ids, not buckets).
    pub x_scale: f64,
    pub log_y: bool,
    pub series: Vec<Series<'a>>,
    /// Horizontal dashed lines: (y, label).
    pub thresholds: Vec<(f64, String)>,
    /// Vertical markers: (x index, label).
    pub markers: Vec<(f64, String)>,
}

fn fmt_tick(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e4 || v.abs() < 1e-2 {
        format!("{v:.0e}")
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Where a chart's values land: its points per series, its y range (decades on a log axis) and the plot's box.
struct Frame {
    n: usize,
    log_y: bool,
    lo: f64,
    hi: f64,
    plot_w: f64,
    plot_h: f64,
}

impl Frame {
    fn of(c: &LineChart) -> Frame {
        let n = c.series.iter().map(|s| s.points.len()).max().unwrap_or(0);
        let finite = |v: f64| v.is_finite() && (!c.log_y || v > 0.0);
        let values: Vec<f64> = c
            .series
            .iter()
            .flat_map(|s| s.points.iter().flatten().copied())
            .chain(c.thresholds.iter().map(|t| t.0))
            .filter(|&v| finite(v))
            .collect();
        let (mut lo, mut hi) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
        if !lo.is_finite() {
            (lo, hi) = if c.log_y { (1e-8, 1.0) } else { (0.0, 1.0) };
        }
        let (lo, hi) = if c.log_y {
            let (l, h) = (lo.log10().floor(), hi.log10().ceil());
            (l, if h <= l { l + 1.0 } else { h })
        } else {
            let lo = lo.min(0.0);
            (lo, if hi <= lo { lo + 1.0 } else { hi * 1.05 })
        };
        Frame { n, log_y: c.log_y, lo, hi, plot_w: W - LEFT - RIGHT, plot_h: H - TOP - BOTTOM }
    }

    /// A value the y axis can show (on a log axis, a positive one).
    fn finite(&self, v: f64) -> bool {
        v.is_finite() && (!self.log_y || v > 0.0)
    }

    fn x_of(&self, i: f64) -> f64 {
        LEFT + if self.n > 1 { self.plot_w * i / (self.n - 1) as f64 } else { self.plot_w / 2.0 }
    }

    /// Infinite (NaN) differences are drawn at the top edge: the worst there is.
    fn y_of(&self, v: f64) -> f64 {
        let (lo, hi) = (self.lo, self.hi);
        let t = if v.is_infinite() && v > 0.0 {
            1.0
        } else if self.log_y {
            (v.max(10f64.powf(lo)).log10() - lo) / (hi - lo)
        } else {
            (v - lo) / (hi - lo)
        };
        TOP + self.plot_h * (1.0 - t.clamp(0.0, 1.0))
    }

    /// y ticks: decades on a log axis, quarters on a linear one.
    fn ticks(&self) -> Vec<f64> {
        let (lo, hi) = (self.lo, self.hi);
        if self.log_y {
            let step = ((hi - lo) / 5.0).ceil().max(1.0);
            let mut v = Vec::new();
            let mut e = lo;
            while e <= hi + 1e-9 {
                v.push(10f64.powf(e));
                e += step;
            }
            v
        } else {
            (0..=4).map(|k| lo + (hi - lo) * k as f64 / 4.0).collect()
        }
    }
}

pub fn line_chart(c: &LineChart) -> String {
    let f = Frame::of(c);
    let mut s = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"{}\">",
        escape(c.title)
    );
    let _ = write!(s, "<text x=\"{LEFT}\" y=\"16\" class=\"title\">{}</text>", escape(c.title));
    let _ = write!(s, "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{}\" height=\"{}\" class=\"frame\"/>", f.plot_w, f.plot_h);
    axes(&mut s, &f, c);
    guides(&mut s, &f, c);
    for (k, series) in c.series.iter().enumerate() {
        line(&mut s, &f, k, series);
    }
    s.push_str("</svg>");
    s
}

/// The y grid with its ticks, the x axis's ends and its label.
fn axes(s: &mut String, f: &Frame, c: &LineChart) {
    for t in f.ticks() {
        let y = f.y_of(t);
        let _ = write!(
            s,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" class=\"grid\"/><text x=\"{}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"end\">{}</text>",
            W - RIGHT,
            LEFT - 4.0,
            y + 3.0,
            fmt_tick(t)
        );
    }
    let last = f.n.saturating_sub(1) as f64 * c.x_scale;
    for (x, label) in [(LEFT, "0".to_string()), (W - RIGHT, format!("{:.0}", last))] {
        let _ = write!(s, "<text x=\"{x:.1}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"middle\">{label}</text>", H - BOTTOM + 14.0);
    }
    let _ = write!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" class=\"axis\" text-anchor=\"middle\">{}</text>",
        LEFT + f.plot_w / 2.0,
        H - 6.0,
        escape(c.x_label)
    );
}

/// The thresholds (horizontal lines) and markers (vertical ones), each labelled.
fn guides(s: &mut String, f: &Frame, c: &LineChart) {
    for (y, label) in &c.thresholds {
        let py = f.y_of(*y);
        let _ = write!(
            s,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{py:.1}\" y2=\"{py:.1}\" class=\"threshold\"/><text x=\"{}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"end\">{}</text>",
            W - RIGHT,
            W - RIGHT - 2.0,
            py - 3.0,
            escape(label)
        );
    }
    for (x, label) in &c.markers {
        let px = f.x_of(*x);
        let _ = write!(
            s,
            "<line x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{TOP}\" y2=\"{:.1}\" class=\"marker\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"marker-label\">{}</text>",
            TOP + f.plot_h,
            px + 3.0,
            TOP + 11.0,
            escape(label)
        );
    }
}

/// Series `k`: a polyline per run of drawable points (a gap where none is), dots on a short series, its legend entry.
fn line(s: &mut String, f: &Frame, k: usize, series: &Series) {
    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for (i, p) in series.points.iter().enumerate() {
        match p.filter(|&v| v.is_infinite() || f.finite(v)) {
            Some(v) => runs.last_mut().unwrap().push((f.x_of(i as f64), f.y_of(v))),
            None if !runs.last().unwrap().is_empty() => runs.push(Vec::new()),
            None => {}
        }
    }
    for run in runs.iter().filter(|r| !r.is_empty()) {
        let pts: Vec<String> = run.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = write!(s, "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>", pts.join(" "), series.color);
        if f.n <= 64 {
            for (x, y) in run {
                let _ = write!(s, "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2.5\" fill=\"{}\"/>", series.color);
            }
        }
    }
    let lx = LEFT + 8.0 + 170.0 * k as f64;
    let _ = write!(
        s,
        "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"10\" height=\"3\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">{}</text>",
        TOP + f.plot_h - 10.0,
        series.color,
        lx + 14.0,
        TOP + f.plot_h - 6.0,
        escape(series.label)
    );
}

/// Paired bars, one pair per labelled item: (label, left value, right value); values are non-negative.
pub fn paired_bars(title: &str, left: (&str, &str), right: (&str, &str), items: &[(String, Option<f64>, Option<f64>)]) -> String {
    let hi = items.iter().flat_map(|i| [i.1, i.2]).flatten().filter(|v| v.is_finite()).fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let slot = plot_w / items.len().max(1) as f64;
    let bar = (slot * 0.38).min(18.0);
    let mut s =
        format!("<svg class=\"chart\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"{}\">", escape(title));
    let _ = write!(s, "<text x=\"{LEFT}\" y=\"16\" class=\"title\">{}</text>", escape(title));
    let _ = write!(s, "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{plot_w}\" height=\"{plot_h}\" class=\"frame\"/>");
    for k in 0..=4 {
        let v = hi * k as f64 / 4.0;
        let y = TOP + plot_h * (1.0 - v / hi);
        let _ = write!(
            s,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" class=\"grid\"/><text x=\"{}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"end\">{}</text>",
            W - RIGHT,
            LEFT - 4.0,
            y + 3.0,
            fmt_tick(v)
        );
    }
    for (i, (label, a, b)) in items.iter().enumerate() {
        let x0 = LEFT + slot * i as f64 + slot / 2.0;
        for (v, dx, color) in [(a, -bar, left.1), (b, 0.0, right.1)] {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                let h = plot_h * (v / hi).clamp(0.0, 1.0);
                let _ = write!(
                    s,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{h:.1}\" fill=\"{color}\"><title>{}: {v:.4}</title></rect>",
                    x0 + dx,
                    TOP + plot_h - h,
                    escape(label)
                );
            }
        }
        let _ =
            write!(s, "<text x=\"{x0:.1}\" y=\"{:.1}\" class=\"tick\" text-anchor=\"middle\">{}</text>", H - BOTTOM + 14.0, escape(label));
    }
    for (k, (name, color)) in [left, right].iter().enumerate() {
        let lx = LEFT + 8.0 + 170.0 * k as f64;
        let _ = write!(
            s,
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">{}</text>",
            TOP + 4.0,
            lx + 14.0,
            TOP + 13.0,
            escape(name)
        );
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_chart_breaks_at_gaps_and_draws_markers_and_thresholds() {
        let c = LineChart {
            title: "t <1>",
            x_label: "step",
            x_scale: 1.0,
            log_y: true,
            series: vec![Series { label: "a", color: "#123", points: vec![Some(1e-3), Some(1e-1), None, Some(f64::INFINITY), Some(0.0)] }],
            thresholds: vec![(1e-2, "atol".into())],
            markers: vec![(1.0, "first divergence".into())],
        };
        let svg = line_chart(&c);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert!(svg.contains("t &lt;1&gt;") && svg.contains("first divergence") && svg.contains("class=\"threshold\""));
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
    }

    #[test]
    fn paired_bars_draw_both_sides() {
        let svg = paired_bars(
            "flips",
            ("ref", "#111"),
            ("pkg", "#222"),
            &[("doc 3".into(), Some(0.5), Some(0.25)), ("doc 9".into(), None, Some(1.0))],
        );
        assert_eq!(svg.matches("<rect x=").count(), 1 + 3 + 2, "{svg}");
    }
}
