//! The models a job spec can name, each sized from the spec and the dataset: an MLP, a LeNet-5 class CNN
//! and a character-level transformer language model. Initialisation and dropout draw from the engine's
//! own RNG. Linear weights are stored `[in, out]`.

use crate::params::Params;
use crate::rng::Rng;
use candle_core::{D, DType, Device, Result, Tensor, Var};
use drover_core::spec::ModelSpec;
use vector::vectorised;

/// Fails with a configuration error (candle's `bail!` would attach a backtrace to a user's mistake).
macro_rules! invalid {
    ($($arg:tt)*) => {
        return Err(candle_core::Error::Msg(format!($($arg)*)))
    };
}

/// A model: logits from inputs. Classification inputs are `[batch, …input_shape]` (f32); language
/// model inputs are `[batch, context]` token ids (u32) and the logits `[batch·context, vocab]`.
pub trait Model: std::fmt::Debug + Send {
    fn forward(&self, input: &Tensor, train: bool, dropout: &mut Rng) -> Result<Tensor>;

    /// Logits for evaluation (no dropout, no gradient).
    fn evaluate(&self, input: &Tensor) -> Result<Tensor> {
        self.forward(input, false, &mut Rng::seed(0))
    }

    /// Loss and correct predictions for one batch of classification, with the gradient of every
    /// parameter (in `params` order) written into `grads` (resized to fit; whatever it held is
    /// overwritten, so the buffers of an earlier step can be handed back in). A hand-written backward
    /// pass on the host, straight from the parameter buffers; `None` when the model has none (autograd
    /// is used instead). `input` is the batch, row-major `[targets.len(), features]`.
    fn gradients(
        &mut self,
        _params: &Params,
        _input: &[f32],
        _targets: &[u32],
        _rng: &mut Rng,
        _grads: &mut Vec<Vec<f32>>,
    ) -> Option<Result<BatchLoss>> {
        None
    }

    /// [`Model::gradients`] for a language model: `tokens` and `targets` are the batch's sequences,
    /// row-major `[batch, context]`.
    fn token_gradients(
        &mut self,
        _params: &Params,
        _tokens: &[u32],
        _targets: &[u32],
        _rng: &mut Rng,
        _grads: &mut Vec<Vec<f32>>,
    ) -> Option<Result<BatchLoss>> {
        None
    }
}

/// What one batch's backward pass measured besides the gradients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchLoss {
    pub loss: f64,
    pub correct: usize,
}

vectorised! {
    /// Mean cross-entropy over a batch of logits `[b, c]` and the correct predictions; d loss / d
    /// logits goes into `grad` (`[b, c]`).
    fn softmax_cross_entropy<'a>(
        logits: &'a [f32],
        targets: &'a [u32],
        classes: usize,
        grad: &'a mut [f32],
    ) -> BatchLoss {
        let b = targets.len();
        let mut loss = 0.0f64;
        let mut correct = 0;
        for (row, (&target, out)) in targets.iter().zip(grad.chunks_mut(classes)).enumerate() {
            let z = &logits[row * classes..(row + 1) * classes];
            let (argmax, max) =
                z.iter()
                    .copied()
                    .enumerate()
                    .fold((0, f32::NEG_INFINITY), |best, (i, v)| {
                        if v > best.1 { (i, v) } else { best }
                    });
            if argmax == target as usize {
                correct += 1;
            }
            for (o, &v) in out.iter_mut().zip(z) {
                *o = vector::exp(v - max);
            }
            let total = vector::sum(out);
            loss += f64::from(total.ln() - (z[target as usize] - max));
            let inv = 1.0 / total;
            for o in out.iter_mut() {
                *o = *o * inv / b as f32;
            }
            out[target as usize] -= 1.0 / b as f32;
        }
        BatchLoss {
            loss: loss / b as f64,
            correct,
        }
    }
}

/// What the dataset says about the model's ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Io {
    Classes {
        input_shape: Vec<usize>,
        classes: usize,
    },
    Tokens {
        vocab: usize,
    },
}

fn uniform(rng: &mut Rng, n: usize, bound: f32) -> Vec<f32> {
    (0..n).map(|_| rng.uniform_in(-bound, bound)).collect()
}

