//! Parallel coordinates: one vertical axis per quantity (an experiment's hyper-parameters, then its
//! metric), one line per item (a trial) through its value on each, coloured by its value on the last
//! axis so the good region of the search space stands out. Axes read in their own units: linear,
//! logarithmic (labelled in values) or categorical (a place per choice, labelled with it). A value an
//! item lacks (a conditional parameter it did not take) breaks its line at that axis.

use crate::ticks::{escape, log_ticks, number, precise, ticks};
use std::fmt::Write;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 320.0;
/// Room for the axes' names above and the colour key below.
const TOP: f64 = 40.0;
const BOTTOM: f64 = 44.0;
const SIDE: f64 = 70.0;
/// The colour scale's ends: best (Okabe–Ito blue) to worst (orange).
const BEST: (f64, f64, f64) = (0.0, 114.0, 178.0);
const WORST: (f64, f64, f64) = (230.0, 159.0, 0.0);

/// How an axis places its values.
#[derive(Debug, Clone, PartialEq)]
pub enum Scale {
    Linear,
    Log,
    /// Values are indices into these labels.
    Categories(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub name: String,
    pub scale: Scale,
}

/// One item's values, an entry per axis (`None` where it has none), and its name for the tooltip.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub name: String,
    pub values: Vec<Option<f64>>,
}

#[derive(Debug, Clone)]
pub struct Parallel<'a> {
    /// What the chart shows, for screen readers.
    pub label: &'a str,
    pub axes: Vec<Axis>,
    pub lines: Vec<Line>,
    /// Lower values of the last axis are better (a loss): they take the "best" colour.
    pub lower_is_better: bool,
}

