//! Performance models a policy fits online from observations: the speed of a job as a function of its
//! shape (Optimus's synchronous model), its convergence curve, and the assignment of parameter blocks to
//! PS shards that balances their load.

pub mod blocks;
pub mod convergence;
pub mod speed;

pub use blocks::{Block, BlockSlice, assign_blocks};
pub use convergence::ConvergenceModel;
pub use speed::SpeedModel;

/// Non-negative least squares for five unknowns: the best unconstrained solution over every active set
/// whose coefficients are all non-negative (exact for so few unknowns).
pub fn nnls(rows: &[([f64; 5], f64)]) -> [f64; 5] {
    let mut best = ([0.0; 5], f64::INFINITY);
    for mask in 1u32..32 {
        let active: Vec<usize> = (0..5).filter(|i| mask & (1 << i) != 0).collect();
        let k = active.len();
        let mut ata = vec![vec![0.0; k + 1]; k];
        for (x, y) in rows {
            for (r, &i) in active.iter().enumerate() {
                for (c, &j) in active.iter().enumerate() {
                    ata[r][c] += x[i] * x[j];
                }
                ata[r][k] += x[i] * y;
            }
        }
        let Some(solution) = solve(ata) else { continue };
        if solution.iter().any(|&v| v < 0.0) {
            continue;
        }
        let mut theta = [0.0; 5];
        for (&i, v) in active.iter().zip(solution) {
            theta[i] = v;
        }
        let error: f64 = rows
            .iter()
            .map(|(x, y)| (x.iter().zip(&theta).map(|(a, b)| a * b).sum::<f64>() - y).powi(2))
            .sum();
        if error < best.1 {
            best = (theta, error);
        }
    }
    best.0
}

/// Gauss-Jordan elimination with partial pivoting on an augmented k × (k+1) matrix.
fn solve(mut m: Vec<Vec<f64>>) -> Option<Vec<f64>> {
    let k = m.len();
    for col in 0..k {
        let pivot = (col..k).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[pivot][col].abs() < 1e-12 {
            return None;
        }
        m.swap(col, pivot);
        for row in 0..k {
            if row != col {
                let factor = m[row][col] / m[col][col];
                let pivot_row = m[col].clone();
                for (cell, pivot) in m[row].iter_mut().zip(&pivot_row).skip(col) {
                    *cell -= factor * pivot;
                }
            }
        }
    }
    Some((0..k).map(|i| m[i][k] / m[i][i]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nnls_recovers_non_negative_coefficients() {
        let truth = [2.0, 0.5, 0.0, 0.1, 0.3];
        let rows: Vec<([f64; 5], f64)> = (1..8)
            .flat_map(|p| {
                (1..8).map(move |w| {
                    [
                        32.0 / f64::from(w),
                        1.0,
                        f64::from(w) / f64::from(p),
                        f64::from(w),
                        f64::from(p),
                    ]
                })
            })
            .map(|x| (x, x.iter().zip(&truth).map(|(a, b)| a * b).sum()))
            .collect();
        let theta = nnls(&rows);
        for (got, want) in theta.iter().zip(truth) {
            assert!((got - want).abs() < 1e-6, "{theta:?}");
        }
    }
}
