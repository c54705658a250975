//! GPU-hours from the allocation ledger: allocated, used by training that was kept (goodput), and lost
//! by cause. Every allocated GPU-second falls in exactly one of those, so allocated = used + lost.
//!
//! A generation's time splits at three moments: its first reported step, the point its work was kept
//! until (its last checkpoint; the end, when it completed), and its end:
//! - allocation → first step: starting up; lost to whatever made it start (`startup` for a job's first
//!   run, `preemption`, `failure`, `resize`, `migration`, `paused` when it had been stopped);
//! - first step → kept until: used;
//! - kept until → end: the work since the last checkpoint, lost to the reason the generation ended;
//! - GPUs of workers that had finished while the rest of the gang still ran are `idle`, taken out of
//!   the generation's last stretch.
//!
//! A generation still running counts what it has used so far; nothing of it is lost yet.

use chrono::{DateTime, Datelike, Duration, TimeZone, Utc};
use drover_store::Allocation;
use serde::Serialize;
use std::collections::BTreeMap;

/// How a stretch of GPU time counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Use {
    Used,
    Lost(&'static str),
}

/// A stretch of one allocation's time, at `gpus` GPUs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub gpus: f64,
    pub kind: Use,
}

impl Segment {
    fn gpu_s(&self) -> f64 {
        seconds(self.to - self.from) * self.gpus
    }
}

/// Seconds to the nanosecond: a segment split at midnight loses nothing to rounding (whole
/// milliseconds per piece lost up to 1 ms a split, so per-day rows came to less than the total).
fn seconds(d: Duration) -> f64 {
    d.num_nanoseconds()
        .map_or_else(
            || d.num_milliseconds() as f64 / 1000.0,
            |ns| ns as f64 / 1e9,
        )
        .max(0.0)
}

/// The cause a job's state reason gives for stopping or (re)starting it.
pub fn cause_of_reason(reason: &str) -> &'static str {
    match reason {
        "submitted" => "startup",
        "preempted" | "suspended" => "preemption",
        "task_failed" | "executor_lost" | "restarts_exhausted" | "repeated_failure"
        | "user_error" | "out_of_memory" => "failure",
        "resized" | "resized_by_user" => "resize",
        "migrated" => "migration",
        "paused_by_user" | "resumed_by_user" => "paused",
        "cancelled_by_user" | "stopped_by_search" => "cancelled",
        "completed" => "completed",
        _ => "other",
    }
}

/// Splits one allocation into used and lost stretches; open allocations run to `now`.
pub fn segments(allocation: &Allocation, now: DateTime<Utc>) -> Vec<Segment> {
    let gpus = f64::from(allocation.gpus);
    let start = allocation.started_at;
    let end = allocation.ended_at.unwrap_or(now).max(start);
    let start_cause = cause_of_reason(&allocation.start_cause);
    let mut out = Vec::with_capacity(4);
    let mut push = |from: DateTime<Utc>, to: DateTime<Utc>, kind: Use| {
        if to > from && gpus > 0.0 {
            out.push(Segment {
                from,
                to,
                gpus,
                kind,
            });
        }
    };
    let first_step = allocation.first_step_at.map(|t| t.clamp(start, end));
    let Some(first_step) = first_step else {
        // Never stepped: all of it went to starting up (or is still starting).
        push(start, end, Use::Lost(start_cause));
        return out;
    };
    push(start, first_step, Use::Lost(start_cause));
    match allocation.ended_at {
        None => push(first_step, end, Use::Used),
        Some(_) => {
            let cause = allocation
                .end_cause
                .as_deref()
                .map_or("other", cause_of_reason_or_cause);
            let kept = if cause == "completed" {
                end
            } else {
                allocation
                    .kept_until
                    .map_or(first_step, |t| t.clamp(first_step, end))
            };
            push(first_step, kept, Use::Used);
            push(
                kept,
                end,
                Use::Lost(if cause == "completed" { "other" } else { cause }),
            );
        }
    }
    // Idle gang members: out of the last stretch, as a parallel stretch at fewer GPUs.
    if allocation.idle_gpu_s > 0.0
        && let Some(last) = out.last_mut()
    {
        let span = seconds(last.to - last.from);
        if span > 0.0 {
            let idle_gpus = (allocation.idle_gpu_s / span).min(last.gpus);
            last.gpus -= idle_gpus;
            let idle = Segment {
                gpus: idle_gpus,
                kind: Use::Lost("idle"),
                ..*last
            };
            out.push(idle);
        }
    }
    out
}

/// Ledger causes are stored already mapped; accept either a cause or a reason.
fn cause_of_reason_or_cause(text: &str) -> &'static str {
    drover_store::END_CAUSES
        .iter()
        .find(|c| **c == text)
        .copied()
        .unwrap_or_else(|| cause_of_reason(text))
}

