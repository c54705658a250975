//! The transformer step's single passes over its activations: dropout masks, bias adds, the residual
//! joins, and GELU (tanh form) with its derivative, vectorised.

use crate::models::vector::{tanh, vectorised};
use crate::rng::Rng;
use rayon::prelude::*;

/// Values per parallel piece of an elementwise pass.
pub(super) const PIECE: usize = 1 << 13;

/// Dropout's mask, drawn as `dropout` draws it (one value per element in order: 1/keep if kept, else
/// 0), so both paths consume the same draws; false (nothing drawn) without dropout.
pub(super) fn draw_mask(mask: &mut Vec<f32>, len: usize, p: f64, rng: &mut Rng) -> bool {
    if p <= 0.0 {
        mask.clear();
        return false;
    }
    let keep = (1.0 - p) as f32;
    let scale = 1.0 / keep;
    mask.clear();
    mask.extend((0..len).map(|_| if rng.uniform() < keep { scale } else { 0.0 }));
    true
}

/// `g ⊙ mask` in `scratch`, or `g` itself without a mask.
pub(super) fn masked<'a>(g: &'a [f32], scratch: &'a mut Vec<f32>, mask: &[f32]) -> &'a [f32] {
    if mask.is_empty() {
        return g;
    }
    scratch.resize(g.len(), 0.0);
    for ((s, &g), &m) in scratch.iter_mut().zip(g).zip(mask) {
        *s = g * m;
    }
    scratch
}

pub(super) fn add_bias(z: &mut [f32], bias: &[f32]) {
    let cols = bias.len();
    let rows = (PIECE / cols).max(1);
    z.par_chunks_mut(rows * cols).for_each(|piece| {
        for row in piece.chunks_exact_mut(cols) {
            for (v, b) in row.iter_mut().zip(bias) {
                *v += b;
            }
        }
    });
}

/// A branch joins the residual stream: `stream += (branch + bias) ⊙ mask`.
pub(super) fn join(stream: &mut [f32], branch: &[f32], bias: &[f32], mask: Option<&[f32]>) {
    let cols = bias.len();
    let rows = (PIECE / cols).max(1);
    let pieces = stream
        .par_chunks_mut(rows * cols)
        .zip(branch.par_chunks(rows * cols));
    match mask {
        None => pieces.for_each(|(stream, branch)| {
            for (s, b) in stream.chunks_exact_mut(cols).zip(branch.chunks_exact(cols)) {
                for ((s, &v), &bias) in s.iter_mut().zip(b).zip(bias) {
                    *s += v + bias;
                }
            }
        }),
        Some(mask) => {
            pieces
                .zip(mask.par_chunks(rows * cols))
                .for_each(|((stream, branch), mask)| {
                    let rows = stream
                        .chunks_exact_mut(cols)
                        .zip(branch.chunks_exact(cols))
                        .zip(mask.chunks_exact(cols));
                    for ((s, b), m) in rows {
                        for (((s, &v), &bias), &m) in s.iter_mut().zip(b).zip(bias).zip(m) {
                            *s += (v + bias) * m;
                        }
                    }
                })
        }
    }
}

/// √(2/π), GELU's tanh approximation's scale.
const GELU_C: f32 = 0.797_884_6;
const GELU_A: f32 = 0.044_715;

/// `pre += bias`; then GELU (its tanh approximation, as candle's `gelu` and PyTorch's
/// `approximate="tanh"`): `act = ½·x·(1 + tanh(c·(x + a·x³)))`, keeping the tanh for the backward.
pub(super) fn gelu(pre: &mut [f32], tanh_of: &mut Vec<f32>, act: &mut Vec<f32>, bias: &[f32]) {
    let cols = bias.len();
    tanh_of.resize(pre.len(), 0.0);
    act.resize(pre.len(), 0.0);
    let rows = (PIECE / cols).max(1);
    pre.par_chunks_mut(rows * cols)
        .zip(tanh_of.par_chunks_mut(rows * cols))
        .zip(act.par_chunks_mut(rows * cols))
        .for_each(|((pre, th), act)| gelu_rows(bias, pre, th, act));
}

vectorised! {
    fn gelu_rows<'a>(bias: &'a [f32], pre: &'a mut [f32], th: &'a mut [f32], act: &'a mut [f32]) {
        let cols = bias.len();
        let rows = pre
            .chunks_exact_mut(cols)
            .zip(th.chunks_exact_mut(cols))
            .zip(act.chunks_exact_mut(cols));
        for ((pre, th), act) in rows {
            for (((x, th), a), &b) in pre.iter_mut().zip(th).zip(act).zip(bias) {
                let v = *x + b;
                *x = v;
                let t = tanh(GELU_C * (v + GELU_A * v * v * v));
                *th = t;
                *a = 0.5 * v * (1.0 + t);
            }
        }
    }
}

/// d loss / d (GELU's input), in place over d loss / d (its output).
pub(super) fn gelu_backward(grad: &mut [f32], pre: &[f32], tanh_of: &[f32]) {
    grad.par_chunks_mut(PIECE)
        .zip(pre.par_chunks(PIECE))
        .zip(tanh_of.par_chunks(PIECE))
        .for_each(|((g, x), t)| gelu_derivative(x, t, g));
}

vectorised! {
    /// `g *= GELU′(x)`, from `x` and the tanh the forward took.
    fn gelu_derivative<'a>(x: &'a [f32], tanh_of: &'a [f32], g: &'a mut [f32]) {
        for ((g, &x), &t) in g.iter_mut().zip(x).zip(tanh_of) {
            let du = GELU_C * (1.0 + 3.0 * GELU_A * x * x);
            *g *= 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
        }
    }
}
