//! Drover's one chart renderer: a chart is a function from series to SVG. The dashboard draws its
//! pages' charts with it ([`Chart::svg`], styled by the page's stylesheet) and the simulator writes its
//! report's charts as files ([`Chart::standalone_svg`], with the same styles inline). Every series gets
//! its own colour and dash (in the plot and in the legend alike), axes carry units, and the legend sits
//! beside the plot, where it covers no data. Long series are downsampled with LTTB (largest triangle
//! three buckets), so a curve of 100,000 points is drawn as at most [`MAX_POINTS`] points.
//!
//! Parallel coordinates, the one chart of another shape (an axis per quantity), are drawn by
//! [`Parallel`] in `parallel.rs` with the same ticks, number formats and colours.
//!
//! Pure: no IO, no clock.

mod parallel;
mod ticks;

pub use parallel::{Axis, Line, Parallel, Scale};
use std::fmt::Write;
use ticks::{escape, log_ticks, number, precise, ticks};

/// Points per series after downsampling: more than a chart's width in pixels shows nothing more.
pub const MAX_POINTS: usize = 800;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 64.0;
/// Room for the legend, right of the plot.
const RIGHT: f64 = 190.0;
/// Characters of a legend's label that fit in that room.
const LEGEND_CHARS: usize = 22;
const BOTTOM: f64 = 40.0;

/// Colours that stay apart for colour-blind readers (Okabe–Ito).
const COLOURS: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#a0a000", "#555555",
];
/// Dash patterns, cycled with a period (3) prime to the palette's (8): the first 24 series each have a
/// colour and dash pair of their own, and neighbours differ in both.
const DASHES: [&str; 3] = ["", "6 3", "2 3"];

/// The colour and dash of series `index`.
pub fn style(index: usize) -> (&'static str, &'static str) {
    (COLOURS[index % COLOURS.len()], DASHES[index % DASHES.len()])
}

/// The styles a standalone file carries; a page's stylesheet gives the same classes.
const STANDALONE_STYLE: &str = ".grid{stroke:#e5e5e5}.axis{stroke:#333}.guide{stroke:#999;stroke-dasharray:4 3}\
     text{font-family:sans-serif;font-size:12px;fill:#222}.title{font-size:15px}.muted{fill:#777}";

#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// How the x axis reads, when the chart does not give its own ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XAxis<'a> {
    /// Training steps.
    Steps,
    /// Seconds relative to now (negative: the past), labelled in hours.
    HoursAgo,
    /// An experiment's trials, by index.
    Trials,
    /// Seconds since a start, named by the label (`time since submission`), ticks in the unit that
    /// suits the span.
    Elapsed(&'a str),
    /// Any quantity, labelled so.
    Named(&'a str),
}

#[derive(Debug, Clone)]
pub struct Chart<'a> {
    /// What the chart shows, for screen readers.
    pub label: &'a str,
    /// A title drawn above the plot (files have one; pages title their charts themselves).
    pub title: Option<&'a str>,
    pub x: XAxis<'a>,
    pub y_label: &'a str,
    pub log_x: bool,
    pub log_y: bool,
    /// The x axis spans this, whatever the points (a time window); the points' extent otherwise.
    pub x_range: Option<(f64, f64)>,
    /// The y axis spans this; points beyond it are drawn at its edge.
    pub y_range: Option<(f64, f64)>,
    /// Ticks with their labels, instead of round numbers chosen from the range.
    pub x_ticks: Option<Vec<(f64, String)>>,
    pub y_ticks: Option<Vec<(f64, String)>>,
    /// Horizontal guide lines (a reference level), drawn under the series.
    pub guides: Vec<f64>,
    /// Points as dots (a scatter) rather than joined lines; points need not be sorted.
    pub markers: bool,
    pub series: Vec<Series>,
}

impl<'a> Chart<'a> {
    /// A chart of `series` with the axes' defaults: linear, ranges from the points, round ticks.
    pub fn new(label: &'a str, x: XAxis<'a>, y_label: &'a str, series: Vec<Series>) -> Self {
        Chart {
            label,
            title: None,
            x,
            y_label,
            log_x: false,
            log_y: false,
            x_range: None,
            y_range: None,
            x_ticks: None,
            y_ticks: None,
            guides: Vec::new(),
            markers: false,
            series,
        }
    }
}

