//! Drover on a cluster of several GPU models: how fast each job runs on each model (its own step times
//! where it has run on two, else the ratio learned from every job that has), and which model each job
//! placed in a round should get. Each job is judged by its progress rate on a model normalised by its
//! rate on its best model (Gavel's effective throughput); the jobs that lose most on the slower models
//! are given the faster ones first, so the cluster's total normalised throughput is high, while who
//! runs at all stays the order's (guarantees, priorities, least attained service) decision. On one
//! model none of this runs.

use crate::cluster::{GpuModelTag, GpuModels};
use crate::perf::SpeedModel;
use crate::snapshot::{ClusterSnapshot, JobView, Shape};
use drover_core::JobId;
use std::collections::{BTreeMap, BTreeSet};

/// Rounds of steps on a model before a job's own measurement there counts.
const MIN_SAMPLES: u32 = 2;
/// Jobs measured on both models of a pair before the pair's ratio is trusted for other jobs; until
/// then a job placed anew after running on one of the two tries the other first (exploration).
const MIN_JOBS_PER_PAIR: u32 = 3;

/// The GPU models of a round's schedulable nodes, when there are several.
pub(super) type Models = GpuModels;

/// The cluster's models, `None` on a cluster of one model (or none).
pub(super) fn models_of(snapshot: &ClusterSnapshot) -> Option<Models> {
    let models = GpuModels::of(&snapshot.nodes);
    (models.tags.len() > 1).then_some(models)
}

/// Two models, the lower tag first.
type Pair = (GpuModelTag, GpuModelTag);

/// Ratios of step times between models, learned from jobs measured on both.
#[derive(Debug, Clone, Default)]
pub(crate) struct ModelLearner {
    /// Per pair (lower tag first): Σ log(step on first / step on second) and how many jobs, of jobs
    /// gone.
    retired: BTreeMap<Pair, (f64, u32)>,
    /// Each active job's own per-pair measurement, as of the last round.
    active: BTreeMap<JobId, Vec<(Pair, f64)>>,
}

/// A job's own log ratio of step times between each pair of models it has run on (lower tag first):
/// its step times on one model against what its speed model on the other predicts at the same
/// shapes, averaged both ways (an elastic job seldom runs one shape on two models).
fn own_pairs(job: &JobView) -> Vec<(Pair, f64)> {
    let usable = |s: &&crate::snapshot::StepStats| {
        !s.shared && s.samples >= MIN_SAMPLES && s.mean_step_s > 0.0 && !s.gpu.is_unknown()
    };
    let mut tags: Vec<GpuModelTag> = job
        .observed
        .step_stats
        .iter()
        .filter(usable)
        .map(|s| s.gpu)
        .collect();
    tags.sort_unstable();
    tags.dedup();
    if tags.len() < 2 {
        return Vec::new();
    }
    let on = |tag: GpuModelTag| -> Vec<crate::snapshot::StepStats> {
        job.observed
            .step_stats
            .iter()
            .filter(usable)
            .filter(|s| s.gpu == tag)
            .copied()
            .collect()
    };
    let by_model: Vec<(GpuModelTag, Vec<crate::snapshot::StepStats>, SpeedModel)> = tags
        .iter()
        .map(|&tag| {
            let stats = on(tag);
            let speed = SpeedModel::of_job(job, &stats);
            (tag, stats, speed)
        })
        .collect();
    // Mean log(measured on a / predicted on b) over a's shapes.
    let against = |a: &[crate::snapshot::StepStats], b: &SpeedModel| {
        let logs: Vec<f64> = a
            .iter()
            .filter_map(|s| {
                let predicted = b.step_s(s.shape);
                (predicted > 0.0).then(|| (s.mean_step_s / predicted).ln())
            })
            .collect();
        (!logs.is_empty()).then(|| logs.iter().sum::<f64>() / logs.len() as f64)
    };
    let mut pairs = Vec::new();
    for (i, (a, stats_a, speed_a)) in by_model.iter().enumerate() {
        for (b, stats_b, speed_b) in &by_model[i + 1..] {
            if let (Some(ab), Some(ba)) = (against(stats_a, speed_b), against(stats_b, speed_a)) {
                pairs.push(((*a, *b), (ab - ba) / 2.0));
            }
        }
    }
    pairs
}

impl ModelLearner {
    /// Takes in this round's measurements; jobs gone keep counting.
    pub fn update(&mut self, snapshot: &ClusterSnapshot) {
        let mut seen = BTreeSet::new();
        for job in &snapshot.jobs {
            seen.insert(job.id);
            let many = job
                .observed
                .step_stats
                .windows(2)
                .any(|w| w[0].gpu != w[1].gpu);
            if many {
                let pairs = own_pairs(job);
                if !pairs.is_empty() {
                    self.active.insert(job.id, pairs);
                }
            }
        }
        let gone: Vec<JobId> = self
            .active
            .keys()
            .filter(|id| !seen.contains(id))
            .copied()
            .collect();
        for id in gone {
            if let Some(pairs) = self.active.remove(&id) {
                for (key, ratio) in pairs {
                    let entry = self.retired.entry(key).or_default();
                    entry.0 += ratio;
                    entry.1 += 1;
                }
            }
        }
    }