fn normal(rng: &mut Rng, n: usize, std: f32) -> Vec<f32> {
    (0..n).map(|_| std * rng.normal()).collect()
}

#[derive(Debug, Clone)]
struct Linear {
    weight: Var,
    bias: Var,
}

impl Linear {
    /// PyTorch's default initialisation: U(−1/√fan_in, 1/√fan_in) for weight and bias.
    fn new(
        params: &mut Params,
        rng: &mut Rng,
        name: &str,
        fan_in: usize,
        fan_out: usize,
    ) -> Result<Self> {
        let bound = 1.0 / (fan_in as f32).sqrt();
        let weight = params.add(
            &format!("{name}.weight"),
            &[fan_in, fan_out],
            uniform(rng, fan_in * fan_out, bound),
        )?;
        let bias = params.add(
            &format!("{name}.bias"),
            &[fan_out],
            uniform(rng, fan_out, bound),
        )?;
        Ok(Self { weight, bias })
    }

    fn normal(
        params: &mut Params,
        rng: &mut Rng,
        name: &str,
        fan_in: usize,
        fan_out: usize,
    ) -> Result<Self> {
        let weight = params.add(
            &format!("{name}.weight"),
            &[fan_in, fan_out],
            normal(rng, fan_in * fan_out, 0.02),
        )?;
        let bias = params.add(&format!("{name}.bias"), &[fan_out], vec![0.0; fan_out])?;
        Ok(Self { weight, bias })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = match x.dims().len() {
            2 => x.matmul(self.weight.as_tensor())?,
            _ => x.broadcast_matmul(self.weight.as_tensor())?,
        };
        y.broadcast_add(self.bias.as_tensor())
    }
}

/// Inverted dropout with a mask from the engine's RNG on the CPU (so runs resume exactly), from the
/// device's own generator on a GPU (the mask is drawn there).
fn dropout(x: &Tensor, p: f64, train: bool, rng: &mut Rng) -> Result<Tensor> {
    if !train || p <= 0.0 {
        return Ok(x.clone());
    }
    if !x.device().is_cpu() {
        return candle_nn::ops::dropout(x, p as f32);
    }
    let keep = (1.0 - p) as f32;
    let scale = 1.0 / keep;
    let mask: Vec<f32> = (0..x.elem_count())
        .map(|_| if rng.uniform() < keep { scale } else { 0.0 })
        .collect();
    x.mul(&Tensor::from_vec(mask, x.shape(), x.device())?)
}

mod charlm;
mod cnn;
mod conv;
mod mlp;
mod transformer;
pub(crate) mod vector;

pub use charlm::CharLm;
pub use cnn::Cnn;
pub use mlp::Mlp;

/// Builds the model a spec names for the dataset's inputs and outputs, registering its parameters.
pub fn build(spec: &ModelSpec, io: &Io, params: &mut Params, seed: u64) -> Result<Box<dyn Model>> {
    let mut rng = Rng::derive(seed, 0x1417);
    Ok(match (spec, io) {
        (
            ModelSpec::Mlp { hidden, dropout },
            Io::Classes {
                input_shape,
                classes,
            },
        ) => {
            let input = input_shape.iter().product();
            Box::new(Mlp::new(
                params, &mut rng, input, hidden, *classes, *dropout,
            )?)
        }
        (
            ModelSpec::Cnn {
                channels,
                hidden,
                dropout,
            },
            Io::Classes {
                input_shape,
                classes,
            },
        ) => Box::new(Cnn::new(
            params,
            &mut rng,
            input_shape,
            channels,
            hidden,
            *classes,
            *dropout,
        )?),
        (
            ModelSpec::Charlm {
                layers,
                heads,
                d_model,
                context,
                dropout,
            },
            Io::Tokens { vocab },
        ) => Box::new(CharLm::new(
            params,
            &mut rng,
            *vocab,
            *layers as usize,
            *heads as usize,
            *d_model as usize,
            *context as usize,
            *dropout,
        )?),
        (ModelSpec::Charlm { .. }, Io::Classes { .. }) => {
            invalid!("the charlm model needs a text dataset")
        }
        (_, Io::Tokens { .. }) => invalid!("a text dataset needs the charlm model"),
    })
}

