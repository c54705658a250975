//! Tiresias, discretised two-dimensional least-attained-service (2D-LAS), after Gu et al. (NSDI'19) and
//! the two-queue configuration of the Pollux artifact's port: a job starts in Q0 and is demoted to Q1
//! once it has attained 16 GPU-hours (GPUs × run time) since it entered Q0 (more thresholds give more
//! queues, as `drover` uses); earlier queues run first, FIFO (by queue entry) within a queue;
//! preemptive across queues. Starvation guard: a demoted job that has waited `promote_knob` × its run
//! time since it last entered Q0 is promoted back to Q0. Models with
//! high tensor skew get consolidated placement (fewest nodes, or wait); the rest are placed anywhere.

use super::common::{arrival_if_free, claim_order, ordered_round};
use super::interface::{Oracle, Policy, PolicyError};
use super::state::{Restored, SavedState, decode, encode, restore_jobs};
use crate::place::Strategy;
use crate::plan::{JobPlan, Plan, RunReason};
use crate::snapshot::{ClusterSnapshot, JobView};
use drover_core::JobId;
use std::collections::BTreeMap;

/// Where a job stands in the queues. Kept between rounds, and saved for the next leader: the order
/// of entry is not in any snapshot.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct QueueEntry {
    #[serde(rename = "q")]
    queue: u8,
    /// Order of entry into the queue (FIFO within a queue).
    seq: u64,
    /// Attained GPU-seconds and run seconds when the job entered Q0 (reset on promotion).
    #[serde(rename = "attained_s")]
    attained_at_entry: f64,
    #[serde(rename = "executed_s")]
    executed_at_entry: f64,
}

/// What Tiresias saves that is no job's: the next order of entry.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(crate) struct Counter {
    next_seq: u64,
}

#[derive(Debug, Clone)]
pub struct Tiresias {
    /// Attained service (GPU-seconds since entering Q0) that demotes a job from each queue to the
    /// next: one value gives two queues, as the Pollux port; ascending.
    pub thresholds_gpu_s: Vec<f64>,
    /// Promote a waiting Q1 job when its wait reaches this multiple of its run time since entering Q0;
    /// 0 turns the guard off.
    pub promote_knob: f64,
    entries: BTreeMap<JobId, QueueEntry>,
    /// Entries of jobs missing from the last snapshots, and since when: kept for
    /// [`ABSENT_KEPT_S`], so a job that is briefly not shown keeps its queue when it comes back.
    absent: BTreeMap<JobId, (f64, QueueEntry)>,
    next_seq: u64,
}

/// How long the queue entry of a job missing from the snapshots is kept. On a live cluster a job
/// is missing between its tasks' exit and its return to the queue (a preemption, a move, a resize
/// settling), and while paused: without this, every preemption put a demoted job back at the end
/// of the first queue, and a pause and resume did it on request. Jobs that ended are forgotten
/// after it.
pub(crate) const ABSENT_KEPT_S: f64 = 600.0;

impl Default for Tiresias {
    fn default() -> Self {
        Tiresias {
            thresholds_gpu_s: vec![16.0 * 3600.0],
            promote_knob: 8.0,
            entries: BTreeMap::new(),
            absent: BTreeMap::new(),
            next_seq: 0,
        }
    }
}

impl Tiresias {
    pub(crate) fn strategy(job: &JobView) -> Strategy {
        if job.consolidate {
            Strategy::Consolidate
        } else {
            Strategy::Relaxed
        }
    }

    /// Brings every job's queue up to date with what the snapshot shows.
    pub(crate) fn update_queues(&mut self, snapshot: &ClusterSnapshot) {
        let now = snapshot.now_s;
        // Entries missing for too long go first (the ones that go missing below, as of now, stay).
        if !self.absent.is_empty() {
            self.absent
                .retain(|_, (since, _)| now - *since < ABSENT_KEPT_S);
        }
        // One lookup a job; the jobs gone since the last call leave after (only when some have: an
        // arrival placed between rounds, and a round where no job ended, pay no pass building a
        // set of every job).
        self.update_entries(snapshot);
        if self.entries.len() > snapshot.jobs.len() {
            let live: std::collections::HashSet<JobId> =
                snapshot.jobs.iter().map(|j| j.id).collect();
            let absent = &mut self.absent;
            self.entries.retain(|id, entry| {
                let kept = live.contains(id);
                if !kept {
                    absent.insert(*id, (now, *entry));
                }
                kept
            });
        }
    }