    /// What was learned from jobs gone, to save: (lower tag, higher tag, Σ log ratio, jobs).
    pub fn retired(&self) -> Vec<(u64, u64, f64, u32)> {
        self.retired
            .iter()
            .map(|(&(a, b), &(sum, n))| (a.0, b.0, sum, n))
            .collect()
    }

    /// A job's own measurements, to save with the job (they count when it is gone).
    pub fn active(&self, job: JobId) -> Option<Vec<(u64, u64, f64)>> {
        self.active
            .get(&job)
            .map(|pairs| pairs.iter().map(|&((a, b), r)| (a.0, b.0, r)).collect())
    }

    /// Takes back what [`Self::retired`] saved.
    pub fn restore_retired(&mut self, retired: &[(u64, u64, f64, u32)]) {
        for &(a, b, sum, n) in retired {
            let (a, b) = (GpuModelTag(a), GpuModelTag(b));
            if a < b && sum.is_finite() {
                self.retired.insert((a, b), (sum, n));
            }
        }
    }

    /// Takes back what [`Self::active`] saved of a job.
    pub fn restore_active(&mut self, job: JobId, pairs: &[(u64, u64, f64)]) {
        let pairs: Vec<(Pair, f64)> = pairs
            .iter()
            .filter(|&&(a, b, r)| a < b && r.is_finite())
            .map(|&(a, b, r)| ((GpuModelTag(a), GpuModelTag(b)), r))
            .collect();
        if !pairs.is_empty() {
            self.active.insert(job, pairs);
        }
    }

    /// Mean log(step on `a` / step on `b`) over the jobs measured on both, and how many.
    fn pair(&self, a: GpuModelTag, b: GpuModelTag) -> (f64, u32) {
        if a == b {
            return (0.0, u32::MAX);
        }
        let (key, sign) = if a < b { ((a, b), 1.0) } else { ((b, a), -1.0) };
        let (mut sum, mut n) = self.retired.get(&key).copied().unwrap_or_default();
        for pairs in self.active.values() {
            if let Some((_, ratio)) = pairs.iter().find(|(k, _)| *k == key) {
                sum += ratio;
                n += 1;
            }
        }
        if n == 0 {
            (0.0, 0)
        } else {
            (sign * sum / f64::from(n), n)
        }
    }

    /// Log step time on each model relative to the first, from the pairs learned (through a third
    /// model where a pair is unknown), and whether each is known.
    pub fn population(&self, tags: &[GpuModelTag]) -> Vec<(f64, bool)> {
        let Some(&first) = tags.first() else {
            return Vec::new();
        };
        tags.iter()
            .map(|&t| {
                let (ratio, n) = self.pair(t, first);
                if n >= MIN_JOBS_PER_PAIR {
                    return (ratio, true);
                }
                for &via in tags.iter().filter(|&&v| v != t && v != first) {
                    let (a, na) = self.pair(t, via);
                    let (b, nb) = self.pair(via, first);
                    if na >= MIN_JOBS_PER_PAIR && nb >= MIN_JOBS_PER_PAIR {
                        return (a + b, true);
                    }
                }
                (0.0, false)
            })
            .collect()
    }
}

/// How fast a job runs on each model of a round, relative to its fastest of them.
#[derive(Debug, Clone)]
pub(super) struct JobSpeeds {
    /// Per model index: relative speed in (0, 1].
    pub relative: Vec<f64>,
    /// Models neither the job nor the population has a ratio for.
    pub unknown: Vec<bool>,
    /// Models the job's own step times give its speed on (its home model, and those it has a ratio
    /// to home for).
    pub measured: Vec<bool>,
}

