//! The queue, for every entrance (REST, the dashboard, the CLI through REST): each waiting job's place
//! in the order the policy would start jobs, its reason in words, and its predicted start and finish
//! with a band (the leader's forecast, refreshed beside its rounds and kept in the store). What a
//! caller sees is made consistent here: no predicted start in the past (a start the forecast put
//! before now is shown as now and marked overdue), none earlier than that of a job of the same size
//! ahead of it (a forecast of the head can be newer than that of the rest), and a job the scheduler
//! can never place says why, with the numbers.

use crate::Service;
use crate::error::ServiceResult;
use chrono::{DateTime, Utc};
use drover_core::{JobId, JobState};
use drover_store::{Job, Needs, QueueEntry, QueuedRow, RoundFree, Scope, WaitingJob};
use serde::Serialize;
use std::collections::HashMap;

/// Waiting jobs ranked at most, oldest first: past it the view says it is not complete.
pub const MAX_QUEUE: u32 = 5_000;
/// Jobs of one page whose stored spec is read to say why they can never run, at most.
const NEVER_FITS_LOOKUPS: usize = 50;

/// A waiting job's place in the queue and when it should start.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct QueuePosition {
    /// 1 for the job the policy would start first, counting every tenant's jobs: the forecast's,
    /// else the last round's (for a job the forecast has not seen yet); `null` until either has.
    pub position: Option<u32>,
    /// The policy's reason it waits (`insufficient_gpus`, `fair_share`, `lower_priority`, …).
    pub reason: Option<String>,
    /// The reason in words, with what is known of it (how many jobs are ahead; for a job no node
    /// can ever hold, what it needs and what the largest node has).
    pub explanation: String,
    /// When it should start if running jobs take as long as estimated: never before now, nor
    /// before a job of the same size ahead of it; `null` beyond the forecast's 30-day horizon or
    /// before the first forecast.
    pub predicted_start: Option<DateTime<Utc>>,
    pub predicted_finish: Option<DateTime<Utc>>,
    /// The start if every job takes as little (`p10`) or as long (`p90`) as its estimate's 10th and
    /// 90th percentiles.
    pub p10: Option<DateTime<Utc>>,
    pub p90: Option<DateTime<Utc>>,
    /// The forecast put its start before now and it still waits (running jobs took longer than
    /// estimated, or the cluster changed): the start shown is now until the next forecast.
    pub overdue: bool,
    /// When this prediction was made: the head of the queue is predicted after every round, the
    /// rest at most every 30 s.
    pub forecast_at: Option<DateTime<Utc>>,
    /// How many of the estimates the prediction rests on (the running jobs' and those of the jobs
    /// ahead) are guesses: no job like them has finished or been measured yet, so each is taken to
    /// run about an hour (between ten minutes and eight hours). Above 0 the prediction is rough.
    pub guesses: u32,
}

