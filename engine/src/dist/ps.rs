//! A parameter-server shard: holds its slices of the model and their optimizer state, takes the
//! workers' gradients for them and applies the optimizer — once per step with every worker's gradient
//! (BSP), or as each gradient arrives (SSP, where a worker more than `staleness` steps ahead of the
//! slowest waits for its parameters; and asynchronous, where nobody waits). One thread per worker
//! connection; tensors are read straight off the socket into per-worker buffers.

use super::compress;
use super::layout::{Layout, Slice};
use super::wire::{self, Hello, Kind};
use crate::checkpoint::Loaded;
use crate::optim::{self, Optimizer};
use drover_core::spec::{Compression, LrSchedule, OptimizerSpec, SyncMode};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, RwLock};
use std::time::Duration;

mod shard_checkpoint;
use shard_checkpoint::restore_optimizer;

/// What a shard needs to know about its job.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    pub job: String,
    pub generation: u64,
    pub index: usize,
    pub workers: u32,
    pub sync: SyncMode,
    pub staleness: u32,
    pub compression: Compression,
    pub optimizer: OptimizerSpec,
    pub lr_schedule: LrSchedule,
    /// The step the job stops at.
    pub total_steps: u64,
    /// The steps the learning-rate schedule spans (the spec's, even when the job stops earlier).
    pub schedule_steps: u64,
    /// The step training starts (or resumes) at.
    pub start_step: u64,
}

/// One SSP grant: worker `rank` got parameters to compute step `clock` while the slowest worker had
/// completed `slowest` steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub rank: u32,
    pub clock: u64,
    pub slowest: u64,
}

/// What a shard did, returned when it ends.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub updates: u64,
    pub grants: Vec<Grant>,
    /// Gradient bytes received from workers (as encoded on the wire).
    pub bytes_in: u64,
}

#[derive(Debug)]
struct State {
    optimizer: Optimizer,
    /// Global steps (BSP) or updates (SSP, async) applied since the start.
    version: u64,
    /// Steps each worker has completed (its pushes).
    clocks: Vec<u64>,
    arrived: Vec<bool>,
    /// Per worker, the step from which its parameters carry [`wire::FLUSH_NEXT`] (once): the leader
    /// announced a checkpoint.
    flush_from: Vec<Option<u64>>,
    connected: Vec<bool>,
    shutdown: bool,
    failed: Option<String>,
    summary: Summary,
}

/// A shard's model slices, optimizer state and bookkeeping, shared by its connection threads.
#[derive(Debug)]
pub struct Shard {
    config: ShardConfig,
    layout: Layout,
    names: Vec<String>,
    slices: Vec<Slice>,
    base_lr: f64,
    params: RwLock<Vec<Vec<f32>>>,
    /// Each worker's latest gradient (BSP keeps them until the step's last one arrives).
    inbox: Vec<Mutex<Vec<Vec<f32>>>>,
    state: Mutex<State>,
    changed: Condvar,
}

