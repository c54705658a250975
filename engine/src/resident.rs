//! Training that stays on the device: for a single-process run on a GPU, the training set, the
//! parameters and the optimizer's state live on the GPU from the first step to the last. A step
//! uploads only the batch's row numbers, gathers the batch there, runs forward and backward
//! (dropout masks drawn there), clips and applies the update with the fused kernels of
//! [`fused`](crate::fused), and adds its loss and correct predictions to sums kept there: the host
//! waits for the GPU once per logging interval ([`Resident::take_totals`]), at validation and at
//! checkpoints, never inside a step.
//!
//! The same code runs on the CPU device (tests check it there against the host path).

use crate::data::Data;
use crate::fused::{
    AdamApply, AdamMoments, AdamStep, AddCorrect, SgdApply, SgdMode, SgdMomentum, SgdStep,
};
use crate::models::Model;
use crate::optim::Optimizer;
use crate::params::Params;
use crate::rng::Rng;
use candle_core::{DType, Device, Result, Tensor};

/// The training split on the device.
#[derive(Debug)]
enum Batches {
    Classes {
        /// `[samples, features]`.
        x: Tensor,
        /// `[samples]`, u32.
        y: Tensor,
        input_shape: Vec<usize>,
    },
    Tokens {
        /// `[tokens]`, u32.
        tokens: Tensor,
        context: usize,
        /// `[1, context]`: 0‥context and 1‥=context, added to each window's start.
        inputs: Tensor,
        targets: Tensor,
    },
}

/// What a run keeps on its device besides the parameters.
#[derive(Debug)]
pub(crate) struct Resident {
    batches: Batches,
    /// Per parameter: AdamW's moments `[2n]` (m then v) or SGD's momentum buffer `[n]`; none for SGD
    /// without momentum.
    state: Vec<Tensor>,
    /// SGD's buffers are taken from the first gradient (PyTorch's rule).
    sgd_started: bool,
    /// Loss and correct predictions summed since the last [`Resident::take_totals`].
    loss: Tensor,
    correct: Tensor,
    /// The host-side batch positions, reused from step to step.
    starts: Vec<u32>,
}

impl Resident {
    /// Uploads the training split and the optimizer's state (`optimizer` as restored or fresh).
    pub fn new(
        data: &Data,
        context: usize,
        params: &Params,
        optimizer: &Optimizer,
        seed: u64,
    ) -> Result<Self> {
        let device = params.device();
        if !device.is_cpu() {
            // Dropout masks come from the device's generator.
            device.set_seed(seed)?;
        }
        let batches = match data {
            Data::Classification(c) => Batches::Classes {
                x: Tensor::from_slice(&c.train.x, (c.train.len(), c.train.dim), device)?,
                y: Tensor::from_slice(&c.train.y, c.train.len(), device)?,
                input_shape: c.input_shape.clone(),
            },
            Data::Text(t) => {
                let positions: Vec<u32> = (0..=context as u32).collect();
                Batches::Tokens {
                    tokens: Tensor::from_slice(&t.train, t.train.len(), device)?,
                    context,
                    inputs: Tensor::from_slice(&positions[..context], (1, context), device)?,
                    targets: Tensor::from_slice(&positions[1..], (1, context), device)?,
                }
            }
        };
        let zero = Tensor::zeros((), DType::F32, device)?;
        let mut resident = Self {
            batches,
            state: Vec::new(),
            sgd_started: false,
            loss: zero.clone(),
            correct: zero,
            starts: Vec::new(),
        };
        resident.upload_state(params, optimizer)?;
        Ok(resident)
    }

