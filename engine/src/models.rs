//! The models a job spec can name, each sized from the spec and the dataset: an MLP, a LeNet-5 class CNN
//! and a character-level transformer language model. Initialisation and dropout draw from the engine's
//! own RNG. Linear weights are stored `[in, out]`.

use crate::params::Params;
use crate::rng::Rng;
use candle_core::{D, DType, Device, Result, Tensor, Var};
use drover_core::spec::ModelSpec;

/// Fails with a configuration error (candle's `bail!` would attach a backtrace to a user's mistake).
macro_rules! invalid {
    ($($arg:tt)*) => {
        return Err(candle_core::Error::Msg(format!($($arg)*)))
    };
}

/// A model: logits from inputs. Classification inputs are `[batch, …input_shape]` (f32); language
/// model inputs are `[batch, context]` token ids (u32) and the logits `[batch·context, vocab]`.
pub trait Model: std::fmt::Debug {
    fn forward(&self, input: &Tensor, train: bool, dropout: &mut Rng) -> Result<Tensor>;

    /// Loss, correct predictions and the gradient of every parameter (in `params` order) for one batch
    /// of classification, computed by a hand-written backward pass straight from the parameter buffers;
    /// `None` when the model has none (autograd is used instead).
    fn gradients(
        &self,
        _params: &Params,
        _input: &Tensor,
        _targets: &[u32],
        _rng: &mut Rng,
    ) -> Option<Result<Gradients>> {
        None
    }
}

/// What one batch's backward pass yields.
#[derive(Debug, Clone, PartialEq)]
pub struct Gradients {
    pub loss: f64,
    pub correct: usize,
    pub grads: Vec<Vec<f32>>,
}

/// Mean cross-entropy over a batch of logits `[b, c]`, the correct predictions, and d loss / d logits.
fn softmax_cross_entropy(
    logits: &[f32],
    targets: &[u32],
    classes: usize,
) -> (f64, usize, Vec<f32>) {
    let b = targets.len();
    let mut loss = 0.0f64;
    let mut correct = 0;
    let mut grad = vec![0.0f32; logits.len()];
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
        let sum: f32 = z.iter().map(|v| (v - max).exp()).sum();
        let log_sum = sum.ln();
        loss += f64::from(log_sum - (z[target as usize] - max));
        for (i, (o, v)) in out.iter_mut().zip(z).enumerate() {
            let p = (v - max).exp() / sum;
            *o = (p - if i == target as usize { 1.0 } else { 0.0 }) / b as f32;
        }
    }
    (loss / b as f64, correct, grad)
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

/// Inverted dropout with a mask from the engine's RNG.
fn dropout(x: &Tensor, p: f64, train: bool, rng: &mut Rng) -> Result<Tensor> {
    if !train || p <= 0.0 {
        return Ok(x.clone());
    }
    let keep = (1.0 - p) as f32;
    let scale = 1.0 / keep;
    let mask: Vec<f32> = (0..x.elem_count())
        .map(|_| if rng.uniform() < keep { scale } else { 0.0 })
        .collect();
    x.mul(&Tensor::from_vec(mask, x.shape(), x.device())?)
}

