//! Charts as standalone SVG: the JCT CDF (log-scale time), GPU utilisation over time, and the sweep's
//! JCT ratio by load.

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 160.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLOURS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#7f7f7f", "#bcbd22",
];
/// Dash patterns, cycled with a period (3) prime to the palette's (10): every series up to 30 has a
/// colour and dash pair of its own, and neighbours in the legend differ in both.
const DASHES: [&str; 3] = ["", "7 3", "2 2"];

/// The stroke of series `index`: its colour, and its `stroke-dasharray` attribute (empty for solid).
fn stroke(index: usize) -> (&'static str, String) {
    let dash = DASHES[index % DASHES.len()];
    let dash = if dash.is_empty() {
        String::new()
    } else {
        format!(" stroke-dasharray=\"{dash}\"")
    };
    (COLOURS[index % COLOURS.len()], dash)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

struct Axes {
    x_min: f64,
    x_max: f64,
    y_min: f64,
    y_max: f64,
    log_x: bool,
}

impl Axes {
    fn x(&self, v: f64) -> f64 {
        let (v, lo, hi) = if self.log_x {
            (v.max(1e-9).log10(), self.x_min.log10(), self.x_max.log10())
        } else {
            (v, self.x_min, self.x_max)
        };
        LEFT + (v - lo) / (hi - lo).max(1e-12) * (WIDTH - LEFT - RIGHT)
    }

    fn y(&self, v: f64) -> f64 {
        HEIGHT
            - BOTTOM
            - (v - self.y_min) / (self.y_max - self.y_min).max(1e-12) * (HEIGHT - TOP - BOTTOM)
    }
}

fn frame(
    title: &str,
    x_label: &str,
    y_label: &str,
    axes: &Axes,
    x_ticks: &[(f64, String)],
    y_ticks: &[(f64, String)],
) -> String {
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n",
        (LEFT + WIDTH - RIGHT) / 2.0,
        escape(title)
    );
    for (v, label) in x_ticks {
        let x = axes.x(*v);
        svg.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#eee\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            HEIGHT - BOTTOM,
            HEIGHT - BOTTOM + 16.0,
            escape(label)
        ));
    }
    for (v, label) in y_ticks {
        let y = axes.y(*v);
        svg.push_str(&format!(
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            escape(label)
        ));
    }
    svg.push_str(&format!(
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"none\" stroke=\"#333\"/>\n\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n\
         <text x=\"16\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {:.1})\">{}</text>\n",
        WIDTH - LEFT - RIGHT,
        HEIGHT - TOP - BOTTOM,
        (LEFT + WIDTH - RIGHT) / 2.0,
        HEIGHT - 12.0,
        escape(x_label),
        (TOP + HEIGHT - BOTTOM) / 2.0,
        (TOP + HEIGHT - BOTTOM) / 2.0,
        escape(y_label)
    ));
    svg
}

fn series(svg: &mut String, axes: &Axes, index: usize, name: &str, points: &[(f64, f64)]) {
    let (colour, dash) = stroke(index);
    let path: Vec<String> = points
        .iter()
        .map(|(x, y)| format!("{:.1},{:.1}", axes.x(*x), axes.y(*y)))
        .collect();
    svg.push_str(&format!(
        "<polyline fill=\"none\" stroke=\"{colour}\"{dash} stroke-width=\"1.8\" points=\"{}\"/>\n",
        path.join(" ")
    ));
    let y = TOP + 16.0 + 18.0 * index as f64;
    svg.push_str(&format!(
        "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{colour}\"{dash} stroke-width=\"3\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
        WIDTH - RIGHT + 12.0,
        WIDTH - RIGHT + 32.0,
        WIDTH - RIGHT + 38.0,
        y + 4.0,
        escape(name)
    ));
}

