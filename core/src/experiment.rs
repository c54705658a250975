//! The `DroverExperiment` document: a hyper-parameter search, in the same conventions as `DroverJob`.
//!
//! An experiment is a trial template (a `DroverJob` spec of type `train` or `command`), a search space
//! whose parameters name the template's fields (`train.optimizer.lr`) or, for `command` trials, plain
//! hyper-parameters handed to the program, the metric to optimise, the searcher and the budgets.
//! Parsing is strict and every error names the field; [`crate::experiment_validate`] holds the
//! semantic checks and [`build_trial`] turns one point of the space into the `DroverJob` that runs it.
//!
//! This module only gathers the parts: the document's types (`definition`) and the trial jobs built
//! from it (`trial`); [`DroverExperiment::parse`] is in the crate's parsing module, above both.

mod definition;
mod trial;

pub use crate::document::EXPERIMENT_KIND;
pub use definition::*;
pub use trial::{
    EXPERIMENT_LABEL, HPARAM_ENV_PREFIX, HPARAMS_ENV, TRIAL_LABEL, TrialRun, build_trial,
    hparam_env_name, is_spec_path,
};

#[cfg(test)]
mod tests;