impl Shard {
    /// A shard of `layout` for tensors `names` starting from `values` (one buffer per tensor), or from
    /// a loaded checkpoint (any shape's: it is assembled whole).
    pub fn new(
        config: ShardConfig,
        layout: Layout,
        names: Vec<String>,
        values: &[Vec<f32>],
        resume: Option<&Loaded>,
    ) -> anyhow::Result<Shard> {
        let slices = layout.shards[config.index].clone();
        let slice_names: Vec<String> = slices
            .iter()
            .map(|s| format!("{}@{}", names[s.tensor], s.offset))
            .collect();
        let mut params: Vec<Vec<f32>> = Vec::with_capacity(slices.len());
        for s in &slices {
            let whole = match resume {
                Some(loaded) => loaded.params.get(&names[s.tensor]).ok_or_else(|| {
                    anyhow::anyhow!("the checkpoint has no tensor {}", names[s.tensor])
                })?,
                None => &values[s.tensor],
            };
            if whole.len() != layout.sizes[s.tensor] {
                anyhow::bail!(
                    "{} has {} values, the model {}",
                    names[s.tensor],
                    whole.len(),
                    layout.sizes[s.tensor]
                );
            }
            params.push(whole[s.range()].to_vec());
        }
        let sizes: Vec<usize> = slices.iter().map(|s| s.len).collect();
        let (mut optimizer, base_lr) = Optimizer::new(&config.optimizer, &sizes);
        if let Some(loaded) = resume {
            restore_optimizer(
                &mut optimizer,
                loaded,
                &names,
                &layout,
                &slices,
                &slice_names,
            )?;
        }
        let workers = config.workers as usize;
        let state = State {
            optimizer,
            version: config.start_step,
            clocks: vec![config.start_step; workers],
            arrived: vec![false; workers],
            flush_from: vec![None; workers],
            connected: vec![false; workers],
            shutdown: false,
            failed: None,
            summary: Summary::default(),
        };
        Ok(Shard {
            inbox: (0..workers)
                .map(|_| Mutex::new(sizes.iter().map(|&n| vec![0.0; n]).collect()))
                .collect(),
            names: slice_names,
            config,
            layout,
            slices,
            base_lr,
            params: RwLock::new(params),
            state: Mutex::new(state),
            changed: Condvar::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(
        &self,
        guard: std::sync::MutexGuard<'a, State>,
    ) -> std::sync::MutexGuard<'a, State> {
        self.changed.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    /// Serves workers on `listener` until worker 0 shuts the job down (or every worker has finished or
    /// failed and gone).
    /// `stop` (a SIGTERM) ends it early only while no worker is connected.
    pub fn serve(
        &self,
        listener: &TcpListener,
        stop: Option<&AtomicBool>,
    ) -> anyhow::Result<Summary> {
        listener.set_nonblocking(true)?;
        std::thread::scope(|scope| -> anyhow::Result<()> {
            let mut seen = 0usize;
            loop {
                match listener.accept() {
                    Ok((stream, _)) => {
                        stream.set_nonblocking(false)?;
                        wire::tune(&stream)?;
                        seen += 1;
                        scope.spawn(move || {
                            if let Err(err) = self.connection(stream) {
                                tracing::debug!(error = %err, "PS connection ended");
                            }
                        });
                    }
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                        let state = self.lock();
                        let active = state.connected.iter().any(|&c| c);
                        let stopped = stop.is_some_and(|s| s.load(Ordering::Relaxed));
                        let over = seen > 0 && (state.shutdown || state.failed.is_some());
                        if !active && (over || stopped) {
                            return Ok(());
                        }
                        drop(state);
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(err) => return Err(err.into()),
                }
            }
        })?;
        let state = self.lock();
        match &state.failed {
            Some(reason) if !state.shutdown => anyhow::bail!("{reason}"),
            _ => Ok(state.summary.clone()),
        }
    }

    fn connection(&self, stream: TcpStream) -> io::Result<()> {
        let mut reader = BufReader::with_capacity(1 << 20, stream.try_clone()?);
        let mut writer = BufWriter::with_capacity(1 << 20, stream);
        let header = wire::read_header(&mut reader)?;
        if header.kind != Kind::Hello {
            return Err(wire::protocol_error("expected hello"));
        }
        let hello: Hello = serde_json::from_slice(&wire::read_payload(&mut reader, header.len)?)
            .map_err(|e| wire::protocol_error(format!("bad hello: {e}")))?;
        let rank = hello.rank as usize;
        let refusal = if hello.job != self.config.job {
            Some(format!(
                "this shard serves job {}, not {}",
                self.config.job, hello.job
            ))
        } else if hello.generation != self.config.generation {
            Some(format!(
                "stale generation: this shard serves generation {}, the worker is of {}",
                self.config.generation, hello.generation
            ))
        } else if hello.workers != self.config.workers || rank >= self.config.workers as usize {
            Some(format!(
                "worker {} of {} does not fit a job of {} workers",
                hello.rank, hello.workers, self.config.workers
            ))
        } else if hello.layout != self.layout.fingerprint() {
            Some("the worker's model differs from this shard's".to_owned())
        } else {
            let mut state = self.lock();
            if state.connected[rank] {
                Some(format!("worker {rank} is already connected"))
            } else {
                state.connected[rank] = true;
                None
            }
        };
        if let Some(reason) = refusal {
            wire::write_frame(&mut writer, Kind::Refused, 0, 0, &[reason.as_bytes()])?;
            return writer.flush();
        }
        wire::write_frame(&mut writer, Kind::Welcome, 0, 0, &[])?;
        writer.flush()?;
        let result = self.session(rank, &mut reader, &mut writer);
        let mut state = self.lock();
        state.connected[rank] = false;
        if !state.shutdown && state.clocks[rank] < self.config.total_steps && state.failed.is_none()
        {
            state.failed = Some(format!(
                "worker {rank} disconnected at step {}{}",
                state.clocks[rank],
                result
                    .as_ref()
                    .err()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ));
        }
        drop(state);
        self.changed.notify_all();
        result
    }

    fn session(
        &self,
        rank: usize,
        reader: &mut BufReader<TcpStream>,
        writer: &mut BufWriter<TcpStream>,
    ) -> io::Result<()> {
        let mut encoded = Vec::new();
        loop {
            let header = match wire::read_header(reader) {
                Ok(h) => h,
                Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(err) => return Err(err),
            };
            match header.kind {
                Kind::Pull => self.reply(rank, header.step, writer)?,
                Kind::Push => {
                    {
                        let mut inbox = self.inbox[rank].lock().unwrap_or_else(|e| e.into_inner());
                        let mut targets: Vec<&mut [f32]> =
                            inbox.iter_mut().map(Vec::as_mut_slice).collect();
                        if header.flags == compress::RAW {
                            wire::read_into(reader, header.len, &mut targets)?;
                        } else {
                            encoded.resize(header.len as usize, 0);
                            reader.read_exact(&mut encoded)?;
                            let bits = match self.config.compression {
                                Compression::Qsgd { bits } => bits,
                                _ => 0,
                            };
                            compress::decode(header.flags, bits, &encoded, &mut targets)?;
                        }
                    }
                    self.apply(rank, header.step, header.len)?;
                    self.reply(rank, header.step + 1, writer)?;
                }
                Kind::Checkpoint => {
                    wire::skip(reader, header.len)?;
                    match self.checkpoint_files() {
                        Ok((model, optimizer)) => {
                            let model_len = (model.len() as u64).to_le_bytes();
                            wire::write_frame(
                                writer,
                                Kind::Ack,
                                0,
                                header.step,
                                &[&model_len, &model, &optimizer],
                            )?;
                        }
                        Err(err) => {
                            let reason = format!("PS shard {}: {err:#}", self.config.index);
                            wire::write_frame(
                                writer,
                                Kind::Ack,
                                1,
                                header.step,
                                &[reason.as_bytes()],
                            )?;
                        }
                    }
                    writer.flush()?;
                }
                Kind::Flush => {
                    // The leader sends it (for its next step) before its own push of the current
                    // one, so under BSP no worker has been sent that step's parameters yet: every
                    // worker flushes the same step's push.
                    wire::skip(reader, header.len)?;
                    self.lock().flush_from.fill(Some(header.step));
                }
                Kind::Shutdown => {
                    wire::skip(reader, header.len)?;
                    self.lock().shutdown = true;
                    self.changed.notify_all();
                    wire::write_frame(writer, Kind::Ack, 0, header.step, &[])?;
                    writer.flush()?;
                }
                other => return Err(wire::protocol_error(format!("unexpected {other:?} frame"))),
            }
        }
    }

    fn learning_rate(&self, step: u64) -> f32 {
        optim::learning_rate(
            self.base_lr,
            &self.config.lr_schedule,
            step,
            self.config.schedule_steps,
        ) as f32
    }

    /// Takes worker `rank`'s gradient for `step` (already in its inbox).
    fn apply(&self, rank: usize, step: u64, bytes: u64) -> io::Result<()> {
        let mut state = self.lock();
        state.summary.bytes_in += bytes;
        if self.config.sync == SyncMode::Bsp {
            if step != state.version || state.arrived[rank] {
                return Err(wire::protocol_error(format!(
                    "worker {rank} pushed step {step} while the shard is at step {}",
                    state.version
                )));
            }
            state.clocks[rank] = step + 1;
            state.arrived[rank] = true;
            if state.arrived.iter().all(|&a| a) {
                // Every worker's gradient is in: sum them in rank order (deterministic) and step.
                let mut first = self.inbox[0].lock().unwrap_or_else(|e| e.into_inner());
                for other in &self.inbox[1..] {
                    let other = other.lock().unwrap_or_else(|e| e.into_inner());
                    for (acc, g) in first.iter_mut().zip(other.iter()) {
                        for (a, &x) in acc.iter_mut().zip(g) {
                            *a += x;
                        }
                    }
                }
                let lr = self.learning_rate(step);
                let mut params = self.params.write().unwrap_or_else(|e| e.into_inner());
                state.optimizer.step(&mut params, &first, lr);
                state.arrived.fill(false);
                state.version += 1;
                state.summary.updates += 1;
                drop(params);
                drop(first);
                self.changed.notify_all();
            }
        } else {
            let inbox = self.inbox[rank].lock().unwrap_or_else(|e| e.into_inner());
            let lr = self.learning_rate(step);
            let mut params = self.params.write().unwrap_or_else(|e| e.into_inner());
            state.optimizer.step(&mut params, &inbox, lr);
            state.clocks[rank] = step + 1;
            state.version += 1;
            state.summary.updates += 1;
            drop(params);
            self.changed.notify_all();
        }
        Ok(())
    }

    /// Sends worker `rank` the parameters to compute step `want` with, once the mode allows it.
    fn reply(&self, rank: usize, want: u64, writer: &mut BufWriter<TcpStream>) -> io::Result<()> {
        let mut state = self.lock();
        let (version, flush) = loop {
            if let Some(reason) = &state.failed {
                let reason = reason.clone();
                drop(state);
                wire::write_frame(writer, Kind::Refused, 0, want, &[reason.as_bytes()])?;
                return writer.flush();
            }
            if state.shutdown {
                drop(state);
                wire::write_frame(writer, Kind::Stop, 0, want, &[])?;
                return writer.flush();
            }
            let slowest = state.clocks.iter().copied().min().unwrap_or(0);
            let ready = match self.config.sync {
                SyncMode::Bsp => state.version >= want,
                SyncMode::Ssp => want.saturating_sub(slowest) <= u64::from(self.config.staleness),
                SyncMode::Async => true,
            };
            if ready {
                if self.config.sync == SyncMode::Ssp {
                    state.summary.grants.push(Grant {
                        rank: rank as u32,
                        clock: want,
                        slowest,
                    });
                }
                let flush = state.flush_from[rank].is_some_and(|from| want >= from);
                if flush {
                    state.flush_from[rank] = None;
                }
                break (state.version, flush);
            }
            state = self.wait(state);
        };
        drop(state);
        let params = self.params.read().unwrap_or_else(|e| e.into_inner());
        let parts: Vec<&[u8]> = params.iter().map(|p| wire::bytes(p)).collect();
        let flags = if flush { wire::FLUSH_NEXT } else { 0 };
        wire::write_frame(writer, Kind::Params, flags, version, &parts)?;
        drop(params);
        writer.flush()
    }

    /// This shard's files of a checkpoint, in memory: its slices (`model`) and their optimizer state.
    /// The worker assembling the checkpoint writes them, so shards need no shared filesystem.
    fn checkpoint_files(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        let state = self.lock();
        let params = self.params.read().unwrap_or_else(|e| e.into_inner());
        shard_checkpoint::checkpoint_files(&self.names, &params, &state.optimizer)
    }

    /// The shard's current values, slice by slice (tests).
    pub fn values(&self) -> Vec<Vec<f32>> {
        self.params
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The shard's optimizer state, named `<state>.<tensor>@<offset>` (tests).
    pub fn optimizer_state(&self) -> Vec<(String, Vec<f32>)> {
        self.lock().optimizer.state(&self.names)
    }

    pub fn slices(&self) -> &[Slice] {
        &self.slices
    }
}

pub fn shard_name(index: usize) -> String {
    format!("ps-{index}")
}
