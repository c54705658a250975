//! How a worker's gradients become the next parameters: applied locally (one worker), through the PS
//! shards, or summed by all-reduce and applied by every worker alike; and the PS task itself.

use super::client::{PsClient, Reply};
use super::cluster::{Cluster, Role};
use super::collective::{Algorithm, Communicator, Mesh};
use super::compress;
pub use super::exchanged::Exchanged;
use super::layout::Layout;
use super::pipeline::Pipeline;
use super::ps::{self, Shard, ShardConfig};
use super::wire::Hello;
use crate::checkpoint::{self, ShardSlice};
use crate::optim;
use crate::trainer::{Outcome, Reporter, Requests, Run, TrainOptions};
use anyhow::{Context, bail};
use drover_core::spec::{Compression, DistributedMode, SyncMode};
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long a task waits for its peers to come up.
const PEER_TIMEOUT: Duration = Duration::from_secs(120);

/// Control values summed along with the gradient in all-reduce mode: any worker asking to stop, and
/// the leader having finished (target reached).
const STOP: usize = 0;
const FINISH: usize = 1;
const CONTROLS: usize = 2;

#[derive(Debug)]
pub enum Exchange {
    Local,
    Ps(PsLink),
    Allreduce {
        communicator: Box<Communicator>,
        /// The job's fixed algorithm, or `None` to choose by size.
        algorithm: Option<Algorithm>,
        flat: Vec<f32>,
        /// Local SGD's state, where the job asked for it.
        local: Option<LocalSgd>,
    },
    /// A pipeline stage ([`Pipeline`]); its steps are [`Pipeline::step`], not [`Exchange::step`].
    Pipeline(Box<Pipeline>),
}

/// Local SGD: each worker steps on its own gradient; the workers average their parameters every
/// `every` steps, at every evaluation, checkpoint and stop, and when the leader asks for it (a
/// requested checkpoint waits for it). The stop, finish and averaging wishes are summed every step.
#[derive(Debug)]
pub struct LocalSgd {
    every: u64,
    /// This worker's parameters have moved on their own since the last averaging.
    diverged: bool,
    /// The leader asked for an averaging at the next step.
    wanted: bool,
}

/// A worker's link to the PS shards. In SSP and async modes a step's push and pull run in the
/// background while the worker computes the next gradient (on parameters one update older); BSP waits.
#[derive(Debug)]
pub struct PsLink {
    /// `None` while a push is in flight (the flight owns it).
    client: Option<PsClient>,
    in_flight: Option<std::thread::JoinHandle<Flight>>,
    /// The buffers the next parameters are read into while the worker computes with its own.
    incoming: Vec<Vec<f32>>,
    overlap: bool,
    /// Bytes pushed by the flights landed so far.
    pushed: u64,
}

#[derive(Debug)]
struct Flight {
    client: PsClient,
    incoming: Vec<Vec<f32>>,
    reply: anyhow::Result<Reply>,
}

impl PsLink {
    fn client(&mut self) -> anyhow::Result<&mut PsClient> {
        self.client
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("the PS connections were lost with a failed push"))
    }

    /// Waits for the push in flight, if any, and takes the parameters it brought; returns its reply.
    fn land(&mut self, run: &mut Run) -> anyhow::Result<Option<Reply>> {
        let Some(flight) = self.in_flight.take() else {
            return Ok(None);
        };
        let Flight {
            client,
            mut incoming,
            reply,
        } = flight
            .join()
            .map_err(|_| anyhow::anyhow!("a push thread panicked"))?;
        self.pushed = client.bytes_pushed;
        self.client = Some(client);
        let reply = reply?;
        if reply != Reply::Stop {
            std::mem::swap(&mut run.params.values, &mut incoming);
            run.params.mark_stale();
        }
        self.incoming = incoming;
        Ok(Some(reply))
    }
}

