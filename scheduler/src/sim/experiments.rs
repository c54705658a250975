//! Hyper-parameter searches in the simulator: experiments whose trials are jobs made, promoted and
//! stopped by Drover's own searcher (`drover_search::plan`, the code the server runs) as their results
//! come in, next to the trace's ordinary jobs. Each running trial carries the searcher's outlook
//! ([`crate::SearchHint`]) for the policy to use or ignore.
//!
//! A trial's hidden truth: the ASHA digits example's space (learning rate, width, batch size,
//! optimizer) mapped to a loss curve `a·(k + k0)^(−α) + c` whose floor `c` is best near a learning
//! rate of 10^−2.5 and a wide model, and whose speed of convergence `k0` grows as the learning rate
//! falls, so curves cross and early ranks mislead a little, as they do in practice. Every trial runs on
//! one GPU at the speed of a measured model drawn per experiment.

use super::engine::{Spawned, Spawner};
use super::speed::MeasuredModel;
use super::truth::{JobTruth, Surface};
use crate::snapshot::{JobView, Observations, Range, SearchHint, Shape, Tenant};
use drover_core::experiment::{Assignment, DroverExperiment, ExperimentSpec};
use drover_core::spec::Format;
use drover_core::{ExperimentId, JobId};
use drover_search::{Decision, SegmentState, Situation, TrialRecord};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The experiments to add to a workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExperimentOptions {
    pub count: usize,
    pub max_trials: u32,
    pub max_concurrent_trials: u32,
    /// Hours a trial that reaches the top rung trains, on one GPU.
    pub trial_hours: f64,
    pub eta: u32,
    /// Rungs of the ladder (the bottom one trains `1/eta^(rungs-1)` of the top one's steps).
    pub rungs: u32,
}

impl Default for ExperimentOptions {
    fn default() -> Self {
        ExperimentOptions {
            count: 0,
            max_trials: 32,
            max_concurrent_trials: 8,
            trial_hours: 4.0,
            eta: 3,
            rungs: 4,
        }
    }
}

const TEMPLATE: &str = r#"
apiVersion: drover.dev/v1
kind: DroverExperiment
metadata: {name: sim}
spec:
  trial:
    type: train
    train:
      model: {type: mlp, hidden: [64]}
      dataset: {type: digits}
      optimizer: {type: adamw, lr: 0.001}
      batch_size: 64
  parameters:
    train.optimizer:
      type: categorical
      values: [{type: adamw}, {type: sgd, momentum: 0.9}]
    train.optimizer.lr: {type: log_uniform, min: 0.0001, max: 0.1}
    train.model.hidden: {type: categorical, values: [[32], [64], [128], [256]]}
    train.batch_size: {type: int, min: 16, max: 256, log: true}
  metric: {name: val_loss, goal: minimize}
  searcher: {type: asha, min_steps: 100, max_steps: 900}
"#;

/// What happened to one experiment.
#[derive(Debug, Clone, Serialize)]
pub struct ExperimentRow {
    pub tenant: String,
    pub submit_s: f64,
    /// When the searcher declared it over.
    pub finish_s: f64,
    /// When a trial first finished the top rung (the first full-fidelity result); never when the
    /// experiment has too few trials to promote one that far (fewer than η^(rungs−1)).
    pub first_full_s: Option<f64>,
    /// The best value a segment ended with, and when it did: the experiment's answer and when it
    /// had it.
    pub best: Option<f64>,
    pub best_at_s: Option<f64>,
    pub trials: usize,
    pub gpu_hours: f64,
}

/// A segment's job, while it is known.
#[derive(Debug, Clone, Copy)]
struct SegmentJob {
    experiment: usize,
    trial: u32,
    /// The step the segment started from.
    start: u64,
    /// Steps of the curve already taken from the job's samples.
    seen: u64,
    attained_gpu_s: f64,
}

#[derive(Debug)]
struct Experiment {
    id: ExperimentId,
    tenant: u32,
    spec: ExperimentSpec,
    model: Arc<MeasuredModel>,
    submit_s: f64,
    finish_s: Option<f64>,
    first_full_s: Option<f64>,
    best: Option<(f64, f64)>,
    trials: Vec<TrialRecord>,
    /// Each trial's loss curve `(a, k0, α, c)`.
    curves: Vec<(f64, f64, f64, f64)>,
    /// The job of each trial's current segment.
    current: BTreeMap<u32, JobId>,
    gpu_s: f64,
}

