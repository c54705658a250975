//! The character transformer's training step on the host, by hand: every linear layer is one product
//! over the whole batch on the parameter buffers (`linalg`), attention is two small products per
//! sequence and head with the causal softmax between them (and four, with its backward, on the way
//! back), layer norm, bias, GELU, dropout and the residual sums are single passes, and every
//! activation the backward pass needs is kept in buffers reused from step to step.
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

mod attention;
mod norm;
mod pointwise;
use pointwise::{add_bias, draw_mask, gelu, gelu_backward, join, masked};

/// The model's sizes, and where its parameters start in `Params`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Shape {
    /// Index of `wte`; the other parameters follow in the order `CharLm::new` registers them.
    pub first_param: usize,
    pub layers: usize,
    pub heads: usize,
    pub d: usize,
    pub context: usize,
    pub vocab: usize,
    pub dropout: f64,
}

/// Parameters per block, in the order `CharLm::new` registers them, and their offsets in a block.
const PER_BLOCK: usize = 12;
const LN1: usize = 0;
const QKV: usize = 2;
const PROJ: usize = 4;
const LN2: usize = 6;
const FC: usize = 8;
const OUT: usize = 10;

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

/// The buffers of a training step, kept so that a step allocates nothing once the first is done.
#[derive(Default)]
pub(super) struct Step {
    layers: Vec<Layer>,
    embed_mask: Vec<f32>,
    /// The residual stream `[N, d]`.
    stream: Vec<f32>,
    /// A branch's output before it joins the stream `[N, d]`.
    branch: Vec<f32>,
    ln_f: Norm,
    logits: Vec<f32>,
    dlogits: Vec<f32>,
    /// d loss / d the residual stream, and the scratch of the backward pass.
    dstream: Vec<f32>,
    dbranch: Vec<f32>,
    dnorm: Vec<f32>,
    dhidden: Vec<f32>,
    dattended: Vec<f32>,
    dqkv: Vec<f32>,
    dprobs: Vec<f32>,
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Step({} layers)", self.layers.len())
    }
}

/// Which parameter of the model, as an index into `Params`.
#[derive(Debug, Clone, Copy)]
struct Index {
    first: usize,
    layers: usize,
}

impl Index {
    fn wte(self) -> usize {
        self.first
    }

    fn wpe(self) -> usize {
        self.first + 1
    }

    fn block(self, layer: usize, offset: usize) -> usize {
        self.first + 2 + layer * PER_BLOCK + offset
    }

    fn ln_f(self) -> usize {
        self.first + 2 + self.layers * PER_BLOCK
    }

    fn head(self) -> usize {
        self.ln_f() + 2
    }

    fn end(self) -> usize {
        self.head() + 2
    }
}

impl Step {
    /// Forward keeping every activation, then backward, each gradient written into `grads`.
    /// `tokens` and `targets` are `[B, context]`, row-major.
    #[expect(
        clippy::too_many_lines,
        reason = "one pass down and one back up the model, in the order of its layers"
    )]
    pub(super) fn run(
        &mut self,
        shape: &Shape,
        params: &Params,
        tokens: &[u32],
        targets: &[u32],
        rng: &mut Rng,
        grads: &mut Vec<Vec<f32>>,
    ) -> Result<BatchLoss> {
        let Shape {
            first_param,
            layers,
            heads,
            d,
            context: t,
            vocab,
            dropout,
        } = *shape;
        if tokens.is_empty() || !tokens.len().is_multiple_of(t) || targets.len() != tokens.len() {
            invalid!(
                "a batch of whole sequences of {t} tokens with one target each, not {} tokens and {} targets",
                tokens.len(),
                targets.len()
            );
        }
        if let Some(&bad) = tokens.iter().chain(targets).find(|&&v| v as usize >= vocab) {
            invalid!("token {bad} is out of range for a vocabulary of {vocab}");
        }
        let n = tokens.len();
        let batch = n / t;
        let hidden = 4 * d;
        let at = Index {
            first: first_param,
            layers,
        };
        let p = |i: usize| params.values[i].as_slice();
        let Step {
            layers: work,
            embed_mask,
            stream,
            branch,
            ln_f,
            logits,
            dlogits,
            dstream,
            dbranch,
            dnorm,
            dhidden,
            dattended,
            dqkv,
            dprobs,
        } = self;
        work.resize_with(layers, Layer::default);

        // Embeddings: token plus position, then dropout.
        stream.resize(n * d, 0.0);
        let (wte, wpe) = (p(at.wte()), p(at.wpe()));
        for (row, (out, &token)) in stream.chunks_exact_mut(d).zip(tokens).enumerate() {
            let token = &wte[token as usize * d..][..d];
            let position = &wpe[row % t * d..][..d];
            for ((o, &a), &b) in out.iter_mut().zip(token).zip(position) {
                *o = a + b;
            }
        }
        if draw_mask(embed_mask, n * d, dropout, rng) {
            for (v, &m) in stream.iter_mut().zip(embed_mask.iter()) {
                *v *= m;
            }
        }

        branch.resize(n * d, 0.0);
        for (l, w) in work.iter_mut().enumerate() {
            let at = |offset| at.block(l, offset);
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

        // The head and the loss.
        ln_f.forward(stream, p(at.ln_f()), p(at.ln_f() + 1));
        logits.resize(n * vocab, 0.0);
        matmul(
            logits,
            MatRef::row_major(&ln_f.out, n, d),
            MatRef::row_major(p(at.head()), d, vocab),
            false,
        );
        add_bias(logits, p(at.head() + 1));
        dlogits.resize(n * vocab, 0.0);
        let loss = softmax_cross_entropy(logits, targets, vocab, dlogits);

        // Backward.
        grads.resize_with(params.len(), Vec::new);
        for (i, g) in grads.iter_mut().enumerate() {
            if i < at.first || i >= at.end() {
                // Not this model's (nothing else registers parameters today).
                g.clear();
                g.resize(params.values[i].len(), 0.0);
            }
        }
        linear_backward(
            grads,
            at.head(),
            &ln_f.out,
            dlogits,
            (d, vocab),
            Some((dnorm, p(at.head()))),
        );
        dstream.clear();
        dstream.resize(n * d, 0.0);
        {
            let (dgamma, dbeta) = pair(grads, at.ln_f());
            ln_f.backward(dnorm, p(at.ln_f()), dstream, dgamma, dbeta);
        }
        for (l, w) in work.iter().enumerate().rev() {
            let at = |offset| at.block(l, offset);
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

        // Embeddings: every row's gradient to its token's row and its position's, in row order.
        let dx = masked(dstream, dbranch, embed_mask);
        let (dwte, dwpe) = pair(grads, at.wte());
        dwte.clear();
        dwte.resize(wte.len(), 0.0);
        dwpe.clear();
        dwpe.resize(wpe.len(), 0.0);
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
        Ok(loss)
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
