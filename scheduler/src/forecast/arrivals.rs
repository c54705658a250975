//! Arrivals to expect during a replay: the jobs of a recent window submitted again, window after
//! window, each with its estimated work.

use super::estimate::{Priors, estimate};
use super::remaining::Remaining;
use crate::snapshot::{JobView, Observations};
use drover_core::JobId;

/// A job expected to be submitted during the replay, with its estimated work.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    /// `submit_s` is when it arrives; its id must not be a real job's.
    pub job: JobView,
    pub remaining: Remaining,
}

/// The arrivals to expect if the last `window_s` seconds repeat: every job in `recent` submitted within
/// that window, again one, two, … windows later, up to `ahead_s` past `now_s` and `cap` jobs. Each copy
/// gets a fresh id (counting down from the top of the id space) and nothing observed.
pub fn recent_arrivals(
    recent: &[&JobView],
    now_s: f64,
    window_s: f64,
    ahead_s: f64,
    cap: usize,
    priors: &Priors,
) -> Vec<Arrival> {
    let mut window: Vec<&JobView> = recent
        .iter()
        .copied()
        .filter(|j| j.submit_s > now_s - window_s && j.submit_s <= now_s)
        .collect();
    if window_s <= 0.0 || window.is_empty() {
        return Vec::new();
    }
    window.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
    let mut out = Vec::new();
    let mut repeat = 1.0;
    'repeats: while repeat * window_s <= ahead_s {
        for job in &window {
            if out.len() >= cap {
                break 'repeats;
            }
            let mut copy = (*job).clone();
            copy.id = JobId(uuid::Uuid::from_u128(u128::MAX - out.len() as u128));
            copy.submit_s = job.submit_s + repeat * window_s;
            copy.placement = None;
            copy.observed = Observations::default();
            let remaining = estimate(&copy, priors);
            out.push(Arrival {
                job: copy,
                remaining,
            });
        }
        repeat += 1.0;
    }
    out
}