impl Exchange {
    /// Joins the job's other tasks as `run`'s options say.
    pub fn join(run: &Run) -> anyhow::Result<Exchange> {
        let options = run.options();
        let Some(cluster) = &options.cluster else {
            return Ok(Exchange::Local);
        };
        let workers = options.workers as usize;
        if cluster.peers.len() < workers + options.ps as usize {
            bail!(
                "{} peer addresses for {} workers and {} PS shards",
                cluster.peers.len(),
                workers,
                options.ps
            );
        }
        match options.distributed.mode {
            DistributedMode::Ps => {
                if options.ps == 0 {
                    bail!("a `ps` job with {workers} workers needs at least one PS shard");
                }
                let layout = layout(run, options.ps);
                let hello = Hello {
                    job: cluster.job.clone(),
                    generation: cluster.generation,
                    rank: options.rank,
                    workers: options.workers,
                    layout: layout.fingerprint(),
                };
                let addresses = &cluster.peers[workers..workers + options.ps as usize];
                let client = PsClient::connect(
                    addresses,
                    &hello,
                    layout,
                    &options.distributed.compression,
                    compress::worker_momentum(
                        &options.distributed.compression,
                        &options.spec.optimizer,
                    ),
                    PEER_TIMEOUT,
                )?;
                Ok(Exchange::Ps(PsLink {
                    client: Some(client),
                    in_flight: None,
                    incoming: run.params.values.clone(),
                    overlap: options.distributed.sync != SyncMode::Bsp,
                    pushed: 0,
                }))
            }
            DistributedMode::Allreduce => {
                if options.distributed.compression != Compression::None {
                    bail!("gradient compression works with `ps` jobs only");
                }
                let listener = TcpListener::bind(&cluster.listen)
                    .with_context(|| format!("listening on {}", cluster.listen))?;
                let addresses = &cluster.peers[..workers];
                let mesh = Mesh::connect(
                    options.rank as usize,
                    cluster.generation,
                    &listener,
                    addresses,
                    PEER_TIMEOUT,
                )?;
                let mut communicator =
                    Communicator::new(mesh, Communicator::nodes_of_addresses(addresses))?;
                let algorithm = Algorithm::from_spec(options.distributed.collective);
                let parallelism = options.distributed.parallelism;
                if algorithm.is_none() || algorithm == Some(Algorithm::Hierarchical) {
                    // Every worker ends with rank 0's figures, so all choose alike.
                    let largest =
                        4 * (run.params.values.iter().map(Vec::len).sum::<usize>() + CONTROLS);
                    let model = communicator
                        .calibrate(largest)
                        .context("measuring the links between the workers")?;
                    tracing::debug!(?model, "all-reduce cost model");
                }
                if !parallelism.is_data_only() {
                    if options.distributed.local_sgd.is_some() {
                        bail!("model parallelism does not combine with local SGD");
                    }
                    return Ok(Exchange::Pipeline(Box::new(Pipeline::new(
                        run,
                        parallelism,
                        communicator,
                        algorithm,
                    )?)));
                }
                Ok(Exchange::Allreduce {
                    communicator: Box::new(communicator),
                    algorithm,
                    flat: Vec::new(),
                    local: options.distributed.local_sgd.map(|l| LocalSgd {
                        every: u64::from(l.every_steps.max(1)),
                        diverged: false,
                        wanted: false,
                    }),
                })
            }
        }
    }

    /// The parameters to start from: the PS shards hold them.
    pub fn start(&mut self, run: &mut Run) -> anyhow::Result<bool> {
        if let Exchange::Ps(link) = self {
            link.land(run)?;
            let reply = link.client()?.pull(run.step, &mut run.params.values)?;
            run.params.mark_stale();
            return Ok(reply == Reply::Stop);
        }
        Ok(false)
    }