/// A job's speed per model, from its own step times and `population`
/// ([`ModelLearner::population`] of the round's models, computed once a round).
pub(super) fn job_speeds(population: &[(f64, bool)], models: &Models, job: &JobView) -> JobSpeeds {
    let home = job.observed.home_gpu();
    let home_index = models.tags.iter().position(|&t| t == home);
    let own = own_pairs(job);
    // Log step time per model, relative to the home model (or to the first without one).
    let mut measured = vec![false; models.tags.len()];
    let log_step: Vec<(f64, bool)> = models
        .tags
        .iter()
        .enumerate()
        .map(|(i, &tag)| {
            let Some(h) = home_index else {
                // Never run: the population's ratios, and nothing to explore (a job learns a ratio
                // only by running on two models).
                return (population[i].0, true);
            };
            if i == h {
                measured[i] = true;
                return (0.0, true);
            }
            let key = if tag < home { (tag, home) } else { (home, tag) };
            if let Some((_, ratio)) = own.iter().find(|(k, _)| *k == key) {
                measured[i] = true;
                return (if tag < home { *ratio } else { -ratio }, true);
            }
            let (pop_t, known_t) = population[i];
            let (pop_h, known_h) = population[h];
            (pop_t - pop_h, known_t && known_h)
        })
        .collect();
    let fastest = log_step.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
    JobSpeeds {
        relative: log_step.iter().map(|x| (fastest - x.0).exp()).collect(),
        unknown: log_step.iter().map(|x| !x.1).collect(),
        measured,
    }
}

/// One job with a target shape this round: its index, the GPUs it takes, its speeds, the models it
/// may use, and for a running job keeping its shape, the model it is on and whether it has been there
/// long enough to move.
pub(super) struct ToPlace {
    pub index: usize,
    pub gpus: u32,
    pub speeds: JobSpeeds,
    pub allowed: Vec<bool>,
    pub current: Option<usize>,
    pub may_move: bool,
    /// Seconds it has run in all.
    pub executed_s: f64,
    /// Its priority and least-attained-service queue: jobs are taken group by group in the policy's
    /// order, by how much they lose on slow models within a group.
    pub group: (i32, u8),
}

/// What [`choose_models`] decided for one job.
pub(super) struct Chosen {
    pub index: usize,
    /// The models to try, in order (`None`: it stays where it is).
    pub models: Option<Vec<GpuModelTag>>,
    /// A running job that moves to another model.
    pub moving: bool,
}

/// Seconds a job runs before it is worth profiling on other models.
const PROFILE_AFTER_S: f64 = 1800.0;

/// A running job moves to a model that runs it at least this much faster.
const MOVE_GAIN: f64 = 1.5;

/// Who gets which model. Jobs come in the policy's order, a group of equal priority and
/// least-attained-service queue at a time, and within a group those that lose most on their slowest
/// allowed model first: each takes the fastest model for it that still has room for its GPUs (a job
/// placed anew that has run on some model tries first a model no ratio to that one is known for
/// yet, to learn one). A running job keeping
/// its shape stays where it is unless, after [`MODEL_MOVE_MIN_S`] there,
/// a model [`MOVE_GAIN`] times faster has room (it moves up) or jobs ahead of it took its own
/// model's room (it moves down, making way, rather than holding fast GPUs a job ahead of it
/// wants). The models a job tries after its choice follow, fastest first.
pub(super) fn choose_models(
    models: &Models,
    jobs: Vec<ToPlace>,
    mut room: Vec<u32>,
) -> Vec<Chosen> {
    let sensitivity = |job: &ToPlace| {
        let allowed = job
            .speeds
            .relative
            .iter()
            .zip(&job.allowed)
            .filter(|(_, a)| **a)
            .map(|(s, _)| *s);
        let (low, high) = allowed.fold((f64::INFINITY, 0.0f64), |(l, h), s| (l.min(s), h.max(s)));
        if low > 0.0 && low.is_finite() {
            high / low
        } else {
            1.0
        }
    };
    let mut chosen = Vec::with_capacity(jobs.len());
    for group in jobs.chunk_by(|a, b| a.group == b.group) {
        let mut group: Vec<&ToPlace> = group.iter().collect();
        // Stable: ties keep the policy's order.
        group.sort_by(|a, b| sensitivity(b).total_cmp(&sensitivity(a)));
        for job in group {
            let mut by_speed: Vec<usize> =
                (0..models.tags.len()).filter(|&m| job.allowed[m]).collect();
            by_speed.sort_by(|&a, &b| job.speeds.relative[b].total_cmp(&job.speeds.relative[a]));
            let best_with_room = by_speed.iter().copied().find(|&m| room[m] >= job.gpus);
            let tags = |first: usize| {
                std::iter::once(first)
                    .chain(by_speed.iter().copied().filter(|&m| m != first))
                    .map(|m| models.tags[m])
                    .collect::<Vec<_>>()
            };
            if let Some(current) = job.current {
                // Profiling: a job that has run a while tries, once, each model it has no step
                // times on (not one far slower than where it is), so that its own ratios, not the
                // population's, decide where it goes.
                let explore = (job.may_move && job.executed_s >= PROFILE_AFTER_S)
                    .then(|| {
                        by_speed.iter().copied().find(|&m| {
                            m != current
                                && !job.speeds.measured[m]
                                && room[m] >= job.gpus
                                && job.speeds.relative[m] >= 0.25 * job.speeds.relative[current]
                        })
                    })
                    .flatten();
                if let Some(m) = explore {
                    room[m] -= job.gpus;
                    chosen.push(Chosen {
                        index: job.index,
                        models: Some(tags(m)),
                        moving: true,
                    });
                    continue;
                }
                let stay = match best_with_room {
                    None => true,
                    Some(best) if best == current => true,
                    Some(best) => {
                        let gain =
                            job.speeds.relative[best] / job.speeds.relative[current].max(1e-9);
                        let crowded_out = room[current] < job.gpus;
                        !(job.may_move && (gain >= MOVE_GAIN || crowded_out))
                    }
                };
                if stay {
                    room[current] = room[current].saturating_sub(job.gpus);
                    chosen.push(Chosen {
                        index: job.index,
                        models: None,
                        moving: false,
                    });
                } else if let Some(best) = best_with_room {
                    room[best] -= job.gpus;
                    chosen.push(Chosen {
                        index: job.index,
                        models: Some(tags(best)),
                        moving: true,
                    });
                }
                continue;
            }
            // Placed anew: a model no ratio is known for first (to learn it), else the fastest
            // with room.
            let pick = by_speed
                .iter()
                .copied()
                .find(|&m| job.speeds.unknown[m] && room[m] >= job.gpus)
                .or(best_with_room);
            let list = match pick {
                Some(m) => {
                    room[m] -= job.gpus;
                    tags(m)
                }
                None => by_speed.iter().map(|&m| models.tags[m]).collect(),
            };
            chosen.push(Chosen {
                index: job.index,
                models: Some(list),
                moving: false,
            });
        }
    }
    chosen
}

