//! Charts as SVG, drawn on the server: a chart is a function from series to markup. Every series
//! gets its own colour and dash, axes carry units, and a legend names what a reader compares. Long
//! series are downsampled with LTTB (largest triangle three buckets) before they are drawn, so a
//! curve of 100,000 points reaches the browser as at most [`MAX_POINTS`] points per series.

use std::fmt::Write;

/// Points per series after downsampling: more than a chart's width in pixels shows nothing more.
pub const MAX_POINTS: usize = 800;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 280.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 40.0;

/// Colours that stay apart for colour-blind readers (Okabe–Ito), each with its own dash.
const STYLES: [(&str, &str); 8] = [
    ("#0072b2", ""),
    ("#d55e00", "6 3"),
    ("#009e73", "2 3"),
    ("#cc79a7", "8 3 2 3"),
    ("#e69f00", "4 4"),
    ("#56b4e9", "1 2"),
    ("#a0a000", "10 4"),
    ("#888888", "3 3 1 3"),
];

#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// How the x axis reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XAxis<'a> {
    /// Training steps.
    Steps,
    /// Seconds relative to now (negative: the past), labelled in hours.
    HoursAgo,
    /// An experiment's trials, by index.
    Trials,
    /// Any quantity, labelled so.
    Named(&'a str),
}

#[derive(Debug, Clone)]
pub struct Chart<'a> {
    /// What the chart shows, for screen readers.
    pub label: &'a str,
    pub x: XAxis<'a>,
    pub y_label: &'a str,
    pub log_y: bool,
    /// The x axis spans this, whatever the points (a time window); the points' extent otherwise.
    pub x_range: Option<(f64, f64)>,
    /// Points as dots (a scatter) rather than joined lines; points need not be sorted.
    pub markers: bool,
    pub series: Vec<Series>,
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

/// Round tick values covering `[lo, hi]`, about `count` of them.
fn ticks(lo: f64, hi: f64, count: usize) -> Vec<f64> {
    let span = hi - lo;
    if !(span.is_finite() && span > 0.0) {
        return vec![lo];
    }
    let raw = span / count as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| span / s <= count as f64)
        .unwrap_or(10.0 * magnitude);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// [`ticks`] for a count (steps, trials): no tick between two whole numbers.
fn whole_ticks(lo: f64, hi: f64, count: usize) -> Vec<f64> {
    let whole: Vec<f64> = ticks(lo, hi, count)
        .into_iter()
        .filter(|t| t.fract() == 0.0)
        .collect();
    if whole.is_empty() { vec![lo] } else { whole }
}

