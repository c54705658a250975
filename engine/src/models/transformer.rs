//! The character transformer's training step on the host, by hand: every linear layer is one product
//! over the whole batch on the parameter buffers (`linalg`), attention is two small products per
//! sequence and head with the causal softmax between them (and four, with its backward, on the way
//! back), layer norm, bias, GELU, dropout and the residual sums are single passes, and every
//! activation the backward pass needs is kept in buffers reused from step to step.
//!
//! The step is built from pieces — embeddings, a range of blocks, the head and loss, each forward
//! and backward — so that a pipeline stage ([`Stage`]) runs only its own layers, on several
//! micro-batches in flight, each micro-batch's activations in a slot of their own; and a stage's
//! blocks can be split among a tensor-parallel group ([`blocks`]).
//!
//! The same arithmetic as the candle forward in `charlm.rs` (tests hold the two to each other),
//! with two differences of rounding only: exponentials and `tanh` are polynomial approximations that
//! vectorise, and masked attention scores are skipped instead of added as −10⁹. Every loop writes
//! each output from one thread, in a fixed order, so a step gives the same bits on any number of
//! threads (exact resume relies on it).

use super::error::invalid;
use super::loss::{BatchLoss, softmax_cross_entropy};
use crate::linalg::{MatRef, matmul};
use crate::params::Params;
use crate::rng::Rng;
use buffers::{Scratch, Slot};
use candle_core::Result;
use linear::{linear_backward, pair};
use std::ops::Range;

mod attention;
mod blocks;
mod buffers;
mod linear;
mod norm;
mod pointwise;
pub(super) mod shape;
pub use blocks::{Reducer, Split};
use pointwise::{add_bias, draw_mask, masked};
pub use shape::Shape;

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
        blocks::forward(
            shape,
            Split::WHOLE,
            params,
            &all,
            rng,
            slot,
            scratch,
            stream,
            &mut (),
        )?;
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
        blocks::backward(
            shape,
            Split::WHOLE,
            params,
            &all,
            slot,
            scratch,
            grads,
            dstream,
            &mut (),
        )?;
        embed_backward(shape, params, tokens, slot, scratch, grads, dstream);
        Ok(loss)
    }
}

/// One pipeline stage of the transformer: the blocks `layers` (with the embeddings on the first
/// stage, the final norm, head and loss on the last), run forward and backward one micro-batch at
/// a time, each micro-batch in flight keeping its activations in a slot of its own.
///
/// With a [`Split`] of more than one, this worker runs its part of every block's heads and MLP
/// columns and the group's [`Reducer`] sums the partial results (Megatron-LM's split); the rest of
/// the stage is computed alike by every worker of the group.
#[derive(Debug)]
pub struct Stage {
    shape: Shape,
    layers: Range<usize>,
    split: Split,
    slots: Vec<Slot>,
    scratch: Scratch,
}

impl Stage {
    /// The stage running `layers`, split `split` (see [`Split::check`]).
    pub fn new(shape: Shape, layers: Range<usize>, split: Split) -> Result<Stage> {
        split.check(&shape)?;
        Ok(Stage {
            shape,
            layers,
            split,
            slots: Vec::new(),
            scratch: Scratch::default(),
        })
    }

    pub fn split(&self) -> Split {
        self.split
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
    #[expect(
        clippy::too_many_arguments,
        reason = "the micro-batch, where its activations go, and the tensor-parallel group"
    )]
    pub fn forward(
        &mut self,
        slot: usize,
        params: &Params,
        tokens: &[u32],
        targets: &[u32],
        rng: &mut Rng,
        stream: &mut Vec<f32>,
        reducer: &mut dyn Reducer,
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
        blocks::forward(
            &shape,
            self.split,
            params,
            &self.layers,
            rng,
            s,
            &mut self.scratch,
            stream,
            reducer,
        )?;
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
    /// written into `grads` (overwritten; a split stage's gradients of the parameters it splits are
    /// zero outside its part). The last stage starts from its loss; the others take d
    /// loss / d their output in `dstream`. Afterwards `dstream` holds d loss / d this stage's input
    /// for the stage before (the first stage's is used up by the embeddings).
    pub fn backward(
        &mut self,
        slot: usize,
        params: &Params,
        tokens: &[u32],
        grads: &mut Vec<Vec<f32>>,
        dstream: &mut Vec<f32>,
        reducer: &mut dyn Reducer,
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
        blocks::backward(
            &shape,
            self.split,
            params,
            &self.layers,
            s,
            &mut self.scratch,
            grads,
            dstream,
            reducer,
        )?;
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