#[derive(Debug)]
pub struct Mlp {
    layers: Vec<Linear>,
    dropout: f64,
    /// Index in `Params` of the first layer's weight; each layer adds a weight and a bias.
    first_param: usize,
    /// `[in, out]` of every layer.
    sizes: Vec<(usize, usize)>,
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
        })
    }

    /// Forward keeping every activation and gate, then backward with two matmuls per layer.
    fn backward(
        &self,
        params: &Params,
        input: &Tensor,
        targets: &[u32],
        rng: &mut Rng,
    ) -> Result<Gradients> {
        let device = input.device();
        let layers = self.sizes.len();
        let weight = |i: usize| {
            let (fan_in, fan_out) = self.sizes[i];
            Tensor::from_slice(
                &params.values[self.first_param + 2 * i],
                (fan_in, fan_out),
                device,
            )
        };
        let weights = (0..layers).map(weight).collect::<Result<Vec<_>>>()?;
        // activations[i] is layer i's input; gates[i] is d relu·dropout of layer i's output. The bias,
        // ReLU and dropout of a layer are one pass on the host over its matmul's output.
        let mut activations = vec![input.flatten_from(1)?];
        let mut gates = Vec::with_capacity(layers);
        let mut logits = Vec::new();
        let keep = (1.0 - self.dropout) as f32;
        let scale = 1.0 / keep;
        for (i, w) in weights.iter().enumerate() {
            let Some(x) = activations.last() else { break };
            let z = x.matmul(w)?;
            let (rows, cols) = z.dims2()?;
            let mut values = z.flatten_all()?.to_vec1::<f32>()?;
            let bias = &params.values[self.first_param + 2 * i + 1];
            if i + 1 == layers {
                for row in values.chunks_exact_mut(cols) {
                    for (v, b) in row.iter_mut().zip(bias) {
                        *v += b;
                    }
                }
                logits = values;
                break;
            }
            let mut gate = vec![0.0f32; values.len()];
            for (row, gate_row) in values
                .chunks_exact_mut(cols)
                .zip(gate.chunks_exact_mut(cols))
            {
                for ((v, g), b) in row.iter_mut().zip(gate_row.iter_mut()).zip(bias) {
                    let pre = *v + b;
                    // The same draws, in the same order, as `dropout` on the whole layer.
                    let mask = if self.dropout > 0.0 {
                        if rng.uniform() < keep { scale } else { 0.0 }
                    } else {
                        1.0
                    };
                    let on = if pre > 0.0 { mask } else { 0.0 };
                    *g = on;
                    *v = pre * on;
                }
            }
            activations.push(Tensor::from_vec(values, (rows, cols), device)?);
            gates.push(Tensor::from_vec(gate, (rows, cols), device)?);
        }
        if logits.is_empty() {
            invalid!("an MLP needs a layer");
        }
        let classes = self.sizes[layers - 1].1;
        let (loss, correct, d_logits) = softmax_cross_entropy(&logits, targets, classes);
        let mut g = Tensor::from_vec(d_logits, (targets.len(), classes), device)?;
        let mut grads = vec![Vec::new(); 2 * layers];
        for i in (0..layers).rev() {
            grads[2 * i] = activations[i]
                .t()?
                .matmul(&g)?
                .flatten_all()?
                .to_vec1::<f32>()?;
            // The bias gradient sums g's rows; on the host that is one pass (candle reduces a
            // non-last dimension with strided reads).
            let (rows, cols) = g.dims2()?;
            let flat = g.flatten_all()?.to_vec1::<f32>()?;
            let mut bias_grad = vec![0.0f32; cols];
            for row in flat.chunks_exact(cols).take(rows) {
                for (acc, v) in bias_grad.iter_mut().zip(row) {
                    *acc += v;
                }
            }
            grads[2 * i + 1] = bias_grad;
            if i > 0 {
                g = g.matmul(&weights[i].t()?)?.mul(&gates[i - 1])?;
            }
        }
        Ok(Gradients {
            loss,
            correct,
            grads,
        })
    }
}

