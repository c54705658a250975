//! Metric series as charts draw them, kept between requests. The first view of a series asks the
//! database to gather it into step ranges (one scan of its index); every later view reads only the
//! samples after the last step seen (one index seek) and folds them in, so a job with 100,000 points
//! costs about what a new job costs once it has been drawn. Ranges double in width when a series
//! outgrows [`MAX_BUCKETS`]. At most [`CAPACITY`] series are kept, the least recently drawn dropped.
//! Every read goes through the store's scoped queries, so a cached series is never shown to a caller
//! who may not see its job.

use drover_api::state::AppState;
use drover_core::JobId;
use drover_store::{MetricBucket, MetricPoint, MetricSeries, Scope, StepRange, StoreResult};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant;

/// Ranges a series is gathered into at first, and kept to at most.
pub const BUCKETS: u32 = 1000;
const MAX_BUCKETS: usize = 2 * BUCKETS as usize;
/// Series kept at once (about 100 KB each at most).
pub const CAPACITY: usize = 256;
/// New samples read per query.
const PAGE: u32 = 20_000;

#[derive(Debug)]
struct Cached {
    /// Ranges are `[origin + k·width, origin + (k+1)·width)`.
    origin: u64,
    width: u64,
    buckets: Vec<MetricBucket>,
    last_step: Option<u64>,
}

impl Cached {
    fn from_series(series: MetricSeries) -> Self {
        Cached {
            origin: series.origin,
            width: series.width.max(1),
            last_step: series.buckets.iter().map(|b| b.last_step).max(),
            buckets: series.buckets,
        }
    }

    fn index(&self, step: u64) -> u64 {
        (step.saturating_sub(self.origin)) / self.width
    }

    fn add(&mut self, point: MetricPoint) {
        let MetricPoint {
            step,
            value,
            recorded_at,
        } = point;
        let index = self.index(step);
        let same = self
            .buckets
            .last()
            .is_some_and(|last| self.index(last.first_step) == index);
        match self.buckets.last_mut() {
            Some(last) if same => {
                last.mean += (value - last.mean) / (last.samples + 1) as f64;
                last.samples += 1;
                last.min = last.min.min(value);
                last.max = last.max.max(value);
                last.last_step = last.last_step.max(step);
                last.last_at = last.last_at.max(recorded_at);
            }
            _ => self.buckets.push(MetricBucket {
                first_step: step,
                last_step: step,
                min: value,
                max: value,
                mean: value,
                samples: 1,
                last_at: recorded_at,
            }),
        }
        self.last_step = Some(self.last_step.map_or(step, |s| s.max(step)));
        while self.buckets.len() > MAX_BUCKETS {
            self.coarsen();
        }
    }

    /// Doubles the ranges' width, merging neighbours.
    fn coarsen(&mut self) {
        self.width *= 2;
        let mut merged: Vec<MetricBucket> = Vec::with_capacity(self.buckets.len() / 2 + 1);
        for bucket in self.buckets.drain(..) {
            let index = (bucket.first_step.saturating_sub(self.origin)) / self.width;
            match merged.last_mut() {
                Some(last)
                    if (last.first_step.saturating_sub(self.origin)) / self.width == index =>
                {
                    let samples = last.samples + bucket.samples;
                    last.mean = (last.mean * last.samples as f64
                        + bucket.mean * bucket.samples as f64)
                        / samples as f64;
                    last.samples = samples;
                    last.min = last.min.min(bucket.min);
                    last.max = last.max.max(bucket.max);
                    last.last_step = bucket.last_step;
                    last.last_at = last.last_at.max(bucket.last_at);
                }
                _ => merged.push(bucket),
            }
        }
        self.buckets = merged;
    }
}

type Key = (JobId, String);
/// One series, locked while it is brought up to date (concurrent viewers wait, not repeat the work).
type Slot = Arc<tokio::sync::Mutex<Option<Cached>>>;

#[derive(Debug, Default)]
struct Cache {
    series: HashMap<Key, (Slot, Instant)>,
}

static CACHE: LazyLock<Mutex<Cache>> = LazyLock::new(Default::default);

fn slot(key: Key) -> Slot {
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = Instant::now();
    if let Some((slot, used)) = cache.series.get_mut(&key) {
        *used = now;
        return slot.clone();
    }
    if cache.series.len() >= CAPACITY
        && let Some(oldest) = cache
            .series
            .iter()
            .min_by_key(|(_, (_, used))| *used)
            .map(|(key, _)| key.clone())
    {
        cache.series.remove(&oldest);
    }
    let slot = Arc::new(tokio::sync::Mutex::new(None));
    cache.series.insert(key, (slot.clone(), now));
    slot
}

/// The series `name` of `job` as step ranges, up to its latest sample.
pub async fn buckets(
    state: &AppState,
    scope: Scope,
    job: JobId,
    name: &str,
) -> StoreResult<Vec<MetricBucket>> {
    let slot = slot((job, name.to_owned()));
    let mut cached = slot.lock().await;
    let series = match cached.as_mut() {
        Some(series) => series,
        None => {
            let gathered = state
                .store
                .metric_series(scope, job, name, StepRange::ALL, BUCKETS)
                .await?;
            cached.insert(Cached::from_series(gathered))
        }
    };
    loop {
        let points = state
            .store
            .metric_points_after(scope, job, name, series.last_step, PAGE)
            .await?;
        for &point in &points {
            series.add(point);
        }
        if points.len() < PAGE as usize {
            break;
        }
    }
    Ok(series.buckets.clone())
}

/// The series `name` of `job` over `steps` alone (a zoomed chart), gathered afresh into
/// [`BUCKETS`] ranges of that span: not kept, as each view asks for a span of its own.
pub async fn between(
    state: &AppState,
    scope: Scope,
    job: JobId,
    name: &str,
    steps: StepRange,
) -> StoreResult<Vec<MetricBucket>> {
    Ok(state
        .store
        .metric_series(scope, job, name, steps, BUCKETS)
        .await?
        .buckets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_samples_in_keeps_every_one_and_bounds_the_ranges() {
        let mut series = Cached::from_series(MetricSeries::default());
        for step in 0..100_000u64 {
            let value = if step == 77_777 { 9.0 } else { 1.0 };
            series.add(MetricPoint {
                step,
                value,
                recorded_at: chrono::DateTime::from_timestamp(step as i64, 0).unwrap_or_default(),
            });
        }
        assert!(series.buckets.len() <= MAX_BUCKETS);
        assert_eq!(
            series.buckets.iter().map(|b| b.samples).sum::<u64>(),
            100_000
        );
        assert_eq!(
            series.buckets.iter().map(|b| b.max).fold(0.0, f64::max),
            9.0
        );
        let mean = series
            .buckets
            .iter()
            .map(|b| b.mean * b.samples as f64)
            .sum::<f64>()
            / 100_000.0;
        assert!((mean - (1.0 + 8.0 / 100_000.0)).abs() < 1e-9);
        assert!(
            series
                .buckets
                .windows(2)
                .all(|w| w[0].last_step < w[1].first_step)
        );
        assert_eq!(series.last_step, Some(99_999));
        // Each range is placed at its latest sample's time.
        assert!(
            series
                .buckets
                .iter()
                .all(|b| b.last_at.timestamp() == b.last_step as i64)
        );
    }
}
