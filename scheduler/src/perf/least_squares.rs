//! Non-negative least squares for the five coefficients of Optimus's speed model (exact: every
//! active set is tried), which both the online fit and the simulator's measured models use.

/// Non-negative least squares for five unknowns: the best unconstrained solution over every active set
/// whose coefficients are all non-negative (exact for so few unknowns).
pub fn nnls(rows: &[([f64; 5], f64)]) -> [f64; 5] {
    // The full normal equations once; each active set solves its sub-block (no allocation).
    let mut gram = [[0.0; 5]; 5];
    let mut rhs = [0.0; 5];
    for (x, y) in rows {
        for i in 0..5 {
            for j in 0..5 {
                gram[i][j] += x[i] * x[j];
            }
            rhs[i] += x[i] * y;
        }
    }
    let mut best = ([0.0; 5], f64::INFINITY);
    for mask in 1u32..32 {
        let mut active = [0usize; 5];
        let mut k = 0;
        for (i, slot) in (0..5)
            .filter(|i| mask & (1 << i) != 0)
            .zip(active.iter_mut())
        {
            *slot = i;
            k += 1;
        }
        let mut m = [[0.0; 6]; 5];
        for r in 0..k {
            for c in 0..k {
                m[r][c] = gram[active[r]][active[c]];
            }
            m[r][k] = rhs[active[r]];
        }
        let Some(solution) = solve(&mut m, k) else {
            continue;
        };
        if solution[..k].iter().any(|&v| v < 0.0) {
            continue;
        }
        let mut theta = [0.0; 5];
        for r in 0..k {
            theta[active[r]] = solution[r];
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

/// Gauss-Jordan elimination with partial pivoting on the augmented k × (k+1) top-left block of `m`.
#[expect(
    clippy::needless_range_loop,
    reason = "index arithmetic over two rows of one matrix"
)]
fn solve(m: &mut [[f64; 6]; 5], k: usize) -> Option<[f64; 5]> {
    for col in 0..k {
        let pivot = (col..k).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[pivot][col].abs() < 1e-12 {
            return None;
        }
        m.swap(col, pivot);
        let pivot_row = m[col];
        for row in 0..k {
            if row != col {
                let factor = m[row][col] / pivot_row[col];
                for c in col..=k {
                    m[row][c] -= factor * pivot_row[c];
                }
            }
        }
    }
    let mut solution = [0.0; 5];
    for i in 0..k {
        solution[i] = m[i][k] / m[i][i];
    }
    Some(solution)
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
