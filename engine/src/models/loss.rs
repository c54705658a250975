//! Classification loss and accuracy: the mean softmax cross-entropy of a batch with its gradient
//! (for the hand-written steps), and the correct predictions in a batch of logits.

use super::vector::{self, vectorised};
use candle_core::{D, DType, Result, Tensor};

/// What one batch's backward pass measured besides the gradients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchLoss {
    pub loss: f64,
    pub correct: usize,
}

vectorised! {
    /// Mean cross-entropy over a batch of logits `[b, c]` and the correct predictions; d loss / d
    /// logits goes into `grad` (`[b, c]`).
    pub(super) fn softmax_cross_entropy<'a>(
        logits: &'a [f32],
        targets: &'a [u32],
        classes: usize,
        grad: &'a mut [f32],
    ) -> BatchLoss {
        let b = targets.len();
        let mut loss = 0.0f64;
        let mut correct = 0;
        for (row, (&target, out)) in targets.iter().zip(grad.chunks_mut(classes)).enumerate() {
            let z = &logits[row * classes..(row + 1) * classes];
            let (argmax, max) =
                z.iter()
                    .copied()
                    .enumerate()
                    .fold((0, f32::NEG_INFINITY), |best, (i, v)| {
                        if v > best.1 { (i, v) } else { best }
                    });
            if argmax == target as usize {
                correct += 1;
            }
            for (o, &v) in out.iter_mut().zip(z) {
                *o = vector::exp(v - max);
            }
            let total = vector::sum(out);
            loss += f64::from(total.ln() - (z[target as usize] - max));
            let inv = 1.0 / total;
            for o in out.iter_mut() {
                *o = *o * inv / b as f32;
            }
            out[target as usize] -= 1.0 / b as f32;
        }
        BatchLoss {
            loss: loss / b as f64,
            correct,
        }
    }
}

/// Correct predictions in a batch of logits.
pub fn correct(logits: &Tensor, targets: &Tensor) -> Result<usize> {
    let predicted = logits
        .argmax(D::Minus1)?
        .to_dtype(DType::U32)?
        .to_vec1::<u32>()?;
    let targets = targets.to_vec1::<u32>()?;
    Ok(predicted
        .iter()
        .zip(&targets)
        .filter(|(p, t)| p == t)
        .count())
}