    /// Turns this worker's gradient (the mean over its `samples` of the global batch) into the next
    /// step's parameters. `controls` are this worker's stop and finish wishes (all-reduce only).
    pub fn step(
        &mut self,
        run: &mut Run,
        mut grads: Vec<Vec<f32>>,
        samples: usize,
        controls: [bool; CONTROLS],
    ) -> anyhow::Result<Exchanged> {
        // `samples` counts a sequence's every token: so does the batch here.
        let batch = (run.options().spec.batch_size as usize * run.values_per_sample()) as f32;
        let share = samples as f32 / batch;
        match self {
            Exchange::Local => Ok(Exchanged {
                lr: run.apply(grads)?,
                stop: false,
                finish: false,
                bytes: 0,
                bubble: None,
            }),
            Exchange::Ps(link) => {
                // The shards apply the optimizer; a clip bound applies to this worker's gradient.
                if let Some(max_norm) = run.options().spec.grad_clip_norm {
                    optim::clip_global_norm(&mut grads, max_norm);
                }
                scale(&mut grads, share);
                let step = run.step;
                // Every worker flushes its residuals into the push before a scheduled checkpoint,
                // so the checkpoint (and a restart or resize from it) drops none.
                let next = step + 1;
                let flush = next.is_multiple_of(run.options().checkpoint.every_steps.max(1))
                    || next >= run.total_steps();
                let before = link.pushed;
                let reply = if link.overlap {
                    // Land the previous step's push (its parameters are used from the next
                    // gradient on), and send this one off while the next gradient is computed.
                    let reply = link.land(run)?;
                    let mut client = link.client.take().ok_or_else(|| {
                        anyhow::anyhow!("the PS connections were lost with a failed push")
                    })?;
                    let mut incoming = std::mem::take(&mut link.incoming);
                    link.in_flight = Some(std::thread::spawn(move || {
                        let reply = client.push_pull(step, &grads, &mut incoming, flush);
                        Flight {
                            client,
                            incoming,
                            reply,
                        }
                    }));
                    reply.unwrap_or(Reply::Params(step))
                } else {
                    let client = link.client()?;
                    let reply = client.push_pull(step, &grads, &mut run.params.values, flush)?;
                    link.pushed = client.bytes_pushed;
                    reply
                };
                let lr = run.advance();
                Ok(Exchanged {
                    lr,
                    stop: reply == Reply::Stop,
                    finish: false,
                    bytes: link.pushed - before,
                    bubble: None,
                })
            }
            Exchange::Pipeline(_) => {
                bail!("a pipeline stage steps through Pipeline::step, not Exchange::step")
            }
            Exchange::Allreduce {
                communicator,
                algorithm,
                flat,
                local: Some(local),
            } => local_step(
                communicator,
                *algorithm,
                flat,
                local,
                run,
                grads,
                share,
                controls,
            ),
            Exchange::Allreduce {
                communicator,
                algorithm,
                flat,
                local: None,
            } => {
                flat.clear();
                for g in &grads {
                    flat.extend(g.iter().map(|x| x * share));
                }
                flat.extend(controls.map(|c| f32::from(u8::from(c))));
                let used = communicator.allreduce(*algorithm, flat)?;
                let n = flat.len() - CONTROLS;
                let mut at = 0;
                for g in &mut grads {
                    let len = g.len();
                    g.copy_from_slice(&flat[at..at + len]);
                    at += len;
                }
                Ok(Exchanged {
                    stop: flat[n + STOP] > 0.0,
                    finish: flat[n + FINISH] > 0.0,
                    lr: run.apply(grads)?,
                    bytes: communicator.bytes_sent(used, 4 * n),
                    bubble: None,
                })
            }
        }
    }

    /// Whether stop and checkpoint requests are this worker's to act on alone (everywhere but the
    /// all-reduce, where every worker's stop is agreed through the reduction).
    pub fn agreed_stop(&self) -> bool {
        matches!(self, Exchange::Allreduce { .. } | Exchange::Pipeline(_))
    }

    /// Waits for a push in flight (SSP, async) and takes its parameters; returns `true` when the
    /// shards answered that the job stops.
    pub fn land(&mut self, run: &mut Run) -> anyhow::Result<bool> {
        match self {
            Exchange::Ps(link) => Ok(link.land(run)? == Some(Reply::Stop)),
            _ => Ok(false),
        }
    }