    /// Each job's entry: made (or taken back from the missing) for a new one, moved down a queue
    /// past its threshold, promoted back to the first after waiting long enough.
    fn update_entries(&mut self, snapshot: &ClusterSnapshot) {
        for job in &snapshot.jobs {
            let observed = &job.observed;
            let entry = self.entries.entry(job.id).or_insert_with(|| {
                if let Some((_, entry)) = self.absent.remove(&job.id) {
                    return entry;
                }
                self.next_seq += 1;
                QueueEntry {
                    queue: 0,
                    seq: self.next_seq,
                    attained_at_entry: observed.attained_gpu_s,
                    executed_at_entry: observed.executed_s,
                }
            });
            let attained = observed.attained_gpu_s - entry.attained_at_entry;
            if self
                .thresholds_gpu_s
                .get(usize::from(entry.queue))
                .is_some_and(|&limit| attained >= limit)
            {
                let queue = self
                    .thresholds_gpu_s
                    .iter()
                    .take_while(|&&limit| attained >= limit)
                    .count() as u8;
                self.next_seq += 1;
                *entry = QueueEntry {
                    queue,
                    seq: self.next_seq,
                    ..*entry
                };
            } else if entry.queue > 0 && job.placement.is_none() && self.promote_knob > 0.0 {
                let ran = observed.executed_s - entry.executed_at_entry;
                let waited = snapshot.now_s - observed.last_state_change_s;
                if ran > 0.0 && waited >= self.promote_knob * ran {
                    self.next_seq += 1;
                    *entry = QueueEntry {
                        queue: 0,
                        seq: self.next_seq,
                        attained_at_entry: observed.attained_gpu_s,
                        executed_at_entry: observed.executed_s,
                    };
                }
            }
        }
    }
}

impl Tiresias {
    /// The job's place in the queues, if it has one (kept for it while it is missing too).
    pub(crate) fn entry(&self, job: JobId) -> Option<QueueEntry> {
        self.entries
            .get(&job)
            .or_else(|| self.absent.get(&job).map(|(_, entry)| entry))
            .copied()
    }

    /// The jobs with a place in the queues, those missing from the last snapshots included: what
    /// is saved for the next leader, so a job missing at a change of leader keeps its queue too.
    pub(crate) fn jobs(&self) -> impl Iterator<Item = JobId> + '_ {
        self.entries.keys().chain(self.absent.keys()).copied()
    }

    /// What is no job's, to save.
    pub(crate) fn counter(&self) -> Counter {
        Counter {
            next_seq: self.next_seq,
        }
    }

    /// Takes back a job's saved place; entries later get orders after every restored one.
    pub(crate) fn restore_entry(&mut self, job: JobId, entry: QueueEntry) {
        self.next_seq = self.next_seq.max(entry.seq);
        self.entries.insert(job, entry);
    }

    pub(crate) fn restore_counter(&mut self, counter: Counter) {
        self.next_seq = self.next_seq.max(counter.next_seq);
    }

    /// (queue, order of entry): lower runs first. Call [`Self::update_queues`] first.
    pub(crate) fn queue_key(&self, job: JobId) -> (u8, u64) {
        self.entries
            .get(&job)
            .map_or((0, u64::MAX), |e| (e.queue, e.seq))
    }
}

impl Policy for Tiresias {
    fn fork(&self, _oracle: Option<Box<dyn Oracle>>) -> Result<Box<dyn Policy>, PolicyError> {
        Ok(Box::new(self.clone()))
    }

    fn name(&self) -> &'static str {
        "tiresias"
    }

    fn save(&self) -> SavedState {
        SavedState {
            jobs: self
                .jobs()
                .filter_map(|job| Some((job, encode(&self.entry(job)?))))
                .collect(),
            shared: Some(encode(&self.counter())),
        }
    }

    fn restore(&mut self, saved: &SavedState) -> Restored {
        if let Some(counter) = saved.shared.as_deref().and_then(decode::<Counter>) {
            self.restore_counter(counter);
        }
        restore_jobs(saved, |job, entry| self.restore_entry(job, entry))
    }

    fn schedule(&mut self, snapshot: &ClusterSnapshot, _previous: &Plan) -> Plan {
        self.update_queues(snapshot);
        let mut order: Vec<usize> = (0..snapshot.jobs.len()).collect();
        let key = |i: usize| {
            let entry = self.entries[&snapshot.jobs[i].id];
            (entry.queue, entry.seq)
        };
        order.sort_by_key(|&i| key(i));
        ordered_round(snapshot, &claim_order(snapshot, &order), Self::strategy)
    }

    fn place_arrival(&mut self, snapshot: &ClusterSnapshot, job: &JobView) -> JobPlan {
        // A new job enters Q0; it runs now if it fits in what is free, else at the next round.
        arrival_if_free(snapshot, job, Self::strategy(job), RunReason::PriorityOrder)
    }
}