/// Per job (by index), the GPU models to try in order when it is placed anew this round, and
/// which running jobs move to another model ([`choose_models`]), from the ratios `learner` has, each
/// job's least-attained-service `queue`, and when each job last moved (`moved_at`, brought up to date
/// here).
pub(super) fn choose(
    learner: &ModelLearner,
    queue: impl Fn(JobId) -> u8,
    moved_at: &mut BTreeMap<JobId, f64>,
    snapshot: &ClusterSnapshot,
    models: &Models,
    order: &[usize],
    targets: &[Option<Shape>],
) -> Choice {
    let model_of = |node: u32| models.of_node(node);
    let room = models.gpus.clone();
    let population = learner.population(&models.tags);
    let live: BTreeSet<JobId> = snapshot.jobs.iter().map(|j| j.id).collect();
    moved_at.retain(|id, _| live.contains(id));
    // A gang larger than every model may span models: it is left to placement.
    let largest = models.gpus.iter().copied().max().unwrap_or(0);
    let mut jobs = Vec::new();
    for &i in order {
        let job = &snapshot.jobs[i];
        let Some(target) = targets[i] else {
            continue;
        };
        if job.gpus_at(target) > largest {
            continue;
        }
        let allowed = models
            .names
            .iter()
            .map(|name| {
                job.gpu_types.is_empty()
                    || job
                        .gpu_types
                        .iter()
                        .any(|t| crate::cluster::model_is(name, t))
            })
            .collect();
        // A running job keeping its shape, on the model of its first worker.
        let current = job
            .placement
            .as_ref()
            .filter(|p| p.shape() == target)
            .and_then(|p| p.tasks.iter().find(|t| !t.gpus.is_empty()))
            .and_then(|t| model_of(t.node.0));
        let settled_since = job
            .observed
            .last_state_change_s
            .max(moved_at.get(&job.id).copied().unwrap_or(f64::NEG_INFINITY));
        jobs.push(ToPlace {
            index: i,
            gpus: job.gpus_at(target),
            speeds: job_speeds(&population, models, job),
            allowed,
            current,
            may_move: job.preemptible && snapshot.now_s - settled_since >= MODEL_MOVE_MIN_S,
            executed_s: job.observed.executed_s,
            group: (job.priority, queue(job.id)),
        });
    }
    let mut choice = Choice {
        models: vec![None; snapshot.jobs.len()],
        moving: vec![false; snapshot.jobs.len()],
    };
    for chosen in choose_models(models, jobs, room) {
        if chosen.moving {
            // Chosen to move, whether or not placement manages it: the delay before the next
            // try is the same.
            choice.moving[chosen.index] = true;
            moved_at.insert(snapshot.jobs[chosen.index].id, snapshot.now_s);
        }
        choice.models[chosen.index] = chosen.models;
    }
    choice
}

/// Seconds a job runs where it was put before it is moved to another GPU model: a move costs a
/// checkpoint and a restart, and jobs bouncing between models would pay it every round.
const MODEL_MOVE_MIN_S: f64 = 900.0;

/// The models each job tries and the running jobs that move, for one round.
#[derive(Debug, Default)]
pub(super) struct Choice {
    pub models: Vec<Option<Vec<GpuModelTag>>>,
    pub moving: Vec<bool>,
}
