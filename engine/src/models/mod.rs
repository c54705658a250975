//! The models a job spec can name, each sized from the spec and the dataset: an MLP, a LeNet-5 class CNN
//! and a character-level transformer language model. Initialisation and dropout draw from the engine's
//! own RNG. Linear weights are stored `[in, out]`.

mod batch;
mod charlm;
mod cnn;
mod conv;
mod error;
mod layers;
mod loss;
mod mlp;
mod model;
#[cfg(test)]
mod referee;
mod registry;
mod transformer;
pub(crate) mod vector;

pub use batch::{class_batch, gather_rows, labels};
pub use charlm::CharLm;
pub use cnn::Cnn;
pub use loss::{BatchLoss, correct};
pub use mlp::Mlp;
pub use model::Model;
pub use registry::{Io, build};
pub use transformer::{Reducer, Shape as TransformerShape, Split, Stage};