/// Gathers the feature rows of a classification batch into `out` (row-major `[rows, dim]`).
pub fn gather_rows(out: &mut Vec<f32>, x: &[f32], rows: &[u32], dim: usize) {
    out.clear();
    out.reserve(rows.len() * dim);
    for &r in rows {
        out.extend_from_slice(&x[r as usize * dim..(r as usize + 1) * dim]);
    }
}

/// The input tensor for a classification batch.
pub fn class_batch(
    x: &[f32],
    rows: &[u32],
    dim: usize,
    input_shape: &[usize],
    device: &Device,
) -> Result<Tensor> {
    let mut data = Vec::new();
    gather_rows(&mut data, x, rows, dim);
    let mut shape = vec![rows.len()];
    shape.extend_from_slice(input_shape);
    Tensor::from_vec(data, shape, device)
}

/// Labels as a u32 tensor.
pub fn labels(y: &[u32], rows: &[u32], device: &Device) -> Result<Tensor> {
    let labels: Vec<u32> = rows.iter().map(|&r| y[r as usize]).collect();
    Tensor::from_vec(labels, rows.len(), device)
}

/// Correct predictions in a batch of logits.
pub fn correct(logits: &Tensor, targets: &Tensor) -> Result<usize> {
    let predicted = logits
        .argmax(D::Minus1)?
        .to_dtype(DType::U32)?
        .to_vec1::<u32>()?;
    let targets = targets.to_vec1::<u32>()?;
    Ok(predicted
        .iter()
        .zip(&targets)
        .filter(|(p, t)| p == t)
        .count())
}

/// Tests' referee for the hand-written steps: `model`'s [`Model::gradients`] on `x` (row-major, the
/// batch as the data holds it) against candle's autograd through [`Model::forward`] on `input`; see
/// [`assert_step_matches_autograd`].
#[cfg(test)]
fn assert_matches_autograd(
    model: &mut dyn Model,
    params: &Params,
    x: &[f32],
    input: &Tensor,
    targets: &[u32],
) {
    assert_step_matches_autograd(model, params, input, targets, |model, rng, grads| {
        model.gradients(params, x, targets, rng, grads)
    });
}

/// Tests' referee for the hand-written steps: `step` (run twice, the first time into buffers of the
/// wrong sizes full of garbage) against candle's autograd through [`Model::forward`] on `input`,
/// both drawing dropout from `Rng::seed(0)`: loss, correct predictions and every gradient.
#[cfg(test)]
fn assert_step_matches_autograd(
    model: &mut dyn Model,
    params: &Params,
    input: &Tensor,
    targets: &[u32],
    mut step: impl FnMut(&mut dyn Model, &mut Rng, &mut Vec<Vec<f32>>) -> Option<Result<BatchLoss>>,
) {
    let mut grads = vec![vec![f32::NAN; 3]; 2];
    let mut manual = None;
    for _ in 0..2 {
        manual = Some(
            step(model, &mut Rng::seed(0), &mut grads)
                .expect("a hand-written step")
                .expect("backward"),
        );
    }
    let manual = manual.expect("ran");
    let logits = model
        .forward(input, true, &mut Rng::seed(0))
        .expect("forward");
    let target_tensor =
        Tensor::from_slice(targets, targets.len(), input.device()).expect("targets");
    let loss = candle_nn::loss::cross_entropy(&logits, &target_tensor).expect("loss");
    let auto = params
        .gradients(&loss.backward().expect("backward"))
        .expect("grads");
    let auto_loss = f64::from(loss.to_scalar::<f32>().expect("scalar"));
    assert!(
        (manual.loss - auto_loss).abs() < 1e-5,
        "{input:?}: loss {} vs {auto_loss}",
        manual.loss
    );
    assert_eq!(
        manual.correct,
        correct(&logits, &target_tensor).expect("correct")
    );
    assert_eq!(grads.len(), auto.len());
    for (name, (m, a)) in params.names.iter().zip(grads.iter().zip(&auto)) {
        assert_eq!(m.len(), a.len(), "{name}");
        for (x, y) in m.iter().zip(a) {
            assert!((x - y).abs() <= 1e-5 + 1e-4 * y.abs(), "{name}: {x} vs {y}");
        }
    }
}
