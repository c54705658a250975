//! Performance models a policy fits online from observations: the speed of a job as a function of its
//! shape (Optimus's synchronous model), its convergence curve, and the assignment of parameter blocks to
//! PS shards that balances their load.

pub mod convergence;
mod least_squares;
pub mod speed;

pub use convergence::ConvergenceModel;
/// Optimus's parameter assignment lives in core, where the engine (which places tensors on its PS
/// shards) uses it too.
pub use drover_core::blocks::{self, Block, BlockSlice, assign_blocks};
pub use least_squares::nnls;
pub use speed::{Layout, SpeedModel};
