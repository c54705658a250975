//! The models a job spec can name, built for what the dataset says about their ends ([`Io`]), with
//! their parameters registered.

use super::charlm::CharLm;
use super::cnn::Cnn;
use super::error::invalid;
use super::mlp::Mlp;
use super::model::Model;
use crate::params::Params;
use crate::rng::Rng;
use candle_core::Result;
use drover_core::spec::ModelSpec;

/// What the dataset says about the model's ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Io {
    Classes {
        input_shape: Vec<usize>,
        classes: usize,
    },
    Tokens {
        vocab: usize,
    },
}

/// Builds the model a spec names for the dataset's inputs and outputs, registering its parameters.
pub fn build(spec: &ModelSpec, io: &Io, params: &mut Params, seed: u64) -> Result<Box<dyn Model>> {
    let mut rng = Rng::derive(seed, 0x1417);
    Ok(match (spec, io) {
        (
            ModelSpec::Mlp { hidden, dropout },
            Io::Classes {
                input_shape,
                classes,
            },
        ) => {
            let input = input_shape.iter().product();
            Box::new(Mlp::new(
                params, &mut rng, input, hidden, *classes, *dropout,
            )?)
        }
        (
            ModelSpec::Cnn {
                channels,
                hidden,
                dropout,
            },
            Io::Classes {
                input_shape,
                classes,
            },
        ) => Box::new(Cnn::new(
            params,
            &mut rng,
            input_shape,
            channels,
            hidden,
            *classes,
            *dropout,
        )?),
        (
            ModelSpec::Charlm {
                layers,
                heads,
                d_model,
                context,
                dropout,
            },
            Io::Tokens { vocab },
        ) => Box::new(CharLm::new(
            params,
            &mut rng,
            *vocab,
            *layers as usize,
            *heads as usize,
            *d_model as usize,
            *context as usize,
            *dropout,
        )?),
        (ModelSpec::Charlm { .. }, Io::Classes { .. }) => {
            invalid!("the charlm model needs a text dataset")
        }
        (_, Io::Tokens { .. }) => invalid!("a text dataset needs the charlm model"),
    })
}