impl QueuePosition {
    /// `entry` as of `now`; its place and reason given by the forecast, else by the last round
    /// (`round`: its index in the round's order, and how it waited there), what it needs against
    /// what the round left free in the numbers of its reason.
    fn of(
        entry: Option<&QueueEntry>,
        round: Option<(usize, &WaitingJob)>,
        free: Option<&RoundFree>,
        forecast_at: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Self {
        let reason = entry
            .map(|e| e.reason.clone())
            .or_else(|| round.map(|(_, w)| w.reason.clone()));
        let place = entry
            .map(|e| e.position)
            .or_else(|| round.map(|(i, _)| i as u32 + 1));
        let mut explanation = explain(reason.as_deref(), place);
        if let (Some(needs), Some(free)) = (round.and_then(|(_, w)| w.needs), free) {
            explanation.push_str(&numbers(reason.as_deref(), needs, free));
        }
        let mut position = QueuePosition {
            position: place,
            explanation,
            reason,
            predicted_start: entry.and_then(|e| e.start),
            predicted_finish: entry.and_then(|e| e.finish),
            p10: entry.and_then(|e| e.p10),
            p90: entry.and_then(|e| e.p90),
            overdue: false,
            forecast_at: entry.and_then(|e| e.made_at).or(entry.and(forecast_at)),
            guesses: entry.map_or(0, |e| e.guesses),
        };
        position.not_before(now, true);
        position
    }

    /// The job can never run here, for `why`: no prediction.
    fn never_fits(&mut self, why: &str) {
        self.reason = Some("never_fits".to_owned());
        self.explanation = format!("it can never run on this cluster: {why}");
        self.predicted_start = None;
        self.predicted_finish = None;
        self.p10 = None;
        self.p90 = None;
        self.guesses = 0;
    }

    /// Moves the prediction to start no earlier than `at` (the band and the finish with it);
    /// `overdue`: `at` is now, so a start moved is one the forecast put in the past.
    fn not_before(&mut self, at: DateTime<Utc>, overdue: bool) {
        let Some(start) = self.predicted_start else {
            return;
        };
        if start < at {
            self.predicted_start = Some(at);
            self.predicted_finish = self.predicted_finish.map(|f| f + (at - start));
            self.overdue |= overdue;
        }
        self.p10 = self.p10.map(|p| p.max(if overdue { at } else { p }));
        self.p90 = self.p90.map(|p| p.max(at));
    }
}

/// A reason code in words; `position` counts every tenant's jobs.
fn explain(reason: Option<&str>, position: Option<u32>) -> String {
    let ahead = position.map_or(0, |p| p.saturating_sub(1));
    let jobs_ahead = match ahead {
        0 => "no job".to_owned(),
        1 => "1 job".to_owned(),
        n => format!("{n} jobs"),
    };
    match reason {
        None => "not yet considered by the scheduler (it runs a round every few seconds)".to_owned(),
        Some("behind_head_of_line") => {
            format!("first come, first served: {jobs_ahead} ahead, and the first of them does not fit yet")
        }
        Some("insufficient_resources") => {
            "not enough free GPUs, CPUs or memory for its smallest shape".to_owned()
        }
        Some("insufficient_gpus") => "not enough free GPUs for its smallest shape".to_owned(),
        Some("insufficient_cpus") => {
            "not enough free CPUs for its workers or parameter-server shards".to_owned()
        }
        Some("insufficient_memory") => "not enough free host memory for its tasks".to_owned(),
        Some("fragmented") => {
            "enough is free in total, but not on few enough nodes for its shape".to_owned()
        }
        Some("lower_priority") => format!(
            "{jobs_ahead} ahead of it in the policy's order (priority, then guarantees and the policy's own order) took what it needs"
        ),
        Some("preempted") => {
            "preempted for a job ahead of it in the policy's order; it resumes from its last checkpoint"
                .to_owned()
        }
        Some("preempted_without_checkpoint") => {
            "preempted without a checkpoint; it restarts from its last one".to_owned()
        }
        Some("never_fits") => "no node of this cluster could ever hold one of its tasks".to_owned(),
        Some("fair_share") => "its tenant has its fair share while others wait".to_owned(),
        Some("suspended") => "its time slice ended; it resumes at its next turn".to_owned(),
        Some("tenant_limit") => {
            "starting it would take its tenant past its maximum GPUs (of a GPU model, or in all)"
                .to_owned()
        }
        Some("eligible_nodes_busy") => {
            "the nodes it may run on (its image, node selector or GPU types) have too little free"
                .to_owned()
        }
        Some(other) => other.replace('_', " "),
    }
}

/// The numbers behind a reason: what the job's smallest shape needs against what the last round
/// left free (`; needs 4 GPUs, 2 of 16 free`); empty for reasons numbers do not explain.
fn numbers(reason: Option<&str>, needs: Needs, free: &RoundFree) -> String {
    let gpus = format!("{} of {} GPUs", free.gpus, free.total_gpus);
    let cpus = format!("{} of {} CPUs", free.cpus, free.total_cpus);
    let memory = format!("{} GB of memory", free.memory_gb);
    let plural = |n: u32, one: &str, many: &str| {
        if n == 1 {
            format!("{n} {one}")
        } else {
            format!("{n} {many}")
        }
    };
    let need_gpus = plural(needs.gpus, "GPU", "GPUs");
    let need_cpus = plural(needs.cpus, "CPU", "CPUs");
    match reason {
        Some("insufficient_gpus") => format!("; it needs {need_gpus}, {gpus} are free"),
        // Jobs ahead took what it needs: each resource it is short of, where the numbers show it
        // (else what held it back is not a count of free resources).
        Some("lower_priority" | "fair_share" | "behind_head_of_line") => {
            let mut short = Vec::new();
            if free.gpus < needs.gpus {
                short.push(format!("{need_gpus}, {gpus} are free"));
            }
            if free.cpus < needs.cpus {
                short.push(format!("{need_cpus}, {cpus} are free"));
            }
            if free.memory_gb < u64::from(needs.memory_gb) {
                short.push(format!("{} GB, {memory} is free", needs.memory_gb));
            }
            if short.is_empty() {
                String::new()
            } else {
                format!("; it needs {}", short.join("; "))
            }
        }
        Some("fragmented") => format!(
            "; it needs {need_gpus}, {gpus} are free, spread over nodes that each hold too few"
        ),
        Some("insufficient_cpus") => format!("; it needs {need_cpus}, {cpus} are free"),
        Some("insufficient_memory") => {
            format!("; it needs {} GB, {memory} is free", needs.memory_gb)
        }
        Some("insufficient_resources") => format!(
            "; it needs {need_gpus}, {need_cpus} and {} GB; {gpus}, {cpus} and {memory} are free",
            needs.memory_gb
        ),
        _ => String::new(),
    }
}

/// A waiting job as the queue lists it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct QueuedJob {
    pub id: uuid::Uuid,
    pub name: String,
    pub tenant: String,
    pub priority: i32,
    pub submitted_at: DateTime<Utc>,
    /// GPUs at its largest shape.
    pub max_gpus: i64,
    #[serde(flatten)]
    pub queue: QueuePosition,
}

