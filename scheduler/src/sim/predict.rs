//! How good are queue predictions? At every arrival that has to wait, the simulator forks its state
//! into [`crate::forecast`] (which sees only observations and the history of finished jobs, as the
//! server does) and records the predicted start; the replay then shows when the job really started.

use super::config::Outcome;
pub use super::config::PredictionRecord;
use super::report::percentile;
use crate::forecast::{
    Basis, Finished, ForecastConfig, Priors, Remaining, estimate, predict_start, recent_arrivals,
};
use crate::snapshot::ClusterSnapshot;
use drover_core::JobId;
use serde::Serialize;
use std::collections::HashMap;

/// Which arrivals get a prediction, and how the forecast runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PredictOptions {
    pub forecast: ForecastConfig,
    /// Predict for one waiting arrival in this many (1: every one).
    pub every: usize,
    /// Expect the arrivals of the last this many seconds to repeat during the replay (0: no new
    /// arrivals, the baseline).
    pub arrival_window_s: f64,
    /// A diagnostic, never available to a server: the forecast is given every job's true remaining
    /// work instead of its estimate, so what is left of the error is the replay's own.
    pub remaining_from_truth: bool,
}

/// How far ahead expected arrivals go, and how many at most.
const ARRIVALS_AHEAD_S: f64 = 6.0 * 3600.0;
const ARRIVALS_CAP: usize = 2_000;

/// The predictor the engine calls at arrivals; it also learns from every completion.
#[derive(Debug)]
pub(crate) struct Predictor {
    options: PredictOptions,
    waiting_arrivals: usize,
    /// Finished jobs: tenant, GPUs of their preferred shape, GPU-seconds per such GPU.
    history: Vec<Finished>,
    /// Jobs submitted within the arrival window, oldest first.
    recent: std::collections::VecDeque<crate::snapshot::JobView>,
    pub(crate) records: Vec<PredictionRecord>,
}

impl Predictor {
    pub(crate) fn new(options: PredictOptions) -> Predictor {
        Predictor {
            options,
            waiting_arrivals: 0,
            history: Vec::new(),
            recent: std::collections::VecDeque::new(),
            records: Vec::new(),
        }
    }

    pub(crate) fn finished(&mut self, job: Finished) {
        self.history.push(job);
    }

    /// Every arrival, as it was submitted.
    pub(crate) fn arrived(&mut self, job: &crate::snapshot::JobView) {
        if self.options.arrival_window_s <= 0.0 {
            return;
        }
        while self
            .recent
            .front()
            .is_some_and(|j| j.submit_s <= job.submit_s - self.options.arrival_window_s)
        {
            self.recent.pop_front();
        }
        self.recent.push_back(job.clone());
    }

    /// A job arrived and waits: predict its start from what can be observed now.
    /// `policy` is the replay's own, with its state: the forecast forks it.
    pub(crate) fn arrived_waiting(
        &mut self,
        snapshot: &ClusterSnapshot,
        policy: &dyn crate::Policy,
        job: JobId,
        index: usize,
        truth: Option<&dyn Fn(&crate::snapshot::JobView) -> f64>,
    ) {
        self.waiting_arrivals += 1;
        if !(self.waiting_arrivals - 1).is_multiple_of(self.options.every.max(1)) {
            return;
        }
        // The priors depend on the active jobs too (their ages, their cohorts' ages): refit them
        // for every prediction, as the server does for every forecast.
        let priors = Priors::from_history(&self.history, &snapshot.jobs);
        let remaining: HashMap<JobId, Remaining> = snapshot
            .jobs
            .iter()
            .map(|j| {
                let remaining = match truth {
                    Some(true_left) if self.options.remaining_from_truth => {
                        let left = true_left(j);
                        Remaining {
                            p10: left,
                            p50: left,
                            p90: left,
                            alone: false,
                            basis: Basis::Measured,
                        }
                    }
                    _ => estimate(j, &priors),
                };
                (j.id, remaining)
            })
            .collect();
        // Without itself: it has arrived already.
        let recent: Vec<&crate::snapshot::JobView> =
            self.recent.iter().filter(|j| j.id != job).collect();
        let arrivals = recent_arrivals(
            &recent,
            snapshot.now_s,
            self.options.arrival_window_s,
            ARRIVALS_AHEAD_S,
            ARRIVALS_CAP,
            &priors,
        );
        let (start_s, start_p10_s, start_p90_s) = match predict_start(
            snapshot,
            policy,
            &remaining,
            &self.options.forecast,
            &arrivals,
            job,
        ) {
            Ok(Some(p)) => (p.start_s, p.start_p10_s, p.start_p90_s),
            // The next round starts it: now.
            Ok(None) => (
                Some(snapshot.now_s),
                Some(snapshot.now_s),
                Some(snapshot.now_s),
            ),
            Err(_) => (None, None, None),
        };
        self.records.push(PredictionRecord {
            job: index,
            made_at_s: snapshot.now_s,
            start_s,
            start_p10_s,
            start_p90_s,
        });
    }
}

/// Prediction error over the jobs that waited longer than `min_wait_s`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Accuracy {
    pub predictions: usize,
    /// Of those, the jobs whose actual wait exceeded the threshold.
    pub long_waits: usize,
    pub min_wait_s: f64,
    /// |predicted start − actual start| / actual wait, median and 90th percentile.
    pub median_error: f64,
    pub p90_error: f64,
    /// Share whose actual start lies within the predicted [p10, p90] band.
    pub within_band: f64,
    /// Share predicted to start beyond the forecast's horizon.
    pub beyond_horizon: f64,
}

/// Compares each prediction with what happened.
pub fn accuracy(records: &[PredictionRecord], outcome: &Outcome, min_wait_s: f64) -> Accuracy {
    let mut errors = Vec::new();
    let mut within = 0usize;
    let mut beyond = 0usize;
    for record in records {
        let Some(actual) = outcome.jobs.get(record.job) else {
            continue;
        };
        let wait = actual.first_start_s - actual.submit_s;
        if wait.is_nan() || wait <= min_wait_s {
            continue;
        }
        let Some(predicted) = record.start_s else {
            beyond += 1;
            errors.push(f64::INFINITY);
            continue;
        };
        errors.push((predicted - actual.first_start_s).abs() / wait);
        if let (Some(lo), Some(hi)) = (record.start_p10_s, record.start_p90_s)
            && lo - 1.0 <= actual.first_start_s
            && actual.first_start_s <= hi + 1.0
        {
            within += 1;
        }
    }
    errors.sort_by(f64::total_cmp);
    let n = errors.len();
    let share = |k: usize| {
        if n == 0 {
            f64::NAN
        } else {
            k as f64 / n as f64
        }
    };
    Accuracy {
        predictions: records.len(),
        long_waits: n,
        min_wait_s,
        median_error: if n == 0 {
            f64::NAN
        } else {
            percentile(&errors, 0.5)
        },
        p90_error: if n == 0 {
            f64::NAN
        } else {
            percentile(&errors, 0.9)
        },
        within_band: share(within),
        beyond_horizon: share(beyond),
    }
}