    /// Whether a checkpoint now would miss something: error-feedback residuals (compressed PS
    /// pushes since the last flush), or local SGD's parameters not averaged since they moved. Call
    /// after `land`.
    pub fn residuals_pending(&self) -> bool {
        match self {
            Exchange::Ps(link) => link.client.as_ref().is_some_and(|c| !c.residuals_flushed()),
            Exchange::Allreduce {
                local: Some(local), ..
            } => local.diverged,
            Exchange::Pipeline(pipeline) => pipeline.diverged(),
            _ => false,
        }
    }

    /// The leader's announcement that it wants a checkpoint: every worker pushes the gradient of
    /// the run's next step flushed, so two steps from now no residual holds anything back (see
    /// [`PsClient::announce_flush`]); under local SGD the workers average at the next step. Call
    /// after `land`.
    pub fn announce_flush(&mut self, run: &Run) -> anyhow::Result<()> {
        match self {
            Exchange::Ps(link) => link.client()?.announce_flush(run.step + 1)?,
            Exchange::Allreduce {
                local: Some(local), ..
            } => local.wanted = true,
            Exchange::Pipeline(pipeline) => pipeline.want_gather(),
            _ => {}
        }
        Ok(())
    }

    /// Writes a checkpoint of the whole job at the run's step (the leader calls it, after `land`).
    pub fn save(&mut self, run: &Run, metrics: &BTreeMap<String, f64>) -> anyhow::Result<PathBuf> {
        let Exchange::Ps(link) = self else {
            return run.save(metrics);
        };
        let client = link.client()?;
        let pending = checkpoint::begin(&run.options().checkpoint_dir, run.step)?;
        client.checkpoint(run.step, pending.path())?;
        let names = &run.params.names;
        let shards = client
            .layout()
            .shards
            .iter()
            .enumerate()
            .map(|(k, slices)| {
                let mut tensors: Vec<String> =
                    slices.iter().map(|s| names[s.tensor].clone()).collect();
                tensors.dedup();
                checkpoint::Shard {
                    name: ps::shard_name(k),
                    tensors,
                    slices: slices
                        .iter()
                        .map(|s| ShardSlice {
                            tensor: names[s.tensor].clone(),
                            offset: s.offset as u64,
                            len: s.len as u64,
                        })
                        .collect(),
                }
            })
            .collect();
        let path = checkpoint::commit(pending, &run.manifest(metrics, shards))?;
        run.retain();
        Ok(path)
    }

    /// The job is over (or stops): the leader releases the PS shards.
    pub fn finish(&mut self, step: u64) -> anyhow::Result<()> {
        if let Exchange::Ps(link) = self {
            link.client()?.shutdown(step)?;
        }
        Ok(())
    }
}

/// A local SGD step: this worker applies its own gradient, the workers sum their stop, finish and
/// averaging wishes, and where a boundary or a wish says so, average their parameters (each weighted
/// by its share of the global batch, so with an averaging every step and plain SGD this is exactly
/// the all-reduce of gradients).
#[expect(
    clippy::too_many_arguments,
    reason = "the all-reduce variant's fields, borrowed apart"
)]
fn local_step(
    communicator: &mut Communicator,
    algorithm: Option<Algorithm>,
    flat: &mut Vec<f32>,
    local: &mut LocalSgd,
    run: &mut Run,
    grads: Vec<Vec<f32>>,
    share: f32,
    controls: [bool; CONTROLS],
) -> anyhow::Result<Exchanged> {
    let lr = run.apply(grads)?;
    let step = run.step;
    let options = run.options();
    let boundary = step.is_multiple_of(local.every)
        || step.is_multiple_of(options.spec.eval_every.max(1))
        || step.is_multiple_of(options.checkpoint.every_steps.max(1))
        || step >= run.total_steps();
    let mut wishes = [
        f32::from(u8::from(controls[STOP])),
        f32::from(u8::from(controls[FINISH])),
        f32::from(u8::from(local.wanted)),
    ];
    let mut bytes = 0;
    if !boundary {
        let used = communicator.allreduce(algorithm, &mut wishes)?;
        bytes += communicator.bytes_sent(used, 4 * wishes.len());
    }
    let average = boundary || wishes.iter().any(|&w| w > 0.0);
    if average {
        flat.clear();
        for values in &run.params.values {
            flat.extend(values.iter().map(|x| x * share));
        }
        let n = flat.len();
        if boundary {
            flat.extend_from_slice(&wishes);
        }
        let used = communicator.allreduce(algorithm, flat)?;
        bytes += communicator.bytes_sent(used, 4 * flat.len());
        if boundary {
            wishes.copy_from_slice(&flat[n..]);
        }
        let mut at = 0;
        for values in &mut run.params.values {
            let len = values.len();
            values.copy_from_slice(&flat[at..at + len]);
            at += len;
        }
        run.params.mark_stale();
        (local.diverged, local.wanted) = (false, false);
    } else {
        local.diverged = true;
    }
    Ok(Exchanged {
        lr,
        stop: wishes[STOP] > 0.0,
        finish: wishes[FINISH] > 0.0,
        bytes,
        bubble: None,
    })
}

