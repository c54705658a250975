//! Causal self-attention's forward and backward passes for the transformer's hand-written step:
//! small products per sequence and head (`linalg::matmul_serial`), sequences in parallel.

use crate::linalg::{MatMut, MatRef, matmul_serial};
use crate::models::vector::{dot, exp, sum, vectorised};
use rayon::prelude::*;

/// Causal self-attention for every sequence and head: `probs = softmax(q·kᵀ/√hd)` below the diagonal
/// (and on it), `attended = probs·v`, head `h` in columns `h·hd..` of `attended`.
pub(super) fn attention_forward(
    qkv: &[f32],
    probs: &mut [f32],
    attended: &mut [f32],
    heads: usize,
    t: usize,
    d: usize,
) {
    probs
        .par_chunks_mut(heads * t * t)
        .zip(attended.par_chunks_mut(t * d))
        .zip(qkv.par_chunks(t * 3 * d))
        .for_each(|((probs, attended), qkv)| {
            attention_rows(probs, attended, qkv, heads, t, d);
        });
}

vectorised! {
    /// [`attention_forward`] for one sequence.
    fn attention_rows<'a>(
        probs: &'a mut [f32],
        attended: &'a mut [f32],
        qkv: &'a [f32],
        heads: usize,
        t: usize,
        d: usize,
    ) {
        let hd = d / heads;
        let scale = 1.0 / (hd as f32).sqrt();
        for (h, p) in probs.chunks_exact_mut(t * t).enumerate() {
            let q = MatRef::columns(qkv, t, 3 * d, h * hd, hd);
            let k = MatRef::columns(qkv, t, 3 * d, d + h * hd, hd);
            let v = MatRef::columns(qkv, t, 3 * d, 2 * d + h * hd, hd);
            matmul_serial(MatMut::row_major(p, t, t), q, k.t(), false);
            for (i, row) in p.chunks_exact_mut(t).enumerate() {
                let (seen, future) = row.split_at_mut(i + 1);
                let max = seen.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
                for s in seen.iter_mut() {
                    *s = exp((*s - max) * scale);
                }
                let inv = 1.0 / sum(seen);
                for s in seen.iter_mut() {
                    *s *= inv;
                }
                future.fill(0.0);
            }
            matmul_serial(
                MatMut::columns(attended, t, d, h * hd, hd),
                MatRef::row_major(p, t, t),
                v,
                false,
            );
        }
    }
}

/// The attention's backward: from d loss / d attended, d loss / d (queries, keys, values) into `dqkv`.
#[expect(
    clippy::too_many_arguments,
    reason = "the forward's buffers, their gradients' and the sizes"
)]
pub(super) fn attention_backward(
    qkv: &[f32],
    probs: &[f32],
    dattended: &[f32],
    dqkv: &mut [f32],
    dprobs: &mut [f32],
    heads: usize,
    t: usize,
    d: usize,
) {
    dprobs
        .par_chunks_mut(heads * t * t)
        .zip(probs.par_chunks(heads * t * t))
        .zip(dattended.par_chunks(t * d))
        .zip(qkv.par_chunks(t * 3 * d))
        .zip(dqkv.par_chunks_mut(t * 3 * d))
        .for_each(|((((dprobs, probs), dattended), qkv), dqkv)| {
            attention_rows_backward(dprobs, probs, dattended, qkv, dqkv, heads, t, d);
        });
}

vectorised! {
    /// [`attention_backward`] for one sequence.
    #[expect(
        clippy::too_many_arguments,
        reason = "the forward's buffers, their gradients' and the sizes"
    )]
    fn attention_rows_backward<'a>(
        dprobs: &'a mut [f32],
        probs: &'a [f32],
        dattended: &'a [f32],
        qkv: &'a [f32],
        dqkv: &'a mut [f32],
        heads: usize,
        t: usize,
        d: usize,
    ) {
        let hd = d / heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let heads = dprobs
            .chunks_exact_mut(t * t)
            .zip(probs.chunks_exact(t * t));
        for (h, (dp, p)) in heads.enumerate() {
            let q = MatRef::columns(qkv, t, 3 * d, h * hd, hd);
            let k = MatRef::columns(qkv, t, 3 * d, d + h * hd, hd);
            let v = MatRef::columns(qkv, t, 3 * d, 2 * d + h * hd, hd);
            let dy = MatRef::columns(dattended, t, d, h * hd, hd);
            let p_m = MatRef::row_major(p, t, t);
            // d probs = dy·vᵀ; d v = probsᵀ·dy.
            matmul_serial(MatMut::row_major(dp, t, t), dy, v.t(), false);
            matmul_serial(
                MatMut::columns(dqkv, t, 3 * d, 2 * d + h * hd, hd),
                p_m.t(),
                dy,
                false,
            );
            // Through the softmax and the scale: d scores = p ⊙ (d p − Σ d p ⊙ p)·scale.
            for (i, (dp, p)) in dp.chunks_exact_mut(t).zip(p.chunks_exact(t)).enumerate() {
                let (seen, future) = dp.split_at_mut(i + 1);
                let dot = dot(seen, p);
                for (g, &p) in seen.iter_mut().zip(p) {
                    *g = p * (*g - dot) * scale;
                }
                future.fill(0.0);
            }
            let ds = MatRef::row_major(dp, t, t);
            // d q = d scores·k; d k = d scoresᵀ·q.
            matmul_serial(MatMut::columns(dqkv, t, 3 * d, h * hd, hd), ds, k, false);
            matmul_serial(
                MatMut::columns(dqkv, t, 3 * d, d + h * hd, hd),
                ds.t(),
                q,
                false,
            );
        }
    }
}
