//! The multi-layer perceptron, with a hand-written backward pass: the products run on the parameter
//! and gradient buffers themselves (`linalg`), every activation lives in buffers kept from step to
//! step, and the bias, ReLU and dropout of a layer are one pass over its product.

use super::error::invalid;
use super::layers::{Linear, dropout};
use super::loss::{BatchLoss, softmax_cross_entropy};
use super::model::Model;
use crate::linalg::{MatRef, matmul};
use crate::models::vector::vectorised;
use crate::params::Params;
use crate::rng::Rng;
use candle_core::{Result, Tensor};
use rayon::prelude::*;

/// Values per parallel piece of an elementwise pass: large enough that splitting costs nothing
/// measurable.
const PIECE: usize = 1 << 14;

#[derive(Debug)]
pub struct Mlp {
    layers: Vec<Linear>,
    dropout: f64,
    /// Index in `Params` of the first layer's weight; each layer adds a weight and a bias.
    first_param: usize,
    /// `[in, out]` of every layer.
    sizes: Vec<(usize, usize)>,
    work: Workspace,
}

/// The buffers of a training step, kept so that a step allocates nothing once the first is done.
#[derive(Default)]
struct Workspace {
    /// Every hidden layer's output (after bias, ReLU and dropout); the next layer's input.
    hidden: Vec<Vec<f32>>,
    logits: Vec<f32>,
    /// d loss / d (the current layer's output), and the one below it being computed.
    delta: Vec<f32>,
    delta_below: Vec<f32>,
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held: usize = self.hidden.iter().map(Vec::capacity).sum::<usize>()
            + self.logits.capacity()
            + self.delta.capacity()
            + self.delta_below.capacity();
        write!(f, "Workspace({held} values)")
    }
}

impl Mlp {
    pub fn new(
        params: &mut Params,
        rng: &mut Rng,
        input: usize,
        hidden: &[u32],
        classes: usize,
        dropout: f64,
    ) -> Result<Self> {
        let mut sizes = vec![input];
        sizes.extend(hidden.iter().map(|&h| h as usize));
        sizes.push(classes);
        let first_param = params.len();
        let layers = sizes
            .windows(2)
            .enumerate()
            .map(|(i, w)| Linear::new(params, rng, &format!("fc{i}"), w[0], w[1]))
            .collect::<Result<Vec<_>>>()?;
        let sizes = sizes.windows(2).map(|w| (w[0], w[1])).collect();
        Ok(Self {
            layers,
            dropout,
            first_param,
            sizes,
            work: Workspace::default(),
        })
    }

