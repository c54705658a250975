//! The convolution layers' training step on the host, by hand: a convolution is an im2col and one
//! matrix product over the whole batch (on the gemm kernels, `linalg`), bias and ReLU are one pass
//! over its output, 2×2 max pooling keeps where each maximum came from, and the backward pass is the
//! same pieces in reverse (col2im only where an input gradient is needed: never for the first layer,
//! whose input is the data). Activations are kept channel-major over the batch (`[C, B, H, W]`), so
//! every product's output is already the next layer's layout; every buffer is kept from step to step.
//!
//! Every loop writes each output from one thread, in a fixed order, so a step gives the same bits on
//! any number of threads (exact resume relies on it).

use crate::linalg::{MatRef, matmul};
use crate::models::vector::{sum, vectorised};
use rayon::prelude::*;

/// One convolution layer's geometry: `channels` → `out` channels, `k`×`k` kernels, `pad`, stride 1,
/// on `size`×`size` inputs; then 2×2 max pooling (floor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub channels: usize,
    pub out: usize,
    pub k: usize,
    pub pad: usize,
    pub size: usize,
}

impl Geometry {
    /// The convolution's output side.
    pub fn conv_size(&self) -> usize {
        self.size + 2 * self.pad + 1 - self.k
    }

    /// The pooled side.
    pub fn pooled(&self) -> usize {
        self.conv_size() / 2
    }

    /// Values in one column of the im2col matrix: `channels·k·k`.
    fn patch(&self) -> usize {
        self.channels * self.k * self.k
    }
}

/// A layer's buffers, kept between the forward and backward passes and from step to step.
#[derive(Debug, Default)]
pub struct LayerWork {
    /// The im2col matrix `[patch, B·P]`.
    cols: Vec<f32>,
    /// The convolution's output after bias and ReLU, `[out, B, conv, conv]`.
    activated: Vec<f32>,
    /// The pooled output `[out, B, pooled, pooled]`: the next layer's input.
    pub pooled: Vec<f32>,
    /// For every pooled value, the index in `activated` of the maximum it took.
    argmax: Vec<u32>,
    /// The kernel gradient's partial sums, one per block of positions.
    partials: Vec<f32>,
}

/// The blocks of batch positions a kernel gradient is summed over, in parallel: fixed, so that the
/// sum's order does not depend on the thread count.
const KERNEL_GRADIENT_BLOCKS: usize = 8;

/// im2col: column `b·P + y·W' + x` holds the patch under output position `(y, x)` of image `b`,
/// row `c·k² + i·k + j` the input value at `(c, y + i − pad, x + j − pad)` (0 outside).
fn im2col(input: &[f32], g: &Geometry, batch: usize, cols: &mut Vec<f32>) {
    let (size, conv, k, pad) = (g.size, g.conv_size(), g.k, g.pad);
    let positions = batch * conv * conv;
    cols.resize(g.patch() * positions, 0.0);
    cols.par_chunks_mut(positions)
        .enumerate()
        .for_each(|(row, out)| {
            let (c, i, j) = (row / (k * k), row / k % k, row % k);
            // Output columns x read input column x + j − pad: those in range are one run.
            let (x0, x1) = valid(j, pad, size, conv);
            for b in 0..batch {
                let image = &input[(c * batch + b) * size * size..][..size * size];
                let out = &mut out[b * conv * conv..][..conv * conv];
                for (y, out) in out.chunks_exact_mut(conv).enumerate() {
                    let sy = (y + i).wrapping_sub(pad);
                    if sy >= size || x0 >= x1 {
                        out.fill(0.0);
                        continue;
                    }
                    let line = &image[sy * size..][..size];
                    out[..x0].fill(0.0);
                    out[x0..x1].copy_from_slice(&line[x0 + j - pad..x1 + j - pad]);
                    out[x1..].fill(0.0);
                }
            }
        });
}

/// The output columns `x0..x1` whose input column `x + j − pad` lies in `0..size`.
fn valid(j: usize, pad: usize, size: usize, conv: usize) -> (usize, usize) {
    let x0 = pad.saturating_sub(j).min(conv);
    let x1 = (size + pad).saturating_sub(j).min(conv).max(x0);
    (x0, x1)
}