impl Model for Mlp {
    fn gradients(
        &self,
        params: &Params,
        input: &Tensor,
        targets: &[u32],
        rng: &mut Rng,
    ) -> Option<Result<Gradients>> {
        Some(self.backward(params, input, targets, rng))
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

#[derive(Debug)]
struct Conv {
    kernel: Var,
    bias: Var,
    padding: usize,
}

impl Conv {
    fn new(
        params: &mut Params,
        rng: &mut Rng,
        name: &str,
        c_in: usize,
        c_out: usize,
        k: usize,
        padding: usize,
    ) -> Result<Self> {
        let fan_in = c_in * k * k;
        let bound = 1.0 / (fan_in as f32).sqrt();
        let kernel = params.add(
            &format!("{name}.weight"),
            &[c_out, c_in, k, k],
            uniform(rng, c_out * fan_in, bound),
        )?;
        let bias = params.add(
            &format!("{name}.bias"),
            &[c_out],
            uniform(rng, c_out, bound),
        )?;
        Ok(Self {
            kernel,
            bias,
            padding,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = x.conv2d(self.kernel.as_tensor(), self.padding, 1, 1, 1)?;
        y.broadcast_add(&self.bias.as_tensor().reshape((1, (), 1, 1))?)
    }
}

/// LeNet-5 class: two convolutions, each with ReLU and 2×2 max pooling, then fully connected layers.
/// The first convolution keeps the image size (5×5 kernels on images of 28 pixels or more, 3×3 below);
/// the second is 5×5 without padding when the pooled image is at least 10 pixels (LeNet's 14 → 10), 3×3
/// with padding otherwise.
#[derive(Debug)]
pub struct Cnn {
    convs: Vec<Conv>,
    fcs: Vec<Linear>,
    dropout: f64,
}

impl Cnn {
    pub fn new(
        params: &mut Params,
        rng: &mut Rng,
        input_shape: &[usize],
        channels: &[u32],
        hidden: &[u32],
        classes: usize,
        dropout: f64,
    ) -> Result<Self> {
        let (c, mut size) = match input_shape {
            [c, h, w] if h == w => (*c, *h),
            [f] => (1, (*f as f64).sqrt() as usize),
            _ => invalid!("the CNN needs square images; the dataset's samples are {input_shape:?}"),
        };
        if size < 4 {
            invalid!("the CNN needs images of at least 4×4 pixels");
        }
        let mut convs = Vec::new();
        let mut c_in = c;
        for (i, &c_out) in channels.iter().enumerate() {
            let (k, pad) = if i == 0 {
                if size >= 28 { (5, 2) } else { (3, 1) }
            } else if size >= 10 {
                (5, 0)
            } else {
                (3, 1)
            };
            convs.push(Conv::new(
                params,
                rng,
                &format!("conv{i}"),
                c_in,
                c_out as usize,
                k,
                pad,
            )?);
            size = (size + 2 * pad + 1 - k) / 2;
            c_in = c_out as usize;
            if size == 0 {
                invalid!("too many convolutions for {input_shape:?} images");
            }
        }
        let mut sizes = vec![c_in * size * size];
        sizes.extend(hidden.iter().map(|&h| h as usize));
        sizes.push(classes);
        let fcs = sizes
            .windows(2)
            .enumerate()
            .map(|(i, w)| Linear::new(params, rng, &format!("fc{i}"), w[0], w[1]))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            convs,
            fcs,
            dropout,
        })
    }
}

impl Model for Cnn {
    fn forward(&self, input: &Tensor, train: bool, rng: &mut Rng) -> Result<Tensor> {
        let mut x = match input.dims().len() {
            4 => input.clone(),
            2 => {
                let (b, f) = input.dims2()?;
                let side = (f as f64).sqrt() as usize;
                input.reshape((b, 1, side, side))?
            }
            _ => input.unsqueeze(1)?,
        };
        for conv in &self.convs {
            x = conv.forward(&x)?.relu()?.max_pool2d(2)?;
        }
        let mut x = x.flatten_from(1)?;
        let last = self.fcs.len() - 1;
        for (i, fc) in self.fcs.iter().enumerate() {
            x = fc.forward(&x)?;
            if i < last {
                x = dropout(&x.relu()?, self.dropout, train, rng)?;
            }
        }
        Ok(x)
    }
}

#[derive(Debug)]
struct LayerNorm {
    gamma: Var,
    beta: Var,
}

impl LayerNorm {
    fn new(params: &mut Params, name: &str, d: usize) -> Result<Self> {
        Ok(Self {
            gamma: params.add(&format!("{name}.weight"), &[d], vec![1.0; d])?,
            beta: params.add(&format!("{name}.bias"), &[d], vec![0.0; d])?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mean = x.mean_keepdim(D::Minus1)?;
        let centred = x.broadcast_sub(&mean)?;
        let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = centred.broadcast_div(&(var + 1e-5)?.sqrt()?)?;
        normed
            .broadcast_mul(self.gamma.as_tensor())?
            .broadcast_add(self.beta.as_tensor())
    }
}

#[derive(Debug)]
struct Block {
    ln1: LayerNorm,
    qkv: Linear,
    proj: Linear,
    ln2: LayerNorm,
    fc: Linear,
    out: Linear,
}

/// A GPT-style character model: token and position embeddings, pre-norm blocks of causal
/// self-attention and a 4× MLP, a final norm and a linear head.
#[derive(Debug)]
pub struct CharLm {
    wte: Var,
    wpe: Var,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
    head: Linear,
    heads: usize,
    d_model: usize,
    context: usize,
    dropout: f64,
}

impl CharLm {
    #[expect(
        clippy::too_many_arguments,
        reason = "one argument per size field of the spec"
    )]
    pub fn new(
        params: &mut Params,
        rng: &mut Rng,
        vocab: usize,
        layers: usize,
        heads: usize,
        d_model: usize,
        context: usize,
        dropout: f64,
    ) -> Result<Self> {
        if heads == 0 || !d_model.is_multiple_of(heads) {
            invalid!("d_model {d_model} must be a multiple of heads {heads}");
        }
        let wte = params.add("wte", &[vocab, d_model], normal(rng, vocab * d_model, 0.02))?;
        let wpe = params.add(
            "wpe",
            &[context, d_model],
            normal(rng, context * d_model, 0.02),
        )?;
        let blocks = (0..layers)
            .map(|i| {
                Ok(Block {
                    ln1: LayerNorm::new(params, &format!("h{i}.ln1"), d_model)?,
                    qkv: Linear::normal(params, rng, &format!("h{i}.qkv"), d_model, 3 * d_model)?,
                    proj: Linear::normal(params, rng, &format!("h{i}.proj"), d_model, d_model)?,
                    ln2: LayerNorm::new(params, &format!("h{i}.ln2"), d_model)?,
                    fc: Linear::normal(params, rng, &format!("h{i}.fc"), d_model, 4 * d_model)?,
                    out: Linear::normal(params, rng, &format!("h{i}.out"), 4 * d_model, d_model)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let ln_f = LayerNorm::new(params, "ln_f", d_model)?;
        let head = Linear::normal(params, rng, "head", d_model, vocab)?;
        Ok(Self {
            wte,
            wpe,
            blocks,
            ln_f,
            head,
            heads,
            d_model,
            context,
            dropout,
        })
    }

    fn attention(&self, block: &Block, x: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (b, t, d) = x.dims3()?;
        let hd = d / self.heads;
        let qkv = block.qkv.forward(x)?.reshape((b, t, 3, self.heads, hd))?;
        let q = qkv
            .narrow(2, 0, 1)?
            .squeeze(2)?
            .transpose(1, 2)?
            .contiguous()?;
        let k = qkv
            .narrow(2, 1, 1)?
            .squeeze(2)?
            .transpose(1, 2)?
            .contiguous()?;
        let v = qkv
            .narrow(2, 2, 1)?
            .squeeze(2)?
            .transpose(1, 2)?
            .contiguous()?;
        let scores = (q.matmul(&k.t()?.contiguous()?)? * (1.0 / (hd as f64).sqrt()))?;
        let weights = candle_nn::ops::softmax(&scores.broadcast_add(mask)?, D::Minus1)?;
        let y = weights
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b, t, d))?;
        block.proj.forward(&y)
    }
}

impl Model for CharLm {
    fn forward(&self, input: &Tensor, train: bool, rng: &mut Rng) -> Result<Tensor> {
        let (b, t) = input.dims2()?;
        if t > self.context {
            invalid!(
                "sequence of {t} tokens exceeds the context of {}",
                self.context
            );
        }
        let tokens = self
            .wte
            .as_tensor()
            .embedding(&input.flatten_all()?)?
            .reshape((b, t, self.d_model))?;
        let positions = self.wpe.as_tensor().narrow(0, 0, t)?;
        let mut x = dropout(&tokens.broadcast_add(&positions)?, self.dropout, train, rng)?;
        let mask: Vec<f32> = (0..t * t)
            .map(|i| if i % t > i / t { -1e9 } else { 0.0 })
            .collect();
        let mask = Tensor::from_vec(mask, (t, t), input.device())?;
        for block in &self.blocks {
            let attended = self.attention(block, &block.ln1.forward(&x)?, &mask)?;
            x = (x + dropout(&attended, self.dropout, train, rng)?)?;
            let hidden = block.fc.forward(&block.ln2.forward(&x)?)?.gelu()?;
            x = (x + dropout(&block.out.forward(&hidden)?, self.dropout, train, rng)?)?;
        }
        let logits = self.head.forward(&self.ln_f.forward(&x)?)?;
        logits.reshape((b * t, ()))
    }
}

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

/// The input tensor for a classification batch.
pub fn class_batch(
    x: &[f32],
    rows: &[u32],
    dim: usize,
    input_shape: &[usize],
    device: &Device,
) -> Result<Tensor> {
    let mut data = Vec::with_capacity(rows.len() * dim);
    for &r in rows {
        data.extend_from_slice(&x[r as usize * dim..(r as usize + 1) * dim]);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hand_written_mlp_backward_matches_autograd() {
        let device = Device::Cpu;
        let mut params = Params::new(&device);
        let mut init = Rng::seed(5);
        let mlp = Mlp::new(&mut params, &mut init, 12, &[16, 8], 4, 0.0).expect("model");
        let x: Vec<f32> = (0..6 * 12)
            .map(|i| ((i * 37 % 17) as f32 - 8.0) / 8.0)
            .collect();
        let input = Tensor::from_vec(x, (6, 12), &device).expect("input");
        let targets = vec![0u32, 3, 1, 2, 3, 0];
        let manual = mlp
            .gradients(&params, &input, &targets, &mut Rng::seed(0))
            .expect("an MLP has a manual backward")
            .expect("backward");
        let logits = mlp
            .forward(&input, true, &mut Rng::seed(0))
            .expect("forward");
        let target_tensor = Tensor::from_vec(targets.clone(), 6, &device).expect("targets");
        let loss = candle_nn::loss::cross_entropy(&logits, &target_tensor).expect("loss");
        let auto = params
            .gradients(&loss.backward().expect("backward"))
            .expect("grads");
        let auto_loss = f64::from(loss.to_scalar::<f32>().expect("scalar"));
        assert!(
            (manual.loss - auto_loss).abs() < 1e-5,
            "{} vs {auto_loss}",
            manual.loss
        );
        assert_eq!(manual.grads.len(), auto.len());
        for (name, (m, a)) in params.names.iter().zip(manual.grads.iter().zip(&auto)) {
            for (x, y) in m.iter().zip(a) {
                assert!((x - y).abs() <= 1e-5 + 1e-4 * y.abs(), "{name}: {x} vs {y}");
            }
        }
    }
}
