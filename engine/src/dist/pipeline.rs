//! Model parallelism for the character transformer: pipeline stages and tensor-parallel groups. A
//! job's workers form `workers / (stages × tensor)` replicas, each a pipeline whose stage `s` runs the
//! `s`-th consecutive part of the layers (the first with the embeddings, the last with the head and
//! loss), each stage run by a group of `tensor` workers that split its blocks' heads and MLP columns
//! ([`Split`]; Megatron-LM's column and row split, the group summing each branch). Each step a
//! replica splits its share of the global batch into micro-batches that stream through the stages —
//! activations forward, their gradients back, point to point between the same worker of neighbouring
//! stages' groups — in GPipe's order (all forwards, then all backwards) or the
//! one-forward-one-backward order (at most `stages − s` micro-batches in flight at stage `s` instead
//! of all of them). Every worker of a stage, in every replica, then sums that stage's gradient by
//! all-reduce (a tensor-parallel worker brings its part of what the group splits), and each updates
//! its own stage's parameters and optimizer state only.
//!
//! Every worker holds the whole model's buffers, but only its stage's are current between
//! gathers: at every evaluation, checkpoint, stop and finish (and when the leader asks) the other
//! stages send theirs — values and optimizer state — to the leader (rank 0, the first stage of
//! the first replica), so what it validates and checkpoints is the whole model. The stop, finish
//! and gather wishes, the loss, the gradient's global norm (for clipping) and the time each stage
//! spent computing are summed over every worker each step.

use super::collective::{Algorithm, Communicator};
use super::exchanged::Exchanged;
use crate::models::{Split, Stage, TransformerShape};
use crate::optim;
use crate::rng::Rng;
use crate::trainer::Run;
use anyhow::{Context, bail};
use drover_core::spec::{Parallelism, PipelineSchedule};
use std::ops::Range;
use std::time::{Duration, Instant};

mod groups;
mod schedule;

use groups::{Group, hand_over};
use schedule::micro_rows;
pub use schedule::{Op, schedule, stage_layers};

/// Indices of the values summed over every worker each step.
const STOP: usize = 0;
const FINISH: usize = 1;
const GATHER: usize = 2;
const LOSS: usize = 3;
const CORRECT: usize = 4;
const NORM2: usize = 5;
const BUSY: usize = 6;
const WALL: usize = 7;
const SUMMED: usize = 8;

/// One worker's stage of a pipeline-parallel job.
#[derive(Debug)]
pub struct Pipeline {
    communicator: Box<Communicator>,
    algorithm: Option<Algorithm>,
    stages: usize,
    stage: usize,
    replica: usize,
    replicas: usize,
    /// This worker's place in its stage's tensor-parallel group.
    split: Split,
    micro: usize,
    schedule: Vec<Op>,
    /// The workers running this stage (every replica's tensor-parallel group), and this worker's
    /// tensor-parallel group.
    group: Group,
    tensor_group: Group,
    model: Stage,
    /// The parameters this stage owns (indices), and every stage's (the leader gathers them).
    owned: Range<usize>,
    stage_params: Vec<Range<usize>>,
    /// One micro-batch's gradients (whole length; this stage's filled), and their weighted sum.
    grads: Vec<Vec<f32>>,
    sum: Vec<Vec<f32>>,
    flat: Vec<f32>,
    /// The activation coming in or going out, and its gradient.
    stream: Vec<f32>,
    dstream: Vec<f32>,
    /// Which micro-batch's activations each slot holds.
    slots: Vec<Option<usize>>,
    /// The leader's copy of other stages has moved on since the last gather; the leader wants one.
    diverged: bool,
    wanted: bool,
}

/// What a pipeline step measured, besides what [`Exchanged`] says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stepped {
    /// The global batch's mean loss and correct predictions, and its tokens.
    pub loss: f64,
    pub correct: usize,
    pub samples: usize,
    /// Time this worker spent computing its passes.
    pub busy: Duration,
    /// The most micro-batches whose activations this stage has held at once (its activation
    /// memory, in micro-batches).
    pub held: usize,
    pub exchanged: Exchanged,
}