/// One page of the queue.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct QueueView {
    /// The policy the forecast replayed (else the last round's); `null` before either.
    pub policy: Option<String>,
    pub forecast_at: Option<DateTime<Utc>>,
    /// When the last scheduling round finished.
    pub round_at: Option<DateTime<Utc>>,
    /// Waiting jobs the caller may see, in all pages.
    pub total: u32,
    /// `false` when more than 5,000 such jobs wait: the oldest 5,000 are ranked and paged.
    pub complete: bool,
    /// How many jobs of the queue come before this page.
    pub offset: u32,
    /// In queue order; jobs the scheduler has not seen yet last, oldest first.
    pub jobs: Vec<QueuedJob>,
}

/// The page of `limit` waiting jobs from `offset` that `scope` may see, in the policy's order.
pub async fn list(
    service: &Service,
    scope: Scope,
    offset: u32,
    limit: u32,
) -> ServiceResult<QueueView> {
    let mut queued = service.store.queued_jobs(scope, MAX_QUEUE + 1).await?;
    let complete = queued.len() <= MAX_QUEUE as usize;
    queued.truncate(MAX_QUEUE as usize);
    let forecast = service.store.queue_forecast().await?;
    let round = service.store.last_round().await?;
    let entries: HashMap<JobId, &QueueEntry> = forecast
        .iter()
        .flat_map(|f| f.entries.iter())
        .map(|e| (e.job, e))
        .collect();
    let reasons: HashMap<JobId, (usize, &WaitingJob)> = round
        .iter()
        .flat_map(|r| r.waiting.iter().enumerate())
        .map(|(i, waiting)| (waiting.job, (i, waiting)))
        .collect();
    let free = round.as_ref().and_then(|r| r.free.as_ref());
    let forecast_at = forecast.as_ref().map(|f| f.computed_at);
    let now = Utc::now();
    let mut ranked: Vec<(Option<u32>, Option<usize>, QueuedRow)> = queued
        .into_iter()
        .map(|job| {
            let position = entries.get(&job.id).map(|e| e.position);
            let in_round = reasons.get(&job.id).map(|(i, _)| *i);
            (position, in_round, job)
        })
        .collect();
    // The forecast's order; then the last round's, for jobs it has not forecast; then the oldest.
    ranked.sort_by_key(|(position, in_round, job)| {
        (
            position.unwrap_or(u32::MAX),
            in_round.unwrap_or(usize::MAX),
            job.created_at,
            job.id,
        )
    });
    let total = ranked.len() as u32;
    // Every job's start counts for the ones behind it; only the page's positions are written out.
    let adjusted = monotone(ranked.iter().map(|(_, _, job)| {
        let start = entries.get(&job.id).and_then(|e| e.start);
        (job.max_gpus, start.map(|s| s.max(now)))
    }));
    let mut page: Vec<QueuedJob> = ranked
        .into_iter()
        .zip(adjusted)
        .skip(offset as usize)
        .take(limit as usize)
        .map(|((_, _, job), adjust)| {
            let mut queue = QueuePosition::of(
                entries.get(&job.id).copied(),
                reasons.get(&job.id).copied(),
                free,
                forecast_at,
                now,
            );
            adjust.apply(&mut queue);
            QueuedJob {
                queue,
                id: job.id.0,
                name: job.name,
                tenant: job.tenant_name,
                priority: job.priority,
                submitted_at: job.created_at,
                max_gpus: job.max_gpus,
            }
        })
        .collect();
    explain_never_fits(service, &mut page).await?;
    Ok(QueueView {
        policy: forecast
            .map(|f| f.policy)
            .or_else(|| round.as_ref().map(|r| r.policy.clone())),
        forecast_at,
        round_at: round.map(|r| r.finished_at),
        total,
        complete,
        offset,
        jobs: page,
    })
}

