//! A run of training (`Run`): batches from the sampler, forward and backward on candle, gradients out
//! as flat buffers, the optimizer applied to them, validation and checkpoints; the loop that drives it
//! is in `training_loop.rs`. A run resumed from a checkpoint reaches bit-identical weights to an
//! uninterrupted one (CPU).

use crate::checkpoint::{self, Manifest, Shard, TensorInfo};
use crate::data::{self, Cursor, Data, Sampler};
use crate::dist::Cluster;
use crate::models::{self, Io, Model};
use crate::optim::{self, Optimizer};
use crate::params::Params;
use crate::resident::Resident;
use crate::rng::Rng;
use anyhow::{Context, bail};
use candle_core::{Device, Tensor};
use drover_core::spec::{CheckpointPolicy, Distributed, TargetMode, TrainSpec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

mod checkpoints;

/// Where a run's numbers and checkpoints go.
pub trait Reporter {
    fn metrics(&mut self, step: u64, values: &[(&str, f64)]);
    /// A checkpoint is durable at `path`.
    fn checkpoint(&mut self, step: u64, path: &Path);
    fn info(&mut self, line: &str);
}

#[derive(Debug, Clone)]
pub struct TrainOptions {
    pub spec: TrainSpec,
    pub checkpoint: CheckpointPolicy,
    pub workers: u32,
    pub ps: u32,
    pub rank: u32,
    pub checkpoint_dir: PathBuf,
    pub resume_from: Option<PathBuf>,
    /// Relative dataset paths are resolved against this directory.
    pub base_dir: PathBuf,
    /// Training metrics every this many steps.
    pub log_every: u64,
    /// Stop after this step even if the spec says more (tests and benchmarks).
    pub stop_at: Option<u64>,
    pub device: Device,
    /// How several workers train together (ignored for one worker without PS).
    pub distributed: Distributed,
    /// This task's place among the job's tasks; `None` for a single-process run.
    pub cluster: Option<Cluster>,
}

impl TrainOptions {
    /// One process training alone on the CPU from scratch: checkpoints in `dir` every 1,000 steps
    /// (last 2 kept), datasets resolved against `base_dir`, metrics every 10 steps. Callers change
    /// what differs with struct update syntax.
    pub fn local(spec: TrainSpec, dir: &Path, base_dir: &Path) -> Self {
        Self {
            spec,
            checkpoint: CheckpointPolicy {
                every_steps: 1_000,
                keep_last: 2,
                keep_best: 0,
            },
            workers: 1,
            ps: 0,
            rank: 0,
            checkpoint_dir: dir.to_path_buf(),
            resume_from: None,
            base_dir: base_dir.to_path_buf(),
            log_every: 10,
            stop_at: None,
            device: Device::Cpu,
            distributed: Distributed::default(),
            cluster: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub step: u64,
    /// Stopped on request before the end, after a checkpoint.
    pub interrupted: bool,
    pub metrics: BTreeMap<String, f64>,
    pub last_checkpoint: Option<PathBuf>,
}

/// A run set up and ready to step: what tests and benchmarks drive directly.
#[derive(Debug)]
pub struct Run {
    pub params: Params,
    pub model: Box<dyn Model>,
    pub optimizer: Optimizer,
    pub base_lr: f64,
    pub rng: Rng,
    pub sampler: Sampler,
    pub step: u64,
    data: Data,
    options: TrainOptions,
    /// The host buffer a classification batch is gathered into, kept from step to step.
    batch_values: Vec<f32>,
    /// A language model batch's input and target tokens, kept likewise.
    batch_tokens: (Vec<u32>, Vec<u32>),
    /// The last applied step's gradient buffers, handed back to the model to fill again.
    spare_grads: Vec<Vec<f32>>,
    /// Set when the run trains on its device without the host in each step (a GPU run of one
    /// process); `params.values` and the optimizer's buffers are then refreshed only for checkpoints.
    resident: Option<Resident>,
}

fn model_json(spec: &TrainSpec) -> serde_json::Value {
    serde_json::to_value(&spec.model).unwrap_or_default()
}

impl Run {
    pub fn new(options: TrainOptions) -> anyhow::Result<Run> {
        let spec = &options.spec;
        if options.workers == 0 {
            bail!("a job needs at least one worker");
        }
        let data = data::load(&spec.dataset, spec.seed, &options.base_dir)?;
        let (io, samples) = match &data {
            Data::Classification(c) => (
                Io::Classes {
                    input_shape: c.input_shape.clone(),
                    classes: c.classes,
                },
                c.train.len(),
            ),
            Data::Text(t) => {
                let context = match spec.model {
                    drover_core::spec::ModelSpec::Charlm { context, .. } => context as usize,
                    _ => bail!("a text dataset needs the charlm model"),
                };
                (
                    Io::Tokens {
                        vocab: t.vocab.len(),
                    },
                    t.train.len().saturating_sub(1) / context,
                )
            }
        };
        if samples == 0 {
            bail!("the dataset has no training samples");
        }
        let mut params = Params::new(&options.device);
        let model = models::build(&spec.model, &io, &mut params, spec.seed)?;
        let sizes: Vec<usize> = params.values.iter().map(Vec::len).collect();
        let (optimizer, base_lr) = Optimizer::new(&spec.optimizer, &sizes);
        let mut run = Run {
            params,
            model,
            optimizer,
            base_lr,
            rng: Rng::derive(spec.seed, 0xD2_0907),
            sampler: Sampler::new(spec.seed, samples, Cursor::default()),
            step: 0,
            data,
            options,
            batch_values: Vec::new(),
            batch_tokens: (Vec::new(), Vec::new()),
            spare_grads: Vec::new(),
            resident: None,
        };
        // One process on a GPU keeps everything there; several exchange gradients through host
        // memory (the wire) and keep the host path.
        if !run.options.device.is_cpu() && run.options.cluster.is_none() {
            run.keep_on_device()?;
        }
        Ok(run)
    }

    /// Trains on the device from now on: the training split and the optimizer's state are uploaded
    /// and each step is [`Run::step_on_device`]. Done by `new` for a single-process GPU run; tests
    /// call it on the CPU to check the device path there.
    pub fn keep_on_device(&mut self) -> anyhow::Result<()> {
        if self.resident.is_none() {
            let context = self.context();
            self.params.sync_if_stale()?;
            self.resident = Some(Resident::new(
                &self.data,
                context,
                &self.params,
                &self.optimizer,
                self.options.spec.seed,
            )?);
        }
        Ok(())
    }

    pub fn is_resident(&self) -> bool {
        self.resident.is_some()
    }

    /// One whole training step on the device (a run that [keeps to it](Run::keep_on_device)):
    /// returns the step's learning rate. The loss and accuracy wait in [`Run::take_totals`].
    pub fn step_on_device(&mut self) -> anyhow::Result<f64> {
        let lr = optim::learning_rate(
            self.base_lr,
            &self.options.spec.lr_schedule,
            self.step,
            self.schedule_steps(),
        );
        let Some(resident) = &mut self.resident else {
            bail!("this run does not train on its device");
        };
        let rows = self.sampler.next(
            self.options.spec.batch_size as usize,
            self.options.rank as usize,
            self.options.workers as usize,
        );
        resident.step(
            &rows,
            self.model.as_ref(),
            &mut self.rng,
            &self.params,
            &mut self.optimizer,
            lr as f32,
            self.options.spec.grad_clip_norm,
        )?;
        self.step += 1;
        Ok(lr)
    }

    /// The loss summed over the steps on the device since the last call, and the correct
    /// predictions; `None` for a run on the host path (its steps return them).
    pub fn take_totals(&mut self) -> anyhow::Result<Option<(f64, usize)>> {
        match &mut self.resident {
            Some(resident) => Ok(Some(resident.take_totals()?)),
            None => Ok(None),
        }
    }

    fn context(&self) -> usize {
        match self.options.spec.model {
            drover_core::spec::ModelSpec::Charlm { context, .. } => context as usize,
            _ => 0,
        }
    }

    /// Values in one sample of `samples` as [`Run::gradients`] counts them: a language model's
    /// sequence counts each of its tokens.
    pub fn values_per_sample(&self) -> usize {
        self.context().max(1)
    }

    /// The transformer's sizes, when the model is one a pipeline can split.
    pub fn transformer(&self) -> Option<models::TransformerShape> {
        self.model.transformer()
    }

    /// Part `part` of `parts` of the next global batch of sequences, with what a hand-written stage
    /// computes on it (a pipeline replica's share: every stage of it draws the same).
    pub fn text_part(&mut self, part: usize, parts: usize) -> anyhow::Result<TextPart<'_>> {
        let batch = self.options.spec.batch_size as usize;
        let context = self.context();
        let Data::Text(t) = &self.data else {
            bail!("pipeline stages train language models on text datasets");
        };
        let rows = self.sampler.next(batch, part, parts);
        let (tokens, targets) = &mut self.batch_tokens;
        text_windows(&t.train, &rows, context, tokens, targets);
        Ok(TextPart {
            params: &self.params,
            tokens,
            targets,
            rng: &mut self.rng,
        })
    }

    /// Applies the gradients of the parameters `part` (indices; the others' are not read) at this
    /// step's learning rate, as every worker running that part does; advances the step.
    pub fn apply_part(&mut self, grads: &[Vec<f32>], part: std::ops::Range<usize>) -> f64 {
        let lr = optim::learning_rate(
            self.base_lr,
            &self.options.spec.lr_schedule,
            self.step,
            self.schedule_steps(),
        );
        let optimizer = &mut self.optimizer;
        let values = &mut self.params.values;
        on_pool(|| optimizer.step_part(values, grads, lr as f32, part));
        self.params.mark_stale();
        self.step += 1;
        lr
    }

    /// Parameter `tensor`'s values and its optimizer state buffers, to be sent or replaced whole.
    pub fn tensor_mut(&mut self, tensor: usize) -> (&mut Vec<f32>, Vec<&mut Vec<f32>>) {
        (
            &mut self.params.values[tensor],
            self.optimizer.buffers_mut(tensor),
        )
    }

    /// Computes this worker's gradients on its share of the next global batch; returns the loss, the
    /// correct predictions, the samples and the gradients (not yet applied).
    pub fn gradients(&mut self) -> anyhow::Result<(f64, usize, usize, Vec<Vec<f32>>)> {
        on_pool(|| self.compute_gradients())
    }

    fn compute_gradients(&mut self) -> anyhow::Result<(f64, usize, usize, Vec<Vec<f32>>)> {
        let batch = self.options.spec.batch_size as usize;
        let rows = self.sampler.next(
            batch,
            self.options.rank as usize,
            self.options.workers as usize,
        );
        let device = &self.options.device;
        let (input, targets) = match &self.data {
            Data::Classification(c) => {
                models::gather_rows(&mut self.batch_values, &c.train.x, &rows, c.train.dim);
                let labels: Vec<u32> = rows.iter().map(|&r| c.train.y[r as usize]).collect();
                if device.is_cpu() {
                    let mut grads = std::mem::take(&mut self.spare_grads);
                    if let Some(result) = self.model.gradients(
                        &self.params,
                        &self.batch_values,
                        &labels,
                        &mut self.rng,
                        &mut grads,
                    ) {
                        let batch = result?;
                        return Ok((batch.loss, batch.correct, labels.len(), grads));
                    }
                    // No hand-written backward: autograd allocates its own gradients.
                }
                let mut shape = vec![rows.len()];
                shape.extend_from_slice(&c.input_shape);
                (
                    Tensor::from_slice(&self.batch_values, shape, device)?,
                    Tensor::from_vec(labels, rows.len(), device)?,
                )
            }
            Data::Text(t) => {
                let context = self.context();
                if device.is_cpu() {
                    let (tokens, targets) = &mut self.batch_tokens;
                    text_windows(&t.train, &rows, context, tokens, targets);
                    let mut grads = std::mem::take(&mut self.spare_grads);
                    if let Some(result) = self.model.token_gradients(
                        &self.params,
                        tokens,
                        targets,
                        &mut self.rng,
                        &mut grads,
                    ) {
                        let batch = result?;
                        return Ok((batch.loss, batch.correct, targets.len(), grads));
                    }
                }
                text_batch(&t.train, &rows, context, device)?
            }
        };
        self.params.sync_if_stale()?;
        let logits = self.model.forward(&input, true, &mut self.rng)?;
        let loss = candle_nn::loss::cross_entropy(&logits, &targets)?;
        let correct = models::correct(&logits, &targets)?;
        let grads = self.params.gradients(&loss.backward()?)?;
        Ok((
            f64::from(loss.to_scalar::<f32>()?),
            correct,
            targets.elem_count(),
            grads,
        ))
    }

    /// Applies gradients at this step's learning rate and advances the step.
    pub fn apply(&mut self, grads: Vec<Vec<f32>>) -> anyhow::Result<f64> {
        on_pool(|| self.apply_here(grads))
    }

    fn apply_here(&mut self, mut grads: Vec<Vec<f32>>) -> anyhow::Result<f64> {
        if let Some(max_norm) = self.options.spec.grad_clip_norm {
            optim::clip_global_norm(&mut grads, max_norm);
        }
        let lr = optim::learning_rate(
            self.base_lr,
            &self.options.spec.lr_schedule,
            self.step,
            self.schedule_steps(),
        );
        self.optimizer
            .step(&mut self.params.values, &grads, lr as f32);
        self.spare_grads = grads;
        self.params.mark_stale();
        self.step += 1;
        Ok(lr)
    }

    /// Advances the step after the parameters were updated elsewhere (the PS shards); returns the
    /// step's learning rate.
    pub fn advance(&mut self) -> f64 {
        let lr = optim::learning_rate(
            self.base_lr,
            &self.options.spec.lr_schedule,
            self.step,
            self.schedule_steps(),
        );
        self.params.mark_stale();
        self.step += 1;
        lr
    }

    /// The step this run stops at: the spec's `max_steps`, or the earlier `stop_at`.
    pub fn total_steps(&self) -> u64 {
        let steps = self.schedule_steps();
        self.options.stop_at.map_or(steps, |s| s.min(steps))
    }

    /// The steps the learning-rate schedule spans: the spec's, whatever `stop_at` says, so that a
    /// shortened run (`drover train --steps`) is the start of the full one and resumes into it.
    pub fn schedule_steps(&self) -> u64 {
        self.options.spec.max_steps.unwrap_or(u64::MAX)
    }

    /// Loss and accuracy on the test split (at most 64 windows of text).
    pub fn evaluate(&mut self) -> anyhow::Result<(f64, f64)> {
        self.params.sync_if_stale()?;
        let device = self.options.device.clone();
        let (mut loss_sum, mut correct, mut count) = (0.0, 0usize, 0usize);
        match &self.data {
            Data::Classification(c) => {
                let rows: Vec<u32> = (0..c.test.len() as u32).collect();
                for chunk in rows.chunks(512) {
                    let input =
                        models::class_batch(&c.test.x, chunk, c.test.dim, &c.input_shape, &device)?;
                    let targets = models::labels(&c.test.y, chunk, &device)?;
                    let logits = self.model.evaluate(&input)?;
                    loss_sum += f64::from(
                        candle_nn::loss::cross_entropy(&logits, &targets)?.to_scalar::<f32>()?,
                    ) * chunk.len() as f64;
                    correct += models::correct(&logits, &targets)?;
                    count += chunk.len();
                }
                Ok((
                    loss_sum / count.max(1) as f64,
                    correct as f64 / count.max(1) as f64,
                ))
            }
            Data::Text(t) => {
                let context = self.context();
                let windows = (t.test.len().saturating_sub(1) / context).min(64) as u32;
                if windows == 0 {
                    return Ok((f64::NAN, f64::NAN));
                }
                let rows: Vec<u32> = (0..windows).collect();
                for chunk in rows.chunks(16) {
                    let (input, targets) = text_batch(&t.test, chunk, context, &device)?;
                    let logits = self.model.evaluate(&input)?;
                    let n = targets.elem_count();
                    loss_sum += f64::from(
                        candle_nn::loss::cross_entropy(&logits, &targets)?.to_scalar::<f32>()?,
                    ) * n as f64;
                    correct += models::correct(&logits, &targets)?;
                    count += n;
                }
                Ok((loss_sum / count as f64, correct as f64 / count as f64))
            }
        }
    }

    pub fn options(&self) -> &TrainOptions {
        &self.options
    }
}

/// The input and target tokens of a batch of windows (each target the token after its input).
fn text_windows(
    tokens: &[u32],
    windows: &[u32],
    context: usize,
    input: &mut Vec<u32>,
    target: &mut Vec<u32>,
) {
    input.clear();
    target.clear();
    for &w in windows {
        let start = w as usize * context;
        input.extend_from_slice(&tokens[start..start + context]);
        target.extend_from_slice(&tokens[start + 1..start + context + 1]);
    }
}

fn text_batch(
    tokens: &[u32],
    windows: &[u32],
    context: usize,
    device: &Device,
) -> anyhow::Result<(Tensor, Tensor)> {
    let (mut input, mut target) = (Vec::new(), Vec::new());
    text_windows(tokens, windows, context, &mut input, &mut target);
    Ok((
        Tensor::from_vec(input, (windows.len(), context), device)?,
        Tensor::from_vec(target, windows.len() * context, device)?,
    ))
}

/// Runs `op` on a thread of rayon's global pool (the calling thread waits), so that the parallel
/// loops and matrix products inside it start from a worker: each then skips the hand-off from outside
/// the pool and the wake-up of a sleeping caller, about 15 µs apiece here, two dozen times a step.
fn on_pool<R: Send>(op: impl FnOnce() -> R + Send) -> R {
    rayon::scope(|_| op())
}

/// A pipeline replica's sequences for one step (`[rows, context]` each, row-major), with the
/// parameters and the dropout draws a stage computes with.
#[derive(Debug)]
pub struct TextPart<'a> {
    pub params: &'a Params,
    pub tokens: &'a [u32],
    pub targets: &'a [u32],
    pub rng: &'a mut Rng,
}

/// What a running training is asked from outside (signals): stop (after a checkpoint), or checkpoint
/// now and go on.
#[derive(Debug, Default)]
pub struct Requests {
    pub stop: AtomicBool,
    pub checkpoint: AtomicBool,
}