/// The largest-triangle-three-buckets downsampling of `points` (sorted by x) to `threshold` points:
/// the first and last points stay, and each bucket keeps the point that spans the largest triangle
/// with its neighbours, so peaks and dips survive.
pub fn lttb(points: &[(f64, f64)], threshold: usize) -> Vec<(f64, f64)> {
    if threshold < 3 || points.len() <= threshold {
        return points.to_vec();
    }
    let mut sampled = Vec::with_capacity(threshold);
    sampled.push(points[0]);
    let every = (points.len() - 2) as f64 / (threshold - 2) as f64;
    let mut a = 0usize;
    for bucket in 0..threshold - 2 {
        let start = (bucket as f64 * every) as usize + 1;
        let end = (((bucket + 1) as f64 * every) as usize + 1).min(points.len() - 1);
        // The average of the next bucket is the triangle's third corner.
        let next_start = end;
        let next_end = (((bucket + 2) as f64 * every) as usize + 1).min(points.len());
        let next = &points[next_start..next_end.max(next_start + 1).min(points.len())];
        let (sum_x, sum_y) = next.iter().fold((0.0, 0.0), |(x, y), p| (x + p.0, y + p.1));
        let (avg_x, avg_y) = (sum_x / next.len() as f64, sum_y / next.len() as f64);
        let (ax, ay) = points[a];
        let mut best = start;
        let mut best_area = -1.0;
        for (i, &(x, y)) in points.iter().enumerate().take(end).skip(start) {
            let area = ((ax - avg_x) * (y - ay) - (ax - x) * (avg_y - ay)).abs();
            if area > best_area {
                best_area = area;
                best = i;
            }
        }
        sampled.push(points[best]);
        a = best;
    }
    sampled.push(points[points.len() - 1]);
    sampled
}

/// Exponential moving average with TensorBoard's debiasing: `weight` 0 draws the raw curve, 0.99
/// a very smooth one.
pub fn smooth(points: &[(f64, f64)], weight: f64) -> Vec<(f64, f64)> {
    if weight <= 0.0 {
        return points.to_vec();
    }
    let weight = weight.min(0.999);
    let mut last = 0.0;
    let mut debias = 1.0;
    points
        .iter()
        .map(|&(x, y)| {
            last = last * weight + (1.0 - weight) * y;
            debias *= weight;
            (x, last / (1.0 - debias))
        })
        .collect()
}

/// Seconds in a short human unit (`45s`, `12m`, `3h`, `2d`).
pub fn human_seconds(s: f64) -> String {
    match s {
        s if s < 60.0 => format!("{s:.0}s"),
        s if s < 3600.0 => format!("{:.0}m", s / 60.0),
        s if s < 86_400.0 => format!("{:.0}h", s / 3600.0),
        s => format!("{:.0}d", s / 86_400.0),
    }
}

/// A duration as a tooltip says it: `45 s`, `12 min 30 s`, `3 h 05 min`.
fn clock(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        s if s < 60 => format!("{s} s"),
        s if s < 3_600 => format!("{} min {:02} s", s / 60, s % 60),
        s => format!("{} h {:02} min", s / 3_600, s % 3_600 / 60),
    }
}

/// [`ticks`] for a count (steps, trials): no tick between two whole numbers.
fn whole_ticks(lo: f64, hi: f64, count: usize) -> Vec<f64> {
    let whole: Vec<f64> = ticks(lo, hi, count)
        .into_iter()
        .filter(|t| t.fract() == 0.0)
        .collect();
    if whole.is_empty() { vec![lo] } else { whole }
}

/// Points of a line a page chart gives a hover target, at most.
const HOVER_POINTS: usize = 200;

/// Where a value lands on an axis: log10 on a log axis.
fn scaled(log: bool, v: f64) -> f64 {
    if log { v.log10() } else { v }
}