    /// Forward keeping every activation, then backward with two products per layer, the weight
    /// gradients written straight into `grads`; with `input_grad`, also the gradient of the input
    /// (a CNN's head passes it on to its convolutions).
    pub(super) fn backward(
        &mut self,
        params: &Params,
        input: &[f32],
        targets: &[u32],
        rng: &mut Rng,
        grads: &mut Vec<Vec<f32>>,
        mut input_grad: Option<&mut Vec<f32>>,
    ) -> Result<BatchLoss> {
        let layers = self.sizes.len();
        let (Some(&(features, _)), Some(&(_, classes))) = (self.sizes.first(), self.sizes.last())
        else {
            invalid!("an MLP needs a layer")
        };
        let batch = targets.len();
        if input.len() != batch * features {
            invalid!(
                "a batch of {batch} samples of {features} features needs {} values, not {}",
                batch * features,
                input.len()
            );
        }
        if let Some(&bad) = targets.iter().find(|&&t| t as usize >= classes) {
            invalid!("label {bad} is out of range for {classes} classes");
        }
        let first = self.first_param;
        let weight = |i: usize| &params.values[first + 2 * i];
        let bias = |i: usize| &params.values[first + 2 * i + 1];
        let work = &mut self.work;
        work.hidden.resize_with(layers - 1, Vec::new);

        for (i, &(fan_in, fan_out)) in self.sizes.iter().enumerate() {
            let (below, rest) = work.hidden.split_at_mut(i);
            let x = if i == 0 { input } else { &below[i - 1] };
            let last = i + 1 == layers;
            let out = if last { &mut work.logits } else { &mut rest[0] };
            out.resize(batch * fan_out, 0.0);
            matmul(
                out,
                MatRef::row_major(x, batch, fan_in),
                MatRef::row_major(weight(i), fan_in, fan_out),
                false,
            );
            if last {
                for row in out.chunks_exact_mut(fan_out) {
                    for (v, b) in row.iter_mut().zip(bias(i)) {
                        *v += b;
                    }
                }
            } else {
                activate(out, bias(i), self.dropout, rng);
            }
        }

        work.delta.resize(batch * classes, 0.0);
        let loss = softmax_cross_entropy(&work.logits, targets, classes, &mut work.delta);
        // A hidden unit passed its gradient on iff its output is positive: ReLU let it through and
        // dropout kept it (scaled by 1/keep).
        let gate = if self.dropout > 0.0 {
            1.0 / (1.0 - self.dropout) as f32
        } else {
            1.0
        };
        grads.resize_with(params.len(), Vec::new);
        for (i, g) in grads.iter_mut().enumerate() {
            if i < first || i >= first + 2 * layers {
                // Not this model's (nothing else registers parameters today).
                g.clear();
                g.resize(params.values[i].len(), 0.0);
            }
        }
        for (i, &(fan_in, fan_out)) in self.sizes.iter().enumerate().rev() {
            let x = if i == 0 { input } else { &work.hidden[i - 1] };
            let delta = MatRef::row_major(&work.delta, batch, fan_out);
            let weight_grad = &mut grads[first + 2 * i];
            weight_grad.resize(fan_in * fan_out, 0.0);
            matmul(
                weight_grad,
                MatRef::row_major(x, batch, fan_in).t(),
                delta,
                false,
            );
            let bias_grad = &mut grads[first + 2 * i + 1];
            bias_grad.resize(fan_out, 0.0);
            column_sums(&work.delta, fan_out, bias_grad);
            if i > 0 {
                work.delta_below.resize(batch * fan_in, 0.0);
                matmul(
                    &mut work.delta_below,
                    delta,
                    MatRef::row_major(weight(i), fan_in, fan_out).t(),
                    false,
                );
                gate_by(&mut work.delta_below, &work.hidden[i - 1], gate);
                std::mem::swap(&mut work.delta, &mut work.delta_below);
            } else if let Some(input_grad) = input_grad.as_deref_mut() {
                input_grad.resize(batch * fan_in, 0.0);
                matmul(
                    input_grad,
                    delta,
                    MatRef::row_major(weight(i), fan_in, fan_out).t(),
                    false,
                );
            }
        }
        Ok(loss)
    }
}

/// A hidden layer's output from its product: `max(z + bias, 0)`, then inverted dropout.
fn activate(z: &mut [f32], bias: &[f32], dropout: f64, rng: &mut Rng) {
    let cols = bias.len();
    if dropout > 0.0 {
        let keep = (1.0 - dropout) as f32;
        let scale = 1.0 / keep;
        // One draw per value in row-major order, the same draws as `dropout` on the whole layer, so
        // this pass stays on one thread.
        for row in z.chunks_exact_mut(cols) {
            for (v, b) in row.iter_mut().zip(bias) {
                let kept = rng.uniform() < keep;
                let pre = *v + b;
                *v = if kept && pre > 0.0 { pre * scale } else { 0.0 };
            }
        }
        return;
    }
    let rows_per_piece = (PIECE / cols.max(1)).max(1);
    z.par_chunks_mut(rows_per_piece * cols)
        .for_each(|piece| bias_relu(piece, bias));
}

vectorised! {
    /// `max(z + bias, 0)` on every row.
    fn bias_relu<'a>(z: &'a mut [f32], bias: &'a [f32]) {
        for row in z.chunks_exact_mut(bias.len()) {
            for (v, b) in row.iter_mut().zip(bias) {
                let pre = *v + b;
                *v = if pre > 0.0 { pre } else { 0.0 };
            }
        }
    }
}

