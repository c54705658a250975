//! The transformer's blocks, forward and backward, whole or split among a tensor-parallel group as
//! Megatron-LM splits them: in attention each worker of a group of `size` computes `heads / size` of
//! the heads (its columns of the query, key and value projection, and the matching rows of the
//! output projection); in the MLP its `4d / size` columns of the first product and the matching rows
//! of the second. Each block's two branches then end in a sum over the group (forward), and the
//! gradient reaching each branch's input is summed likewise (backward): four all-reduces of `[N, d]`
//! per block and step. Layer norms, biases after a sum, the embeddings and the head are computed
//! alike by every worker. A group of one ([`Split::WHOLE`]) is the whole model's step: one product
//! per linear layer, nothing summed.
//!
//! A worker's gradient of a split weight is its part, zero elsewhere: summing the group's gives the
//! whole (the pipeline sums it with the replicas'), and every worker then updates the whole weight
//! alike.

use super::attention::{attention_backward, attention_forward};
use super::buffers::{Layer, Scratch, Slot};
use super::linear::{linear_backward, pair};
use super::pointwise::{add_bias, draw_mask, gelu, gelu_backward, join, masked};
use super::shape::{FC, LN1, LN2, OUT, PROJ, QKV, Shape};
use crate::linalg::{MatMut, MatRef, matmul, matmul_into};
use crate::models::error::invalid;
use crate::models::mlp::column_sums;
use crate::params::Params;
use crate::rng::Rng;
use candle_core::Result;
use std::ops::Range;

/// This worker's place in its tensor-parallel group: worker `rank` of `size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    pub rank: usize,
    pub size: usize,
}

impl Split {
    /// No split: one worker computes everything.
    pub const WHOLE: Split = Split { rank: 0, size: 1 };

    /// Whether `shape`'s heads divide among the group.
    pub fn check(&self, shape: &Shape) -> Result<()> {
        if self.size == 0 || self.rank >= self.size || !shape.heads.is_multiple_of(self.size) {
            invalid!(
                "worker {} of a tensor-parallel group of {} cannot split {} heads",
                self.rank,
                self.size,
                shape.heads
            );
        }
        Ok(())
    }
}

/// Sums a buffer over the tensor-parallel group, in place; every worker of the group calls it alike.
pub trait Reducer {
    fn sum(&mut self, data: &mut [f32]) -> Result<()>;
}

/// The reducer of a group of one: nothing to sum.
impl Reducer for () {
    fn sum(&mut self, _data: &mut [f32]) -> Result<()> {
        Ok(())
    }
}

/// This worker's part of the sizes: heads, attention width and MLP width.
fn parts(shape: &Shape, split: Split) -> (usize, usize, usize) {
    let size = split.size;
    (shape.heads / size, shape.d / size, 4 * shape.d / size)
}

