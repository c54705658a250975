//! Grid search: every point of the grid once, in a fixed order (see [`crate::space::grid`]).

use crate::space::{self, Dim};
use drover_core::experiment::Assignment;

/// The grid's `index`-th point, `None` past its end.
pub fn nth(dims: &[Dim<'_>], points: u32, index: usize) -> Option<Assignment> {
    space::grid(dims, points).into_iter().nth(index)
}