/// `delta ⊙ (gate where the layer's output is positive, else 0)`. Without dropout the gate is 1 and
/// this is a select, not a product: a saturated softmax makes many of these values subnormal, and
/// arithmetic on subnormals is an order of magnitude slower on x86.
fn gate_by(delta: &mut [f32], output: &[f32], gate: f32) {
    delta
        .par_chunks_mut(PIECE)
        .zip(output.par_chunks(PIECE))
        .for_each(|(delta, output)| gate_piece(delta, output, gate));
}

vectorised! {
    fn gate_piece<'a>(delta: &'a mut [f32], output: &'a [f32], gate: f32) {
        if gate == 1.0 {
            for (d, &o) in delta.iter_mut().zip(output) {
                *d = if o > 0.0 { *d } else { 0.0 };
            }
        } else {
            for (d, &o) in delta.iter_mut().zip(output) {
                *d = if o > 0.0 { *d * gate } else { 0.0 };
            }
        }
    }
}

/// The column sums of a row-major matrix, each adding the rows in order: the same on any number of
/// threads.
pub(super) fn column_sums(matrix: &[f32], cols: usize, sums: &mut [f32]) {
    const COLUMNS: usize = 256;
    sums.par_chunks_mut(COLUMNS)
        .enumerate()
        .for_each(|(block, sums)| {
            sums.fill(0.0);
            let start = block * COLUMNS;
            for row in matrix.chunks_exact(cols) {
                for (acc, v) in sums.iter_mut().zip(&row[start..]) {
                    *acc += v;
                }
            }
        });
}

impl Model for Mlp {
    fn gradients(
        &mut self,
        params: &Params,
        input: &[f32],
        targets: &[u32],
        rng: &mut Rng,
        grads: &mut Vec<Vec<f32>>,
    ) -> Option<Result<BatchLoss>> {
        Some(self.backward(params, input, targets, rng, grads, None))
    }

    fn forward(&self, input: &Tensor, train: bool, rng: &mut Rng) -> Result<Tensor> {
        let mut x = input.flatten_from(1)?;
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x)?;
            if i < last {
                x = dropout(&x.relu()?, self.dropout, train, rng)?;
            }
        }
        Ok(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::referee::assert_matches_autograd;
    use candle_core::Device;

    fn manual_and_autograd_agree(dropout: f64) {
        let device = Device::Cpu;
        let mut params = Params::new(&device);
        let mut init = Rng::seed(5);
        let mut mlp = Mlp::new(&mut params, &mut init, 12, &[16, 8], 4, dropout).expect("model");
        let x: Vec<f32> = (0..6 * 12)
            .map(|i| ((i * 37 % 17) as f32 - 8.0) / 8.0)
            .collect();
        let input = Tensor::from_slice(&x, (6, 12), &device).expect("input");
        assert_matches_autograd(&mut mlp, &params, &x, &input, &[0, 3, 1, 2, 3, 0]);
    }

    #[test]
    fn the_hand_written_mlp_backward_matches_autograd() {
        manual_and_autograd_agree(0.0);
    }

    #[test]
    fn with_dropout_the_hand_written_backward_draws_the_same_masks_as_autograd() {
        manual_and_autograd_agree(0.3);
    }

    #[test]
    fn a_batch_of_the_wrong_size_or_an_unknown_label_is_refused() {
        let mut params = Params::new(&Device::Cpu);
        let mut mlp = Mlp::new(&mut params, &mut Rng::seed(1), 4, &[3], 2, 0.0).expect("model");
        let mut grads = Vec::new();
        let mut rng = Rng::seed(0);
        let short = mlp
            .gradients(&params, &[0.0; 7], &[0, 1], &mut rng, &mut grads)
            .expect("manual");
        assert!(short.is_err_and(|e| e.to_string().contains("needs 8 values, not 7")));
        let label = mlp
            .gradients(&params, &[0.0; 8], &[0, 2], &mut rng, &mut grads)
            .expect("manual");
        assert!(label.is_err_and(|e| e.to_string().contains("label 2 is out of range")));
    }
}
