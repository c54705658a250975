//! Tests' referee for the hand-written training steps: each held to candle's autograd through the
//! model's forward pass (loss, correct predictions and every gradient).

use super::loss::{BatchLoss, correct};
use super::model::Model;
use crate::params::Params;
use crate::rng::Rng;
use candle_core::{Result, Tensor};

/// Tests' referee for the hand-written steps: `model`'s [`Model::gradients`] on `x` (row-major, the
/// batch as the data holds it) against candle's autograd through [`Model::forward`] on `input`; see
/// [`assert_step_matches_autograd`].
pub(super) fn assert_matches_autograd(
    model: &mut dyn Model,
    params: &Params,
    x: &[f32],
    input: &Tensor,
    targets: &[u32],
) {
    assert_step_matches_autograd(model, params, input, targets, |model, rng, grads| {
        model.gradients(params, x, targets, rng, grads)
    });
}

/// Tests' referee for the hand-written steps: `step` (run twice, the first time into buffers of the
/// wrong sizes full of garbage) against candle's autograd through [`Model::forward`] on `input`,
/// both drawing dropout from `Rng::seed(0)`: loss, correct predictions and every gradient.
pub(super) fn assert_step_matches_autograd(
    model: &mut dyn Model,
    params: &Params,
    input: &Tensor,
    targets: &[u32],
    mut step: impl FnMut(&mut dyn Model, &mut Rng, &mut Vec<Vec<f32>>) -> Option<Result<BatchLoss>>,
) {
    let mut grads = vec![vec![f32::NAN; 3]; 2];
    let mut manual = None;
    for _ in 0..2 {
        manual = Some(
            step(model, &mut Rng::seed(0), &mut grads)
                .expect("a hand-written step")
                .expect("backward"),
        );
    }
    let manual = manual.expect("ran");
    let logits = model
        .forward(input, true, &mut Rng::seed(0))
        .expect("forward");
    let target_tensor =
        Tensor::from_slice(targets, targets.len(), input.device()).expect("targets");
    let loss = candle_nn::loss::cross_entropy(&logits, &target_tensor).expect("loss");
    let auto = params
        .gradients(&loss.backward().expect("backward"))
        .expect("grads");
    let auto_loss = f64::from(loss.to_scalar::<f32>().expect("scalar"));
    assert!(
        (manual.loss - auto_loss).abs() < 1e-5,
        "{input:?}: loss {} vs {auto_loss}",
        manual.loss
    );
    assert_eq!(
        manual.correct,
        correct(&logits, &target_tensor).expect("correct")
    );
    assert_eq!(grads.len(), auto.len());
    for (name, (m, a)) in params.names.iter().zip(grads.iter().zip(&auto)) {
        assert_eq!(m.len(), a.len(), "{name}");
        for (x, y) in m.iter().zip(a) {
            assert!((x - y).abs() <= 1e-5 + 1e-4 * y.abs(), "{name}: {x} vs {y}");
        }
    }
}
