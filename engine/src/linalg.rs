//! Dense `f32` matrix products between host buffers, written straight into the caller's memory.
//!
//! candle's `matmul` wants its operands in tensors and allocates its result, so a training step through
//! it copies every weight in and every gradient out. The MLP's hand-written backward instead calls the
//! gemm kernels candle's CPU backend uses on the parameter and gradient buffers themselves, through
//! this module. It is one of the few places allowed `unsafe` (Cargo.toml lists them): a view can
//! only be made over a slice it fits in, and the product checks every shape before the kernel sees
//! a pointer.

#![expect(
    unsafe_code,
    reason = "the gemm kernels take raw pointers; the views and shapes are checked first"
)]

/// A read-only matrix over a slice: element `(r, c)` is `data[r * row_stride + c * col_stride]`.
/// Made only by [`MatRef::row_major`], [`MatRef::columns`] and [`MatRef::t`], so it never reaches
/// past its slice.
#[derive(Debug, Clone, Copy)]
pub struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

impl<'a> MatRef<'a> {
    /// `data` as a row-major `rows × cols` matrix.
    ///
    /// # Panics
    /// When `data` does not hold exactly `rows × cols` values (a bug in the caller's shapes).
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        assert_eq!(
            Some(data.len()),
            rows.checked_mul(cols),
            "a {rows}×{cols} matrix over {} values",
            data.len()
        );
        Self {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// Columns `from..from + cols` of a row-major `rows × stride` matrix over `data`: a block of a
    /// wider matrix, without copying.
    ///
    /// # Panics
    /// When `data` does not hold exactly `rows × stride` values or the columns run past a row.
    pub fn columns(data: &'a [f32], rows: usize, stride: usize, from: usize, cols: usize) -> Self {
        assert_eq!(
            Some(data.len()),
            rows.checked_mul(stride),
            "a {rows}×{stride} matrix over {} values",
            data.len()
        );
        assert!(
            from.checked_add(cols).is_some_and(|end| end <= stride),
            "columns {from}..{} of {stride}",
            from.saturating_add(cols)
        );
        Self {
            data: &data[from.min(data.len())..],
            rows,
            cols,
            row_stride: stride,
            col_stride: 1,
        }
    }

    /// The transpose, without moving anything.
    pub fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }
}

/// A writable matrix over a slice: row-major with a row stride, so it can be a block of columns of a
/// wider matrix. Made only by [`MatMut::row_major`] and [`MatMut::columns`], so it never reaches past
/// its slice.
#[derive(Debug)]
pub struct MatMut<'a> {
    data: &'a mut [f32],
    rows: usize,
    cols: usize,
    row_stride: usize,
}

impl<'a> MatMut<'a> {
    /// `data` as a row-major `rows × cols` matrix.
    ///
    /// # Panics
    /// When `data` does not hold exactly `rows × cols` values (a bug in the caller's shapes).
    pub fn row_major(data: &'a mut [f32], rows: usize, cols: usize) -> Self {
        MatRef::row_major(data, rows, cols);
        Self {
            data,
            rows,
            cols,
            row_stride: cols,
        }
    }

    /// Columns `from..from + cols` of a row-major `rows × stride` matrix over `data`.
    ///
    /// # Panics
    /// When `data` does not hold exactly `rows × stride` values or the columns run past a row.
    pub fn columns(
        data: &'a mut [f32],
        rows: usize,
        stride: usize,
        from: usize,
        cols: usize,
    ) -> Self {
        let view = MatRef::columns(data, rows, stride, from, cols);
        let (rows, cols) = (view.rows, view.cols);
        let from = from.min(data.len());
        Self {
            data: &mut data[from..],
            rows,
            cols,
            row_stride: stride,
        }
    }
}

/// `dst = a · b`, or `dst += a · b` when `accumulate`; `dst` is row-major `a.rows × b.cols`. Runs on
/// rayon's pool; the kernels split the output among threads, never the inner dimension, so a product
/// comes out the same on every run (exact resume relies on it).
///
/// # Panics
/// When the shapes do not agree (a bug in the caller's shapes).
pub fn matmul(dst: &mut [f32], a: MatRef<'_>, b: MatRef<'_>, accumulate: bool) {
    let (m, n) = (a.rows, b.cols);
    assert_eq!(
        a.cols, b.rows,
        "inner dimensions of a {m}×{} · {}×{n} product",
        a.cols, b.rows
    );
    assert_eq!(
        dst.len(),
        m * n,
        "a {m}×{n} product into {} values",
        dst.len()
    );
    let parallelism = match rayon::current_num_threads() {
        1 => gemm::Parallelism::None,
        threads => gemm::Parallelism::Rayon(threads),
    };
    product(MatMut::row_major(dst, m, n), a, b, accumulate, parallelism);
}