impl Pipeline {
    /// This worker's part of the model as `parallelism` splits it, over the job's `communicator`.
    /// Rank `r` is worker `r mod tensor` of the tensor-parallel group of stage
    /// `(r div tensor) mod stages` of replica `r div (stages × tensor)`.
    pub fn new(
        run: &Run,
        parallelism: Parallelism,
        communicator: Communicator,
        algorithm: Option<Algorithm>,
    ) -> anyhow::Result<Pipeline> {
        let Some(shape) = run.transformer() else {
            bail!(
                "pipeline stages and tensor splits divide the charlm transformer: this model cannot be split"
            );
        };
        let (world, rank) = (communicator.world(), communicator.rank());
        let stages = parallelism.stages() as usize;
        let tensor = parallelism.tensor as usize;
        let per_replica = stages * tensor;
        if per_replica < 2 || !world.is_multiple_of(per_replica) {
            bail!(
                "{stages} stages × tensor {tensor} need a multiple of {per_replica} workers, not {world}"
            );
        }
        if stages > shape.layers {
            bail!(
                "{stages} stages for a model of {} layers: every stage needs at least one",
                shape.layers
            );
        }
        let replicas = world / per_replica;
        let split = Split {
            rank: rank % tensor,
            size: tensor,
        };
        let (stage, replica) = (rank / tensor % stages, rank / per_replica);
        let micro = parallelism.pipeline.map_or(1, |p| p.micro_batches as usize);
        let batch = run.options().spec.batch_size as usize;
        if micro == 0 || batch < replicas * micro {
            bail!(
                "{micro} micro-batches in each of {replicas} replicas need a batch of at least {} sequences, not {batch}",
                replicas * micro
            );
        }
        let node_of = communicator.node_of();
        let group = Group::new(
            (0..replicas)
                .flat_map(|r| (0..tensor).map(move |t| r * per_replica + stage * tensor + t))
                .collect(),
            node_of,
        );
        let tensor_group = Group::new(
            (0..tensor)
                .map(|t| replica * per_replica + stage * tensor + t)
                .collect(),
            node_of,
        );
        let layers = stage_layers(shape.layers, stages, stage);
        let model = Stage::new(shape, layers, split)?;
        let stage_params = (0..stages)
            .map(|s| shape.stage_params(&stage_layers(shape.layers, stages, s)))
            .collect();
        let kind = parallelism
            .pipeline
            .map_or(PipelineSchedule::OneFOneB, |p| p.schedule);
        Ok(Pipeline {
            communicator: Box::new(communicator),
            algorithm,
            stages,
            stage,
            replica,
            replicas,
            split,
            micro,
            schedule: schedule(kind, stages, stage, micro),
            group,
            tensor_group,
            owned: model.params(),
            model,
            stage_params,
            grads: Vec::new(),
            sum: Vec::new(),
            flat: Vec::new(),
            stream: Vec::new(),
            dstream: Vec::new(),
            slots: Vec::new(),
            diverged: false,
            wanted: false,
        })
    }

    pub fn stage(&self) -> usize {
        self.stage
    }

    pub fn shape(&self) -> &TransformerShape {
        self.model.shape()
    }

    /// The most micro-batches whose activations this stage has held at once.
    pub fn peak_in_flight(&self) -> usize {
        self.model.slots()
    }

    /// Whether the leader's copy of the other stages is behind theirs (a checkpoint now would
    /// miss their progress).
    pub fn diverged(&self) -> bool {
        self.diverged
    }

    /// The leader wants the whole model at the next step (a checkpoint was asked for).
    pub fn want_gather(&mut self) {
        self.wanted = true;
    }