/// GPU-hours in one group and period.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Totals {
    pub allocated_gpu_hours: f64,
    pub used_gpu_hours: f64,
    pub lost_gpu_hours: f64,
    /// Lost GPU-hours by cause (`startup`, `preemption`, `failure`, `resize`, `migration`, `paused`,
    /// `cancelled`, `idle`, `other`).
    pub lost_by_cause: BTreeMap<String, f64>,
    /// Allocated GPU-hours by GPU model (of the allocations whose nodes' models are known).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub allocated_gpu_hours_by_model: BTreeMap<String, f64>,
}

impl Totals {
    /// `gpu_s` GPU-seconds of `kind`, held on GPUs of `models` (model, GPUs; empty when not known).
    fn add(&mut self, kind: Use, gpu_s: f64, models: &BTreeMap<String, u32>) {
        let hours = gpu_s / 3600.0;
        self.allocated_gpu_hours += hours;
        let of_all: u32 = models.values().sum();
        if of_all > 0 {
            for (model, gpus) in models {
                *self
                    .allocated_gpu_hours_by_model
                    .entry(model.clone())
                    .or_default() += hours * f64::from(*gpus) / f64::from(of_all);
            }
        }
        match kind {
            Use::Used => self.used_gpu_hours += hours,
            Use::Lost(cause) => {
                self.lost_gpu_hours += hours;
                *self.lost_by_cause.entry(cause.to_owned()).or_default() += hours;
            }
        }
    }
}

/// The periods usage is bucketed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    Day,
    Week,
    /// The whole window as one period.
    Total,
}

impl Period {
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Total => "total",
        }
    }
}

/// The start of the period holding `at` (weeks start on Monday, UTC).
pub fn period_start(
    period: Period,
    at: DateTime<Utc>,
    window_from: DateTime<Utc>,
) -> DateTime<Utc> {
    let day = Utc
        .with_ymd_and_hms(at.year(), at.month(), at.day(), 0, 0, 0)
        .single()
        .unwrap_or(at);
    match period {
        Period::Day => day,
        Period::Week => day - Duration::days(i64::from(at.weekday().num_days_from_monday())),
        Period::Total => window_from,
    }
}

