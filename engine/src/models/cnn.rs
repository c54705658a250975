//! The LeNet-5 class convolutional network. On the host its training step is written by hand
//! (`conv.rs` for the convolutions, the MLP's for the fully connected head), straight on the
//! parameter buffers; elsewhere (a GPU) it goes through candle's autograd.

use super::error::invalid;
use super::layers::uniform;
use super::loss::BatchLoss;
use super::model::Model;
use crate::models::conv::{self, Geometry, LayerWork};
use crate::models::mlp::Mlp;
use crate::params::Params;
use crate::rng::Rng;
use candle_core::{Result, Tensor, Var};

#[derive(Debug)]
struct Conv {
    kernel: Var,
    bias: Var,
    geometry: Geometry,
    im2col: Im2col,
}

/// How a layer builds its im2col matrix (row `c·k² + i·k + j`, column `y·conv + x`) in candle
/// operations, chosen by what its gradient costs on a GPU.
#[derive(Debug)]
enum Im2col {
    /// A gather: for every value of an image's matrix, the index of the input value it copies in
    /// the image flattened with one zero appended (the index of that zero stands for the padding).
    /// u32, on the model's device. Its gradient is candle's `index_add`, which on CUDA runs one
    /// thread per image over every index, so only a layer whose input needs no gradient (the
    /// first, on the data) or whose selection would be too large takes it.
    Gather(Tensor),
    /// A product of each channel's pixels `[B·C, size²]` with a 0/1 matrix `[size², k²·conv²]` that
    /// copies every pixel to the places it takes in that channel's rows (padding is a column of
    /// zeros): the gradient is the product with its transpose, one gemm on cuBLAS. Multiplying by 1
    /// and adding zeros is exact, so the values are the gather's.
    Select(Tensor),
}

/// The most entries (`size²·k²·conv²`) a layer's selection matrix may have: 4 Mi (16 MiB of f32;
/// the LeNet-5's second layer has 196·25·100 = 490,000). It costs `size²` times the gather's arithmetic, which past
/// this is more than a gemm hides.
const MAX_SELECTION: usize = 1 << 22;

impl Conv {
    /// `input_grad`: whether the layer's input needs a gradient (every layer but the first).
    fn new(
        params: &mut Params,
        rng: &mut Rng,
        name: &str,
        geometry: Geometry,
        input_grad: bool,
    ) -> Result<Self> {
        let Geometry {
            channels: c_in,
            out: c_out,
            k,
            pad,
            size,
        } = geometry;
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
        let conv = geometry.conv_size();
        // The pixel of the channel that tap (i, j) of output position (y, x) reads, if any.
        let source = |i: usize, j: usize, y: usize, x: usize| {
            let (sy, sx) = ((y + i).wrapping_sub(pad), (x + j).wrapping_sub(pad));
            (sy < size && sx < size).then(|| sy * size + sx)
        };
        let columns = k * k * conv * conv;
        let im2col = if input_grad && size * size * columns <= MAX_SELECTION {
            let mut select = vec![0f32; size * size * columns];
            for (column, (i, j, y, x)) in taps(k, conv).enumerate() {
                if let Some(pixel) = source(i, j, y, x) {
                    select[pixel * columns + column] = 1.0;
                }
            }
            Im2col::Select(Tensor::from_vec(
                select,
                (size * size, columns),
                params.device(),
            )?)
        } else {
            let zero = (c_in * size * size) as u32;
            let mut gather = Vec::with_capacity(c_in * columns);
            for c in 0..c_in {
                gather.extend(taps(k, conv).map(|(i, j, y, x)| {
                    source(i, j, y, x).map_or(zero, |pixel| (c * size * size + pixel) as u32)
                }));
            }
            Im2col::Gather(Tensor::from_vec(gather, c_in * columns, params.device())?)
        };
        Ok(Self {
            kernel,
            bias,
            geometry,
            im2col,
        })
    }

    /// The convolution as im2col (a gather or a selection product) and one product, in candle
    /// operations, so that its gradients are theirs: candle 0.9's `conv2d` computes a wrong kernel
    /// gradient on CUDA, and a wrong result on the CPU for some shapes this model builds (3×3
    /// kernels on 4×4 images of several channels). Tests hold this and the host's hand-written
    /// step to a direct loop (`conv.rs`) and to each other, on the CPU and on a GPU.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let g = self.geometry;
        let b = x.dim(0)?;
        let (patch, conv, pixels) = (g.channels * g.k * g.k, g.conv_size(), g.size * g.size);
        let cols = match &self.im2col {
            Im2col::Select(select) => x.reshape((b * g.channels, pixels))?.matmul(select)?,
            Im2col::Gather(taps) => {
                let flat = x.reshape((b, g.channels * pixels))?;
                Tensor::cat(&[&flat, &flat.narrow(1, 0, 1)?.zeros_like()?], 1)?
                    .index_select(taps, 1)?
            }
        }
        .reshape((b, patch, conv * conv))?;
        let y = self
            .kernel
            .as_tensor()
            .reshape((g.out, patch))?
            .broadcast_matmul(&cols)?
            .reshape((b, g.out, conv, conv))?;
        y.broadcast_add(&self.bias.as_tensor().reshape((1, (), 1, 1))?)
    }
}

