//! The training loop every task runs, at any shape: gradients from the run, an exchange (local, PS
//! shards or all-reduce) turning them into the next parameters — or a pipeline stage's step doing
//! both — and the leader's metrics, validation, checkpoints, target and stop handling.

use crate::dist::worker::{Exchange, Exchanged};
use crate::dist::{self, Cluster, Role};
use crate::rng::Rng;
use crate::trainer::{Outcome, Reporter, Requests, Run, TrainOptions};
use drover_core::spec::TargetMode;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Trains until the step budget or the target, or until a stop is requested (then checkpoints and
/// returns); a checkpoint request is served at the next step boundary. With several workers, worker 0
/// (the leader) reports metrics, validates and writes checkpoints; a PS task serves its shard instead.
pub fn train(
    options: TrainOptions,
    reporter: &mut dyn Reporter,
    requests: &Requests,
) -> anyhow::Result<Outcome> {
    if let Some(Cluster {
        role: Role::Ps { .. },
        ..
    }) = &options.cluster
    {
        return dist::worker::serve_shard(options, reporter, requests);
    }
    let began = Instant::now();
    let leader = options.rank == 0;
    let distributed = options.cluster.is_some();
    let mut run = Run::new(options.clone())?;
    if leader {
        reporter.info(&format!(
            "model: {} parameters in {} tensors; {} steps; global batch {}{}{}",
            run.params.num_values(),
            run.params.len(),
            options
                .spec
                .max_steps
                .map_or_else(|| "until the target".to_owned(), |s| s.to_string()),
            options.spec.batch_size,
            if run.is_resident() {
                "; on the GPU, steps without the host"
            } else if options.device.is_cpu() {
                ""
            } else {
                "; on the GPU, gradients exchanged through the host"
            },
            if distributed {
                format!(
                    "; {} workers, {} PS, {:?}",
                    options.workers, options.ps, options.distributed
                )
            } else {
                String::new()
            }
        ));
    }
    if let Some(path) = &options.resume_from {
        run.restore(path)?;
        reporter.info(&format!(
            "resumed from step {} ({})",
            run.step,
            path.display()
        ));
    }
    let mut exchange = Exchange::join(&run)?;
    let total = run.total_steps();
    let eval_every = options.spec.eval_every.max(1);
    let checkpoint_every = options.checkpoint.every_steps.max(1);
    let log_every = options.log_every.max(1);
    let mut metrics: BTreeMap<String, f64> = BTreeMap::new();
    let mut last_saved = options.resume_from.as_ref().map(|_| run.step);
    let mut last_checkpoint = None;
    let mut window = Window::default();
    let mut stop_agreed = exchange.start(&mut run)?;
    let mut finish_agreed = false;
    let mut reached_target = false;
    let mut first_step = true;
    // A checkpoint the leader was asked for while compressed gradients' residuals are pending
    // waits for the flush it announced (two steps): requested ones, and the one a stop writes.
    let mut flush_announced = false;
    let mut checkpoint_pending = false;
    let seed = options.spec.seed;
    let batch = options.spec.batch_size as usize;
    loop {
        let done =
            run.step >= total || finish_agreed || (reached_target && !exchange.agreed_stop());
        let mut stopping = if exchange.agreed_stop() {
            stop_agreed
        } else {
            stop_agreed || (leader && requests.stop.load(Ordering::Relaxed))
        };
        if stopping && !done && !stop_agreed && leader {
            stop_agreed |= exchange.land(&mut run)?;
            if !stop_agreed && !residuals_flushed(&mut exchange, &run, &mut flush_announced)? {
                stopping = false;
            }
        }
        if done || stopping {
            // The last push must arrive before this worker goes (SSP, async).
            exchange.land(&mut run)?;
            if leader {
                if last_saved != Some(run.step) {
                    let path = exchange.save(&run, &metrics)?;
                    reporter.checkpoint(run.step, &path);
                    last_checkpoint = Some(path);
                }
                exchange.finish(run.step)?;
                if stopping && !done {
                    reporter.info(&format!("checkpointed at step {} on request", run.step));
                }
            }
            return Ok(Outcome {
                step: run.step,
                interrupted: stopping && !done,
                metrics,
                last_checkpoint,
            });
        }
        if distributed {
            // Each worker's dropout draws depend on (seed, step, rank) only, so any shape resumes.
            run.rng = Rng::derive(
                seed ^ run.step.rotate_left(20),
                0xD2_0907 ^ u64::from(options.rank),
            );
        }
        let exchanged = if run.is_resident() {
            // The loss and accuracy stay on the device until the metrics are reported.
            let lr = run.step_on_device()?;
            window.add(0.0, 0, batch, 0, Duration::ZERO);
            Exchanged {
                lr,
                stop: false,
                finish: false,
                bytes: 0,
                bubble: None,
            }
        } else if let Exchange::Pipeline(pipeline) = &mut exchange {
            let started = Instant::now();
            let controls = [requests.stop.load(Ordering::Relaxed), reached_target];
            let stepped = pipeline.step(&mut run, controls)?;
            window.add(
                stepped.loss,
                stepped.correct,
                stepped.samples,
                stepped.exchanged.bytes,
                started.elapsed().saturating_sub(stepped.busy),
            );
            if let Some((idle, wall)) = stepped.exchanged.bubble {
                window.idle += idle;
                window.wall += wall;
            }
            window.held = window.held.max(stepped.held);
            stepped.exchanged
        } else {
            let started = Instant::now();
            let (loss, correct, samples, grads) = run.gradients()?;
            let computed = started.elapsed();
            let controls = [requests.stop.load(Ordering::Relaxed), reached_target];
            let exchanged = exchange.step(&mut run, grads, samples, controls)?;
            window.add(
                loss,
                correct,
                samples,
                exchanged.bytes,
                started.elapsed() - computed,
            );
            exchanged
        };
        (stop_agreed, finish_agreed) = (exchanged.stop, exchanged.finish);
        let step = run.step;
        if !leader {
            continue;
        }
        if first_step {
            // How long this run took to load, restore, meet its peers and take a step: the server
            // times resizes with it.
            reporter.metrics(step, &[(STARTUP_METRIC, began.elapsed().as_secs_f64())]);
            first_step = false;
        }
        let mut requested =
            requests.checkpoint.swap(false, Ordering::Relaxed) || checkpoint_pending;
        if requested {
            stop_agreed |= exchange.land(&mut run)?;
            checkpoint_pending = !residuals_flushed(&mut exchange, &run, &mut flush_announced)?;
            requested = !checkpoint_pending;
        }
        let evaluate = step % eval_every == 0 || step == total;
        let save = requested || step % checkpoint_every == 0 || step == total;
        if evaluate || save {
            // Validation and checkpoints see this step's parameters.
            stop_agreed |= exchange.land(&mut run)?;
        }
        if step % log_every == 0 || step == total {
            if let Some((loss, correct)) = run.take_totals()? {
                window.loss += loss;
                window.correct += correct;
            }
            let values = window.values(exchanged.lr, distributed);
            for (k, v) in &values {
                metrics.insert((*k).to_owned(), *v);
            }
            reporter.metrics(step, &values);
            window = Window::default();
            diverged(&values, step)?;
        }
        if evaluate {
            let (val_loss, val_accuracy) = run.evaluate()?;
            metrics.insert("val_loss".to_owned(), val_loss);
            metrics.insert("val_accuracy".to_owned(), val_accuracy);
            reporter.metrics(
                step,
                &[("val_loss", val_loss), ("val_accuracy", val_accuracy)],
            );
            if let Some(target) = &options.spec.target
                && let Some(&value) = metrics.get(&target.metric)
            {
                reached_target = match target.mode {
                    TargetMode::Max => value >= target.value,
                    TargetMode::Min => value <= target.value,
                };
            }
            window.restart();
        }
        if save || reached_target {
            // No checkpoint of weights that have gone NaN (the loss seen so far says so on the
            // host; on a device it is read at the next report).
            diverged(&[("loss", window.loss)], step)?;
            flush_announced = false;
            let path = exchange.save(&run, &metrics)?;
            reporter.checkpoint(step, &path);
            last_saved = Some(step);
            last_checkpoint = Some(path);
            window.restart();
        }
    }
}

/// Whether a checkpoint now keeps every error-feedback residual (always, without compression). If
/// not, the leader announces a flush once and waits for it: every worker pushes the next step's
/// gradient uncompressed with its residual folded in, so two steps later the parameters hold it all.
fn residuals_flushed(
    exchange: &mut Exchange,
    run: &Run,
    announced: &mut bool,
) -> anyhow::Result<bool> {
    if !exchange.residuals_pending() {
        return Ok(true);
    }
    if !*announced {
        exchange.announce_flush(run)?;
        *announced = true;
    }
    Ok(false)
}

/// A training loss that is no longer a number ends the run with an error rather than training on
/// (and checkpointing) weights that are NaN: a job that diverged fails and says so.
fn diverged(values: &[(&str, f64)], step: u64) -> anyhow::Result<()> {
    match values.iter().find(|(name, _)| *name == "loss") {
        Some(&(_, loss)) if !loss.is_finite() => anyhow::bail!(
            "training diverged: the loss became {loss} by step {step} (a lower `lr`, \
             `grad_clip_norm` or a learning-rate warm-up may help; the data may hold NaN or \
             infinite values)"
        ),
        _ => Ok(()),
    }
}

/// Reported once per run with its first step: seconds from the task's start to the end of that step.
pub const STARTUP_METRIC: &str = "startup_s";

/// Training metrics accumulated between two reports.
#[derive(Debug)]
struct Window {
    loss: f64,
    correct: usize,
    samples: usize,
    steps: u64,
    bytes: u64,
    exchange: Duration,
    /// A pipeline's idle and wall time, summed over its workers (seconds).
    idle: f64,
    wall: f64,
    /// The most micro-batches the leader's stage held at once.
    held: usize,
    start: Instant,
}

impl Default for Window {
    fn default() -> Self {
        Self {
            loss: 0.0,
            correct: 0,
            samples: 0,
            steps: 0,
            bytes: 0,
            exchange: Duration::ZERO,
            idle: 0.0,
            wall: 0.0,
            held: 0,
            start: Instant::now(),
        }
    }
}

impl Window {
    fn add(&mut self, loss: f64, correct: usize, samples: usize, bytes: u64, exchange: Duration) {
        self.loss += loss;
        self.correct += correct;
        self.samples += samples;
        self.steps += 1;
        self.bytes += bytes;
        self.exchange += exchange;
    }

    /// Validation and checkpoints do not count as training time.
    fn restart(&mut self) {
        self.start = Instant::now();
    }

    fn values(&self, lr: f64, distributed: bool) -> Vec<(&'static str, f64)> {
        let elapsed = self.start.elapsed().as_secs_f64().max(1e-9);
        let steps = self.steps.max(1) as f64;
        let mut values = vec![
            ("loss", self.loss / steps),
            ("accuracy", self.correct as f64 / self.samples.max(1) as f64),
            ("samples_per_s", self.samples as f64 / elapsed),
            ("step_time_ms", 1000.0 * elapsed / steps),
            ("lr", lr),
        ];
        if distributed {
            values.push(("comm_time_ms", 1000.0 * self.exchange.as_secs_f64() / steps));
            values.push(("grad_bytes_per_step", self.bytes as f64 / steps));
        }
        if self.wall > 0.0 {
            // The fraction of the stages' time spent waiting for each other (and the wire).
            values.push(("pipeline_bubble", self.idle / self.wall));
            values.push(("pipeline_micro_batches_held", self.held as f64));
        }
        values
    }
}