/// col2im: the input gradient `[channels, B, size, size]` from the im2col matrix's gradient, each
/// input value summing the patches that read it in a fixed order.
fn col2im(dcols: &[f32], g: &Geometry, batch: usize, dinput: &mut Vec<f32>) {
    let (size, conv, k) = (g.size, g.conv_size(), g.k);
    let positions = batch * conv * conv;
    dinput.resize(g.channels * batch * size * size, 0.0);
    dinput
        .par_chunks_mut(size * size)
        .enumerate()
        .for_each(|(cb, image)| {
            let (c, b) = (cb / batch, cb % batch);
            let first = c * k * k * positions + b * conv * conv;
            col2im_image(&dcols[first..], positions, g, image);
        });
}

vectorised! {
    /// One image of [`col2im`]: `dcols` starts at the image's first position of its channel's
    /// first row; rows are `positions` apart.
    fn col2im_image<'a>(dcols: &'a [f32], positions: usize, g: &'a Geometry, image: &'a mut [f32]) {
        let (size, conv, k, pad) = (g.size, g.conv_size(), g.k, g.pad);
        image.fill(0.0);
        for i in 0..k {
            for j in 0..k {
                let row = &dcols[(i * k + j) * positions..][..conv * conv];
                let (x0, x1) = valid(j, pad, size, conv);
                if x0 >= x1 {
                    continue;
                }
                for (y, row) in row.chunks_exact(conv).enumerate() {
                    let sy = (y + i).wrapping_sub(pad);
                    if sy >= size {
                        continue;
                    }
                    let line = &mut image[sy * size + x0 + j - pad..][..x1 - x0];
                    for (v, d) in line.iter_mut().zip(&row[x0..x1]) {
                        *v += d;
                    }
                }
            }
        }
    }
}

/// The layer's forward pass: convolution, bias, ReLU and pooling into `work.pooled`.
pub fn forward(
    input: &[f32],
    kernel: &[f32],
    bias: &[f32],
    g: &Geometry,
    batch: usize,
    work: &mut LayerWork,
) {
    let conv = g.conv_size();
    let positions = batch * conv * conv;
    im2col(input, g, batch, &mut work.cols);
    work.activated.resize(g.out * positions, 0.0);
    matmul(
        &mut work.activated,
        MatRef::row_major(kernel, g.out, g.patch()),
        MatRef::row_major(&work.cols, g.patch(), positions),
        false,
    );
    work.activated
        .par_chunks_mut(positions)
        .zip(bias)
        .for_each(|(channel, &b)| shifted_relu(channel, b));
    pool(
        &work.activated,
        g,
        batch,
        &mut work.pooled,
        &mut work.argmax,
    );
}

/// 2×2 max pooling of `[out, B, conv, conv]` (floor), remembering the first maximum of each window.
fn pool(
    activated: &[f32],
    g: &Geometry,
    batch: usize,
    pooled: &mut Vec<f32>,
    argmax: &mut Vec<u32>,
) {
    let (conv, half) = (g.conv_size(), g.pooled());
    pooled.resize(g.out * batch * half * half, 0.0);
    argmax.resize(pooled.len(), 0);
    pooled
        .par_chunks_mut(half * half)
        .zip(argmax.par_chunks_mut(half * half))
        .enumerate()
        .for_each(|(image, (out, at))| {
            let base = image * conv * conv;
            for y in 0..half {
                for x in 0..half {
                    let first = base + 2 * y * conv + 2 * x;
                    let mut best = first;
                    for candidate in [first + 1, first + conv, first + conv + 1] {
                        if activated[candidate] > activated[best] {
                            best = candidate;
                        }
                    }
                    out[y * half + x] = activated[best];
                    at[y * half + x] = best as u32;
                }
            }
        });
}

