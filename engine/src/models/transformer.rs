//! The character transformer's training step on the host, by hand: every linear layer is one product
//! over the whole batch on the parameter buffers (`linalg`), attention is two small products per
//! sequence and head with the causal softmax between them (and four, with its backward, on the way
//! back), layer norm, bias, GELU, dropout and the residual sums are single passes, and every
//! activation the backward pass needs is kept in buffers reused from step to step.
//!
//! The step is built from pieces — embeddings, a range of blocks, the head and loss, each forward
//! and backward — so that a pipeline stage ([`Stage`]) runs only its own layers, on several
//! micro-batches in flight, each micro-batch's activations in a slot of their own.
//!
//! The same arithmetic as the candle forward in `charlm.rs` (tests hold the two to each other),
//! with two differences of rounding only: exponentials and `tanh` are polynomial approximations that
//! vectorise, and masked attention scores are skipped instead of added as −10⁹. Every loop writes
//! each output from one thread, in a fixed order, so a step gives the same bits on any number of
//! threads (exact resume relies on it).

use super::error::invalid;
use super::loss::{BatchLoss, softmax_cross_entropy};
use crate::linalg::{MatRef, matmul};
use crate::models::mlp::column_sums;
use crate::params::Params;
use crate::rng::Rng;
use attention::{attention_backward, attention_forward};
use candle_core::Result;
use norm::Norm;
use std::ops::Range;

mod attention;
mod norm;
mod pointwise;
pub(super) mod shape;
use pointwise::{add_bias, draw_mask, gelu, gelu_backward, join, masked};
pub use shape::Shape;
use shape::{FC, LN1, LN2, OUT, PROJ, QKV};

/// One block's activations, kept from the forward pass for the backward.
#[derive(Debug, Default)]
struct Layer {
    ln1: Norm,
    /// The queries, keys and values `[N, 3d]`.
    qkv: Vec<f32>,
    /// The attention weights `[B, heads, T, T]` (zero above the diagonal).
    probs: Vec<f32>,
    /// The attention's output before its projection `[N, d]`.
    attended: Vec<f32>,
    attn_mask: Vec<f32>,
    ln2: Norm,
    /// The MLP's first product plus bias, before GELU `[N, 4d]`; the `tanh` GELU took of it; GELU's
    /// output.
    pre: Vec<f32>,
    tanh: Vec<f32>,
    act: Vec<f32>,
    out_mask: Vec<f32>,
}

/// What one batch's (or micro-batch's) forward pass keeps for its backward.
#[derive(Debug, Default)]
struct Slot {
    /// The activations of the blocks the pass runs, in order.
    layers: Vec<Layer>,
    embed_mask: Vec<f32>,
    ln_f: Norm,
    /// d loss / d logits `[N, vocab]`.
    dlogits: Vec<f32>,
}

/// Buffers a pass uses and leaves (shared by every slot).
#[derive(Debug, Default)]
struct Scratch {
    /// A branch's output before it joins the stream `[N, d]`.
    branch: Vec<f32>,
    logits: Vec<f32>,
    dbranch: Vec<f32>,
    dnorm: Vec<f32>,
    dhidden: Vec<f32>,
    dattended: Vec<f32>,
    dqkv: Vec<f32>,
    dprobs: Vec<f32>,
}

/// The buffers of a training step, kept so that a step allocates nothing once the first is done.
#[derive(Default)]
pub(super) struct Step {
    slot: Slot,
    scratch: Scratch,
    /// The residual stream `[N, d]`, and d loss / d it.
    stream: Vec<f32>,
    dstream: Vec<f32>,
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Step({} layers)", self.slot.layers.len())
    }
}