    /// One training step of this stage: the micro-batches through the schedule, the stage's
    /// gradients summed over the replicas and applied, and (at a boundary or on a wish) every
    /// stage's parameters gathered to the leader. `controls` are this worker's stop and finish
    /// wishes.
    pub fn step(&mut self, run: &mut Run, controls: [bool; 2]) -> anyhow::Result<Stepped> {
        // Dropout draws depend on (seed, step, replica, stage): a tensor-parallel group draws
        // alike, as its activations are the same.
        let seed = run.options().spec.seed;
        run.rng = Rng::derive(
            seed ^ run.step.rotate_left(20),
            0xD2_0907 ^ (self.replica * self.stages + self.stage) as u64,
        );
        let started = Instant::now();
        let (loss, correct, rows, busy, sent) = self.passes(run)?;
        let wall = started.elapsed();
        let batch_rows = run.options().spec.batch_size as usize;
        let share = rows as f32 / batch_rows as f32;

        // The replicas of this stage sum its gradient, each weighted by its share of the batch.
        self.flat.clear();
        for g in &self.sum[self.owned.clone()] {
            self.flat.extend(g.iter().map(|x| x * share));
        }
        let mut bytes = sent
            + self
                .group
                .sum(&mut self.communicator, self.algorithm, &mut self.flat)
                .context("summing the stage's gradients over the replicas")?;
        let mut at = 0;
        for g in &mut self.sum[self.owned.clone()] {
            let len = g.len();
            g.copy_from_slice(&self.flat[at..at + len]);
            at += len;
        }

        // Everything every worker needs from every other, summed at once.
        let last = self.stage + 1 == self.stages;
        let mut summed = [0.0f32; SUMMED];
        summed[STOP] = f32::from(u8::from(controls[0]));
        summed[FINISH] = f32::from(u8::from(controls[1]));
        summed[GATHER] = f32::from(u8::from(self.wanted));
        if last && self.split.rank == 0 {
            summed[LOSS] = (loss * f64::from(share)) as f32;
            summed[CORRECT] = correct as f32;
        }
        if self.replica == 0 && self.split.rank == 0 {
            summed[NORM2] = optim::squared_norm(&self.sum[self.owned.clone()]) as f32;
        }
        summed[BUSY] = busy.as_secs_f32();
        summed[WALL] = wall.as_secs_f32();
        let used = self
            .communicator
            .allreduce(
                self.algorithm.filter(|a| *a != Algorithm::Hierarchical),
                &mut summed,
            )
            .context("summing the workers' wishes and the loss")?;
        bytes += self.communicator.bytes_sent(used, 4 * SUMMED);

        if let Some(max_norm) = run.options().spec.grad_clip_norm
            && let Some(scale) = optim::clip_scale(f64::from(summed[NORM2]).sqrt(), max_norm)
        {
            for x in self.sum[self.owned.clone()].iter_mut().flatten() {
                *x *= scale;
            }
        }
        let lr = run.apply_part(&self.sum, self.owned.clone());

        let step = run.step;
        let options = run.options();
        let boundary = step.is_multiple_of(options.spec.eval_every.max(1))
            || step.is_multiple_of(options.checkpoint.every_steps.max(1))
            || step >= run.total_steps();
        let wished = summed[STOP] > 0.0 || summed[FINISH] > 0.0 || summed[GATHER] > 0.0;
        if boundary || wished {
            bytes += self.gather(run)?;
            (self.diverged, self.wanted) = (false, false);
        } else {
            self.diverged = true;
        }
        let context = self.model.shape().context;
        Ok(Stepped {
            loss: f64::from(summed[LOSS]),
            correct: summed[CORRECT] as usize,
            samples: batch_rows * context,
            busy,
            held: self.model.slots(),
            exchanged: Exchanged {
                lr,
                stop: summed[STOP] > 0.0,
                finish: summed[FINISH] > 0.0,
                bytes,
                bubble: Some((
                    f64::from(summed[WALL] - summed[BUSY]),
                    f64::from(summed[WALL]),
                )),
            },
        })
    }