fn scale(grads: &mut [Vec<f32>], factor: f32) {
    if factor != 1.0 {
        for x in grads.iter_mut().flat_map(|g| g.iter_mut()) {
            *x *= factor;
        }
    }
}

fn layout(run: &Run, shards: u32) -> Layout {
    let sizes: Vec<usize> = run.params.values.iter().map(Vec::len).collect();
    Layout::new(&run.params.names, &sizes, shards)
}

/// Runs a PS shard task: builds the model (or loads the checkpoint) to take its slices, then serves
/// the workers until the leader shuts the job down.
pub fn serve_shard(
    options: TrainOptions,
    reporter: &mut dyn Reporter,
    requests: &Requests,
) -> anyhow::Result<Outcome> {
    let Some(
        cluster @ Cluster {
            role: Role::Ps { index },
            ..
        },
    ) = &options.cluster
    else {
        bail!("not a PS task");
    };
    let index = *index as usize;
    if index >= options.ps as usize {
        bail!("PS shard {index} of a job with {} shards", options.ps);
    }
    let run = Run::new(options.clone())?;
    let loaded = match &options.resume_from {
        Some(path) => Some(checkpoint::load(path)?),
        None => None,
    };
    let start_step = loaded.as_ref().map_or(0, |l| l.manifest.step);
    let layout = layout(&run, options.ps);
    let config = ShardConfig {
        job: cluster.job.clone(),
        generation: cluster.generation,
        index,
        workers: options.workers,
        sync: options.distributed.sync,
        staleness: options.distributed.staleness,
        compression: options.distributed.compression.clone(),
        optimizer: compress::shard_optimizer(
            &options.distributed.compression,
            &options.spec.optimizer,
        ),
        lr_schedule: options.spec.lr_schedule.clone(),
        total_steps: run.total_steps(),
        schedule_steps: run.schedule_steps(),
        start_step,
    };
    let values = layout.shard_len(index);
    let slices = layout.shards[index].len();
    let shard = Shard::new(
        config,
        layout,
        run.params.names.clone(),
        &run.params.values,
        loaded.as_ref(),
    )?;
    drop(run);
    let listener = TcpListener::bind(&cluster.listen)
        .with_context(|| format!("listening on {}", cluster.listen))?;
    reporter.info(&format!(
        "PS shard {index} of {}: {values} values in {slices} slices, {:?} sync, on {}",
        options.ps, options.distributed.sync, cluster.listen
    ));
    let started = Instant::now();
    let summary = shard.serve(&listener, Some(&requests.stop))?;
    reporter.info(&format!(
        "PS shard {index}: {} updates, {:.1} MB of gradients in {:.1} s",
        summary.updates,
        summary.bytes_in as f64 / 1e6,
        started.elapsed().as_secs_f64()
    ));
    Ok(Outcome {
        step: start_step + summary.updates,
        interrupted: requests.stop.load(Ordering::Relaxed),
        metrics: BTreeMap::new(),
        last_checkpoint: None,
    })
}