impl Step {
    /// Forward keeping every activation, then backward, each gradient written into `grads`.
    /// `tokens` and `targets` are `[B, context]`, row-major.
    pub(super) fn run(
        &mut self,
        shape: &Shape,
        params: &Params,
        tokens: &[u32],
        targets: &[u32],
        rng: &mut Rng,
        grads: &mut Vec<Vec<f32>>,
    ) -> Result<BatchLoss> {
        shape.check(tokens, targets)?;
        let Step {
            slot,
            scratch,
            stream,
            dstream,
        } = self;
        let all = 0..shape.layers;
        embed(shape, params, tokens, rng, slot, stream);
        blocks_forward(shape, params, &all, rng, slot, scratch, stream);
        let loss = head_forward(shape, params, targets, slot, scratch, stream);
        let at = shape.index();
        grads.resize_with(params.len(), Vec::new);
        for (i, g) in grads.iter_mut().enumerate() {
            if i < at.first || i >= at.end() {
                // Not this model's (nothing else registers parameters today).
                g.clear();
                g.resize(params.values[i].len(), 0.0);
            }
        }
        head_backward(shape, params, slot, scratch, grads, dstream);
        blocks_backward(shape, params, &all, slot, scratch, grads, dstream);
        embed_backward(shape, params, tokens, slot, scratch, grads, dstream);
        Ok(loss)
    }
}

/// One pipeline stage of the transformer: the blocks `layers` (with the embeddings on the first
/// stage, the final norm, head and loss on the last), run forward and backward one micro-batch at
/// a time, each micro-batch in flight keeping its activations in a slot of its own.
#[derive(Debug)]
pub struct Stage {
    shape: Shape,
    layers: Range<usize>,
    slots: Vec<Slot>,
    scratch: Scratch,
}

impl Stage {
    pub fn new(shape: Shape, layers: Range<usize>) -> Stage {
        Stage {
            shape,
            layers,
            slots: Vec::new(),
            scratch: Scratch::default(),
        }
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    pub fn is_first(&self) -> bool {
        self.layers.start == 0
    }

    pub fn is_last(&self) -> bool {
        self.layers.end == self.shape.layers
    }

    /// The parameters this stage computes gradients for.
    pub fn params(&self) -> Range<usize> {
        self.shape.stage_params(&self.layers)
    }

    /// Slots allocated so far: the most micro-batches ever in flight at once.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The forward pass of one micro-batch into `slot`. The first stage embeds `tokens` into
    /// `stream`; the others take their input in `stream` (`[rows, d]`, from the stage before).
    /// Afterwards `stream` holds the output for the next stage; the last stage returns the loss
    /// against `targets` instead.
    pub fn forward(
        &mut self,
        slot: usize,
        params: &Params,
        tokens: &[u32],
        targets: &[u32],
        rng: &mut Rng,
        stream: &mut Vec<f32>,
    ) -> Result<Option<BatchLoss>> {
        let shape = self.shape;
        shape.check(tokens, targets)?;
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, Slot::default);
        }
        let s = &mut self.slots[slot];
        if self.layers.start == 0 {
            embed(&shape, params, tokens, rng, s, stream);
        } else if stream.len() != tokens.len() * shape.d {
            invalid!(
                "an activation of {} values for {} tokens of width {}",
                stream.len(),
                tokens.len(),
                shape.d
            );
        }
        blocks_forward(
            &shape,
            params,
            &self.layers,
            rng,
            s,
            &mut self.scratch,
            stream,
        );
        if self.layers.end < shape.layers {
            return Ok(None);
        }
        Ok(Some(head_forward(
            &shape,
            params,
            targets,
            s,
            &mut self.scratch,
            stream,
        )))
    }

    /// The backward pass of the micro-batch in `slot`, the gradients of this stage's parameters
    /// written into `grads` (overwritten). The last stage starts from its loss; the others take d
    /// loss / d their output in `dstream`. Afterwards `dstream` holds d loss / d this stage's input
    /// for the stage before (the first stage's is used up by the embeddings).
    pub fn backward(
        &mut self,
        slot: usize,
        params: &Params,
        tokens: &[u32],
        grads: &mut Vec<Vec<f32>>,
        dstream: &mut Vec<f32>,
    ) -> Result<()> {
        let shape = self.shape;
        let Some(s) = self.slots.get(slot) else {
            invalid!("no forward pass in slot {slot}");
        };
        grads.resize_with(params.len(), Vec::new);
        if self.layers.end == shape.layers {
            head_backward(&shape, params, s, &mut self.scratch, grads, dstream);
        } else if dstream.len() != tokens.len() * shape.d {
            invalid!(
                "a gradient of {} values for {} tokens of width {}",
                dstream.len(),
                tokens.len(),
                shape.d
            );
        }
        blocks_backward(
            &shape,
            params,
            &self.layers,
            s,
            &mut self.scratch,
            grads,
            dstream,
        );
        if self.layers.start == 0 {
            embed_backward(&shape, params, tokens, s, &mut self.scratch, grads, dstream);
        }
        Ok(())
    }
}

