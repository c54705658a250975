//! The simulator's report charts — the JCT CDF (log-scale time), GPU utilisation over time, and the
//! sweep's JCT ratio by load — as files, drawn by Drover's one chart renderer (`drover_plot`), the
//! dashboard's too.

use drover_plot::{Chart, Series, XAxis, human_seconds};

/// Percent ticks for a fraction axis.
fn quarters() -> Vec<(f64, String)> {
    (0..=4)
        .map(|i| (f64::from(i) / 4.0, format!("{}%", i * 25)))
        .collect()
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
    let mut x_ticks = Vec::new();
    let mut tick = lo;
    while tick <= hi * 1.0001 {
        x_ticks.push((tick, human_seconds(tick)));
        tick *= 10.0;
    }
    let series = policies
        .iter()
        .map(|(name, values)| {
            let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
            sorted.sort_by(f64::total_cmp);
            let n = sorted.len().max(1) as f64;
            Series {
                name: name.clone(),
                points: sorted
                    .iter()
                    .enumerate()
                    .map(|(k, v)| (v.max(lo), (k + 1) as f64 / n))
                    .collect(),
            }
        })
        .collect();
    let title = "Job completion time (CDF)";
    let mut chart = Chart::new(
        title,
        XAxis::Named("completion time"),
        "fraction of jobs",
        series,
    );
    chart.title = Some(title);
    chart.log_x = true;
    chart.x_range = Some((lo, hi));
    chart.y_range = Some((0.0, 1.0));
    chart.x_ticks = Some(x_ticks);
    chart.y_ticks = Some(quarters());
    chart.standalone_svg()
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
    let days = ((end - start) / 86_400.0).ceil().max(1.0) as u32;
    let every = (days / 10).max(1);
    let x_ticks: Vec<(f64, String)> = (0..=days)
        .step_by(every as usize)
        .map(|d| (f64::from(d) * 24.0, format!("day {d}")))
        .collect();
    let series = policies
        .iter()
        .map(|(name, timeline)| Series {
            name: name.clone(),
            points: hourly(timeline, start)
                .into_iter()
                .map(|(h, busy)| (h, busy / f64::from(gpus.max(1))))
                .collect(),
        })
        .collect();
    let title = format!("GPU utilisation ({gpus} GPUs, hourly mean)");
    let mut chart = Chart::new(
        &title,
        XAxis::Named("time since first submission"),
        "busy GPUs",
        series,
    );
    chart.title = Some(&title);
    chart.x_range = Some((0.0, ((end - start) / 3600.0).max(1.0)));
    chart.y_range = Some((0.0, 1.0));
    chart.x_ticks = Some(x_ticks);
    chart.y_ticks = Some(quarters());
    chart.standalone_svg()
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
    // Ratios far above the best baseline's (FIFO's, overloaded) are drawn at the top so the region
    // around 1 stays readable.
    let y_hi = points().map(|(_, y)| y).fold(1.0, f64::max).min(3.0);
    let y_max = (y_hi * 4.0).ceil() / 4.0 + 0.25;
    let x_ticks = [0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0]
        .into_iter()
        .filter(|tick| (x_lo..=x_hi).contains(tick))
        .map(|tick| (tick, format!("{tick}")))
        .collect();
    let mut y_ticks = Vec::new();
    let mut tick = 0.0;
    while tick <= y_max + 1e-9 {
        y_ticks.push((tick, format!("{tick:.2}")));
        tick += if y_max > 3.0 { 1.0 } else { 0.25 };
    }
    let series = policies
        .iter()
        .map(|(name, values)| {
            let mut sorted = values.clone();
            sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series {
                name: name.clone(),
                points: sorted,
            }
        })
        .collect();
    let title = "Average JCT over the best non-oracle baseline's, by load";
    let mut chart = Chart::new(
        title,
        XAxis::Named("offered load"),
        "avg JCT / best baseline's (clipped at 3)",
        series,
    );
    chart.title = Some(title);
    chart.log_x = true;
    chart.x_range = Some((x_lo, x_hi));
    chart.y_range = Some((0.0, y_max));
    chart.x_ticks = Some(x_ticks);
    chart.y_ticks = Some(y_ticks);
    // Where a policy matches the best baseline.
    chart.guides = vec![1.0];
    chart.standalone_svg()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reports_charts_name_their_axes_and_every_policy() {
        let policies: Vec<(String, Vec<f64>)> = (0..3)
            .map(|i| (format!("policy-{i}"), vec![100.0 * (i + 1) as f64, 5000.0]))
            .collect();
        let cdf = jct_cdf(&policies);
        assert!(cdf.contains("completion time (log)") && cdf.contains("fraction of jobs"));
        assert!(
            cdf.contains(">100%<") && cdf.contains(">2m<") && cdf.contains(">3h<"),
            "percent and human time ticks"
        );
        for i in 0..3 {
            assert!(cdf.contains(&format!("policy-{i} (2 pts)")));
        }
        let timelines = vec![(
            "fifo".to_owned(),
            vec![(0.0, 2.0), (7200.0, 4.0), (90_000.0, 0.0)],
        )];
        let busy = utilisation(&timelines, 4);
        assert!(busy.contains("GPU utilisation (4 GPUs, hourly mean)") && busy.contains(">day 1<"));
        let ratios = vec![(
            "drover".to_owned(),
            vec![(0.5, 0.9), (1.0, 1.1), (2.0, 9.0)],
        )];
        let sweep = sweep(&ratios);
        assert!(sweep.contains(r#"class="guide""#), "the line at 1");
        assert!(sweep.contains("offered load (log)"));
    }
}
