//! Drover's training engine, on candle: the models a job spec names, the engine's own seeded RNG and
//! optimizers over flat parameter buffers, data loaders, and checkpoints that resume exactly.

pub mod checkpoint;
pub mod data;
pub mod device;
pub mod dist;
mod fused;
pub mod linalg;
pub mod models;
pub mod optim;
pub mod params;
mod resident;
pub mod rng;
pub mod sampler;
pub mod trainer;
mod training_loop;

pub use trainer::{Outcome, Reporter, Requests, Run, TrainOptions};
pub use training_loop::train;