/// CDF of job completion times, one line per policy.
pub fn jct_cdf(policies: &[(String, Vec<f64>)]) -> String {
    let all = policies
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| *v > 0.0);
    let (lo, hi) = all.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let lo = if lo.is_finite() {
        10f64.powf(lo.log10().floor())
    } else {
        1.0
    };
    let hi = if hi > 0.0 {
        10f64.powf(hi.log10().ceil())
    } else {
        10.0
    };
    let axes = Axes {
        x_min: lo,
        x_max: hi,
        y_min: 0.0,
        y_max: 1.0,
        log_x: true,
    };
    let mut x_ticks = Vec::new();
    let mut tick = lo;
    while tick <= hi * 1.0001 {
        x_ticks.push((tick, human_seconds(tick)));
        tick *= 10.0;
    }
    let y_ticks: Vec<(f64, String)> = (0..=4)
        .map(|i| (f64::from(i) / 4.0, format!("{}%", i * 25)))
        .collect();
    let mut svg = frame(
        "Job completion time (CDF)",
        "completion time (log scale)",
        "fraction of jobs",
        &axes,
        &x_ticks,
        &y_ticks,
    );
    for (i, (name, values)) in policies.iter().enumerate() {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len().max(1) as f64;
        let step = (sorted.len() / 400).max(1);
        let points: Vec<(f64, f64)> = sorted
            .iter()
            .enumerate()
            .filter(|(k, _)| k % step == 0 || *k + 1 == sorted.len())
            .map(|(k, v)| (v.max(lo), (k + 1) as f64 / n))
            .collect();
        series(&mut svg, &axes, i, name, &points);
    }
    svg.push_str("</svg>\n");
    svg
}

/// GPU utilisation over time (hourly means), one line per policy.
pub fn utilisation(policies: &[(String, Vec<(f64, f64)>)], gpus: u32) -> String {
    let end = policies
        .iter()
        .flat_map(|(_, v)| v.last().map(|p| p.0))
        .fold(0.0, f64::max);
    let start = policies
        .iter()
        .flat_map(|(_, v)| v.first().map(|p| p.0))
        .fold(f64::INFINITY, f64::min);
    let start = if start.is_finite() { start } else { 0.0 };
    let axes = Axes {
        x_min: 0.0,
        x_max: ((end - start) / 3600.0).max(1.0),
        y_min: 0.0,
        y_max: 1.0,
        log_x: false,
    };
    let days = ((end - start) / 86_400.0).ceil().max(1.0) as u32;
    let every = (days / 10).max(1);
    let x_ticks: Vec<(f64, String)> = (0..=days)
        .step_by(every as usize)
        .map(|d| (f64::from(d) * 24.0, format!("day {d}")))
        .collect();
    let y_ticks: Vec<(f64, String)> = (0..=4)
        .map(|i| (f64::from(i) / 4.0, format!("{}%", i * 25)))
        .collect();
    let title = format!("GPU utilisation ({gpus} GPUs, hourly mean)");
    let mut svg = frame(
        &title,
        "time since first submission",
        "busy GPUs",
        &axes,
        &x_ticks,
        &y_ticks,
    );
    for (i, (name, timeline)) in policies.iter().enumerate() {
        let points: Vec<(f64, f64)> = hourly(timeline, start)
            .into_iter()
            .map(|(h, busy)| (h, busy / f64::from(gpus.max(1))))
            .collect();
        series(&mut svg, &axes, i, name, &points);
    }
    svg.push_str("</svg>\n");
    svg
}

/// Hourly means of a step function given as (time, value) change points.
fn hourly(timeline: &[(f64, f64)], start: f64) -> Vec<(f64, f64)> {
    let Some(&(_, _)) = timeline.last() else {
        return Vec::new();
    };
    let end = timeline.last().map_or(start, |p| p.0);
    let hours = ((end - start) / 3600.0).ceil() as usize;
    let mut sums = vec![0.0; hours.max(1)];
    for window in timeline.windows(2) {
        let (t0, v) = window[0];
        let t1 = window[1].0;
        let mut t = t0;
        while t < t1 {
            let hour = ((t - start) / 3600.0) as usize;
            let boundary = start + (hour as f64 + 1.0) * 3600.0;
            let until = boundary.min(t1);
            if let Some(sum) = sums.get_mut(hour) {
                *sum += v * (until - t);
            }
            t = until;
        }
    }
    sums.into_iter()
        .enumerate()
        .map(|(h, s)| (h as f64 + 0.5, s / 3600.0))
        .collect()
}