/// What the queue's order changes of a job's forecast start.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Adjust {
    /// The latest start of a job of its size ahead of it: its own is not before it.
    floor: Option<DateTime<Utc>>,
    /// Jobs ahead of it predicted to start later.
    overtaken: u32,
}

impl Adjust {
    fn apply(self, position: &mut QueuePosition) {
        if let Some(floor) = self.floor {
            position.not_before(floor, false);
        }
        if self.overtaken > 0 {
            let ahead = if self.overtaken == 1 {
                "1 job".to_owned()
            } else {
                format!("{} jobs", self.overtaken)
            };
            position.explanation.push_str(&format!(
                "; it should start before {ahead} ahead of it, in room they cannot use (they need more, or other resources, than will be free then)"
            ));
        }
    }
}

/// In queue order, no job starts before a job of the same size ahead of it: the policy starts the
/// one ahead first, and a forecast of the head (after every round) can be newer than the rest's. A
/// job predicted to start before jobs of other sizes ahead of it says so, and why. `jobs`: each
/// job's largest GPUs and its start as shown (never before now), in queue order; the result is in
/// the same order.
fn monotone(jobs: impl Iterator<Item = (i64, Option<DateTime<Utc>>)>) -> Vec<Adjust> {
    let mut latest: HashMap<i64, DateTime<Utc>> = HashMap::new();
    let mut starts = Vec::with_capacity(jobs.size_hint().0);
    let mut floors = Vec::with_capacity(jobs.size_hint().0);
    for (gpus, start) in jobs {
        let Some(start) = start else {
            starts.push(None);
            floors.push(None);
            continue;
        };
        let floor = latest.entry(gpus).or_insert(start);
        floors.push(Some(*floor));
        *floor = (*floor).max(start);
        starts.push(Some(*floor));
    }
    overtaken(starts)
        .into_iter()
        .zip(floors)
        .map(|(overtaken, floor)| Adjust { floor, overtaken })
        .collect()
}

/// For each start in queue order, how many starts before it in the order are later (a job without
/// a prediction overtakes none and is overtaken by none): a Fenwick tree over the starts' ranks,
/// O(n log n).
fn overtaken(starts: Vec<Option<DateTime<Utc>>>) -> Vec<u32> {
    let mut ranks: Vec<DateTime<Utc>> = starts.iter().flatten().copied().collect();
    ranks.sort_unstable();
    ranks.dedup();
    let mut tree = vec![0u32; ranks.len() + 1];
    let mut seen = 0u32;
    starts
        .into_iter()
        .map(|start| {
            let Some(start) = start else { return 0 };
            // 1-based rank of this start; jobs seen so far at a rank at most it.
            let rank = ranks.partition_point(|s| *s <= start);
            let (mut at_most, mut i) = (0u32, rank);
            while i > 0 {
                at_most += tree[i];
                i &= i - 1;
            }
            let later = seen - at_most;
            let mut i = rank;
            while i < tree.len() {
                tree[i] += 1;
                i += i & i.wrapping_neg();
            }
            seen += 1;
            later
        })
        .collect()
}

/// For the page's jobs that never fit (or that neither the forecast nor the last round placed in
/// the queue), why, from their stored specs (read in one query) and the nodes (none known: none
/// is refused).
async fn explain_never_fits(service: &Service, page: &mut [QueuedJob]) -> ServiceResult<()> {
    let candidates: Vec<JobId> = page
        .iter()
        .filter(|j| matches!(j.queue.reason.as_deref(), Some("never_fits") | None))
        .take(NEVER_FITS_LOOKUPS)
        .map(|j| JobId(j.id))
        .collect();
    if candidates.is_empty() || !service.capacity.knows_nodes(service.store.as_ref()).await? {
        return Ok(());
    }
    // Ids from the scoped list; a job deleted since is simply absent.
    let documents = service.store.job_documents(&candidates).await?;
    let mut why: HashMap<uuid::Uuid, String> = HashMap::with_capacity(documents.len());
    for (id, _, document) in &documents {
        let Some(spec) = drover_store::spec_of(document) else {
            continue;
        };
        if let Some(reason) = service
            .capacity
            .why_never_fits(service.store.as_ref(), &spec)
            .await?
        {
            why.insert(id.0, reason);
        }
    }
    for job in page.iter_mut() {
        if let Some(reason) = why.remove(&job.id) {
            job.queue.never_fits(&reason);
        }
    }
    Ok(())
}