/// The [`Spawner`] that runs the experiments.
#[derive(Debug)]
pub struct Experiments {
    experiments: Vec<Experiment>,
    jobs: BTreeMap<JobId, SegmentJob>,
    tenants: Vec<String>,
    rng: ChaCha8Rng,
    max_node_cpus: u32,
}

/// The top rung's steps for `hours` on one GPU of `model`.
fn steps_in(model: &MeasuredModel, hours: f64) -> u64 {
    let truth = truth_for(model, 1.0, (0.0, 1.0, 1.0, 0.0));
    (truth.steps_per_s(one_gpu()) * hours * 3600.0).max(1.0) as u64
}

fn one_gpu() -> Shape {
    Shape { ps: 1, workers: 1 }
}

fn truth_for(model: &MeasuredModel, steps: f64, loss: (f64, f64, f64, f64)) -> JobTruth {
    JobTruth {
        surface: Surface::Measured {
            model: Arc::new(model.clone()),
            stretch: 1.0,
        },
        total_steps: steps.max(1.0),
        step_noise: model.residual.clamp(0.02, 0.15),
        loss,
        model_speeds: Vec::new(),
    }
}

impl Experiments {
    /// `options.count` experiments, submitted evenly over `[first_s, last_s]` by the tenants with the
    /// largest guarantees in turn, each trial on a measured model drawn per experiment.
    pub fn new(
        options: ExperimentOptions,
        tenants: &[Tenant],
        models: &[MeasuredModel],
        span: (f64, f64),
        max_node_cpus: u32,
        seed: u64,
    ) -> Experiments {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xe4be_71e5);
        let mut by_share: Vec<u32> = (0..tenants.len() as u32).collect();
        by_share.sort_by_key(|&t| std::cmp::Reverse(tenants[t as usize].guaranteed_gpus));
        let base = DroverExperiment::parse(TEMPLATE.as_bytes(), Format::Yaml)
            .map(|d| d.spec)
            .unwrap_or_else(|err| unreachable!("the simulator's experiment template: {err}"));
        let (first, last) = span;
        let experiments = (0..options.count)
            .map(|i| {
                let model = Arc::new(models[rng.random_range(0..models.len().max(1))].clone());
                let max_steps = steps_in(&model, options.trial_hours);
                let eta = options.eta.max(2);
                // Rounded up, so that η^(rungs−1) times the bottom rung reaches the top one.
                let min_steps = max_steps
                    .div_ceil(u64::from(eta).pow(options.rungs.max(1) - 1))
                    .max(1);
                let mut spec = base.clone();
                spec.searcher = drover_core::experiment::SearcherSpec::Asha {
                    min_steps,
                    max_steps,
                    eta,
                };
                spec.budget.max_trials = Some(options.max_trials);
                spec.budget.max_concurrent_trials = options.max_concurrent_trials;
                spec.seed = seed.wrapping_mul(1000).wrapping_add(i as u64);
                let at = (i as f64 + 0.5) / options.count as f64;
                Experiment {
                    id: ExperimentId(uuid::Uuid::from_u128(i as u128 + 1)),
                    tenant: by_share
                        .get(i % by_share.len().max(1))
                        .copied()
                        .unwrap_or(0),
                    spec,
                    model,
                    submit_s: first + at * (last - first).max(0.0),
                    finish_s: None,
                    first_full_s: None,
                    best: None,
                    trials: Vec::new(),
                    curves: Vec::new(),
                    current: BTreeMap::new(),
                    gpu_s: 0.0,
                }
            })
            .collect();
        Experiments {
            experiments,
            jobs: BTreeMap::new(),
            tenants: tenants.iter().map(|t| t.name.clone()).collect(),
            rng,
            max_node_cpus,
        }
    }

    /// One row per experiment.
    pub fn rows(&self) -> Vec<ExperimentRow> {
        self.experiments
            .iter()
            .map(|e| ExperimentRow {
                tenant: self
                    .tenants
                    .get(e.tenant as usize)
                    .cloned()
                    .unwrap_or_default(),
                submit_s: e.submit_s,
                finish_s: e.finish_s.unwrap_or(f64::NAN),
                first_full_s: e.first_full_s,
                best: e.best.map(|(value, _)| value),
                best_at_s: e.best.map(|(_, at)| at),
                trials: e.trials.len(),
                gpu_hours: e.gpu_s / 3600.0,
            })
            .collect()
    }

    /// The hidden loss curve of a trial at `params`, with a per-trial offset.
    fn curve_of(&mut self, params: &Assignment) -> (f64, f64, f64, f64) {
        let lr = params
            .get("train.optimizer.lr")
            .and_then(|v| v.as_f64())
            .unwrap_or(1e-3);
        let width = params
            .get("train.model.hidden")
            .and_then(|v| v.get(0))
            .and_then(|v| v.as_f64())
            .unwrap_or(64.0);
        let batch = params
            .get("train.batch_size")
            .and_then(|v| v.as_f64())
            .unwrap_or(64.0);
        let sgd = params
            .get("train.optimizer")
            .and_then(|v| v.get("type"))
            .and_then(|v| v.as_str())
            == Some("sgd");
        let off = lr.log10() + 2.5;
        let floor = 0.05
            + 0.08 * off * off
            + 0.04 * (256.0 / width).log2() / 3.0
            + 0.02 * ((batch / 64.0).log2()).abs()
            + if sgd { 0.03 } else { 0.0 }
            + self.rng.random_range(0.0..0.03);
        // A lower learning rate converges later.
        let k0 = 50.0 * 10f64.powf(-0.5 * off).clamp(0.1, 10.0);
        let alpha = 0.7;
        let start = 2.3;
        ((start - floor) * k0.powf(alpha), k0, alpha, floor)
    }

    /// Takes every segment job's new samples into its trial's curve.
    fn observe(&mut self, jobs: &[JobView]) {
        for job in jobs {
            let Some(segment) = self.jobs.get_mut(&job.id) else {
                continue;
            };
            segment.attained_gpu_s = job.observed.attained_gpu_s;
            let experiment = &mut self.experiments[segment.experiment];
            let Some(trial) = experiment.trials.get_mut(segment.trial as usize) else {
                continue;
            };
            for &(step, loss) in job.observed.loss_samples.iter() {
                if step > segment.seen {
                    trial.curve.push((segment.start + step, loss));
                    segment.seen = step;
                }
            }
        }
    }

    /// A segment's job ended: completed (`value` is its final metric) or stopped.
    fn ended(&mut self, id: JobId, value: Option<f64>, now: f64) {
        let Some(segment) = self.jobs.remove(&id) else {
            return;
        };
        let experiment = &mut self.experiments[segment.experiment];
        experiment.gpu_s += segment.attained_gpu_s;
        if experiment.current.get(&segment.trial) == Some(&id) {
            experiment.current.remove(&segment.trial);
        }
        let top = match experiment.spec.searcher {
            drover_core::experiment::SearcherSpec::Asha { max_steps, .. } => max_steps,
            _ => u64::MAX,
        };
        let Some(trial) = experiment.trials.get_mut(segment.trial as usize) else {
            return;
        };
        let Some(last) = trial.segments.last_mut() else {
            return;
        };
        match value {
            Some(value) => {
                last.state = SegmentState::Succeeded;
                last.last = Some(value);
                let end = last.max_steps.unwrap_or(segment.start);
                trial.curve.push((end, value));
                if end >= top && experiment.first_full_s.is_none() {
                    experiment.first_full_s = Some(now);
                }
                if experiment.best.is_none_or(|(best, _)| value < best) {
                    experiment.best = Some((value, now));
                }
            }
            None => last.state = SegmentState::Stopped,
        }
    }

    /// The job for a trial's new segment, from `start` to `end` steps.
    fn segment_job(
        &mut self,
        experiment: usize,
        trial: u32,
        start: u64,
        end: u64,
        index: u128,
        now: f64,
    ) -> (JobView, JobTruth) {
        let e = &self.experiments[experiment];
        let (a, k0, alpha, c) = e.curves[trial as usize];
        // The curve continues from the checkpoint's step.
        let truth = truth_for(
            &e.model,
            end.saturating_sub(start) as f64,
            (a, k0 + start as f64, alpha, c),
        );
        let (cpus_per_worker, cpus_per_ps) = super::workload::default_cpus(self.max_node_cpus);
        let id = JobId(uuid::Uuid::from_u128(index));
        let view = JobView {
            id,
            tenant: e.tenant,
            priority: 0,
            submit_s: now,
            workers: Range { min: 1, max: 1 },
            ps: Range { min: 1, max: 1 },
            preferred: one_gpu(),
            gpus_per_worker: 1,
            gpu_memory_gb: None,
            cpus_per_worker,
            cpus_per_ps,
            memory_gb_per_task: 0,
            preemptible: true,
            consolidate: false,
            worker_unit: 1,
            worker_step: 1,
            micro_batches: 1,
            placement: None,
            observed: Observations {
                step_budget: Some(end.saturating_sub(start)),
                runs_to_budget: true,
                // Trials of one experiment run one program, as the server keys them.
                program: Some(experiment as u64),
                ..Observations::default()
            },
            search: None,
            image: false,
            node_selector: Default::default(),
            gpu_types: Vec::new(),
            tolerations: Vec::new(),
        };
        self.experiments[experiment].current.insert(trial, id);
        self.jobs.insert(
            id,
            SegmentJob {
                experiment,
                trial,
                start,
                seen: 0,
                attained_gpu_s: 0.0,
            },
        );
        (view, truth)
    }
}