/// [`matmul`] into any writable view (columns of a wider matrix, say), on rayon's pool.
///
/// # Panics
/// When the shapes do not agree (a bug in the caller's shapes).
pub fn matmul_into(dst: MatMut<'_>, a: MatRef<'_>, b: MatRef<'_>, accumulate: bool) {
    assert_eq!(
        (a.cols, dst.rows, dst.cols),
        (b.rows, a.rows, b.cols),
        "a {}×{} · {}×{} product into {}×{}",
        a.rows,
        a.cols,
        b.rows,
        b.cols,
        dst.rows,
        dst.cols
    );
    let parallelism = match rayon::current_num_threads() {
        1 => gemm::Parallelism::None,
        threads => gemm::Parallelism::Rayon(threads),
    };
    product(dst, a, b, accumulate, parallelism);
}

/// [`matmul`] into any writable view, on the calling thread alone: for many small products that the
/// caller runs in parallel itself (attention's, one per sequence and head).
///
/// # Panics
/// When the shapes do not agree (a bug in the caller's shapes).
pub fn matmul_serial(dst: MatMut<'_>, a: MatRef<'_>, b: MatRef<'_>, accumulate: bool) {
    product(dst, a, b, accumulate, gemm::Parallelism::None);
}

fn product(
    dst: MatMut<'_>,
    a: MatRef<'_>,
    b: MatRef<'_>,
    accumulate: bool,
    parallelism: gemm::Parallelism,
) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(
        k, b.rows,
        "inner dimensions of a {m}×{k} · {}×{n} product",
        b.rows
    );
    assert!(
        dst.rows == m && dst.cols == n,
        "a {m}×{n} product into a {}×{} matrix",
        dst.rows,
        dst.cols
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for row in dst.data.chunks_mut(dst.row_stride) {
                row[..n].fill(0.0);
            }
        }
        return;
    }
    // SAFETY: `a` and `b` never reach past their slices (see `MatRef`): with positive strides the
    // largest offset the kernel reads is (rows−1)·row_stride + (cols−1)·col_stride, which is len−1
    // for a row-major view and for its transpose alike, and for a block of columns `from..from+cols`
    // of a `rows × stride` matrix (its slice starting at `from`) (rows−1)·stride + cols − 1 ≤
    // rows·stride − from − 1 = len − 1, transposed or not. `dst` is such a view too (row-major, or a
    // block of columns), m×n as just checked, so the kernel writes only inside its slice; being a
    // unique borrow it cannot overlap `a` or `b`. Strides are at most the length of the matrix a
    // view was made from, so they fit in an isize. With `read_dst` false the kernel only writes
    // `dst`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.data.as_mut_ptr(),
            1,
            dst.row_stride as isize,
            accumulate,
            a.data.as_ptr(),
            a.col_stride as isize,
            a.row_stride as isize,
            b.data.as_ptr(),
            b.col_stride as isize,
            b.row_stride as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: MatRef<'_>, b: MatRef<'_>) -> Vec<f32> {
        let at = |m: &MatRef<'_>, r: usize, c: usize| m.data[r * m.row_stride + c * m.col_stride];
        let mut out = vec![0.0f32; a.rows * b.cols];
        for r in 0..a.rows {
            for c in 0..b.cols {
                out[r * b.cols + c] = (0..a.cols).map(|i| at(&a, r, i) * at(&b, i, c)).sum();
            }
        }
        out
    }

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7 + seed * 13) % 23) as f32 / 11.0 - 1.0)
            .collect()
    }

    #[test]
    fn products_of_every_orientation_match_the_definition() {
        let (m, k, n) = (37, 70, 19);
        let a = values(m * k, 1);
        let b = values(k * n, 2);
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let a = if ta {
                MatRef::row_major(&a, k, m).t()
            } else {
                MatRef::row_major(&a, m, k)
            };
            let b = if tb {
                MatRef::row_major(&b, n, k).t()
            } else {
                MatRef::row_major(&b, k, n)
            };
            let expected = naive(a, b);
            let mut dst = vec![f32::NAN; m * n];
            matmul(&mut dst, a, b, false);
            for (x, y) in dst.iter().zip(&expected) {
                assert!((x - y).abs() < 1e-4, "{ta} {tb}: {x} vs {y}");
            }
            // Accumulating adds the product to what is there.
            matmul(&mut dst, a, b, true);
            for (x, y) in dst.iter().zip(&expected) {
                assert!((x - 2.0 * y).abs() < 2e-4, "{ta} {tb}: {x} vs 2×{y}");
            }
        }
    }

    #[test]
    fn blocks_of_columns_multiply_as_the_columns_they_hold() {
        // dst = A[:, 5..16] · B[:, 5..16]ᵀ for row-major A (4×20) and B (3×20): a sum over part of
        // the inner dimension, as the CNN splits its kernel gradients.
        let (a, b) = (values(4 * 20, 3), values(3 * 20, 4));
        let mut dst = vec![f32::NAN; 12];
        matmul(
            &mut dst,
            MatRef::columns(&a, 4, 20, 5, 11),
            MatRef::columns(&b, 3, 20, 5, 11).t(),
            false,
        );
        for (index, v) in dst.iter().enumerate() {
            let (r, c) = (index / 3, index % 3);
            let expected: f32 = (5..16).map(|i| a[r * 20 + i] * b[c * 20 + i]).sum();
            assert!((v - expected).abs() < 1e-4, "{r},{c}: {v} vs {expected}");
        }
    }

    #[test]
    fn a_product_into_a_block_of_columns_leaves_the_other_columns_alone() {
        // dst[:, 4..7] = A · B for A (5×3) and B (3×3), dst 5×10 full of 9s; then += the same.
        let (a, b) = (values(15, 5), values(9, 6));
        let (a, b) = (MatRef::row_major(&a, 5, 3), MatRef::row_major(&b, 3, 3));
        let expected = naive(a, b);
        let mut dst = vec![9.0f32; 50];
        matmul_serial(MatMut::columns(&mut dst, 5, 10, 4, 3), a, b, false);
        matmul_serial(MatMut::columns(&mut dst, 5, 10, 4, 3), a, b, true);
        for (index, v) in dst.iter().enumerate() {
            let (r, c) = (index / 10, index % 10);
            if (4..7).contains(&c) {
                let e = 2.0 * expected[r * 3 + c - 4];
                assert!((v - e).abs() < 1e-4, "{r},{c}: {v} vs {e}");
            } else {
                assert_eq!(*v, 9.0, "{r},{c}");
            }
        }
        // An empty inner dimension zeroes only the block.
        matmul_serial(
            MatMut::columns(&mut dst, 5, 10, 7, 3),
            MatRef::row_major(&[], 5, 0),
            MatRef::row_major(&[], 0, 3),
            false,
        );
        assert!(
            dst.chunks(10)
                .all(|row| row[7..] == [0.0; 3] && row[0] == 9.0)
        );
    }

    #[test]
    #[should_panic(expected = "columns 15..21 of 20")]
    fn a_block_past_the_rows_is_refused() {
        let a = values(40, 0);
        MatRef::columns(&a, 2, 20, 15, 6);
    }

    #[test]
    fn an_empty_inner_dimension_gives_zeros() {
        let mut dst = vec![1.0f32; 6];
        matmul(
            &mut dst,
            MatRef::row_major(&[], 2, 0),
            MatRef::row_major(&[], 0, 3),
            false,
        );
        assert_eq!(dst, vec![0.0; 6]);
    }

    #[test]
    #[should_panic(expected = "inner dimensions")]
    fn mismatched_shapes_are_refused() {
        let a = values(6, 0);
        let mut dst = vec![0.0f32; 4];
        matmul(
            &mut dst,
            MatRef::row_major(&a, 2, 3),
            MatRef::row_major(&a, 2, 3),
            false,
        );
    }

    #[test]
    #[should_panic(expected = "a 2×4 matrix over 6 values")]
    fn a_view_must_fit_its_slice() {
        let a = values(6, 0);
        let _ = MatRef::row_major(&a, 2, 4);
    }
}