    /// Replaces the device's optimizer state with the host optimizer's (after a restore).
    pub fn upload_state(&mut self, params: &Params, optimizer: &Optimizer) -> Result<()> {
        let device = params.device();
        let sizes = params.values.iter().map(Vec::len);
        self.state = match optimizer {
            Optimizer::AdamW { m, v, .. } => sizes
                .zip(m.iter().zip(v))
                .map(|(n, (m, v))| {
                    let mut mv = Vec::with_capacity(2 * n);
                    mv.extend_from_slice(m);
                    mv.extend_from_slice(v);
                    Tensor::from_vec(mv, 2 * n, device)
                })
                .collect::<Result<_>>()?,
            Optimizer::Sgd {
                momentum, buffers, ..
            } => {
                self.sgd_started = !buffers.is_empty();
                if *momentum == 0.0 {
                    Vec::new()
                } else if buffers.is_empty() {
                    sizes
                        .map(|n| Tensor::zeros(n, DType::F32, device))
                        .collect::<Result<_>>()?
                } else {
                    buffers
                        .iter()
                        .map(|b| Tensor::from_slice(b, b.len(), device))
                        .collect::<Result<_>>()?
                }
            }
        };
        Ok(())
    }

    /// The parameters' and the optimizer's state copied to the host (for a checkpoint).
    pub fn download(
        &self,
        params: &Params,
        optimizer: &Optimizer,
    ) -> Result<(Vec<Vec<f32>>, Optimizer)> {
        let values = params
            .vars()
            .iter()
            .map(|var| var.as_tensor().flatten_all()?.to_vec1::<f32>())
            .collect::<Result<Vec<_>>>()?;
        let mut host = optimizer.clone();
        match &mut host {
            Optimizer::AdamW { m, v, .. } => {
                for ((m, v), mv) in m.iter_mut().zip(v.iter_mut()).zip(&self.state) {
                    let all = mv.to_vec1::<f32>()?;
                    let (first, second) = all.split_at(all.len() / 2);
                    m.clear();
                    m.extend_from_slice(first);
                    v.clear();
                    v.extend_from_slice(second);
                }
            }
            Optimizer::Sgd { buffers, .. } => {
                *buffers = if self.sgd_started {
                    self.state
                        .iter()
                        .map(Tensor::to_vec1::<f32>)
                        .collect::<Result<_>>()?
                } else {
                    Vec::new()
                };
            }
        }
        Ok((values, host))
    }