/// A queued job's place and prediction, for `GET /api/v1/jobs/{id}` and its page.
pub async fn position_of(service: &Service, job: &Job) -> ServiceResult<Option<QueuePosition>> {
    if job.state != JobState::Queued {
        return Ok(None);
    }
    let forecast = service.store.queue_forecast().await?;
    let entry = forecast
        .as_ref()
        .and_then(|f| f.entries.iter().find(|e| e.job == job.id));
    let round = service.store.last_round().await?;
    let waiting = round
        .as_ref()
        .and_then(|r| r.waiting.iter().enumerate().find(|(_, w)| w.job == job.id));
    let mut position = QueuePosition::of(
        entry,
        waiting,
        round.as_ref().and_then(|r| r.free.as_ref()),
        forecast.as_ref().map(|f| f.computed_at),
        Utc::now(),
    );
    if matches!(position.reason.as_deref(), Some("never_fits") | None)
        && let Some(spec) = job.spec()
        && let Some(why) = service
            .capacity
            .why_never_fits(service.store.as_ref(), &spec)
            .await?
    {
        position.never_fits(&why);
    }
    Ok(Some(position))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    fn entry(position: u32, start_min: i64, now: DateTime<Utc>) -> QueueEntry {
        QueueEntry {
            job: JobId(uuid::Uuid::now_v7()),
            position,
            reason: "lower_priority".to_owned(),
            start: Some(now + Duration::minutes(start_min)),
            finish: Some(now + Duration::minutes(start_min + 30)),
            p10: Some(now + Duration::minutes(start_min - 5)),
            p90: Some(now + Duration::minutes(start_min + 5)),
            guesses: 0,
            made_at: None,
        }
    }

    fn queued(position: QueuePosition, max_gpus: i64) -> QueuedJob {
        QueuedJob {
            id: uuid::Uuid::now_v7(),
            name: "j".to_owned(),
            tenant: "t".to_owned(),
            priority: 0,
            submitted_at: Utc::now(),
            max_gpus,
            queue: position,
        }
    }

    #[test]
    fn a_start_the_forecast_put_in_the_past_is_now_and_overdue() {
        let now = Utc::now();
        let past = QueuePosition::of(Some(&entry(1, -16, now)), None, None, Some(now), now);
        assert_eq!(past.predicted_start, Some(now));
        assert!(past.overdue);
        // The finish moves with the start; the band never ends before it begins.
        assert_eq!(past.predicted_finish, Some(now + Duration::minutes(30)));
        assert!(past.p10.unwrap() >= now && past.p90.unwrap() >= now);
        let ahead = QueuePosition::of(Some(&entry(1, 10, now)), None, None, Some(now), now);
        assert_eq!(ahead.predicted_start, Some(now + Duration::minutes(10)));
        assert!(!ahead.overdue);
    }

    #[test]
    fn a_job_never_starts_before_one_of_its_size_ahead_of_it() {
        let now = Utc::now();
        let at = |position, minutes| {
            QueuePosition::of(
                Some(&entry(position, minutes, now)),
                None,
                None,
                Some(now),
                now,
            )
        };
        let mut jobs = [
            queued(at(1, 40), 2),
            // Smaller: may start before the first (backfill).
            queued(at(2, 10), 1),
            queued(at(3, 20), 2),
            queued(at(4, 60), 2),
        ];
        let adjusted = monotone(jobs.iter().map(|j| (j.max_gpus, j.queue.predicted_start)));
        for (job, adjust) in jobs.iter_mut().zip(adjusted) {
            adjust.apply(&mut job.queue);
        }
        let starts: Vec<i64> = jobs
            .iter()
            .map(|j| (j.queue.predicted_start.unwrap() - now).num_minutes())
            .collect();
        assert_eq!(starts, [40, 10, 40, 60]);
        assert!(jobs.iter().all(|j| !j.queue.overdue));
        // The smaller job says why it goes first; the others overtake no one.
        assert!(
            jobs[1]
                .queue
                .explanation
                .ends_with("; it should start before 1 job ahead of it, in room they cannot use (they need more, or other resources, than will be free then)"),
            "{}",
            jobs[1].queue.explanation
        );
        for i in [0, 2, 3] {
            assert!(!jobs[i].queue.explanation.contains("start before"));
        }
    }

    #[test]
    fn overtaking_counts_the_later_starts_ahead() {
        let now = Utc::now();
        let at = |m: i64| Some(now + Duration::minutes(m));
        assert_eq!(
            overtaken(vec![at(50), at(10), None, at(50), at(20), at(5), at(60)]),
            [0, 1, 0, 0, 2, 4, 0]
        );
        assert!(overtaken(Vec::new()).is_empty());
    }

    #[test]
    fn every_reason_reads_as_words_and_lower_priority_counts_the_jobs_ahead() {
        let text = explain(Some("lower_priority"), Some(29));
        assert!(text.starts_with("28 jobs ahead"), "{text}");
        assert!(!text.contains("lower priority"), "{text}");
        for code in [
            "behind_head_of_line",
            "insufficient_resources",
            "insufficient_gpus",
            "insufficient_cpus",
            "insufficient_memory",
            "fragmented",
            "preempted",
            "never_fits",
            "fair_share",
            "suspended",
            "preempted_without_checkpoint",
            "tenant_limit",
            "eligible_nodes_busy",
        ] {
            let text = explain(Some(code), Some(1));
            assert!(!text.contains('_') && text.len() > 20, "{code}: {text}");
        }
    }

    #[test]
    fn reasons_say_what_the_job_needs_against_what_is_free() {
        use drover_store::{Needs, RoundFree, WaitingJob};
        let free = RoundFree {
            gpus: 2,
            total_gpus: 16,
            cpus: 3,
            total_cpus: 64,
            memory_gb: 100,
        };
        let waiting = |reason: &str| WaitingJob {
            job: JobId(uuid::Uuid::now_v7()),
            reason: reason.to_owned(),
            needs: Some(Needs {
                gpus: 4,
                cpus: 8,
                memory_gb: 32,
            }),
        };
        let said = |reason: &str| {
            let w = waiting(reason);
            QueuePosition::of(None, Some((2, &w)), Some(&free), None, Utc::now()).explanation
        };
        assert!(
            said("insufficient_gpus").ends_with("; it needs 4 GPUs, 2 of 16 GPUs are free"),
            "{}",
            said("insufficient_gpus")
        );
        assert!(said("insufficient_cpus").ends_with("; it needs 8 CPUs, 3 of 64 CPUs are free"));
        assert!(said("lower_priority").starts_with("2 jobs ahead of it"));
        assert!(
            said("lower_priority").ends_with(
                "; it needs 4 GPUs, 2 of 16 GPUs are free; 8 CPUs, 3 of 64 CPUs are free"
            ),
            "{}",
            said("lower_priority")
        );
        assert!(
            said("insufficient_resources")
                .ends_with("it needs 4 GPUs, 8 CPUs and 32 GB; 2 of 16 GPUs, 3 of 64 CPUs and 100 GB of memory are free")
        );
        // Enough GPUs free: the count does not explain a lower priority.
        let plenty = RoundFree { gpus: 8, ..free };
        let w = waiting("lower_priority");
        let shown = QueuePosition::of(None, Some((0, &w)), Some(&plenty), None, Utc::now());
        assert!(
            !shown.explanation.contains("GPUs are free")
                && shown
                    .explanation
                    .ends_with("; it needs 8 CPUs, 3 of 64 CPUs are free"),
            "{}",
            shown.explanation
        );
        // Nothing it needs is short: no numbers.
        let roomy = RoundFree {
            gpus: 8,
            cpus: 64,
            ..free
        };
        let shown = QueuePosition::of(None, Some((0, &w)), Some(&roomy), None, Utc::now());
        assert!(!shown.explanation.contains("free"), "{}", shown.explanation);
        // A record from before rounds said their needs: the reason alone.
        let old = WaitingJob::new(w.job, "insufficient_gpus");
        let shown = QueuePosition::of(None, Some((0, &old)), Some(&free), None, Utc::now());
        assert_eq!(
            shown.explanation,
            "not enough free GPUs for its smallest shape"
        );
    }
}
