//! Layer norm's forward and backward passes for the transformer's hand-written step.

use super::pointwise::PIECE;
use crate::models::vector::{dot, sum, vectorised};
use rayon::prelude::*;

/// A layer norm's forward results: the normalised rows, their reciprocal standard deviations and the
/// scaled and shifted output.
#[derive(Debug, Default)]
pub(super) struct Norm {
    xhat: Vec<f32>,
    rstd: Vec<f32>,
    pub(super) out: Vec<f32>,
}

impl Norm {
    pub(super) fn forward(&mut self, x: &[f32], gamma: &[f32], beta: &[f32]) {
        let d = gamma.len();
        self.xhat.resize(x.len(), 0.0);
        self.out.resize(x.len(), 0.0);
        self.rstd.resize(x.len() / d, 0.0);
        let rows = (PIECE / d).max(1);
        self.xhat
            .par_chunks_mut(rows * d)
            .zip(self.out.par_chunks_mut(rows * d))
            .zip(self.rstd.par_chunks_mut(rows))
            .zip(x.par_chunks(rows * d))
            .for_each(|(((xhat, out), rstd), x)| norm_rows(x, gamma, beta, xhat, rstd, out));
    }

    /// From d loss / d output `dy`: adds d loss / d input to `dx` and writes the scale's and the
    /// shift's gradients.
    pub(super) fn backward(
        &self,
        dy: &[f32],
        gamma: &[f32],
        dx: &mut [f32],
        dgamma: &mut Vec<f32>,
        dbeta: &mut Vec<f32>,
    ) {
        let d = gamma.len();
        dgamma.clear();
        dgamma.resize(d, 0.0);
        dbeta.clear();
        dbeta.resize(d, 0.0);
        norm_parameter_gradients(dy, &self.xhat, dgamma, dbeta);
        let rows = (PIECE / d).max(1);
        dx.par_chunks_mut(rows * d)
            .zip(dy.par_chunks(rows * d))
            .zip(self.xhat.par_chunks(rows * d))
            .zip(self.rstd.par_chunks(rows))
            .for_each(|(((dx, dy), xhat), rstd)| norm_rows_backward(dy, gamma, xhat, rstd, dx));
    }
}

vectorised! {
    /// Layer norm of each row of `x` (rows of `gamma.len()`), keeping x̂ and 1/σ for the backward.
    fn norm_rows<'a>(
        x: &'a [f32],
        gamma: &'a [f32],
        beta: &'a [f32],
        xhat: &'a mut [f32],
        rstd: &'a mut [f32],
        out: &'a mut [f32],
    ) {
        let d = gamma.len();
        let rows = xhat
            .chunks_exact_mut(d)
            .zip(out.chunks_exact_mut(d))
            .zip(rstd)
            .zip(x.chunks_exact(d));
        for (((xhat, out), rstd), x) in rows {
            let mean = sum(x) / d as f32;
            for (xh, &v) in xhat.iter_mut().zip(x) {
                *xh = v - mean;
            }
            let r = 1.0 / (dot(xhat, xhat) / d as f32 + 1e-5).sqrt();
            *rstd = r;
            for ((xh, o), (&g, &b)) in xhat.iter_mut().zip(out).zip(gamma.iter().zip(beta)) {
                let n = *xh * r;
                *xh = n;
                *o = n * g + b;
            }
        }
    }
}

vectorised! {
    /// A layer norm's scale and shift gradients: Σ dy·x̂ and Σ dy over the rows, in row order.
    fn norm_parameter_gradients<'a>(
        dy: &'a [f32],
        xhat: &'a [f32],
        dgamma: &'a mut [f32],
        dbeta: &'a mut [f32],
    ) {
        let d = dgamma.len();
        for (dy, xhat) in dy.chunks_exact(d).zip(xhat.chunks_exact(d)) {
            for (((g, b), &dy), &xh) in dgamma.iter_mut().zip(dbeta.iter_mut()).zip(dy).zip(xhat) {
                *g += dy * xh;
                *b += dy;
            }
        }
    }
}

vectorised! {
    /// A layer norm's input gradient for each row, added to `dx`:
    /// `dx += (dy·γ − mean(dy·γ) − x̂·mean(dy·γ·x̂)) / σ`.
    fn norm_rows_backward<'a>(
        dy: &'a [f32],
        gamma: &'a [f32],
        xhat: &'a [f32],
        rstd: &'a [f32],
        dx: &'a mut [f32],
    ) {
        let d = gamma.len();
        let rows = dx
            .chunks_exact_mut(d)
            .zip(dy.chunks_exact(d))
            .zip(xhat.chunks_exact(d))
            .zip(rstd);
        for (((dx, dy), xhat), &r) in rows {
            // Both means in eight lanes, so that they vectorise.
            let (mut m1, mut m2) = ([0.0f32; 8], [0.0f32; 8]);
            let lanes = dy.chunks_exact(8).zip(gamma.chunks_exact(8));
            for ((dy, g), xh) in lanes.zip(xhat.chunks_exact(8)) {
                for i in 0..8 {
                    let g = dy[i] * g[i];
                    m1[i] += g;
                    m2[i] += g * xh[i];
                }
            }
            let (mut m1, mut m2) = (sum(&m1), sum(&m2));
            let tail = d - d % 8;
            for ((&dy, &g), &xh) in dy[tail..].iter().zip(&gamma[tail..]).zip(&xhat[tail..]) {
                m1 += dy * g;
                m2 += dy * g * xh;
            }
            let (m1, m2) = (m1 / d as f32, m2 / d as f32);
            for (((dx, &dy), &g), &xh) in dx.iter_mut().zip(dy).zip(gamma).zip(xhat) {
                *dx += r * (dy * g - m1 - xh * m2);
            }
        }
    }
}