/// Adds `segment`'s GPU time within [`from`, `to`) to `buckets`, split at period boundaries; its
/// allocation held GPUs of `models` (model, GPUs).
pub fn accumulate<K: Ord + Clone>(
    buckets: &mut BTreeMap<(K, DateTime<Utc>), Totals>,
    key: &K,
    (segment, models): (&Segment, &BTreeMap<String, u32>),
    period: Period,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) {
    let mut at = segment.from.max(from);
    let stop = segment.to.min(to);
    while at < stop {
        let bucket = period_start(period, at, from);
        let next = match period {
            Period::Day => bucket + Duration::days(1),
            Period::Week => bucket + Duration::days(7),
            Period::Total => stop,
        }
        .min(stop);
        let piece = Segment {
            from: at,
            to: next,
            ..*segment
        };
        buckets
            .entry((key.clone(), bucket))
            .or_default()
            .add(segment.kind, piece.gpu_s(), models);
        if next <= at {
            break;
        }
        at = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_core::{JobId, TenantId, UserId};

    fn at(minutes: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 2, 23, 0, 0)
            .single()
            .unwrap()
            + Duration::minutes(minutes)
    }

    fn allocation(ended: Option<i64>, cause: Option<&str>) -> Allocation {
        Allocation {
            job_id: JobId(uuid::Uuid::nil()),
            generation: 2,
            tenant_id: TenantId(uuid::Uuid::nil()),
            user_id: UserId(uuid::Uuid::nil()),
            gpus: 4,
            started_at: at(0),
            start_cause: "preempted".to_owned(),
            ended_at: ended.map(at),
            end_cause: cause.map(str::to_owned),
            first_step_at: Some(at(5)),
            kept_until: Some(at(50)),
            idle_gpu_s: 0.0,
            gpu_models: BTreeMap::from([("V100".to_owned(), 3), ("K80".to_owned(), 1)]),
        }
    }

    fn total(segments: &[Segment]) -> Totals {
        let mut buckets = BTreeMap::new();
        for s in segments {
            accumulate(
                &mut buckets,
                &(),
                (s, &BTreeMap::new()),
                Period::Total,
                at(-1000),
                at(1000),
            );
        }
        buckets.into_values().next().unwrap_or_default()
    }

    #[test]
    fn a_failed_generation_loses_its_restart_and_the_work_since_its_checkpoint() {
        let t = total(&segments(&allocation(Some(60), Some("failure")), at(100)));
        assert!((t.allocated_gpu_hours - 4.0).abs() < 1e-9);
        assert!((t.used_gpu_hours - 3.0).abs() < 1e-9, "{t:?}");
        assert!((t.lost_by_cause["preemption"] - 5.0 / 15.0).abs() < 1e-9);
        assert!((t.lost_by_cause["failure"] - 10.0 / 15.0).abs() < 1e-9);
        assert!((t.used_gpu_hours + t.lost_gpu_hours - t.allocated_gpu_hours).abs() < 1e-9);
    }

    #[test]
    fn completion_keeps_everything_after_the_first_step_less_idle_workers() {
        let mut a = allocation(Some(60), Some("completed"));
        a.idle_gpu_s = 1800.0;
        let t = total(&segments(&a, at(100)));
        assert!((t.allocated_gpu_hours - 4.0).abs() < 1e-9);
        assert!((t.lost_by_cause["idle"] - 0.5).abs() < 1e-9, "{t:?}");
        assert!((t.used_gpu_hours - (55.0 / 15.0 - 0.5)).abs() < 1e-9);
        assert!((t.used_gpu_hours + t.lost_gpu_hours - t.allocated_gpu_hours).abs() < 1e-9);
    }

    #[test]
    fn open_allocations_count_use_so_far_and_days_split_at_midnight() {
        let a = allocation(None, None);
        let segs = segments(&a, at(120));
        let mut buckets = BTreeMap::new();
        for s in &segs {
            accumulate(
                &mut buckets,
                &"t",
                (s, &a.gpu_models),
                Period::Day,
                at(-1000),
                at(1000),
            );
        }
        // 23:00 to 01:00: two days, an hour each.
        assert_eq!(buckets.len(), 2);
        let hours: Vec<f64> = buckets.values().map(|t| t.allocated_gpu_hours).collect();
        assert!(
            (hours[0] - 4.0).abs() < 1e-9 && (hours[1] - 4.0).abs() < 1e-9,
            "{hours:?}"
        );
        let used: f64 = buckets.values().map(|t| t.used_gpu_hours).sum();
        assert!((used - 4.0 * 115.0 / 60.0).abs() < 1e-9);
        // Three of its four GPUs were V100s: three quarters of each day's hours.
        for t in buckets.values() {
            let by = &t.allocated_gpu_hours_by_model;
            assert!((by["V100"] - 3.0).abs() < 1e-9, "{by:?}");
            assert!((by["K80"] - 1.0).abs() < 1e-9, "{by:?}");
        }
    }

    #[test]
    fn days_add_up_to_the_total_when_a_segment_starts_between_milliseconds() {
        // Allocation times come from the clock with sub-millisecond parts; a split at midnight
        // must not lose any of them.
        // Every moment shares one sub-millisecond part, as when they are the start plus whole
        // seconds: the stretch of use that crosses midnight is then a whole number of milliseconds
        // long, but neither piece of it is.
        let started = at(-30) + Duration::nanoseconds(700_500);
        let mut a = allocation(None, Some("preempted"));
        a.started_at = started;
        a.first_step_at = Some(started + Duration::seconds(5));
        a.kept_until = Some(started + Duration::minutes(100));
        a.ended_at = Some(started + Duration::minutes(110));
        let segs = segments(&a, at(200));
        let mut days = BTreeMap::new();
        let mut whole = BTreeMap::new();
        for s in &segs {
            accumulate(
                &mut days,
                &"t",
                (s, &a.gpu_models),
                Period::Day,
                at(-1000),
                at(1000),
            );
            accumulate(
                &mut whole,
                &"t",
                (s, &a.gpu_models),
                Period::Total,
                at(-1000),
                at(1000),
            );
        }
        assert_eq!(days.len(), 2, "the allocation spans midnight");
        let total = whole.values().next().expect("one total bucket");
        let sum = |pick: fn(&Totals) -> f64| days.values().map(pick).sum::<f64>();
        for (what, by_day, overall) in [
            (
                "allocated",
                sum(|t| t.allocated_gpu_hours),
                total.allocated_gpu_hours,
            ),
            ("used", sum(|t| t.used_gpu_hours), total.used_gpu_hours),
            ("lost", sum(|t| t.lost_gpu_hours), total.lost_gpu_hours),
        ] {
            assert!(
                (by_day - overall).abs() < 1e-9,
                "{what}: days {by_day} vs total {overall}"
            );
        }
    }

    #[test]
    fn a_generation_that_never_stepped_is_all_startup_loss() {
        let mut a = allocation(Some(10), Some("preempted"));
        a.first_step_at = None;
        a.generation = 1;
        a.start_cause = "submitted".to_owned();
        let t = total(&segments(&a, at(100)));
        assert_eq!(t.used_gpu_hours, 0.0);
        assert!((t.lost_by_cause["startup"] - 4.0 * 10.0 / 60.0).abs() < 1e-9);
    }
}