/// The blocks `layers` forward on `stream` (`[N, d]`), each block's activations into `slot`; a
/// split group's workers each on their part of each block, the branches summed over the group.
#[expect(
    clippy::too_many_arguments,
    reason = "the pass's buffers, the split and the group"
)]
pub(super) fn forward(
    shape: &Shape,
    split: Split,
    params: &Params,
    layers: &Range<usize>,
    rng: &mut Rng,
    slot: &mut Slot,
    scratch: &mut Scratch,
    stream: &mut [f32],
    reducer: &mut dyn Reducer,
) -> Result<()> {
    let Shape {
        d,
        context: t,
        dropout,
        ..
    } = *shape;
    let (heads, dl, hl) = parts(shape, split);
    let rank = split.rank;
    let n = stream.len() / d;
    let batch = n / t;
    let index = shape.index();
    let p = |i: usize| params.values[i].as_slice();
    let Scratch { branch, bias, .. } = scratch;
    branch.resize(n * d, 0.0);
    slot.layers.resize_with(layers.len(), Layer::default);
    for (l, w) in layers.clone().zip(slot.layers.iter_mut()) {
        let at = |offset| index.block(l, offset);
        // Attention: this worker's heads.
        w.ln1.forward(stream, p(at(LN1)), p(at(LN1) + 1));
        w.qkv.resize(n * 3 * dl, 0.0);
        let x = MatRef::row_major(&w.ln1.out, n, d);
        if split.size == 1 {
            matmul(
                &mut w.qkv,
                x,
                MatRef::row_major(p(at(QKV)), d, 3 * d),
                false,
            );
            add_bias(&mut w.qkv, p(at(QKV) + 1));
        } else {
            // This worker's heads' queries, keys and values: three blocks of columns.
            bias.clear();
            for j in 0..3 {
                let from = j * d + rank * dl;
                matmul_into(
                    MatMut::columns(&mut w.qkv, n, 3 * dl, j * dl, dl),
                    x,
                    MatRef::columns(p(at(QKV)), d, 3 * d, from, dl),
                    false,
                );
                bias.extend_from_slice(&p(at(QKV) + 1)[from..from + dl]);
            }
            add_bias(&mut w.qkv, bias);
        }
        w.probs.resize(batch * heads * t * t, 0.0);
        w.attended.resize(n * dl, 0.0);
        attention_forward(&w.qkv, &mut w.probs, &mut w.attended, heads, t, dl);
        matmul(
            branch,
            MatRef::row_major(&w.attended, n, dl),
            MatRef::row_major(&p(at(PROJ))[rank * dl * d..][..dl * d], dl, d),
            false,
        );
        reducer.sum(branch)?;
        let masked = draw_mask(&mut w.attn_mask, n * d, dropout, rng);
        join(
            stream,
            branch,
            p(at(PROJ) + 1),
            masked.then_some(&w.attn_mask[..]),
        );
        // MLP: this worker's columns of the hidden layer.
        w.ln2.forward(stream, p(at(LN2)), p(at(LN2) + 1));
        w.pre.resize(n * hl, 0.0);
        matmul(
            &mut w.pre,
            MatRef::row_major(&w.ln2.out, n, d),
            MatRef::columns(p(at(FC)), d, 4 * d, rank * hl, hl),
            false,
        );
        gelu(
            &mut w.pre,
            &mut w.tanh,
            &mut w.act,
            &p(at(FC) + 1)[rank * hl..][..hl],
        );
        matmul(
            branch,
            MatRef::row_major(&w.act, n, hl),
            MatRef::row_major(&p(at(OUT))[rank * hl * d..][..hl * d], hl, d),
            false,
        );
        reducer.sum(branch)?;
        let masked = draw_mask(&mut w.out_mask, n * d, dropout, rng);
        join(
            stream,
            branch,
            p(at(OUT) + 1),
            masked.then_some(&w.out_mask[..]),
        );
    }
    Ok(())
}