/// Embeddings: token plus position, then dropout, into `stream`.
fn embed(
    shape: &Shape,
    params: &Params,
    tokens: &[u32],
    rng: &mut Rng,
    slot: &mut Slot,
    stream: &mut Vec<f32>,
) {
    let (d, t) = (shape.d, shape.context);
    let at = shape.index();
    let n = tokens.len();
    stream.resize(n * d, 0.0);
    let (wte, wpe) = (
        params.values[at.wte()].as_slice(),
        params.values[at.wpe()].as_slice(),
    );
    for (row, (out, &token)) in stream.chunks_exact_mut(d).zip(tokens).enumerate() {
        let token = &wte[token as usize * d..][..d];
        let position = &wpe[row % t * d..][..d];
        for ((o, &a), &b) in out.iter_mut().zip(token).zip(position) {
            *o = a + b;
        }
    }
    if draw_mask(&mut slot.embed_mask, n * d, shape.dropout, rng) {
        for (v, &m) in stream.iter_mut().zip(slot.embed_mask.iter()) {
            *v *= m;
        }
    }
}

/// The blocks `layers` forward on `stream` (`[N, d]`), each block's activations into `slot`.
fn blocks_forward(
    shape: &Shape,
    params: &Params,
    layers: &Range<usize>,
    rng: &mut Rng,
    slot: &mut Slot,
    scratch: &mut Scratch,
    stream: &mut [f32],
) {
    let Shape {
        heads,
        d,
        context: t,
        dropout,
        ..
    } = *shape;
    let n = stream.len() / d;
    let batch = n / t;
    let hidden = 4 * d;
    let index = shape.index();
    let p = |i: usize| params.values[i].as_slice();
    let branch = &mut scratch.branch;
    branch.resize(n * d, 0.0);
    slot.layers.resize_with(layers.len(), Layer::default);
    for (l, w) in layers.clone().zip(slot.layers.iter_mut()) {
        let at = |offset| index.block(l, offset);
        // Attention.
        w.ln1.forward(stream, p(at(LN1)), p(at(LN1) + 1));
        w.qkv.resize(n * 3 * d, 0.0);
        matmul(
            &mut w.qkv,
            MatRef::row_major(&w.ln1.out, n, d),
            MatRef::row_major(p(at(QKV)), d, 3 * d),
            false,
        );
        add_bias(&mut w.qkv, p(at(QKV) + 1));
        w.probs.resize(batch * heads * t * t, 0.0);
        w.attended.resize(n * d, 0.0);
        attention_forward(&w.qkv, &mut w.probs, &mut w.attended, heads, t, d);
        matmul(
            branch,
            MatRef::row_major(&w.attended, n, d),
            MatRef::row_major(p(at(PROJ)), d, d),
            false,
        );
        let masked = draw_mask(&mut w.attn_mask, n * d, dropout, rng);
        join(
            stream,
            branch,
            p(at(PROJ) + 1),
            masked.then_some(&w.attn_mask[..]),
        );
        // MLP.
        w.ln2.forward(stream, p(at(LN2)), p(at(LN2) + 1));
        w.pre.resize(n * hidden, 0.0);
        matmul(
            &mut w.pre,
            MatRef::row_major(&w.ln2.out, n, d),
            MatRef::row_major(p(at(FC)), d, hidden),
            false,
        );
        gelu(&mut w.pre, &mut w.tanh, &mut w.act, p(at(FC) + 1));
        matmul(
            branch,
            MatRef::row_major(&w.act, n, hidden),
            MatRef::row_major(p(at(OUT)), hidden, d),
            false,
        );
        let masked = draw_mask(&mut w.out_mask, n * d, dropout, rng);
        join(
            stream,
            branch,
            p(at(OUT) + 1),
            masked.then_some(&w.out_mask[..]),
        );
    }
}