pub fn human_seconds(s: f64) -> String {
    match s {
        s if s < 60.0 => format!("{s:.0}s"),
        s if s < 3600.0 => format!("{:.0}m", s / 60.0),
        s if s < 86_400.0 => format!("{:.0}h", s / 3600.0),
        s => format!("{:.0}d", s / 86_400.0),
    }
}

/// The sweep's chart: each policy's average JCT over the best non-oracle baseline's (1 = as good as
/// the best of them), against offered load (log scale), one line per policy.
pub fn sweep(policies: &[(String, Vec<(f64, f64)>)]) -> String {
    let points = || policies.iter().flat_map(|(_, p)| p.iter().copied());
    let (x_lo, x_hi) = points().fold((f64::INFINITY, 0.0f64), |(lo, hi), (x, _)| {
        (lo.min(x), hi.max(x))
    });
    let (x_lo, x_hi) = if x_lo.is_finite() && x_hi > 0.0 {
        (x_lo.max(1e-3) / 1.2, x_hi * 1.2)
    } else {
        (0.1, 10.0)
    };
    // Ratios far above the best baseline's (FIFO's, overloaded) are clipped at the top so the region
    // around 1 stays readable.
    let y_hi = points().map(|(_, y)| y).fold(1.0, f64::max).min(3.0);
    let y_max = (y_hi * 4.0).ceil() / 4.0 + 0.25;
    let axes = Axes {
        x_min: x_lo,
        x_max: x_hi,
        y_min: 0.0,
        y_max,
        log_x: true,
    };
    let mut x_ticks = Vec::new();
    for tick in [0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0] {
        if tick >= x_lo && tick <= x_hi {
            x_ticks.push((tick, format!("{tick}")));
        }
    }
    let mut y_ticks = Vec::new();
    let mut tick = 0.0;
    while tick <= y_max + 1e-9 {
        y_ticks.push((tick, format!("{tick:.2}")));
        tick += if y_max > 3.0 { 1.0 } else { 0.25 };
    }
    let mut svg = frame(
        "Average JCT over the best non-oracle baseline's, by load",
        "offered load (log scale)",
        "avg JCT / best baseline's (clipped at 3)",
        &axes,
        &x_ticks,
        &y_ticks,
    );
    // The line where a policy matches the best baseline.
    svg.push_str(&format!(
        "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#999\" stroke-dasharray=\"4 3\"/>\n",
        WIDTH - RIGHT,
        y = axes.y(1.0)
    ));
    for (i, (name, values)) in policies.iter().enumerate() {
        let mut sorted: Vec<(f64, f64)> = values.iter().map(|&(x, y)| (x, y.min(y_max))).collect();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        series(&mut svg, &axes, i, name, &sorted);
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line of a chart with as many series as `drover sim --compare all` draws (nine, and
    /// more) has a colour and dash of its own, in the plot and in the legend alike.
    #[test]
    fn every_series_has_its_own_colour_and_dash() {
        let policies: Vec<(String, Vec<f64>)> = (0..12)
            .map(|i| (format!("policy-{i}"), vec![10.0 * (i + 1) as f64, 100.0]))
            .collect();
        let svg = jct_cdf(&policies);
        let strokes = |prefix: &str| -> Vec<String> {
            svg.lines()
                .filter(|l| l.starts_with(prefix))
                .map(|l| {
                    let start = l.find("stroke=").unwrap_or(0);
                    let end = l.find("stroke-width").unwrap_or(l.len());
                    l[start..end].to_owned()
                })
                .collect()
        };
        let lines = strokes("<polyline");
        assert_eq!(lines.len(), 12);
        let distinct: std::collections::BTreeSet<&String> = lines.iter().collect();
        assert_eq!(distinct.len(), 12, "{lines:?}");
        // The legend's swatches match the lines they name.
        let legend: Vec<String> = strokes("<line x1=")
            .into_iter()
            .filter(|s| !s.contains("#eee") && !s.contains("#333") && !s.contains("#999"))
            .collect();
        assert_eq!(legend, lines);
    }
}