impl Spawner for Experiments {
    fn next_wake_s(&self) -> f64 {
        self.experiments
            .iter()
            .filter(|e| e.trials.is_empty() && e.finish_s.is_none())
            .map(|e| e.submit_s)
            .fold(f64::INFINITY, f64::min)
    }

    fn done(&self) -> bool {
        self.experiments.iter().all(|e| e.finish_s.is_some())
    }

    fn round(
        &mut self,
        now_s: f64,
        next_index: u128,
        jobs: &[JobView],
        ended: &[JobId],
    ) -> Spawned {
        self.observe(jobs);
        let mut spawned = Spawned::default();
        for &id in ended {
            let Some(segment) = self.jobs.get(&id).copied() else {
                continue;
            };
            let e = &self.experiments[segment.experiment];
            let (a, k0, alpha, c) = e.curves[segment.trial as usize];
            let end = e.trials[segment.trial as usize]
                .segments
                .last()
                .and_then(|s| s.max_steps)
                .unwrap_or(segment.start) as f64;
            let truth = a * (end + k0).powf(-alpha) + c;
            let value = super::workload::noisy(&mut self.rng, truth, 0.02);
            self.ended(id, Some(value), now_s);
        }
        let mut index = next_index;
        for experiment in 0..self.experiments.len() {
            let e = &self.experiments[experiment];
            if e.finish_s.is_some() || e.submit_s > now_s {
                continue;
            }
            let situation = Situation {
                trials: e.trials.clone(),
                gpu_hours_used: e.gpu_s / 3600.0,
                past_deadline: false,
            };
            let plan = drover_search::plan(&e.spec, &situation);
            for decision in &plan.decisions {
                drover_search::apply(&mut self.experiments[experiment].trials, decision);
                match decision {
                    Decision::Start {
                        trial,
                        params,
                        max_steps,
                        source,
                        ..
                    } => {
                        let curve = self.curve_of(params);
                        let e = &mut self.experiments[experiment];
                        e.curves.push(curve);
                        let start = source
                            .and_then(|s| e.trials.get(s.trial as usize))
                            .map_or(0, drover_search::pbt::steps_done);
                        let end = max_steps.unwrap_or(start + 1);
                        spawned
                            .jobs
                            .push(self.segment_job(experiment, *trial, start, end, index, now_s));
                        index += 1;
                    }
                    Decision::Resume {
                        trial, max_steps, ..
                    } => {
                        let start = self.experiments[experiment].trials[*trial as usize]
                            .segments
                            .iter()
                            .rev()
                            .skip(1)
                            .find(|s| s.state == SegmentState::Succeeded)
                            .and_then(|s| s.max_steps)
                            .unwrap_or(0);
                        spawned.jobs.push(
                            self.segment_job(experiment, *trial, start, *max_steps, index, now_s),
                        );
                        index += 1;
                    }
                    Decision::Stop { trial, .. } => {
                        if let Some(&id) = self.experiments[experiment].current.get(trial) {
                            spawned.stop.push(id);
                            self.ended(id, None, now_s);
                        }
                    }
                }
            }
            let e = &mut self.experiments[experiment];
            if plan.finished.is_some() && e.current.is_empty() {
                e.finish_s = Some(now_s);
                continue;
            }
            for (trial, outlook) in drover_search::outlook(&e.spec, &e.trials) {
                if let Some(&id) = e.current.get(&trial) {
                    spawned.hints.push((
                        id,
                        SearchHint {
                            experiment: e.id,
                            promise: outlook.promise,
                            doomed: outlook.doomed,
                        },
                    ));
                }
            }
        }
        spawned
    }
}
