//! The model interface: logits from inputs (candle's forward, which autograd differentiates), and,
//! where a model has one, its hand-written training step on the parameter buffers.

use super::loss::BatchLoss;
use super::transformer::shape::Shape;
use crate::params::Params;
use crate::rng::Rng;
use candle_core::{Result, Tensor};

/// A model: logits from inputs. Classification inputs are `[batch, …input_shape]` (f32); language
/// model inputs are `[batch, context]` token ids (u32) and the logits `[batch·context, vocab]`.
pub trait Model: std::fmt::Debug + Send {
    fn forward(&self, input: &Tensor, train: bool, dropout: &mut Rng) -> Result<Tensor>;

    /// Logits for evaluation (no dropout, no gradient).
    fn evaluate(&self, input: &Tensor) -> Result<Tensor> {
        self.forward(input, false, &mut Rng::seed(0))
    }

    /// Loss and correct predictions for one batch of classification, with the gradient of every
    /// parameter (in `params` order) written into `grads` (resized to fit; whatever it held is
    /// overwritten, so the buffers of an earlier step can be handed back in). A hand-written backward
    /// pass on the host, straight from the parameter buffers; `None` when the model has none (autograd
    /// is used instead). `input` is the batch, row-major `[targets.len(), features]`.
    fn gradients(
        &mut self,
        _params: &Params,
        _input: &[f32],
        _targets: &[u32],
        _rng: &mut Rng,
        _grads: &mut Vec<Vec<f32>>,
    ) -> Option<Result<BatchLoss>> {
        None
    }

    /// [`Model::gradients`] for a language model: `tokens` and `targets` are the batch's sequences,
    /// row-major `[batch, context]`.
    fn token_gradients(
        &mut self,
        _params: &Params,
        _tokens: &[u32],
        _targets: &[u32],
        _rng: &mut Rng,
        _grads: &mut Vec<Vec<f32>>,
    ) -> Option<Result<BatchLoss>> {
        None
    }

    /// The transformer's sizes, where the model is one a pipeline can split into stages
    /// ([`super::Stage`]).
    fn transformer(&self) -> Option<Shape> {
        None
    }
}
