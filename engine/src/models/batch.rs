//! Classification batches from a dataset's rows: their features gathered into a buffer or a tensor,
//! and their labels.

use candle_core::{Device, Result, Tensor};

/// Gathers the feature rows of a classification batch into `out` (row-major `[rows, dim]`).
pub fn gather_rows(out: &mut Vec<f32>, x: &[f32], rows: &[u32], dim: usize) {
    out.clear();
    out.reserve(rows.len() * dim);
    for &r in rows {
        out.extend_from_slice(&x[r as usize * dim..(r as usize + 1) * dim]);
    }
}

/// The input tensor for a classification batch.
pub fn class_batch(
    x: &[f32],
    rows: &[u32],
    dim: usize,
    input_shape: &[usize],
    device: &Device,
) -> Result<Tensor> {
    let mut data = Vec::new();
    gather_rows(&mut data, x, rows, dim);
    let mut shape = vec![rows.len()];
    shape.extend_from_slice(input_shape);
    Tensor::from_vec(data, shape, device)
}

/// Labels as a u32 tensor.
pub fn labels(y: &[u32], rows: &[u32], device: &Device) -> Result<Tensor> {
    let labels: Vec<u32> = rows.iter().map(|&r| y[r as usize]).collect();
    Tensor::from_vec(labels, rows.len(), device)
}
