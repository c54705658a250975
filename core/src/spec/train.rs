//! The `train` job's document: model, dataset, optimizer, learning-rate schedule, target and
//! initial checkpoint.

use super::defaults;
use crate::openapi::not_blank;
use crate::schema::one_object;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

/// Metrics a `target` may name.
pub const TARGET_METRICS: [&str; 4] = ["val_accuracy", "val_loss", "accuracy", "loss"];

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
    #[schema(exclusive_minimum = 0)]
    pub grad_clip_norm: Option<f64>,
    /// The GLOBAL batch, split across workers and unchanged by resizes.
    #[schema(minimum = 1, maximum = 1048576)]
    pub batch_size: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 10000000000_u64)]
    pub max_steps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    #[serde(default = "defaults::eval_every")]
    #[schema(minimum = 1)]
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
        #[schema(max_items = 32, minimum = 1, maximum = 65536)]
        hidden: Vec<u32>,
        #[serde(default)]
        #[schema(minimum = 0, exclusive_maximum = 1)]
        dropout: f64,
    },
    /// A LeNet-5 class convolutional network; its input size comes from the dataset.
    Cnn {
        #[serde(default = "defaults::cnn_channels")]
        #[schema(min_items = 1, max_items = 4, minimum = 1, maximum = 65536)]
        channels: Vec<u32>,
        #[serde(default = "defaults::cnn_hidden")]
        #[schema(max_items = 32, minimum = 1, maximum = 65536)]
        hidden: Vec<u32>,
        #[serde(default)]
        #[schema(minimum = 0, exclusive_maximum = 1)]
        dropout: f64,
    },
    /// A character-level transformer language model.
    Charlm {
        #[serde(default = "defaults::charlm_layers")]
        #[schema(minimum = 1, maximum = 48)]
        layers: u32,
        #[serde(default = "defaults::charlm_heads")]
        #[schema(minimum = 1, maximum = 64)]
        heads: u32,
        #[serde(default = "defaults::charlm_d_model")]
        #[schema(minimum = 1, maximum = 8192)]
        d_model: u32,
        #[serde(default = "defaults::charlm_context")]
        #[schema(minimum = 1, maximum = 8192)]
        context: u32,
        #[serde(default)]
        #[schema(minimum = 0, exclusive_maximum = 1)]
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
    Idx {
        #[schema(schema_with = not_blank)]
        path: String,
    },
    /// A CSV file of numeric features and a label column.
    Csv {
        #[schema(schema_with = not_blank)]
        path: String,
        /// The label column's name; the last column when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label_column: Option<String>,
    },
    /// Plain text, for language models.
    Text {
        #[schema(schema_with = not_blank)]
        path: String,
    },
    /// Generated data, for tests and demos.
    Synthetic {
        #[serde(default = "defaults::synthetic_samples")]
        #[schema(minimum = 1, maximum = 100000000)]
        samples: u64,
        #[serde(default = "defaults::synthetic_features")]
        #[schema(minimum = 1, maximum = 1000000)]
        features: u32,
        #[serde(default = "defaults::synthetic_classes")]
        #[schema(minimum = 2, maximum = 100000)]
        classes: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[schemars(transform = one_object)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum OptimizerSpec {
    Sgd {
        #[schema(exclusive_minimum = 0, maximum = 10)]
        lr: f64,
        #[serde(default)]
        #[schema(minimum = 0, exclusive_maximum = 1)]
        momentum: f64,
        #[serde(default)]
        nesterov: bool,
        #[serde(default)]
        #[schema(minimum = 0, maximum = 1)]
        weight_decay: f64,
    },
    Adamw {
        #[serde(default = "defaults::adamw_lr")]
        #[schema(exclusive_minimum = 0, maximum = 10)]
        lr: f64,
        #[serde(default = "defaults::adamw_weight_decay")]
        #[schema(minimum = 0, maximum = 1)]
        weight_decay: f64,
        #[serde(default = "defaults::beta1")]
        #[schema(minimum = 0, exclusive_maximum = 1)]
        beta1: f64,
        #[serde(default = "defaults::beta2")]
        #[schema(minimum = 0, exclusive_maximum = 1)]
        beta2: f64,
        #[serde(default = "defaults::eps")]
        #[schema(exclusive_minimum = 0, exclusive_maximum = 1)]
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
    #[schema(schema_with = target_metric_schema)]
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
    #[schema(schema_with = not_blank)]
    pub checkpoint: String,
}

/// `spec.train.target.metric`.
fn target_metric_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(TARGET_METRICS))
        .description(Some(
            "The metric to reach; a `val_loss` or `loss` target needs `mode: min`, an accuracy's \
             value is between 0 and 1.",
        ))
        .into()
}