/// The final norm, the head and the loss against `targets`; d loss / d logits into `slot`.
fn head_forward(
    shape: &Shape,
    params: &Params,
    targets: &[u32],
    slot: &mut Slot,
    scratch: &mut Scratch,
    stream: &[f32],
) -> BatchLoss {
    let (d, vocab) = (shape.d, shape.vocab);
    let at = shape.index();
    let p = |i: usize| params.values[i].as_slice();
    let n = stream.len() / d;
    slot.ln_f.forward(stream, p(at.ln_f()), p(at.ln_f() + 1));
    let logits = &mut scratch.logits;
    logits.resize(n * vocab, 0.0);
    matmul(
        logits,
        MatRef::row_major(&slot.ln_f.out, n, d),
        MatRef::row_major(p(at.head()), d, vocab),
        false,
    );
    add_bias(logits, p(at.head() + 1));
    slot.dlogits.resize(n * vocab, 0.0);
    softmax_cross_entropy(logits, targets, vocab, &mut slot.dlogits)
}

/// The head's and the final norm's gradients; d loss / d the stream into `dstream`.
fn head_backward(
    shape: &Shape,
    params: &Params,
    slot: &Slot,
    scratch: &mut Scratch,
    grads: &mut [Vec<f32>],
    dstream: &mut Vec<f32>,
) {
    let (d, vocab) = (shape.d, shape.vocab);
    let at = shape.index();
    let p = |i: usize| params.values[i].as_slice();
    let n = slot.dlogits.len() / vocab;
    let dnorm = &mut scratch.dnorm;
    linear_backward(
        grads,
        at.head(),
        &slot.ln_f.out,
        &slot.dlogits,
        (d, vocab),
        Some((dnorm, p(at.head()))),
    );
    dstream.clear();
    dstream.resize(n * d, 0.0);
    let (dgamma, dbeta) = pair(grads, at.ln_f());
    slot.ln_f
        .backward(dnorm, p(at.ln_f()), dstream, dgamma, dbeta);
}

