//! The models a job spec can name, each sized from the spec and the dataset: an MLP, a LeNet-5 class CNN
//! and a character-level transformer language model. Initialisation and dropout draw from the engine's
//! own RNG. Linear weights are stored `[in, out]`.

use crate::params::Params;
use crate::rng::Rng;
use candle_core::{D, DType, Device, Result, Tensor, Var};
use drover_core::spec::ModelSpec;

/// A model: logits from inputs. Classification inputs are `[batch, …input_shape]` (f32); language
/// model inputs are `[batch, context]` token ids (u32) and the logits `[batch·context, vocab]`.
pub trait Model: std::fmt::Debug {
    fn forward(&self, input: &Tensor, train: bool, dropout: &mut Rng) -> Result<Tensor>;
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
        let layers = sizes
            .windows(2)
            .enumerate()
            .map(|(i, w)| Linear::new(params, rng, &format!("fc{i}"), w[0], w[1]))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { layers, dropout })
    }
}

impl Model for Mlp {
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
            _ => candle_core::bail!(
                "the CNN needs square images; the dataset's samples are {input_shape:?}"
            ),
        };
        if size < 4 {
            candle_core::bail!("the CNN needs images of at least 4×4 pixels");
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
                candle_core::bail!("too many convolutions for {input_shape:?} images");
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
            candle_core::bail!("d_model {d_model} must be a multiple of heads {heads}");
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
            candle_core::bail!(
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
            candle_core::bail!("the charlm model needs a text dataset")
        }
        (_, Io::Tokens { .. }) => candle_core::bail!("a text dataset needs the charlm model"),
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
