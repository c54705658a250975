//! The buffers a pass of the transformer keeps: each block's activations for its backward pass, a
//! micro-batch's slot of them, and the scratch every pass uses and leaves.

use super::norm::Norm;

/// One block's activations, kept from the forward pass for the backward.
#[derive(Debug, Default)]
pub(super) struct Layer {
    pub(super) ln1: Norm,
    /// The queries, keys and values `[N, 3d]`.
    pub(super) qkv: Vec<f32>,
    /// The attention weights `[B, heads, T, T]` (zero above the diagonal).
    pub(super) probs: Vec<f32>,
    /// The attention's output before its projection `[N, d]`.
    pub(super) attended: Vec<f32>,
    pub(super) attn_mask: Vec<f32>,
    pub(super) ln2: Norm,
    /// The MLP's first product plus bias, before GELU `[N, 4d]`; the `tanh` GELU took of it; GELU's
    /// output.
    pub(super) pre: Vec<f32>,
    pub(super) tanh: Vec<f32>,
    pub(super) act: Vec<f32>,
    pub(super) out_mask: Vec<f32>,
}

/// What one batch's (or micro-batch's) forward pass keeps for its backward.
#[derive(Debug, Default)]
pub(super) struct Slot {
    /// The activations of the blocks the pass runs, in order.
    pub(super) layers: Vec<Layer>,
    pub(super) embed_mask: Vec<f32>,
    pub(super) ln_f: Norm,
    /// d loss / d logits `[N, vocab]`.
    pub(super) dlogits: Vec<f32>,
}

/// Buffers a pass uses and leaves (shared by every slot).
#[derive(Debug, Default)]
pub(super) struct Scratch {
    /// A branch's output before it joins the stream `[N, d]`.
    pub(super) branch: Vec<f32>,
    /// A tensor-parallel worker's part of a bias, or of a bias's gradient.
    pub(super) bias: Vec<f32>,
    pub(super) logits: Vec<f32>,
    pub(super) dbranch: Vec<f32>,
    pub(super) dnorm: Vec<f32>,
    pub(super) dhidden: Vec<f32>,
    pub(super) dattended: Vec<f32>,
    pub(super) dqkv: Vec<f32>,
    pub(super) dprobs: Vec<f32>,
}