/// The blocks `layers` backward from d loss / d their output in `dstream`, which ends as d loss /
/// d their input.
fn blocks_backward(
    shape: &Shape,
    params: &Params,
    layers: &Range<usize>,
    slot: &Slot,
    scratch: &mut Scratch,
    grads: &mut [Vec<f32>],
    dstream: &mut [f32],
) {
    let Shape {
        heads,
        d,
        context: t,
        ..
    } = *shape;
    let hidden = 4 * d;
    let index = shape.index();
    let p = |i: usize| params.values[i].as_slice();
    let Scratch {
        dbranch,
        dnorm,
        dhidden,
        dattended,
        dqkv,
        dprobs,
        ..
    } = scratch;
    let n = dstream.len() / d;
    for (l, w) in layers.clone().zip(slot.layers.iter()).rev() {
        let at = |offset| index.block(l, offset);
        // MLP.
        let dout = masked(dstream, dbranch, &w.out_mask);
        linear_backward(
            grads,
            at(OUT),
            &w.act,
            dout,
            (hidden, d),
            Some((dhidden, p(at(OUT)))),
        );
        gelu_backward(dhidden, &w.pre, &w.tanh);
        linear_backward(
            grads,
            at(FC),
            &w.ln2.out,
            dhidden,
            (d, hidden),
            Some((dnorm, p(at(FC)))),
        );
        {
            let (dgamma, dbeta) = pair(grads, at(LN2));
            w.ln2.backward(dnorm, p(at(LN2)), dstream, dgamma, dbeta);
        }
        // Attention.
        let dproj = masked(dstream, dbranch, &w.attn_mask);
        linear_backward(
            grads,
            at(PROJ),
            &w.attended,
            dproj,
            (d, d),
            Some((dattended, p(at(PROJ)))),
        );
        dqkv.resize(n * 3 * d, 0.0);
        dprobs.resize(w.probs.len(), 0.0);
        attention_backward(&w.qkv, &w.probs, dattended, dqkv, dprobs, heads, t, d);
        linear_backward(
            grads,
            at(QKV),
            &w.ln1.out,
            dqkv,
            (d, 3 * d),
            Some((dnorm, p(at(QKV)))),
        );
        let (dgamma, dbeta) = pair(grads, at(LN1));
        w.ln1.backward(dnorm, p(at(LN1)), dstream, dgamma, dbeta);
    }
}

/// Embeddings: every row's gradient to its token's row and its position's, in row order.
fn embed_backward(
    shape: &Shape,
    params: &Params,
    tokens: &[u32],
    slot: &Slot,
    scratch: &mut Scratch,
    grads: &mut [Vec<f32>],
    dstream: &[f32],
) {
    let (d, t) = (shape.d, shape.context);
    let at = shape.index();
    let dx = masked(dstream, &mut scratch.dbranch, &slot.embed_mask);
    let (dwte, dwpe) = pair(grads, at.wte());
    dwte.clear();
    dwte.resize(params.values[at.wte()].len(), 0.0);
    dwpe.clear();
    dwpe.resize(params.values[at.wpe()].len(), 0.0);
    for (row, (dx, &token)) in dx.chunks_exact(d).zip(tokens).enumerate() {
        let token = &mut dwte[token as usize * d..][..d];
        for (g, &v) in token.iter_mut().zip(dx) {
            *g += v;
        }
        let position = &mut dwpe[row % t * d..][..d];
        for (g, &v) in position.iter_mut().zip(dx) {
            *g += v;
        }
    }
}

/// Two neighbouring gradient buffers, both writable.
fn pair(grads: &mut [Vec<f32>], first: usize) -> (&mut Vec<f32>, &mut Vec<f32>) {
    let (a, b) = grads[first..].split_at_mut(1);
    (&mut a[0], &mut b[0])
}

/// A linear layer `y = x·W + b` (`W` `[in, out]` at `weight`, its bias next) from d loss / d y:
/// the weight's and the bias's gradients, and with `input`, d loss / d x into its buffer.
fn linear_backward(
    grads: &mut [Vec<f32>],
    weight: usize,
    x: &[f32],
    dy: &[f32],
    (fan_in, fan_out): (usize, usize),
    input: Option<(&mut Vec<f32>, &[f32])>,
) {
    let rows = dy.len() / fan_out;
    let (dw, db) = pair(grads, weight);
    dw.resize(fan_in * fan_out, 0.0);
    let dy_m = MatRef::row_major(dy, rows, fan_out);
    matmul(dw, MatRef::row_major(x, rows, fan_in).t(), dy_m, false);
    db.resize(fan_out, 0.0);
    column_sums(dy, fan_out, db);
    if let Some((dx, w)) = input {
        dx.resize(rows * fan_in, 0.0);
        matmul(dx, dy_m, MatRef::row_major(w, fan_in, fan_out).t(), false);
    }
}