/// The layer's backward pass from the gradient of its pooled output: the kernel's and the bias's
/// gradients, and, when `dinput` is given, the gradient of its input. `dpooled` is used as scratch.
#[expect(
    clippy::too_many_arguments,
    reason = "a layer's parameters, buffers and gradients"
)]
pub fn backward(
    dpooled: &[f32],
    kernel: &[f32],
    g: &Geometry,
    batch: usize,
    work: &mut LayerWork,
    dactivated: &mut Vec<f32>,
    kernel_grad: &mut Vec<f32>,
    bias_grad: &mut Vec<f32>,
    dcols: &mut Vec<f32>,
    dinput: Option<&mut Vec<f32>>,
) {
    let conv = g.conv_size();
    let positions = batch * conv * conv;
    // Each channel's pooled gradients go to their windows' maxima, where ReLU let the value through.
    dactivated.resize(g.out * positions, 0.0);
    let per_channel = batch * g.pooled() * g.pooled();
    dactivated
        .par_chunks_mut(positions)
        .enumerate()
        .for_each(|(channel, d)| {
            d.fill(0.0);
            let range = channel * per_channel..(channel + 1) * per_channel;
            for (&grad, &at) in dpooled[range.clone()].iter().zip(&work.argmax[range]) {
                let at = at as usize - channel * positions;
                if work.activated[channel * positions + at] > 0.0 {
                    d[at] = grad;
                }
            }
        });
    bias_grad.resize(g.out, 0.0);
    bias_grad
        .par_iter_mut()
        .zip(dactivated.par_chunks(positions))
        .for_each(|(b, d)| *b = channel_sum(d));
    // The kernel's gradient sums over every position of the batch, a long inner dimension for a
    // small output that one product would leave to one thread: a fixed number of blocks of positions
    // are multiplied in parallel and their products added in order (the same bits on any number of
    // threads).
    let kernel_values = g.out * g.patch();
    let block = positions.div_ceil(KERNEL_GRADIENT_BLOCKS);
    work.partials
        .resize(KERNEL_GRADIENT_BLOCKS * kernel_values, 0.0);
    work.partials
        .par_chunks_mut(kernel_values)
        .enumerate()
        .for_each(|(index, partial)| {
            let from = (index * block).min(positions);
            let len = block.min(positions - from);
            matmul(
                partial,
                MatRef::columns(dactivated, g.out, positions, from, len),
                MatRef::columns(&work.cols, g.patch(), positions, from, len).t(),
                false,
            );
        });
    kernel_grad.clear();
    kernel_grad.resize(kernel_values, 0.0);
    for partial in work.partials.chunks_exact(kernel_values) {
        for (sum, v) in kernel_grad.iter_mut().zip(partial) {
            *sum += v;
        }
    }
    if let Some(dinput) = dinput {
        dcols.resize(g.patch() * positions, 0.0);
        matmul(
            dcols,
            MatRef::row_major(kernel, g.out, g.patch()).t(),
            MatRef::row_major(dactivated, g.out, positions),
            false,
        );
        col2im(dcols, g, batch, dinput);
    }
}

/// `[B, C·S]` rows (a batch as the data holds it) to channel-major `[C, B, S]`, or back: `from` is
/// `[rows, cols, S]`, `to` becomes `[cols, rows, S]`.
pub fn transpose_batch(from: &[f32], rows: usize, cols: usize, to: &mut Vec<f32>) {
    to.resize(from.len(), 0.0);
    if rows <= 1 || cols <= 1 {
        to.copy_from_slice(from);
        return;
    }
    let per = from.len() / (rows * cols);
    to.par_chunks_mut(rows * per)
        .enumerate()
        .for_each(|(c, out)| {
            for (r, out) in out.chunks_exact_mut(per).enumerate() {
                out.copy_from_slice(&from[(r * cols + c) * per..][..per]);
            }
        });
}

vectorised! {
    /// `max(v + b, 0)` over a channel.
    fn shifted_relu<'a>(channel: &'a mut [f32], b: f32) {
        for v in channel {
            let pre = *v + b;
            *v = if pre > 0.0 { pre } else { 0.0 };
        }
    }
}