    /// This stage's forward and backward passes over the replica's micro-batches, in the
    /// schedule's order, exchanging activations and their gradients with the neighbouring stages.
    /// Leaves the micro-batches' weighted gradient sum in `self.sum`; returns the replica's mean
    /// loss and correct predictions (last stage), its rows, the time spent computing and the
    /// bytes sent.
    fn passes(&mut self, run: &mut Run) -> anyhow::Result<(f64, usize, usize, Duration, u64)> {
        let rank = self.communicator.rank();
        // The same worker of the tensor-parallel group of the stage before and after.
        let tensor = self.split.size;
        let prev = (self.stage > 0).then(|| rank - tensor);
        let next = (self.stage + 1 < self.stages).then(|| rank + tensor);
        let shape = *self.model.shape();
        let part = run.text_part(self.replica, self.replicas)?;
        let context = self.model.shape().context;
        let d = self.model.shape().d;
        let rows = part.tokens.len() / context;
        let params = part.params;
        self.grads.resize_with(params.len(), Vec::new);
        self.sum.resize_with(params.len(), Vec::new);
        for i in self.owned.clone() {
            self.sum[i].clear();
            self.sum[i].resize(params.values[i].len(), 0.0);
        }
        self.slots.clear();
        let (mut loss, mut correct) = (0.0, 0);
        let mut busy = Duration::ZERO;
        let mut sent = 0u64;
        // A micro-batch whose input (or output's gradient) a combined exchange already brought.
        let (mut have_input, mut have_grad) = (None, None);
        let ops = std::mem::take(&mut self.schedule);
        let result = (|| -> anyhow::Result<()> {
            for (k, &op) in ops.iter().enumerate() {
                let following = ops.get(k + 1).copied();
                match op {
                    Op::Forward(m) => {
                        let span = micro_rows(rows, self.micro, m);
                        let tokens = &part.tokens[span.start * context..span.end * context];
                        let targets = &part.targets[span.start * context..span.end * context];
                        if let Some(prev) = prev
                            && have_input != Some(m)
                        {
                            self.stream.resize(tokens.len() * d, 0.0);
                            self.communicator
                                .mesh()
                                .recv(prev, &mut self.stream)
                                .with_context(|| {
                                    format!("receiving micro-batch {m}'s activation")
                                })?;
                        }
                        let slot = self.take_slot(m);
                        let began = Instant::now();
                        let out = self.model.forward(
                            slot,
                            params,
                            tokens,
                            targets,
                            part.rng,
                            &mut self.stream,
                            &mut self.tensor_group.reducer(
                                &mut self.communicator,
                                self.algorithm,
                                &mut sent,
                            ),
                        )?;
                        busy += began.elapsed();
                        if let Some(batch) = out {
                            let weight = span.len() as f64 / rows as f64;
                            loss += batch.loss * weight;
                            correct += batch.correct;
                        }
                        if let Some(next) = next {
                            sent += (self.stream.len() * 4) as u64;
                            // The gradient the next op needs comes from the same neighbour.
                            let into = match following {
                                Some(Op::Backward(b)) => {
                                    let span = micro_rows(rows, self.micro, b);
                                    self.dstream.resize(span.len() * context * d, 0.0);
                                    have_grad = Some(b);
                                    Some(&mut self.dstream[..])
                                }
                                _ => None,
                            };
                            hand_over(&mut self.communicator, next, &self.stream, into)
                                .with_context(|| format!("sending micro-batch {m}'s activation"))?;
                        }
                    }
                    Op::Backward(m) => {
                        let span = micro_rows(rows, self.micro, m);
                        let tokens = &part.tokens[span.start * context..span.end * context];
                        if let Some(next) = next
                            && have_grad != Some(m)
                        {
                            self.dstream.resize(tokens.len() * d, 0.0);
                            self.communicator
                                .mesh()
                                .recv(next, &mut self.dstream)
                                .with_context(|| format!("receiving micro-batch {m}'s gradient"))?;
                        }
                        let slot = self.release_slot(m)?;
                        let began = Instant::now();
                        self.model.backward(
                            slot,
                            params,
                            tokens,
                            &mut self.grads,
                            &mut self.dstream,
                            &mut self.tensor_group.reducer(
                                &mut self.communicator,
                                self.algorithm,
                                &mut sent,
                            ),
                        )?;
                        let weight = span.len() as f32 / rows as f32;
                        for i in self.owned.clone() {
                            // A tensor-parallel group's first worker brings what all compute
                            // whole; each brings its part of what they split.
                            if self.split.rank != 0 && !shape.is_split(i) {
                                continue;
                            }
                            for (s, &g) in self.sum[i].iter_mut().zip(&self.grads[i]) {
                                *s += weight * g;
                            }
                        }
                        busy += began.elapsed();
                        if let Some(prev) = prev {
                            sent += (self.dstream.len() * 4) as u64;
                            // The input the next op needs comes from the same neighbour.
                            let into = match following {
                                Some(Op::Forward(f)) => {
                                    let span = micro_rows(rows, self.micro, f);
                                    self.stream.resize(span.len() * context * d, 0.0);
                                    have_input = Some(f);
                                    Some(&mut self.stream[..])
                                }
                                _ => None,
                            };
                            hand_over(&mut self.communicator, prev, &self.dstream, into)
                                .with_context(|| format!("sending micro-batch {m}'s gradient"))?;
                        }
                    }
                }
            }
            Ok(())
        })();
        self.schedule = ops;
        result?;
        Ok((loss, correct, rows, busy, sent))
    }

