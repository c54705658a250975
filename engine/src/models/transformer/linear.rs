//! A linear layer's backward pass on the parameter buffers, and the gradient buffers of a weight
//! and its bias side by side.

use crate::linalg::{MatRef, matmul};
use crate::models::mlp::column_sums;

/// Two neighbouring gradient buffers, both writable.
pub(super) fn pair(grads: &mut [Vec<f32>], first: usize) -> (&mut Vec<f32>, &mut Vec<f32>) {
    let (a, b) = grads[first..].split_at_mut(1);
    (&mut a[0], &mut b[0])
}

/// A linear layer `y = x·W + b` (`W` `[in, out]` at `weight`, its bias next) from d loss / d y:
/// the weight's and the bias's gradients, and with `input`, d loss / d x into its buffer.
pub(super) fn linear_backward(
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
