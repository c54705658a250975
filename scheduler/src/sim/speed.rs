//! Measured training speeds (`data/models/ps_worker_speed.txt`) and the ground-truth speed surface
//! built from them: inside the measured grid, bilinear interpolation of the measurements (as the DL2
//! authors do); outside it, the Optimus synchronous model fitted to them with non-negative
//! coefficients:
//!
//! step time t(p, w) = θ0·M/w + θ1 + θ2·w/p + θ3·w + θ4·p,   throughput = M / t  (samples/s)
//!
//! with M the total batch. The fit minimises relative error (rows weighted by 1/t), by exact
//! non-negative least squares over the 31 active sets of the five coefficients.

use crate::perf::nnls;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("speed file line {line}: {reason}")]
pub struct ParseError {
    pub line: usize,
    pub reason: String,
}

/// One model's measurements and its fitted Optimus function.
#[derive(Debug, Clone)]
pub struct MeasuredModel {
    pub name: String,
    /// Total batch size M (samples per step).
    pub batch: f64,
    /// (PS shards, workers) -> throughput in samples/s.
    pub points: BTreeMap<(u32, u32), f64>,
    ps_axis: Vec<u32>,
    worker_axis: Vec<u32>,
    /// Mean CPU use of one PS shard and of one worker, as measured.
    pub ps_cpu: f64,
    pub worker_cpu: f64,
    pub theta: [f64; 5],
    /// Relative RMS error of the fit over the measured points.
    pub residual: f64,
    /// Median relative error of the fit.
    pub median_error: f64,
}

/// A model's lines as read: batch, (p, w, throughput) points, PS and worker CPU samples.
type RawModel = (f64, Vec<(u32, u32, f64)>, Vec<f64>, Vec<f64>);

/// Parses the Python-literal tuples of the speed file, dropping failed (all-zero) runs.
pub fn parse_models(text: &str) -> Result<Vec<MeasuredModel>, ParseError> {
    let mut raw: BTreeMap<String, RawModel> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let err = |reason: &str| ParseError {
            line: n + 1,
            reason: reason.to_owned(),
        };
        let inner = line
            .strip_prefix('(')
            .and_then(|l| l.strip_suffix(')'))
            .ok_or_else(|| err("not a tuple"))?;
        let fields = split_top_level(inner);
        if fields.len() != 8 {
            return Err(err("expected 8 fields"));
        }
        let name = fields[0].trim().trim_matches('\'').to_owned();
        let number = |s: &str| s.trim().parse::<f64>().map_err(|_| err("bad number"));
        let list = |s: &str| -> Result<Vec<f64>, ParseError> {
            let s = s
                .trim()
                .strip_prefix('[')
                .and_then(|s| s.strip_suffix(']'))
                .ok_or_else(|| err("bad list"))?;
            s.split(',')
                .filter(|x| !x.trim().is_empty())
                .map(number)
                .collect()
        };
        let batch = number(fields[2])?;
        let ps = number(fields[3])? as u32;
        let workers = number(fields[4])? as u32;
        let speeds = list(fields[5])?;
        let throughput: f64 = speeds.iter().sum();
        if throughput <= 0.0 {
            continue;
        }
        let entry = raw
            .entry(name)
            .or_insert_with(|| (batch, Vec::new(), Vec::new(), Vec::new()));
        entry.1.push((ps, workers, throughput));
        entry.2.extend(list(fields[6])?);
        entry.3.extend(list(fields[7])?);
    }
    Ok(raw
        .into_iter()
        .map(|(name, (batch, points, ps_cpu, worker_cpu))| {
            MeasuredModel::new(name, batch, &points, &ps_cpu, &worker_cpu)
        })
        .collect())
}

/// Splits on commas outside brackets.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

fn features(batch: f64, p: f64, w: f64) -> [f64; 5] {
    [batch / w, 1.0, w / p, w, p]
}