fn number(value: f64) -> String {
    let magnitude = value.abs();
    if value == 0.0 {
        "0".to_owned()
    } else if !(1e-3..1e6).contains(&magnitude) {
        format!("{value:.1e}")
    } else if magnitude >= 100.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else if magnitude >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

impl Chart<'_> {
    /// The chart as an `<svg>` element (with a text fallback when there is nothing to draw).
    pub fn svg(&self) -> String {
        let series: Vec<Series> = self
            .series
            .iter()
            .map(|s| {
                let mut points: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|&(x, y)| x.is_finite() && y.is_finite() && (!self.log_y || y > 0.0))
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
        let all = series.iter().flat_map(|s| s.points.iter());
        let (mut x_lo, mut x_hi, mut y_lo, mut y_hi) = (
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
        );
        for &(x, y) in all {
            let y = if self.log_y { y.log10() } else { y };
            x_lo = x_lo.min(x);
            x_hi = x_hi.max(x);
            y_lo = y_lo.min(y);
            y_hi = y_hi.max(y);
        }
        let mut out = String::with_capacity(4096 + 24 * MAX_POINTS * series.len());
        let _ = write!(
            out,
            r#"<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg">"#,
            escape(self.label)
        );
        if let Some((lo, hi)) = self.x_range {
            x_lo = lo;
            x_hi = hi;
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
        if x_hi <= x_lo {
            x_hi = x_lo + 1.0;
        }
        // Counts and rates start at zero when nothing is negative.
        if !self.log_y && y_lo >= 0.0 && y_lo <= y_hi * 0.5 {
            y_lo = 0.0;
        }
        if y_hi <= y_lo {
            let pad = if y_lo == 0.0 { 1.0 } else { y_lo.abs() * 0.05 };
            y_hi += pad;
            if y_lo != 0.0 {
                y_lo -= pad;
            }
        }
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let sx = |x: f64| LEFT + (x - x_lo) / (x_hi - x_lo) * plot_w;
        let sy = |y: f64| TOP + (1.0 - (y - y_lo) / (y_hi - y_lo)) * plot_h;
        // Grid and y ticks.
        let y_ticks = if self.log_y {
            (y_lo.floor() as i64..=y_hi.ceil() as i64)
                .map(|e| e as f64)
                .filter(|e| (y_lo..=y_hi).contains(e))
                .collect()
        } else {
            ticks(y_lo, y_hi, 5)
        };
        for t in y_ticks {
            let y = sy(t);
            let label = if self.log_y {
                number(10f64.powf(t))
            } else {
                number(t)
            };
            let _ = write!(
                out,
                r#"<line class="grid" x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}"/><text class="tick" x="{}" y="{:.1}" text-anchor="end">{label}</text>"#,
                WIDTH - RIGHT,
                LEFT - 6.0,
                y + 4.0,
            );
        }
        let (x_ticks, x_label) = match self.x {
            XAxis::Steps => (whole_ticks(x_lo, x_hi, 6), "step"),
            XAxis::Trials => (whole_ticks(x_lo, x_hi, 6), "trial"),
            XAxis::Named(name) => (ticks(x_lo, x_hi, 6), name),
            XAxis::HoursAgo => (
                ticks(x_lo / 3600.0, x_hi / 3600.0, 6)
                    .into_iter()
                    .map(|h| h * 3600.0)
                    .collect(),
                "hours ago",
            ),
        };
        for t in x_ticks {
            let label = match self.x {
                XAxis::Steps | XAxis::Trials | XAxis::Named(_) => number(t),
                XAxis::HoursAgo => number(-t / 3600.0),
            };
            let _ = write!(
                out,
                r#"<text class="tick" x="{:.1}" y="{}" text-anchor="middle">{label}</text>"#,
                sx(t),
                HEIGHT - BOTTOM + 16.0
            );
        }
        let x_label = escape(x_label);
        let _ = write!(
            out,
            r#"<line class="axis" x1="{LEFT}" x2="{}" y1="{y}" y2="{y}"/><line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{y}"/>"#,
            WIDTH - RIGHT,
            y = HEIGHT - BOTTOM
        );
        let _ = write!(
            out,
            r#"<text class="axis-label" x="{}" y="{}" text-anchor="middle">{x_label}</text><text class="axis-label" transform="translate(14 {}) rotate(-90)" text-anchor="middle">{}{}</text>"#,
            LEFT + plot_w / 2.0,
            HEIGHT - 4.0,
            TOP + plot_h / 2.0,
            escape(self.y_label),
            if self.log_y { " (log)" } else { "" }
        );
        for (i, s) in series.iter().enumerate().filter(|_| self.markers) {
            let (colour, _) = STYLES[i % STYLES.len()];
            let _ = write!(
                out,
                r#"<g fill="{colour}" data-series="{}">"#,
                escape(&s.name)
            );
            for &(x, y) in &s.points {
                let y = if self.log_y { y.log10() } else { y };
                let _ = write!(
                    out,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3.5"/>"#,
                    sx(x),
                    sy(y)
                );
            }
            out.push_str("</g>");
        }
        for (i, s) in series.iter().enumerate().filter(|_| !self.markers) {
            let (colour, dash) = STYLES[i % STYLES.len()];
            let _ = write!(
                out,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="1.8" stroke-dasharray="{dash}" data-series="{}" points=""#,
                escape(&s.name)
            );
            for &(x, y) in &s.points {
                let y = if self.log_y { y.log10() } else { y };
                let _ = write!(out, "{:.1},{:.1} ", sx(x), sy(y));
            }
            out.push_str(r#""/>"#);
            // A line of one point draws nothing: show it as a dot.
            if let [(x, y)] = s.points[..] {
                let y = if self.log_y { y.log10() } else { y };
                let _ = write!(
                    out,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{colour}"/>"#,
                    sx(x),
                    sy(y)
                );
            }
        }
        // The legend, top right, one line per series.
        for (i, s) in series.iter().enumerate() {
            let (colour, dash) = STYLES[i % STYLES.len()];
            let y = TOP + 8.0 + 16.0 * i as f64;
            let x = WIDTH - RIGHT - 170.0;
            let _ = write!(
                out,
                r#"{}<text class="legend" x="{}" y="{}">{} ({} pts)</text>"#,
                if self.markers {
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
                },
                x + 30.0,
                y + 4.0,
                escape(&s.name),
                s.points.len()
            );
        }
        out.push_str("</svg>");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let chart = Chart {
            label: "loss and accuracy",
            x: XAxis::Steps,
            y_label: "value",
            log_y: true,
            x_range: None,
            markers: false,
            series: vec![
                Series {
                    name: "loss".into(),
                    points: (1..5000).map(|i| (i as f64, 1.0 / i as f64)).collect(),
                },
                Series {
                    name: "<accuracy>".into(),
                    points: vec![(0.0, 0.0), (10.0, 0.5)],
                },
            ],
        };
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
}