/// A channel's im2col rows in order: every tap `(i, j)` of the `k×k` kernel, and within it every
/// output position `(y, x)` of the `conv×conv` output.
fn taps(k: usize, conv: usize) -> impl Iterator<Item = (usize, usize, usize, usize)> {
    (0..k * k * conv * conv).map(move |n| {
        let (tap, position) = (n / (conv * conv), n % (conv * conv));
        (tap / k, tap % k, position / conv, position % conv)
    })
}

/// 2×2 max pooling (floor) whose gradient goes to each window's maximum. candle's `max_pool2d`
/// scales that gradient by the share of the window holding the maximum (¼ for a single one), so the
/// pooling is a reshape and two maxima, whose gradient is the usual one.
fn pool2(x: &Tensor) -> Result<Tensor> {
    let (b, c, h, w) = x.dims4()?;
    let (h2, w2) = (h / 2, w / 2);
    let x = if h % 2 == 0 && w % 2 == 0 {
        x.contiguous()?
    } else {
        x.narrow(2, 0, 2 * h2)?.narrow(3, 0, 2 * w2)?.contiguous()?
    };
    x.reshape((b, c, h2, 2, w2, 2))?.max(5)?.max(3)
}

/// LeNet-5 class: two convolutions, each with ReLU and 2×2 max pooling, then fully connected layers.
/// The first convolution keeps the image size (5×5 kernels on images of 28 pixels or more, 3×3 below);
/// the second is 5×5 without padding when the pooled image is at least 10 pixels (LeNet's 14 → 10), 3×3
/// with padding otherwise.
#[derive(Debug)]
pub struct Cnn {
    convs: Vec<Conv>,
    /// The fully connected layers: an MLP on the flattened pooled features.
    head: Mlp,
    /// Index in `Params` of the first convolution's kernel; each layer adds a kernel and a bias.
    first_param: usize,
    work: Workspace,
}