impl Parallel<'_> {
    /// The chart as an `<svg>` element for a page.
    pub fn svg(&self) -> String {
        let mut out = String::with_capacity(2048 + 160 * self.lines.len());
        let _ = write!(
            out,
            r#"<svg class="chart parallel" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg">"#,
            escape(self.label)
        );
        let n = self.axes.len();
        let drawable = self
            .lines
            .iter()
            .filter(|l| l.values.iter().flatten().any(|v| v.is_finite()))
            .count();
        if n < 2 || drawable == 0 {
            let _ = write!(
                out,
                r#"<text x="{}" y="{}" text-anchor="middle" class="muted">no trials with values yet</text></svg>"#,
                WIDTH / 2.0,
                HEIGHT / 2.0
            );
            return out;
        }
        let bottom = HEIGHT - BOTTOM;
        let gap = (WIDTH - 2.0 * SIDE) / (n - 1) as f64;
        let xs: Vec<f64> = (0..n).map(|i| SIDE + gap * i as f64).collect();
        // Each axis's extent, in its scaled units (log10 on a log axis).
        let ranges: Vec<(f64, f64)> = self
            .axes
            .iter()
            .enumerate()
            .map(|(i, axis)| match &axis.scale {
                Scale::Categories(labels) => (-0.5, labels.len().max(1) as f64 - 0.5),
                scale => {
                    let log = *scale == Scale::Log;
                    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
                    for v in self
                        .lines
                        .iter()
                        .filter_map(|l| l.values.get(i).copied().flatten())
                    {
                        if v.is_finite() && (!log || v > 0.0) {
                            let v = if log { v.log10() } else { v };
                            lo = lo.min(v);
                            hi = hi.max(v);
                        }
                    }
                    if !lo.is_finite() {
                        (0.0, 1.0)
                    } else if hi <= lo {
                        (lo - 0.5, hi + 0.5)
                    } else {
                        let pad = (hi - lo) * 0.04;
                        (lo - pad, hi + pad)
                    }
                }
            })
            .collect();
        let place = |i: usize, v: f64| -> Option<f64> {
            let log = self.axes[i].scale == Scale::Log;
            if !v.is_finite() || (log && v <= 0.0) {
                return None;
            }
            let v = if log { v.log10() } else { v };
            let (lo, hi) = ranges[i];
            Some(bottom - (v - lo) / (hi - lo) * (bottom - TOP))
        };
        // The axes, their names and ticks.
        for (i, axis) in self.axes.iter().enumerate() {
            let x = xs[i];
            let _ = write!(
                out,
                r#"<line class="axis" x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{bottom}"/><text class="axis-label" x="{x:.1}" y="{}" text-anchor="middle">{}{}</text>"#,
                TOP - 14.0,
                escape(&axis.name),
                if axis.scale == Scale::Log {
                    " (log)"
                } else {
                    ""
                }
            );
            let (lo, hi) = ranges[i];
            let marks: Vec<(f64, String)> = match &axis.scale {
                Scale::Categories(labels) => labels
                    .iter()
                    .enumerate()
                    .map(|(k, label)| (k as f64, label.clone()))
                    .collect(),
                Scale::Log => log_ticks(lo, hi)
                    .into_iter()
                    .map(|t| (10f64.powf(t), number(10f64.powf(t))))
                    .collect(),
                Scale::Linear => ticks(lo, hi, 4)
                    .into_iter()
                    .map(|t| (t, number(t)))
                    .collect(),
            };
            for (value, label) in marks {
                let y = match &axis.scale {
                    Scale::Categories(_) => bottom - (value - lo) / (hi - lo) * (bottom - TOP),
                    _ => match place(i, value) {
                        Some(y) => y,
                        None => continue,
                    },
                };
                let _ = write!(
                    out,
                    r#"<line class="axis" x1="{:.1}" x2="{x:.1}" y1="{y:.1}" y2="{y:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                    x - 4.0,
                    x - 6.0,
                    y + 4.0,
                    escape(&label)
                );
            }
        }
        // The lines, worst first so the best are drawn on top.
        let last = n - 1;
        let scores: Vec<Option<f64>> = self
            .lines
            .iter()
            .map(|l| {
                l.values
                    .get(last)
                    .copied()
                    .flatten()
                    .filter(|v| v.is_finite())
            })
            .collect();
        let (lo, hi) = scores
            .iter()
            .flatten()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
                (lo.min(v), hi.max(v))
            });
        // 0 for the best value, 1 for the worst.
        let badness = |v: Option<f64>| -> f64 {
            match v {
                Some(v) if hi > lo => {
                    let t = (v - lo) / (hi - lo);
                    if self.lower_is_better { t } else { 1.0 - t }
                }
                Some(_) => 0.0,
                None => 1.0,
            }
        };
        let mut order: Vec<usize> = (0..self.lines.len()).collect();
        order.sort_by(|&a, &b| badness(scores[b]).total_cmp(&badness(scores[a])));
        for k in order {
            let line = &self.lines[k];
            let t = badness(scores[k]);
            let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
            let colour = format!(
                "#{:02x}{:02x}{:02x}",
                mix(BEST.0, WORST.0),
                mix(BEST.1, WORST.1),
                mix(BEST.2, WORST.2)
            );
            let tip: Vec<String> = self
                .axes
                .iter()
                .zip(&line.values)
                .map(|(axis, v)| match (v, &axis.scale) {
                    (None, _) => format!("{} —", axis.name),
                    (Some(v), Scale::Categories(labels)) => format!(
                        "{} {}",
                        axis.name,
                        labels.get(*v as usize).map_or("?", String::as_str)
                    ),
                    (Some(v), _) => format!("{} {}", axis.name, precise(*v)),
                })
                .collect();
            let _ = write!(
                out,
                r#"<g class="trial-line"><title>{}: {}</title>"#,
                escape(&line.name),
                escape(&tip.join(", "))
            );
            // A run of consecutive axes with values is one polyline; a missing value breaks it.
            let mut run: Vec<(f64, f64)> = Vec::new();
            let flush = |run: &mut Vec<(f64, f64)>, out: &mut String| {
                if run.len() >= 2 {
                    let _ = write!(
                        out,
                        r#"<polyline fill="none" stroke="{colour}" stroke-width="1.6" stroke-opacity="0.85" points=""#
                    );
                    for (x, y) in run.iter() {
                        let _ = write!(out, "{x:.1},{y:.1} ");
                    }
                    out.push_str(r#""/>"#);
                } else if let [(x, y)] = run[..] {
                    let _ = write!(
                        out,
                        r#"<circle cx="{x:.1}" cy="{y:.1}" r="2.5" fill="{colour}"/>"#
                    );
                }
                run.clear();
            };
            for (i, value) in line.values.iter().enumerate().take(n) {
                match value.and_then(|v| place(i, v)) {
                    Some(y) => run.push((xs[i], y)),
                    None => flush(&mut run, &mut out),
                }
            }
            flush(&mut run, &mut out);
            out.push_str("</g>");
        }
        // The colour key, under the plot: best to worst, with the last axis's values.
        let key_y = HEIGHT - 18.0;
        let (best, worst) = if self.lower_is_better {
            (lo, hi)
        } else {
            (hi, lo)
        };
        let _ = write!(
            out,
            r##"<defs><linearGradient id="parallel-key"><stop offset="0" stop-color="#0072b2"/><stop offset="1" stop-color="#e69f00"/></linearGradient></defs><rect x="{SIDE}" y="{}" width="160" height="8" fill="url(#parallel-key)"/><text class="tick" x="{}" y="{}">colour: {} from {} (best) to {} (worst)</text>"##,
            key_y - 8.0,
            SIDE + 168.0,
            key_y,
            escape(&self.axes[last].name),
            if best.is_finite() {
                precise(best)
            } else {
                "—".to_owned()
            },
            if worst.is_finite() {
                precise(worst)
            } else {
                "—".to_owned()
            },
        );
        out.push_str("</svg>");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_read_in_their_units_and_the_best_line_is_blue_and_on_top() {
        let chart = Parallel {
            label: "trials",
            axes: vec![
                Axis {
                    name: "lr".into(),
                    scale: Scale::Log,
                },
                Axis {
                    name: "optimizer".into(),
                    scale: Scale::Categories(vec!["sgd".into(), "adamw".into()]),
                },
                Axis {
                    name: "loss".into(),
                    scale: Scale::Linear,
                },
            ],
            lines: vec![
                Line {
                    name: "trial 1".into(),
                    values: vec![Some(0.001), Some(0.0), Some(0.9)],
                },
                Line {
                    name: "trial 2".into(),
                    values: vec![Some(0.1), Some(1.0), Some(0.2)],
                },
                Line {
                    name: "trial 3".into(),
                    values: vec![Some(0.01), None, Some(0.5)],
                },
            ],
            lower_is_better: true,
        };
        let svg = chart.svg();
        assert!(
            svg.contains(">0.01</text>") && svg.contains(">0.1</text>"),
            "{svg}"
        );
        assert!(svg.contains(">adamw</text>") && svg.contains("lr (log)"));
        assert!(svg.contains("<title>trial 2: lr 0.1, optimizer adamw, loss 0.2</title>"));
        assert!(svg.contains("<title>trial 3: lr 0.01, optimizer —, loss 0.5</title>"));
        // The best (lowest loss) is drawn last, in the best colour; the worst in the worst.
        let best = svg.find("trial 2:").unwrap();
        assert!(svg.find("trial 1:").unwrap() < best && svg.find("trial 3:").unwrap() < best);
        assert!(svg[best..].contains(r##"stroke="#0072b2""##));
        assert!(svg.contains(r##"stroke="#e69f00""##));
        assert!(svg.contains("colour: loss from 0.2 (best) to 0.9 (worst)"));
        // A missing value breaks the line: trial 3 is two dots, not a line through "optimizer".
        let third = &svg[svg.find("trial 3:").unwrap()..];
        let third = &third[..third.find("</g>").unwrap()];
        assert!(!third.contains("polyline") && third.matches("<circle").count() == 2);
    }

    #[test]
    fn too_little_to_draw_says_so() {
        let chart = Parallel {
            label: "trials",
            axes: vec![Axis {
                name: "loss".into(),
                scale: Scale::Linear,
            }],
            lines: Vec::new(),
            lower_is_better: true,
        };
        assert!(chart.svg().contains("no trials with values yet"));
    }
}