    /// One training step on the rows `rows` of the training split at learning rate `lr`.
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts of a run a step touches"
    )]
    pub fn step(
        &mut self,
        rows: &[u32],
        model: &dyn Model,
        rng: &mut Rng,
        params: &Params,
        optimizer: &mut Optimizer,
        lr: f32,
        clip: Option<f64>,
    ) -> Result<()> {
        let device = params.device().clone();
        let (input, targets) = self.batch(rows, &device)?;
        let logits = model.forward(&input, true, rng)?;
        let loss = candle_nn::loss::cross_entropy(&logits, &targets)?;
        let grads = loss.backward()?;
        self.loss = (&self.loss + loss.detach())?;
        self.correct
            .inplace_op3(&logits.detach().contiguous()?, &targets, &AddCorrect)?;
        let mut gradients = params
            .vars()
            .iter()
            .map(|var| match grads.get(var.as_tensor()) {
                Some(g) => g.flatten_all(),
                None => Tensor::zeros(var.elem_count(), DType::F32, &device),
            })
            .collect::<Result<Vec<_>>>()?;
        if let Some(max_norm) = clip {
            clip_global_norm(&mut gradients, max_norm)?;
        }
        self.apply(params, &gradients, optimizer, lr)
    }

    fn batch(&mut self, rows: &[u32], device: &Device) -> Result<(Tensor, Tensor)> {
        match &self.batches {
            Batches::Classes { x, y, input_shape } => {
                let index = Tensor::from_slice(rows, rows.len(), device)?;
                let mut shape = Vec::with_capacity(input_shape.len() + 1);
                shape.push(rows.len());
                shape.extend_from_slice(input_shape);
                Ok((
                    x.index_select(&index, 0)?.reshape(shape)?,
                    y.index_select(&index, 0)?,
                ))
            }
            Batches::Tokens {
                tokens,
                context,
                inputs,
                targets,
            } => {
                self.starts.clear();
                self.starts
                    .extend(rows.iter().map(|&w| w * *context as u32));
                let starts = Tensor::from_slice(&self.starts, (rows.len(), 1), device)?;
                let gather = |offsets: &Tensor| {
                    tokens.index_select(&starts.broadcast_add(offsets)?.flatten_all()?, 0)
                };
                Ok((
                    gather(inputs)?.reshape((rows.len(), *context))?,
                    gather(targets)?,
                ))
            }
        }
    }

    fn apply(
        &mut self,
        params: &Params,
        gradients: &[Tensor],
        optimizer: &mut Optimizer,
        lr: f32,
    ) -> Result<()> {
        match optimizer {
            Optimizer::AdamW {
                beta1,
                beta2,
                eps,
                weight_decay,
                t,
                ..
            } => {
                *t += 1;
                let moments = AdamMoments {
                    beta1: *beta1,
                    beta2: *beta2,
                };
                let update = AdamApply {
                    decay: 1.0 - lr * *weight_decay,
                    step_size: lr / (1.0 - beta1.powi(*t as i32)),
                    sqrt_c2: (1.0 - beta2.powi(*t as i32)).sqrt(),
                    eps: *eps,
                };
                let fused = AdamStep {
                    moments,
                    apply: update,
                };
                for ((var, g), mv) in params.vars().iter().zip(gradients).zip(&self.state) {
                    if mv.device().is_cuda() {
                        var.as_tensor().inplace_op3(g, mv, &fused)?;
                    } else {
                        mv.inplace_op2(g, &moments)?;
                        var.as_tensor().inplace_op2(mv, &update)?;
                    }
                }
            }
            Optimizer::Sgd {
                momentum,
                nesterov,
                weight_decay,
                ..
            } => {
                let mode = match (*momentum == 0.0, *nesterov) {
                    (true, _) => SgdMode::Plain,
                    (false, false) => SgdMode::Momentum,
                    (false, true) => SgdMode::Nesterov,
                };
                let buffer = SgdMomentum {
                    first: !self.sgd_started,
                    momentum: *momentum,
                    weight_decay: *weight_decay,
                };
                let update = SgdApply {
                    mode,
                    lr,
                    momentum: *momentum,
                    weight_decay: *weight_decay,
                };
                let fused = SgdStep {
                    momentum: buffer,
                    apply: update,
                };
                for (i, (var, g)) in params.vars().iter().zip(gradients).enumerate() {
                    let p = var.as_tensor();
                    match self.state.get(i) {
                        Some(buf) if p.device().is_cuda() => p.inplace_op3(g, buf, &fused)?,
                        Some(buf) => {
                            buf.inplace_op3(g, p, &buffer)?;
                            p.inplace_op3(g, buf, &update)?;
                        }
                        // Plain SGD reads no buffer: the gradient stands in.
                        None if p.device().is_cuda() => p.inplace_op3(g, g, &fused)?,
                        None => p.inplace_op3(g, g, &update)?,
                    }
                }
                self.sgd_started = true;
            }
        }
        Ok(())
    }

    /// The loss and correct predictions summed over the steps since the last call (the host waits
    /// for the device here).
    pub fn take_totals(&mut self) -> Result<(f64, usize)> {
        let loss = f64::from(self.loss.to_scalar::<f32>()?);
        let correct = self.correct.to_scalar::<f32>()? as usize;
        self.loss = self.loss.zeros_like()?;
        self.correct = self.correct.zeros_like()?;
        Ok((loss, correct))
    }
}

/// Scales the gradients so that their global L2 norm is at most `max_norm`, on the device: the scale
/// `min(1, max_norm / (norm + 1e-6))` is computed there, so the host does not wait for the norm.
fn clip_global_norm(gradients: &mut [Tensor], max_norm: f64) -> Result<()> {
    let Some(first) = gradients.first() else {
        return Ok(());
    };
    let mut squares = Tensor::zeros((), DType::F32, first.device())?;
    for g in gradients.iter() {
        squares = (squares + g.sqr()?.sum_all()?)?;
    }
    let norm = (squares.sqrt()? + 1e-6)?;
    let scale = (norm.recip()? * max_norm)?.minimum(1.0)?;
    for g in gradients.iter_mut() {
        *g = g.broadcast_mul(&scale)?;
    }
    Ok(())
}