impl MeasuredModel {
    fn new(
        name: String,
        batch: f64,
        points: &[(u32, u32, f64)],
        ps_cpu: &[f64],
        worker_cpu: &[f64],
    ) -> Self {
        let rows: Vec<([f64; 5], f64)> = points
            .iter()
            .map(|&(p, w, throughput)| {
                let step_s = batch / throughput;
                let x = features(batch, f64::from(p), f64::from(w));
                (x.map(|v| v / step_s), 1.0)
            })
            .collect();
        let theta = nnls(&rows);
        let mut errors: Vec<f64> = points
            .iter()
            .map(|&(p, w, throughput)| {
                let fitted = fitted_throughput(&theta, batch, f64::from(p), f64::from(w));
                (fitted - throughput).abs() / throughput
            })
            .collect();
        let residual =
            (errors.iter().map(|e| e * e).sum::<f64>() / errors.len().max(1) as f64).sqrt();
        errors.sort_by(f64::total_cmp);
        let median_error = errors.get(errors.len() / 2).copied().unwrap_or(0.0);
        let mut ps_axis: Vec<u32> = points.iter().map(|p| p.0).collect();
        ps_axis.sort_unstable();
        ps_axis.dedup();
        let mut worker_axis: Vec<u32> = points.iter().map(|p| p.1).collect();
        worker_axis.sort_unstable();
        worker_axis.dedup();
        MeasuredModel {
            name,
            batch,
            points: points.iter().map(|&(p, w, t)| ((p, w), t)).collect(),
            ps_axis,
            worker_axis,
            ps_cpu: mean(ps_cpu),
            worker_cpu: mean(worker_cpu),
            theta,
            residual,
            median_error,
        }
    }

    /// The fitted Optimus function, in samples/s.
    pub fn fitted(&self, p: f64, w: f64) -> f64 {
        fitted_throughput(&self.theta, self.batch, p, w)
    }

    /// The true speed in samples/s at (p, w), real-valued.
    pub fn speed(&self, p: f64, w: f64) -> f64 {
        let (Some(&p_lo), Some(&p_hi)) = (self.ps_axis.first(), self.ps_axis.last()) else {
            return self.fitted(p, w);
        };
        let (Some(&w_lo), Some(&w_hi)) = (self.worker_axis.first(), self.worker_axis.last()) else {
            return self.fitted(p, w);
        };
        if p < f64::from(p_lo) || p > f64::from(p_hi) || w < f64::from(w_lo) || w > f64::from(w_hi)
        {
            return self.fitted(p, w);
        }
        let (p0, p1) = bracket(&self.ps_axis, p);
        let (w0, w1) = bracket(&self.worker_axis, w);
        let corner = |pi: u32, wi: u32| {
            self.points
                .get(&(pi, wi))
                .copied()
                .unwrap_or_else(|| self.fitted(f64::from(pi), f64::from(wi)))
        };
        let fp = if p1 == p0 {
            0.0
        } else {
            (p - f64::from(p0)) / f64::from(p1 - p0)
        };
        let fw = if w1 == w0 {
            0.0
        } else {
            (w - f64::from(w0)) / f64::from(w1 - w0)
        };
        let low = corner(p0, w0) * (1.0 - fp) + corner(p1, w0) * fp;
        let high = corner(p0, w1) * (1.0 - fp) + corner(p1, w1) * fp;
        low * (1.0 - fw) + high * fw
    }

    /// The worker count at which the measurements peak (strong scaling: small for every model).
    pub fn peak_workers(&self) -> u32 {
        self.points
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(1, |(&(_, w), _)| w)
    }
}

fn fitted_throughput(theta: &[f64; 5], batch: f64, p: f64, w: f64) -> f64 {
    let x = features(batch, p.max(1e-9), w.max(1e-9));
    let step_s: f64 = x.iter().zip(theta).map(|(x, t)| x * t).sum();
    if step_s > 0.0 { batch / step_s } else { 0.0 }
}

/// The axis values around `x` (equal when `x` is on the axis).
fn bracket(axis: &[u32], x: f64) -> (u32, u32) {
    let hi = axis
        .iter()
        .position(|&a| f64::from(a) >= x)
        .unwrap_or(axis.len() - 1);
    if f64::from(axis[hi]) == x || hi == 0 {
        (axis[hi], axis[hi])
    } else {
        (axis[hi - 1], axis[hi])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tuples_and_drops_failed_runs() {
        let text = "('m', 'dist_sync', 32, 1, 2, [7.7, 7.7], [1.9], [0.4, 0.4])\n('m', 'dist_sync', 32, 2, 2, [0.0, 0.0], [0.0], [0.0, 0.0])\n";
        let models = parse_models(text).unwrap();
        assert_eq!(models.len(), 1);
        assert_eq!(models[0].points.len(), 1);
        assert!((models[0].points[&(1, 2)] - 15.4).abs() < 1e-9);
        assert!(parse_models("not a tuple").is_err());
    }
}