    /// The first free activation slot, now holding micro-batch `m`.
    fn take_slot(&mut self, m: usize) -> usize {
        match self.slots.iter().position(Option::is_none) {
            Some(free) => {
                self.slots[free] = Some(m);
                free
            }
            None => {
                self.slots.push(Some(m));
                self.slots.len() - 1
            }
        }
    }

    /// The slot holding micro-batch `m`, freed.
    fn release_slot(&mut self, m: usize) -> anyhow::Result<usize> {
        let slot = self
            .slots
            .iter()
            .position(|&s| s == Some(m))
            .ok_or_else(|| anyhow::anyhow!("micro-batch {m} went backward before forward"))?;
        self.slots[slot] = None;
        Ok(slot)
    }

    /// The first replica's later stages (each its tensor-parallel group's first worker: they all
    /// hold the whole stage) send their parameters and optimizer state to the leader,
    /// which then holds the whole model. Returns the bytes this worker sent.
    fn gather(&mut self, run: &mut Run) -> anyhow::Result<u64> {
        let rank = self.communicator.rank();
        let mut sent = 0;
        let tensor_size = self.split.size;
        if rank == 0 {
            for (s, params) in self.stage_params.iter().enumerate().skip(1) {
                for tensor in params.clone() {
                    let (values, state) = run.tensor_mut(tensor);
                    for buffer in std::iter::once(values).chain(state) {
                        self.communicator
                            .mesh()
                            .recv(s * tensor_size, buffer)
                            .with_context(|| format!("gathering stage {s}'s parameters"))?;
                    }
                }
            }
            run.params.mark_stale();
        } else if self.replica == 0 && self.split.rank == 0 {
            for tensor in self.owned.clone() {
                let (values, state) = run.tensor_mut(tensor);
                for buffer in std::iter::once(values).chain(state) {
                    sent += (buffer.len() * 4) as u64;
                    self.communicator
                        .mesh()
                        .send(0, buffer)
                        .context("sending this stage's parameters to the leader")?;
                }
            }
        }
        Ok(sent)
    }
}