/// The blocks `layers` backward from d loss / d their output in `dstream`, which ends as d loss / d
/// their input: the gradients of this worker's parts of the split weights (zero elsewhere), of the
/// rest whole, and d loss / d each branch's input summed over the group.
#[expect(
    clippy::too_many_arguments,
    reason = "the pass's buffers, the split and the group"
)]
#[expect(
    clippy::too_many_lines,
    reason = "one pass back up the blocks, in the order of their layers"
)]
pub(super) fn backward(
    shape: &Shape,
    split: Split,
    params: &Params,
    layers: &Range<usize>,
    slot: &Slot,
    scratch: &mut Scratch,
    grads: &mut [Vec<f32>],
    dstream: &mut [f32],
    reducer: &mut dyn Reducer,
) -> Result<()> {
    let Shape { d, context: t, .. } = *shape;
    let (heads, dl, hl) = parts(shape, split);
    let rank = split.rank;
    let index = shape.index();
    let p = |i: usize| params.values[i].as_slice();
    let Scratch {
        dbranch,
        dnorm,
        dhidden,
        dattended,
        dqkv,
        dprobs,
        bias,
        ..
    } = scratch;
    let n = dstream.len() / d;
    for (l, w) in layers.clone().zip(slot.layers.iter()).rev() {
        let at = |offset| index.block(l, offset);
        // The split weights' gradients are this worker's part, zero elsewhere (a whole worker's
        // part is all of it): zeroed once, as nothing writes outside the part.
        for i in [at(QKV), at(QKV) + 1, at(PROJ), at(FC), at(FC) + 1, at(OUT)] {
            let len = params.values[i].len();
            if split.size > 1 && grads[i].len() != len {
                grads[i].clear();
            }
            grads[i].resize(len, 0.0);
        }
        // MLP: the second product's rows, GELU, the first product's columns.
        let dout = masked(dstream, dbranch, &w.out_mask);
        {
            let (dw, db) = pair(grads, at(OUT));
            matmul(
                &mut dw[rank * hl * d..][..hl * d],
                MatRef::row_major(&w.act, n, hl).t(),
                MatRef::row_major(dout, n, d),
                false,
            );
            db.resize(d, 0.0);
            column_sums(dout, d, db);
        }
        dhidden.resize(n * hl, 0.0);
        matmul(
            dhidden,
            MatRef::row_major(dout, n, d),
            MatRef::row_major(&p(at(OUT))[rank * hl * d..][..hl * d], hl, d).t(),
            false,
        );
        gelu_backward(dhidden, &w.pre, &w.tanh);
        {
            let (dw, db) = pair(grads, at(FC));
            matmul_into(
                MatMut::columns(dw, d, 4 * d, rank * hl, hl),
                MatRef::row_major(&w.ln2.out, n, d).t(),
                MatRef::row_major(dhidden, n, hl),
                false,
            );
            column_sums(dhidden, hl, &mut db[rank * hl..][..hl]);
        }
        dnorm.resize(n * d, 0.0);
        matmul(
            dnorm,
            MatRef::row_major(dhidden, n, hl),
            MatRef::columns(p(at(FC)), d, 4 * d, rank * hl, hl).t(),
            false,
        );
        reducer.sum(dnorm)?;
        {
            let (dgamma, dbeta) = pair(grads, at(LN2));
            w.ln2.backward(dnorm, p(at(LN2)), dstream, dgamma, dbeta);
        }
        // Attention: the output projection's rows, this worker's heads, their projections' columns.
        let dproj = masked(dstream, dbranch, &w.attn_mask);
        {
            let (dw, db) = pair(grads, at(PROJ));
            matmul(
                &mut dw[rank * dl * d..][..dl * d],
                MatRef::row_major(&w.attended, n, dl).t(),
                MatRef::row_major(dproj, n, d),
                false,
            );
            db.resize(d, 0.0);
            column_sums(dproj, d, db);
        }
        dattended.resize(n * dl, 0.0);
        matmul(
            dattended,
            MatRef::row_major(dproj, n, d),
            MatRef::row_major(&p(at(PROJ))[rank * dl * d..][..dl * d], dl, d).t(),
            false,
        );
        dqkv.resize(n * 3 * dl, 0.0);
        dprobs.resize(w.probs.len(), 0.0);
        attention_backward(&w.qkv, &w.probs, dattended, dqkv, dprobs, heads, t, dl);
        if split.size == 1 {
            linear_backward(
                grads,
                at(QKV),
                &w.ln1.out,
                dqkv,
                (d, 3 * d),
                Some((dnorm, p(at(QKV)))),
            );
        } else {
            {
                let (dw, db) = pair(grads, at(QKV));
                let x = MatRef::row_major(&w.ln1.out, n, d).t();
                bias.resize(3 * dl, 0.0);
                column_sums(dqkv, 3 * dl, bias);
                for j in 0..3 {
                    let from = j * d + rank * dl;
                    matmul_into(
                        MatMut::columns(dw, d, 3 * d, from, dl),
                        x,
                        MatRef::columns(dqkv, n, 3 * dl, j * dl, dl),
                        false,
                    );
                    db[from..from + dl].copy_from_slice(&bias[j * dl..][..dl]);
                }
            }
            for j in 0..3 {
                matmul(
                    dnorm,
                    MatRef::columns(dqkv, n, 3 * dl, j * dl, dl),
                    MatRef::columns(p(at(QKV)), d, 3 * d, j * d + rank * dl, dl).t(),
                    j > 0,
                );
            }
            reducer.sum(dnorm)?;
        }
        let (dgamma, dbeta) = pair(grads, at(LN1));
        w.ln1.backward(dnorm, p(at(LN1)), dstream, dgamma, dbeta);
    }
    Ok(())
}