impl Chart<'_> {
    /// The chart as an `<svg>` element for a page, whose stylesheet styles its classes (with a text
    /// fallback when there is nothing to draw).
    pub fn svg(&self) -> String {
        self.render(None)
    }

    /// The chart as a file of its own: the same drawing on a white background, its styles inline.
    pub fn standalone_svg(&self) -> String {
        let mut svg = self.render(Some(STANDALONE_STYLE));
        svg.push('\n');
        svg
    }

    fn top(&self) -> f64 {
        if self.title.is_some() { 36.0 } else { 16.0 }
    }

    fn render(&self, inline_style: Option<&str>) -> String {
        let series: Vec<Series> = self
            .series
            .iter()
            .map(|s| {
                let mut points: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|&(x, y)| {
                        x.is_finite()
                            && y.is_finite()
                            && (!self.log_y || y > 0.0)
                            && (!self.log_x || x > 0.0)
                    })
                    .collect();
                if self.markers {
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                }
                Series {
                    name: s.name.clone(),
                    points: lttb(&points, MAX_POINTS),
                }
            })
            .collect();
        let (mut x_lo, mut x_hi, mut y_lo, mut y_hi) = (
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
        );
        for &(x, y) in series.iter().flat_map(|s| s.points.iter()) {
            x_lo = x_lo.min(scaled(self.log_x, x));
            x_hi = x_hi.max(scaled(self.log_x, x));
            y_lo = y_lo.min(scaled(self.log_y, y));
            y_hi = y_hi.max(scaled(self.log_y, y));
        }
        let top = self.top();
        if let Some((lo, hi)) = self.x_range {
            x_lo = scaled(self.log_x, lo);
            x_hi = scaled(self.log_x, hi);
        }
        if x_lo.is_finite() && x_hi <= x_lo {
            x_hi = x_lo + 1.0;
        }
        let mut out = String::with_capacity(4096 + 24 * MAX_POINTS * series.len());
        let _ = write!(
            out,
            r#"<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg""#,
            escape(self.label)
        );
        // A page's linear x axis says where its plot lies and what it spans, so a script can read a
        // place on it as a value (to zoom to a dragged range).
        if inline_style.is_none() && !self.log_x && x_lo.is_finite() {
            let _ = write!(out, r#" data-x="{LEFT} {} {x_lo} {x_hi}""#, WIDTH - RIGHT);
        }
        out.push('>');
        if let Some(style) = inline_style {
            let _ = write!(
                out,
                r#"<style>{style}</style><rect width="100%" height="100%" fill="white"/>"#
            );
        }
        if let Some(title) = self.title {
            let _ = write!(
                out,
                r#"<text class="title" x="{}" y="22" text-anchor="middle">{}</text>"#,
                (WIDTH - RIGHT + LEFT) / 2.0,
                escape(title)
            );
        }
        if !y_lo.is_finite() {
            let _ = write!(
                out,
                r#"<text x="{}" y="{}" text-anchor="middle" class="muted">no points yet</text></svg>"#,
                WIDTH / 2.0,
                HEIGHT / 2.0
            );
            return out;
        }
        match self.y_range {
            Some((lo, hi)) => {
                y_lo = scaled(self.log_y, lo);
                y_hi = scaled(self.log_y, hi);
            }
            None => {
                // Counts and rates start at zero when nothing is negative.
                if !self.log_y && y_lo >= 0.0 && y_lo <= y_hi * 0.5 {
                    y_lo = 0.0;
                }
            }
        }
        if y_hi <= y_lo {
            let pad = if y_lo == 0.0 { 1.0 } else { y_lo.abs() * 0.05 };
            y_hi += pad;
            if y_lo != 0.0 {
                y_lo -= pad;
            }
        }
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - top - BOTTOM;
        let sx = |x: f64| LEFT + (x - x_lo) / (x_hi - x_lo) * plot_w;
        // Points beyond a given y range are drawn at its edge.
        let sy = |y: f64| top + (1.0 - ((y - y_lo) / (y_hi - y_lo)).clamp(0.0, 1.0)) * plot_h;
        self.y_grid(&mut out, y_lo, y_hi, &sy);
        self.x_grid(&mut out, x_lo, x_hi, &sx, top);
        let bottom = HEIGHT - BOTTOM;
        let _ = write!(
            out,
            r#"<line class="axis" x1="{LEFT}" x2="{}" y1="{bottom}" y2="{bottom}"/><line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{top}" y2="{bottom}"/>"#,
            WIDTH - RIGHT,
        );
        let x_label = match self.x {
            XAxis::Steps => "step",
            XAxis::Trials => "trial",
            XAxis::HoursAgo => "hours ago",
            XAxis::Elapsed(name) => name,
            XAxis::Named(name) => name,
        };
        let _ = write!(
            out,
            r#"<text class="axis-label" x="{}" y="{}" text-anchor="middle">{}{}</text><text class="axis-label" transform="translate(14 {}) rotate(-90)" text-anchor="middle">{}{}</text>"#,
            LEFT + plot_w / 2.0,
            HEIGHT - 4.0,
            escape(x_label),
            if self.log_x { " (log)" } else { "" },
            top + plot_h / 2.0,
            escape(self.y_label),
            if self.log_y { " (log)" } else { "" }
        );
        for &guide in &self.guides {
            let y = sy(scaled(self.log_y, guide));
            let _ = write!(
                out,
                r#"<line class="guide" x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}"/>"#,
                WIDTH - RIGHT
            );
        }
        let point = |&(x, y): &(f64, f64)| (sx(scaled(self.log_x, x)), sy(scaled(self.log_y, y)));
        for (i, s) in series.iter().enumerate() {
            let (colour, dash) = style(i);
            if self.markers {
                let _ = write!(
                    out,
                    r#"<g fill="{colour}" data-series="{}">"#,
                    escape(&s.name)
                );
                // Each dot says its values on hover.
                for p in &s.points {
                    let (x, y) = point(p);
                    let _ = write!(
                        out,
                        r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5"><title>{}</title></circle>"#,
                        escape(&self.hover_text(&s.name, *p))
                    );
                }
                out.push_str("</g>");
                continue;
            }
            let _ = write!(
                out,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="1.8" stroke-dasharray="{dash}" data-series="{}" points=""#,
                escape(&s.name)
            );
            for p in &s.points {
                let (x, y) = point(p);
                let _ = write!(out, "{x:.1},{y:.1} ");
            }
            out.push_str(r#""/>"#);
            // A line of one point draws nothing: show it as a dot.
            if let [p] = s.points[..] {
                let (x, y) = point(&p);
                let _ = write!(
                    out,
                    r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{colour}"/>"#
                );
            }
        }
        // On a page, a line's points say their values on hover (the browser's own tooltip): an
        // invisible target at up to HOVER_POINTS of each line's points.
        if inline_style.is_none() && !self.markers {
            out.push_str(r#"<g class="hit">"#);
            for s in &series {
                let every = s.points.len().div_ceil(HOVER_POINTS).max(1);
                for p in s.points.iter().step_by(every) {
                    let (x, y) = point(p);
                    let _ = write!(
                        out,
                        r#"<rect x="{:.1}" y="{:.1}" width="8" height="8"><title>{}</title></rect>"#,
                        x - 4.0,
                        y - 4.0,
                        escape(&self.hover_text(&s.name, *p))
                    );
                }
            }
            out.push_str("</g>");
        }
        self.legend(&mut out, &series, top);
        out.push_str("</svg>");
        out
    }

    /// What a point says on hover: where it is on the x axis, its series and its value.
    fn hover_text(&self, series: &str, (x, y): (f64, f64)) -> String {
        let at = match self.x {
            XAxis::Steps => format!("step {}", x.round()),
            XAxis::Trials => format!("trial {}", x.round()),
            XAxis::HoursAgo => format!("{} h ago", precise(-x / 3600.0)),
            XAxis::Elapsed(_) => format!("at {}", clock(x)),
            XAxis::Named(name) => format!("{name} {}", precise(x)),
        };
        format!("{at}: {series} {}", precise(y))
    }

    fn y_grid(&self, out: &mut String, y_lo: f64, y_hi: f64, sy: &impl Fn(f64) -> f64) {
        let ticks: Vec<(f64, String)> = match &self.y_ticks {
            Some(given) => given
                .iter()
                .map(|(v, label)| (scaled(self.log_y, *v), label.clone()))
                .collect(),
            None if self.log_y => log_ticks(y_lo, y_hi)
                .into_iter()
                .map(|t| (t, number(10f64.powf(t))))
                .collect(),
            None => ticks(y_lo, y_hi, 5)
                .into_iter()
                .map(|t| (t, number(t)))
                .collect(),
        };
        for (t, label) in ticks {
            let y = sy(t);
            let _ = write!(
                out,
                r#"<line class="grid" x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}"/><text class="tick" x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
                WIDTH - RIGHT,
                LEFT - 6.0,
                y + 4.0,
                escape(&label)
            );
        }
    }

    fn x_grid(&self, out: &mut String, x_lo: f64, x_hi: f64, sx: &impl Fn(f64) -> f64, top: f64) {
        let ticks: Vec<(f64, String)> = match (&self.x_ticks, self.x) {
            (Some(given), _) => given
                .iter()
                .map(|(v, label)| (scaled(self.log_x, *v), label.clone()))
                .collect(),
            (None, _) if self.log_x => log_ticks(x_lo, x_hi)
                .into_iter()
                .map(|t| (t, number(10f64.powf(t))))
                .collect(),
            (None, XAxis::Steps | XAxis::Trials) => whole_ticks(x_lo, x_hi, 6)
                .into_iter()
                .map(|t| (t, number(t)))
                .collect(),
            (None, XAxis::Named(_)) => ticks(x_lo, x_hi, 6)
                .into_iter()
                .map(|t| (t, number(t)))
                .collect(),
            (None, XAxis::Elapsed(_)) => {
                // The unit that suits the span: ticks at round numbers of it.
                let (unit, name) = match x_hi - x_lo {
                    span if span < 120.0 => (1.0, "s"),
                    span if span < 7_200.0 => (60.0, "min"),
                    span if span < 172_800.0 => (3_600.0, "h"),
                    _ => (86_400.0, "d"),
                };
                ticks(x_lo / unit, x_hi / unit, 6)
                    .into_iter()
                    .map(|v| (v * unit, format!("{} {name}", number(v))))
                    .collect()
            }
            (None, XAxis::HoursAgo) => ticks(x_lo / 3600.0, x_hi / 3600.0, 6)
                .into_iter()
                .map(|h| (h * 3600.0, number(-h)))
                .collect(),
        };
        for (t, label) in ticks {
            let x = sx(t);
            let _ = write!(
                out,
                r#"<line class="grid" x1="{x:.1}" x2="{x:.1}" y1="{top}" y2="{}"/><text class="tick" x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#,
                HEIGHT - BOTTOM,
                HEIGHT - BOTTOM + 16.0,
                escape(&label)
            );
        }
    }

    /// One line per series, right of the plot: its swatch in the series' own colour and dash.
    fn legend(&self, out: &mut String, series: &[Series], top: f64) {
        for (i, s) in series.iter().enumerate() {
            let (colour, dash) = style(i);
            let y = top + 8.0 + 16.0 * i as f64;
            let x = WIDTH - RIGHT + 12.0;
            let swatch = if self.markers {
                // A round mark (not a <circle>: those are the data's dots).
                format!(
                    r#"<rect x="{}" y="{}" width="7" height="7" rx="3.5" fill="{colour}"/>"#,
                    x + 8.5,
                    y - 3.5
                )
            } else {
                format!(
                    r#"<line x1="{x}" x2="{}" y1="{y}" y2="{y}" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/>"#,
                    x + 24.0
                )
            };
            // A label longer than the legend's room is cut, whole in its tooltip.
            let label = format!("{} ({} pts)", s.name, s.points.len());
            let shown = if label.chars().count() > LEGEND_CHARS {
                let mut cut: String = label.chars().take(LEGEND_CHARS - 1).collect();
                cut.push('…');
                cut
            } else {
                label.clone()
            };
            let _ = write!(
                out,
                r#"{swatch}<text class="legend" x="{}" y="{}"><title>{}</title>{}</text>"#,
                x + 30.0,
                y + 4.0,
                escape(&label),
                escape(&shown)
            );
        }
    }
}

/// A small line of recent values between 0 and `max`, for a table or a summary line: no axes; what
/// it shows is said by `label` (its accessible name and tooltip). Unknown values (`None`) leave gaps.
pub fn sparkline(label: &str, values: &[Option<f64>], max: f64) -> String {
    const W: f64 = 120.0;
    const H: f64 = 24.0;
    let mut out = format!(
        r#"<svg class="spark" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{0}"><title>{0}</title><line class="grid" x1="0" x2="{W}" y1="{H}" y2="{H}"/>"#,
        escape(label)
    );
    let step = if values.len() > 1 {
        W / (values.len() - 1) as f64
    } else {
        0.0
    };
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.matches(',').count() >= 2 {
            let _ = write!(
                out,
                r#"<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>"#,
                COLOURS[0],
                run.trim_end()
            );
        } else if let Some((x, y)) = run.trim().split_once(',') {
            let _ = write!(
                out,
                r#"<circle cx="{x}" cy="{y}" r="1.5" fill="{}"/>"#,
                COLOURS[0]
            );
        }
        run.clear();
    };
    for (i, value) in values.iter().enumerate() {
        match value {
            Some(v) if v.is_finite() && max > 0.0 => {
                let y = H - (v / max).clamp(0.0, 1.0) * (H - 2.0) - 1.0;
                let _ = write!(run, "{:.1},{y:.1} ", i as f64 * step);
            }
            _ => flush(&mut run, &mut out),
        }
    }
    flush(&mut run, &mut out);
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparkline_draws_known_values_and_leaves_gaps() {
        let svg = sparkline(
            "CPU, last 15 min",
            &[Some(0.0), Some(0.5), None, Some(1.0), Some(1.0)],
            1.0,
        );
        assert!(svg.contains(r#"aria-label="CPU, last 15 min""#), "{svg}");
        // Two runs: a line of two points, then another of two.
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert!(svg.contains("0.0,23.0 30.0,12.0"), "{svg}");
        assert!(svg.contains("90.0,1.0 120.0,1.0"), "{svg}");
        let lone = sparkline("x", &[None, Some(0.5), None], 1.0);
        assert!(lone.contains("<circle"), "{lone}");
    }

    #[test]
    fn a_page_chart_says_its_points_values_on_hover() {
        let chart = Chart::new(
            "loss",
            XAxis::Steps,
            "loss",
            vec![Series {
                name: "loss".into(),
                points: (0..1000)
                    .map(|i| (i as f64, 1.0 / (i as f64 + 1.0)))
                    .collect(),
            }],
        );
        let svg = chart.svg();
        assert!(svg.contains("<title>step 0: loss 1</title>"), "{svg}");
        let targets = svg.matches("<rect").count();
        assert!((100..=HOVER_POINTS).contains(&targets), "{targets}");
        assert_eq!(svg.matches("<title>step ").count(), targets);
        // A file has no hover targets.
        assert!(!chart.standalone_svg().contains("<title>step"));
        assert_eq!(precise(0.000_123_456), "0.0001235");
        assert_eq!(precise(1234.5678), "1235");
    }

    #[test]
    fn a_log_axis_is_labelled_in_values_at_any_span() {
        let values = |lo: f64, hi: f64| -> Vec<String> {
            log_ticks(lo.log10(), hi.log10())
                .into_iter()
                .map(|t| number(10f64.powf(t)))
                .collect()
        };
        assert_eq!(values(0.0002, 0.1), ["0.001", "0.01", "0.1"]);
        // Within one decade: 2× and 5× as well.
        assert_eq!(values(0.0015, 0.03), ["0.002", "0.005", "0.01", "0.02"]);
        // Within a factor of three: round values between the ends.
        assert!(
            values(0.0021, 0.0058).len() >= 2,
            "{:?}",
            values(0.0021, 0.0058)
        );
    }

    #[test]
    fn a_count_axis_has_whole_ticks_only() {
        assert_eq!(whole_ticks(0.0, 3.0, 6), vec![0.0, 1.0, 2.0, 3.0]);
        assert_eq!(whole_ticks(1.0, 2.0, 6), vec![1.0, 2.0]);
        assert_eq!(whole_ticks(0.0, 1000.0, 6), ticks(0.0, 1000.0, 6));
    }

    #[test]
    fn lttb_keeps_the_ends_and_the_peaks_of_a_long_series() {
        let mut points: Vec<(f64, f64)> = (0..100_000).map(|i| (i as f64, 1.0)).collect();
        points[54_321].1 = 50.0;
        let sampled = lttb(&points, MAX_POINTS);
        assert_eq!(sampled.len(), MAX_POINTS);
        assert_eq!(sampled[0], points[0]);
        assert_eq!(sampled[MAX_POINTS - 1], points[99_999]);
        assert!(sampled.contains(&(54_321.0, 50.0)), "the spike survives");
        assert!(sampled.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn smoothing_follows_a_constant_and_damps_noise() {
        let flat: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 3.0)).collect();
        for (_, y) in smooth(&flat, 0.9) {
            assert!((y - 3.0).abs() < 1e-9, "debiased from the first point");
        }
        let noisy: Vec<(f64, f64)> = (0..200)
            .map(|i| (i as f64, if i % 2 == 0 { 1.0 } else { -1.0 }))
            .collect();
        let smoothed = smooth(&noisy, 0.95);
        assert!(smoothed[150..].iter().all(|&(_, y)| y.abs() < 0.1));
    }

    #[test]
    fn a_chart_draws_each_series_in_its_own_style_with_a_legend() {
        let mut chart = Chart::new(
            "loss and accuracy",
            XAxis::Steps,
            "value",
            vec![
                Series {
                    name: "loss".into(),
                    points: (1..5000).map(|i| (i as f64, 1.0 / i as f64)).collect(),
                },
                Series {
                    name: "<accuracy>".into(),
                    points: vec![(0.0, 0.0), (10.0, 0.5)],
                },
            ],
        );
        chart.log_y = true;
        let svg = chart.svg();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(r##"stroke="#0072b2""##) && svg.contains(r##"stroke="#d55e00""##));
        assert!(svg.contains("loss (800 pts)"), "downsampled to MAX_POINTS");
        assert!(
            svg.contains("&lt;accuracy&gt; (1 pts)"),
            "escaped; y = 0 dropped on a log axis"
        );
        assert!(svg.contains("value (log)"));
        let empty = Chart {
            series: vec![],
            ..chart
        };
        assert!(empty.svg().contains("no points yet"));
    }

    /// As many series as `drover sim --compare all` draws (nine, and more): every line has a colour
    /// and dash of its own, and its legend swatch matches it.
    #[test]
    fn every_series_has_its_own_colour_and_dash() {
        let series: Vec<Series> = (0..12)
            .map(|i| Series {
                name: format!("policy-{i}"),
                points: vec![(1.0, i as f64), (2.0, i as f64 + 1.0)],
            })
            .collect();
        let svg = Chart::new("twelve", XAxis::Named("x"), "y", series).standalone_svg();
        let attrs = |tag: &str| -> Vec<String> {
            svg.split(tag)
                .skip(1)
                .map(|rest| {
                    let start = rest.find("stroke=").unwrap_or(0);
                    let end = rest[start..].find(" data-series").map_or_else(
                        || rest[start..].find("/>").unwrap_or(0) + start,
                        |e| e + start,
                    );
                    rest[start..end]
                        .replace(r#" stroke-width="2""#, "")
                        .replace(r#" stroke-width="1.8""#, "")
                })
                .collect()
        };
        let lines = attrs("<polyline");
        assert_eq!(lines.len(), 12);
        let distinct: std::collections::BTreeSet<&String> = lines.iter().collect();
        assert_eq!(distinct.len(), 12, "{lines:?}");
        let legend: Vec<String> = attrs("<line x1=")
            .into_iter()
            .filter(|s| s.starts_with("stroke=\"#"))
            .collect();
        assert_eq!(
            legend, lines,
            "the legend's swatches match the lines they name"
        );
        assert!(
            svg.starts_with("<svg") && svg.contains("<style>") && svg.contains(r#"fill="white""#)
        );
    }

    #[test]
    fn the_legend_sits_beside_the_plot_and_covers_no_data() {
        let series = vec![Series {
            name: "a".into(),
            points: (0..100).map(|i| (i as f64, i as f64)).collect(),
        }];
        let svg = Chart::new("a", XAxis::Named("x"), "y", series).svg();
        let plot_right = WIDTH - RIGHT;
        let legend_x: f64 = svg
            .split(r#"<text class="legend" x=""#)
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .and_then(|x| x.parse().ok())
            .expect("a legend entry");
        assert!(
            legend_x > plot_right,
            "legend at {legend_x}, plot ends at {plot_right}"
        );
        let furthest = svg
            .split(r#"points=""#)
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .map(|pts| {
                pts.split_whitespace()
                    .filter_map(|p| p.split(',').next()?.parse::<f64>().ok())
                    .fold(0.0, f64::max)
            })
            .expect("a line");
        assert!(furthest <= plot_right + 0.1);
    }

    #[test]
    fn given_ticks_and_ranges_are_kept_and_points_beyond_are_drawn_at_the_edge() {
        let mut chart = Chart::new(
            "ratio",
            XAxis::Named("load"),
            "ratio",
            vec![Series {
                name: "p".into(),
                points: vec![(0.5, 0.5), (1.0, 10.0)],
            }],
        );
        chart.log_x = true;
        chart.y_range = Some((0.0, 3.0));
        chart.x_ticks = Some(vec![(0.5, "0.5".into()), (1.0, "1".into())]);
        chart.guides = vec![1.0];
        let svg = chart.standalone_svg();
        assert!(svg.contains(">0.5</text>") && svg.contains(">1</text>"));
        assert!(svg.contains(r#"class="guide""#));
        let top = chart.top();
        assert!(
            svg.contains(&format!(",{top:.1} ")),
            "10 is drawn at the top of 0..3: {svg}"
        );
        assert!(svg.contains("load (log)"));
    }

    #[test]
    fn durations_read_in_their_unit() {
        assert_eq!(human_seconds(30.0), "30s");
        assert_eq!(human_seconds(600.0), "10m");
        assert_eq!(human_seconds(7200.0), "2h");
        assert_eq!(human_seconds(172_800.0), "2d");
    }

    /// A chart of time since a start labels its ticks in the span's unit and its tooltips as a
    /// clock; a page's linear chart says where its plot lies and what it spans (for zooming).
    #[test]
    fn elapsed_time_reads_in_its_unit_and_pages_carry_the_x_span() {
        let series = vec![Series {
            name: "loss".into(),
            points: (0..=20)
                .map(|i| (i as f64 * 90.0, 1.0 / (1.0 + i as f64)))
                .collect(),
        }];
        let chart = Chart::new(
            "loss by time",
            XAxis::Elapsed("time since the first sample"),
            "loss",
            series,
        );
        let svg = chart.svg();
        assert!(svg.contains(">10 min</text>"), "{svg}");
        assert!(svg.contains("time since the first sample"));
        assert!(
            svg.contains("<title>at 1 min 30 s: loss 0.5</title>"),
            "{svg}"
        );
        assert!(
            svg.contains(&format!(r#"data-x="{LEFT} {} 0 1800""#, WIDTH - RIGHT)),
            "{svg}"
        );
        // Files carry no script hooks; log axes none either.
        assert!(!chart.standalone_svg().contains("data-x"));
        let mut log = chart.clone();
        log.log_x = true;
        assert!(!log.svg().contains("data-x"));
        assert_eq!(clock(3_725.0), "1 h 02 min");
    }
}