/// A step's buffers, kept so that a step allocates nothing once the first is done.
#[derive(Debug, Default)]
struct Workspace {
    layers: Vec<LayerWork>,
    /// The batch channel-major, `[C, B, H, W]`.
    input: Vec<f32>,
    /// The last pooled output as rows, `[B, C·h·w]`, and its gradient.
    flat: Vec<f32>,
    dflat: Vec<f32>,
    /// The gradient of the current layer's pooled output, channel-major.
    dpooled: Vec<f32>,
    dactivated: Vec<f32>,
    dcols: Vec<f32>,
    dinput: Vec<f32>,
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
            [f] => {
                let side = (*f as f64).sqrt().round() as usize;
                if side * side != *f {
                    invalid!(
                        "the CNN needs square images; the dataset's samples have {f} features, \
                         not a square number"
                    );
                }
                (1, side)
            }
            _ => invalid!("the CNN needs square images; the dataset's samples are {input_shape:?}"),
        };
        if size < 4 {
            invalid!("the CNN needs images of at least 4×4 pixels");
        }
        let first_param = params.len();
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
            let layer = Geometry {
                channels: c_in,
                out: c_out as usize,
                k,
                pad,
                size,
            };
            convs.push(Conv::new(params, rng, &format!("conv{i}"), layer, i > 0)?);
            size = layer.pooled();
            c_in = c_out as usize;
            if size == 0 {
                invalid!("too many convolutions for {input_shape:?} images");
            }
        }
        let head = Mlp::new(params, rng, c_in * size * size, hidden, classes, dropout)?;
        Ok(Self {
            convs,
            head,
            first_param,
            work: Workspace::default(),
        })
    }

    /// The convolutions forward on the host, the head's forward and backward (the MLP's), then the
    /// convolutions backward, every gradient written into `grads`.
    fn backward(
        &mut self,
        params: &Params,
        input: &[f32],
        targets: &[u32],
        rng: &mut Rng,
        grads: &mut Vec<Vec<f32>>,
    ) -> Result<BatchLoss> {
        let batch = targets.len();
        let Some(first) = self.convs.first().map(|c| c.geometry) else {
            invalid!("a CNN needs a convolution")
        };
        let pixels = first.size * first.size;
        if input.len() != batch * first.channels * pixels {
            invalid!(
                "a batch of {batch} images of {}×{}×{} needs {} values, not {}",
                first.channels,
                first.size,
                first.size,
                batch * first.channels * pixels,
                input.len()
            );
        }
        let work = &mut self.work;
        work.layers
            .resize_with(self.convs.len(), LayerWork::default);
        conv::transpose_batch(input, batch, first.channels, &mut work.input);
        for (i, g) in self.convs.iter().map(|c| &c.geometry).enumerate() {
            let (below, rest) = work.layers.split_at_mut(i);
            let x = match below.last() {
                Some(previous) => &previous.pooled,
                None => &work.input,
            };
            let kernel = &params.values[self.first_param + 2 * i];
            let bias = &params.values[self.first_param + 2 * i + 1];
            conv::forward(x, kernel, bias, g, batch, &mut rest[0]);
        }
        let last = self.convs.len() - 1;
        let out = self.convs[last].geometry.out;
        conv::transpose_batch(&work.layers[last].pooled, out, batch, &mut work.flat);
        let loss = self.head.backward(
            params,
            &work.flat,
            targets,
            rng,
            grads,
            Some(&mut work.dflat),
        )?;
        conv::transpose_batch(&work.dflat, batch, out, &mut work.dpooled);
        for (i, g) in self.convs.iter().map(|c| &c.geometry).enumerate().rev() {
            let kernel = &params.values[self.first_param + 2 * i];
            let (kernel_grad, bias_grad) = match &mut grads[self.first_param + 2 * i..] {
                [k, b, ..] => (k, b),
                _ => invalid!("gradients for {} parameters", grads.len()),
            };
            conv::backward(
                &work.dpooled,
                kernel,
                g,
                batch,
                &mut work.layers[i],
                &mut work.dactivated,
                kernel_grad,
                bias_grad,
                &mut work.dcols,
                (i > 0).then_some(&mut work.dinput),
            );
            if i > 0 {
                std::mem::swap(&mut work.dpooled, &mut work.dinput);
            }
        }
        Ok(loss)
    }

    /// The batch as images `[B, C, H, W]`.
    fn images(input: &Tensor) -> Result<Tensor> {
        match input.dims().len() {
            4 => Ok(input.clone()),
            2 => {
                let (b, f) = input.dims2()?;
                let side = (f as f64).sqrt() as usize;
                input.reshape((b, 1, side, side))
            }
            _ => input.unsqueeze(1),
        }
    }

    /// The convolutions' output for a batch on the host, flattened `[B, C·h·w]`: what the training
    /// step computes, for evaluation.
    fn host_features(&self, images: &Tensor) -> Result<Tensor> {
        let batch = images.dim(0)?;
        let rows = images.flatten_all()?.to_vec1::<f32>()?;
        let Some(first) = self.convs.first().map(|c| c.geometry) else {
            invalid!("a CNN needs a convolution")
        };
        let mut input = Vec::new();
        conv::transpose_batch(&rows, batch, first.channels, &mut input);
        let mut work = LayerWork::default();
        for layer in &self.convs {
            let g = &layer.geometry;
            let kernel = layer.kernel.as_tensor().flatten_all()?.to_vec1::<f32>()?;
            let bias = layer.bias.as_tensor().to_vec1::<f32>()?;
            conv::forward(&input, &kernel, &bias, g, batch, &mut work);
            std::mem::swap(&mut input, &mut work.pooled);
        }
        let channels = self.convs.last().map_or(0, |c| c.geometry.out);
        let mut flat = Vec::new();
        conv::transpose_batch(&input, channels, batch, &mut flat);
        let features = flat.len() / batch.max(1);
        Tensor::from_vec(flat, (batch, features), images.device())
    }
}

impl Model for Cnn {
    /// Through candle (autograd, any device). Training on the host takes [`Model::gradients`]
    /// instead, and evaluation there [`Model::evaluate`].
    fn forward(&self, input: &Tensor, train: bool, rng: &mut Rng) -> Result<Tensor> {
        let mut x = Self::images(input)?;
        for conv in &self.convs {
            x = pool2(&conv.forward(&x)?.relu()?)?;
        }
        self.head.forward(&x, train, rng)
    }

    /// On the host, the hand-written convolutions the training step uses (faster there than
    /// candle's operations, and the same numbers as training sees).
    fn evaluate(&self, input: &Tensor) -> Result<Tensor> {
        if !input.device().is_cpu() {
            return self.forward(input, false, &mut Rng::seed(0));
        }
        let features = self.host_features(&Self::images(input)?)?;
        self.head.forward(&features, false, &mut Rng::seed(0))
    }

    fn gradients(
        &mut self,
        params: &Params,
        input: &[f32],
        targets: &[u32],
        rng: &mut Rng,
        grads: &mut Vec<Vec<f32>>,
    ) -> Option<Result<BatchLoss>> {
        Some(self.backward(params, input, targets, rng, grads))
    }
}

#[cfg(test)]
mod tests;