vectorised! {
    fn channel_sum<'a>(values: &'a [f32]) -> f32 {
        sum(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A direct loop over every output, input channel and kernel tap: the referee.
    fn naive(x: &[f32], kernel: &[f32], bias: &[f32], g: &Geometry, batch: usize) -> Vec<f32> {
        let (conv, k, size) = (g.conv_size(), g.k, g.size);
        let mut out = vec![0.0f32; g.out * batch * conv * conv];
        for o in 0..g.out {
            for b in 0..batch {
                for y in 0..conv {
                    for x_ in 0..conv {
                        let mut acc = bias[o];
                        for c in 0..g.channels {
                            for i in 0..k {
                                for j in 0..k {
                                    let (sy, sx) =
                                        ((y + i).wrapping_sub(g.pad), (x_ + j).wrapping_sub(g.pad));
                                    if sy < size && sx < size {
                                        acc += kernel[((o * g.channels + c) * k + i) * k + j]
                                            * x[((b * g.channels + c) * size + sy) * size + sx];
                                    }
                                }
                            }
                        }
                        out[((o * batch + b) * conv + y) * conv + x_] = acc.max(0.0);
                    }
                }
            }
        }
        out
    }

    /// A layer's geometry, a batch of two images, a kernel and a bias.
    type Case = (Geometry, Vec<f32>, Vec<f32>, Vec<f32>);

    /// Every geometry the CNN builds (LeNet's and the small images'), and odd sizes, with a batch of
    /// two images, a kernel and a bias.
    fn cases() -> Vec<Case> {
        [
            (5, 2, 28, 1, 6),
            (5, 0, 14, 6, 16),
            (3, 1, 8, 1, 6),
            (3, 1, 4, 6, 16),
            (3, 0, 4, 4, 2),
            (3, 1, 9, 2, 3),
        ]
        .into_iter()
        .map(|(k, pad, size, channels, out)| {
            let g = Geometry {
                channels,
                out,
                k,
                pad,
                size,
            };
            let x = (0..2 * channels * size * size)
                .map(|i| ((i * 37 % 23) as f32 - 11.0) / 11.0)
                .collect();
            let kernel = (0..out * channels * k * k)
                .map(|i| ((i * 13 % 7) as f32 - 3.0) / 5.0)
                .collect();
            let bias = (0..out).map(|o| 0.1 * o as f32 - 0.2).collect();
            (g, x, kernel, bias)
        })
        .collect()
    }

    /// The layer's output equals the direct loop's. (candle 0.9's CPU conv2d gets some of these wrong, e.g. 3×3
    /// kernels on 4×4 inputs of 4 channels, which the digits CNN's second layer is.)
    #[test]
    fn the_im2col_convolution_computes_the_direct_sum() {
        for (g, x, kernel, bias) in cases() {
            let (channels, batch) = (g.channels, 2);
            let mut input = Vec::new();
            transpose_batch(&x, batch, channels, &mut input);
            let mut work = LayerWork::default();
            forward(&input, &kernel, &bias, &g, batch, &mut work);
            let expected = naive(&x, &kernel, &bias, &g, batch);
            let worst = expected
                .iter()
                .zip(&work.activated)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(worst < 1e-5, "{g:?}: {worst}");
            // Pooling: each value the largest of its window, the last odd row and column dropped.
            let (conv, half) = (g.conv_size(), g.pooled());
            for (index, (&v, &at)) in work.pooled.iter().zip(&work.argmax).enumerate() {
                let (image, y, x_) = (index / (half * half), index / half % half, index % half);
                let window = [(0, 0), (0, 1), (1, 0), (1, 1)]
                    .map(|(dy, dx)| expected[(image * conv + 2 * y + dy) * conv + 2 * x_ + dx]);
                let largest = window.into_iter().fold(f32::NEG_INFINITY, f32::max);
                assert!((v - largest).abs() < 1e-5, "{g:?} pooled {index}");
                assert_eq!(work.activated[at as usize], v);
            }
        }
    }

    /// candle's CUDA convolution (the GPU path's) against the direct loop, on the same geometries;
    /// skipped where no GPU can be opened.
    #[cfg(feature = "cuda")]
    #[test]
    fn candle_on_the_gpu_computes_the_direct_sum() {
        use candle_core::Tensor;
        let Ok(gpu) = crate::device::open("cuda") else {
            eprintln!("skipped: no GPU");
            return;
        };
        let mut wrong = Vec::new();
        for (g, x, kernel, bias) in cases() {
            let Geometry {
                channels,
                out,
                k,
                pad,
                size,
            } = g;
            let batch = 2;
            let expected = naive(&x, &kernel, &bias, &g, batch);
            let on_gpu = || -> candle_core::Result<Vec<f32>> {
                let xt = Tensor::from_vec(x.clone(), (batch, channels, size, size), &gpu)?;
                let kt = Tensor::from_vec(kernel.clone(), (out, channels, k, k), &gpu)?;
                let bt = Tensor::from_vec(bias.clone(), (1, out, 1, 1), &gpu)?;
                xt.conv2d(&kt, pad, 1, 1, 1)?
                    .broadcast_add(&bt)?
                    .relu()?
                    .transpose(0, 1)?
                    .contiguous()?
                    .flatten_all()?
                    .to_vec1::<f32>()
            };
            let got = on_gpu().expect("candle on the GPU");
            let worst = expected
                .iter()
                .zip(&got)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            if worst > 1e-4 {
                wrong.push(format!("{g:?}: off by {worst}"));
            }
        }
        assert!(
            wrong.is_empty(),
            "candle's CUDA conv2d is wrong for {wrong:#?}"
        );
    }
}
