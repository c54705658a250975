//! The `train` job's document: model, dataset, optimizer, learning-rate schedule, target and
//! initial checkpoint.

use super::defaults;
use crate::schema::one_object;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrainSpec {
    pub model: ModelSpec,
    pub dataset: DatasetSpec,
    #[serde(default)]
    pub optimizer: OptimizerSpec,
    #[serde(default)]
    pub lr_schedule: LrSchedule,
    /// Clip the global gradient norm to this value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_clip_norm: Option<f64>,
    /// The GLOBAL batch, split across workers and unchanged by resizes.
    pub batch_size: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    #[serde(default = "defaults::eval_every")]
    pub eval_every: u64,
    #[serde(default = "defaults::seed")]
    pub seed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_from: Option<InitFrom>,
}

/// The model and its size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[schemars(transform = one_object)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum ModelSpec {
    /// A multi-layer perceptron.
    Mlp {
        #[serde(default = "defaults::mlp_hidden")]
        hidden: Vec<u32>,
        #[serde(default)]
        dropout: f64,
    },
    /// A LeNet-5 class convolutional network; its input size comes from the dataset.
    Cnn {
        #[serde(default = "defaults::cnn_channels")]
        channels: Vec<u32>,
        #[serde(default = "defaults::cnn_hidden")]
        hidden: Vec<u32>,
        #[serde(default)]
        dropout: f64,
    },
    /// A character-level transformer language model.
    Charlm {
        #[serde(default = "defaults::charlm_layers")]
        layers: u32,
        #[serde(default = "defaults::charlm_heads")]
        heads: u32,
        #[serde(default = "defaults::charlm_d_model")]
        d_model: u32,
        #[serde(default = "defaults::charlm_context")]
        context: u32,
        #[serde(default)]
        dropout: f64,
    },
}

/// Where the training data comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[schemars(transform = one_object)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum DatasetSpec {
    /// The UCI handwritten digits shipped with Drover.
    Digits {},
    /// A directory in IDX format (the MNIST family).
    Idx { path: String },
    /// A CSV file of numeric features and a label column.
    Csv {
        path: String,
        /// The label column's name; the last column when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label_column: Option<String>,
    },
    /// Plain text, for language models.
    Text { path: String },
    /// Generated data, for tests and demos.
    Synthetic {
        #[serde(default = "defaults::synthetic_samples")]
        samples: u64,
        #[serde(default = "defaults::synthetic_features")]
        features: u32,
        #[serde(default = "defaults::synthetic_classes")]
        classes: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[schemars(transform = one_object)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum OptimizerSpec {
    Sgd {
        lr: f64,
        #[serde(default)]
        momentum: f64,
        #[serde(default)]
        nesterov: bool,
        #[serde(default)]
        weight_decay: f64,
    },
    Adamw {
        #[serde(default = "defaults::adamw_lr")]
        lr: f64,
        #[serde(default = "defaults::adamw_weight_decay")]
        weight_decay: f64,
        #[serde(default = "defaults::beta1")]
        beta1: f64,
        #[serde(default = "defaults::beta2")]
        beta2: f64,
        #[serde(default = "defaults::eps")]
        eps: f64,
    },
}

impl Default for OptimizerSpec {
    fn default() -> Self {
        OptimizerSpec::Adamw {
            lr: defaults::adamw_lr(),
            weight_decay: defaults::adamw_weight_decay(),
            beta1: defaults::beta1(),
            beta2: defaults::beta2(),
            eps: defaults::eps(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LrSchedule {
    #[serde(default)]
    pub warmup_steps: u64,
    #[serde(default)]
    pub decay: Decay,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Decay {
    #[default]
    None,
    Cosine,
}

/// Stop when a metric reaches a value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub metric: String,
    pub value: f64,
    #[serde(default)]
    pub mode: TargetMode,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TargetMode {
    #[default]
    Max,
    Min,
}

/// Start from another job's checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InitFrom {
    pub checkpoint: String,
}
