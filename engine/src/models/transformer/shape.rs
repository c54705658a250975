//! The transformer's sizes, and where each of its parameters sits in `Params`: the whole model's
//! and a pipeline stage's.

use crate::models::error::invalid;
use candle_core::Result;
use std::ops::Range;

/// The model's sizes, and where its parameters start in `Params`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Index of `wte`; the other parameters follow in the order `CharLm::new` registers them.
    pub first_param: usize,
    pub layers: usize,
    pub heads: usize,
    pub d: usize,
    pub context: usize,
    pub vocab: usize,
    pub dropout: f64,
}

impl Shape {
    pub(super) fn index(&self) -> Index {
        Index {
            first: self.first_param,
            layers: self.layers,
        }
    }

    /// The parameters (indices into `Params`) of the stage that runs `layers`, with the embeddings
    /// when it is the first and the final norm and head when it is the last.
    pub fn stage_params(&self, layers: &Range<usize>) -> Range<usize> {
        let at = self.index();
        let start = if layers.start == 0 {
            at.wte()
        } else {
            at.block(layers.start, 0)
        };
        let end = if layers.end == self.layers {
            at.end()
        } else {
            at.block(layers.end, 0)
        };
        start..end
    }

    /// Whether parameter `i` is one a tensor-parallel group splits (each worker's gradient of it
    /// is its part, zero elsewhere); the others every worker of the group computes whole.
    pub fn is_split(&self, i: usize) -> bool {
        let at = self.index();
        if i < at.block(0, 0) || i >= at.ln_f() {
            return false;
        }
        let offset = (i - at.block(0, 0)) % PER_BLOCK;
        [QKV, QKV + 1, PROJ, FC, FC + 1, OUT].contains(&offset)
    }

    /// Checks a batch of whole sequences with one target each, every token in the vocabulary.
    pub(super) fn check(&self, tokens: &[u32], targets: &[u32]) -> Result<()> {
        let (t, vocab) = (self.context, self.vocab);
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
        Ok(())
    }
}

/// Parameters per block, in the order `CharLm::new` registers them, and their offsets in a block.
pub(super) const PER_BLOCK: usize = 12;
pub(super) const LN1: usize = 0;
pub(super) const QKV: usize = 2;
pub(super) const PROJ: usize = 4;
pub(super) const LN2: usize = 6;
pub(super) const FC: usize = 8;
pub(super) const OUT: usize = 10;

/// Which parameter of the model, as an index into `Params`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Index {
    pub(super) first: usize,
    pub(super) layers: usize,
}

impl Index {
    pub(super) fn wte(self) -> usize {
        self.first
    }

    pub(super) fn wpe(self) -> usize {
        self.first + 1
    }

    pub(super) fn block(self, layer: usize, offset: usize) -> usize {
        self.first + 2 + layer * PER_BLOCK + offset
    }

    pub(super) fn ln_f(self) -> usize {
        self.first + 2 + self.layers * PER_BLOCK
    }

    pub(super) fn head(self) -> usize {
        self.ln_f() + 2
    }

    pub(super) fn end(self) -> usize {
        self.head() + 2
    }
}
