//! Semantic checks of a `train` job's document: batch size, steps and evaluation, the model's
//! layers, the dataset, the optimizer, gradient clipping, the target and the initial checkpoint.

use super::check::{Check, ensure};
use crate::spec::{
    DatasetSpec, DroverJob, ModelSpec, OptimizerSpec, TARGET_METRICS, TargetMode, TrainSpec,
};

pub(super) fn validate_train(train: &TrainSpec, job: &DroverJob) -> Check {
    ensure(
        (1..=1 << 20).contains(&train.batch_size),
        "spec.train.batch_size",
        || format!("must be between 1 and 1048576, got {}", train.batch_size),
    )?;
    let max_workers = job.spec.resources.workers.max;
    ensure(
        train.batch_size >= max_workers,
        "spec.train.batch_size",
        || {
            format!(
                "the global batch ({}) must give every worker at least one sample (workers.max is {max_workers})",
                train.batch_size
            )
        },
    )?;
    ensure(
        train.max_steps.is_some() || train.target.is_some(),
        "spec.train.max_steps",
        || "set max_steps, target, or both, so the job knows when it is done".into(),
    )?;
    if let Some(steps) = train.max_steps {
        ensure(
            (1..=10_000_000_000).contains(&steps),
            "spec.train.max_steps",
            || format!("must be between 1 and 10000000000, got {steps}"),
        )?;
    }
    if let Some(target) = &train.target {
        ensure(
            TARGET_METRICS.contains(&target.metric.as_str()),
            "spec.train.target.metric",
            || {
                format!(
                    "unknown metric `{}` (expected one of {})",
                    target.metric,
                    TARGET_METRICS.join(", ")
                )
            },
        )?;
        ensure(target.value.is_finite(), "spec.train.target.value", || {
            "must be a finite number".into()
        })?;
        let loss = target.metric.ends_with("loss");
        // `mode` defaults to `max`: a loss target left at it would be met by the first evaluation.
        ensure(
            !loss || target.mode == TargetMode::Min,
            "spec.train.target.mode",
            || {
                format!(
                    "a `{}` target needs `mode: min` (the job stops once the loss is at most the \
                     value; the default, `max`, would stop it at the first evaluation)",
                    target.metric
                )
            },
        )?;
        ensure(
            loss || (0.0..=1.0).contains(&target.value),
            "spec.train.target.value",
            || {
                format!(
                    "`{}` is a fraction between 0 and 1, got {} (for 97% write 0.97)",
                    target.metric, target.value
                )
            },
        )?;
    }
    ensure(train.eval_every >= 1, "spec.train.eval_every", || {
        "must be at least 1".into()
    })?;
    if let Some(norm) = train.grad_clip_norm {
        ensure(
            norm.is_finite() && norm > 0.0,
            "spec.train.grad_clip_norm",
            || format!("must be a positive number, got {norm}"),
        )?;
    }
    if let Some(init) = &train.init_from {
        ensure(
            !init.checkpoint.trim().is_empty(),
            "spec.train.init_from.checkpoint",
            || "must name a checkpoint".into(),
        )?;
    }
    validate_model(&train.model)?;
    validate_dataset(&train.dataset)?;
    // Text is tokens for the character model; everything else is classes for the others.
    let text = matches!(train.dataset, DatasetSpec::Text { .. });
    let charlm = matches!(train.model, ModelSpec::Charlm { .. });
    ensure(text == charlm, "spec.train.model.type", || {
        if charlm {
            "the charlm model needs a text dataset (`dataset: {type: text, path: …}`)".into()
        } else {
            "a text dataset needs the charlm model (`model: {type: charlm}`)".into()
        }
    })?;
    if let (ModelSpec::Cnn { .. }, DatasetSpec::Synthetic { features, .. }) =
        (&train.model, &train.dataset)
    {
        // The CNN reads flat samples as square one-channel images.
        let side = f64::from(*features).sqrt().round() as u32;
        ensure(
            side * side == *features && side >= 4,
            "spec.train.dataset.features",
            || {
                format!(
                    "the cnn model needs square images of at least 4×4 pixels: {features} is not a square number of at least 16"
                )
            },
        )?;
    }
    validate_optimizer(&train.optimizer)
}

fn validate_layers(layers: &[u32], field: &str, allow_empty: bool) -> Check {
    ensure(allow_empty || !layers.is_empty(), field, || {
        "must list at least one layer".into()
    })?;
    ensure(layers.len() <= 32, field, || {
        format!("at most 32 layers, got {}", layers.len())
    })?;
    for (i, &width) in layers.iter().enumerate() {
        ensure(
            (1..=65_536).contains(&width),
            &format!("{field}[{i}]"),
            || format!("must be between 1 and 65536, got {width}"),
        )?;
    }
    let weights: u64 = layers
        .windows(2)
        .map(|pair| u64::from(pair[0]) * u64::from(pair[1]))
        .sum();
    ensure(weights <= MAX_WEIGHTS, field, || {
        format!(
            "these layers hold {weights} weights between them; the engine trains models of at \
             most {MAX_WEIGHTS} (4 GiB of f32)"
        )
    })
}

/// The most weights a model's layers may hold (4 GiB of f32, before the optimizer's state), and
/// the most values a synthetic dataset may (4 GiB): past these a run would fail allocating them.
const MAX_WEIGHTS: u64 = 1 << 30;
const MAX_SYNTHETIC_VALUES: u64 = 1 << 30;

fn validate_dropout(dropout: f64) -> Check {
    ensure(
        (0.0..1.0).contains(&dropout),
        "spec.train.model.dropout",
        || format!("must be in [0, 1), got {dropout}"),
    )
}

fn validate_model(model: &ModelSpec) -> Check {
    match model {
        ModelSpec::Mlp { hidden, dropout } => {
            validate_layers(hidden, "spec.train.model.hidden", true)?;
            validate_dropout(*dropout)
        }
        ModelSpec::Cnn {
            channels,
            hidden,
            dropout,
        } => {
            validate_layers(channels, "spec.train.model.channels", false)?;
            ensure(channels.len() <= 4, "spec.train.model.channels", || {
                "at most 4 convolution blocks".into()
            })?;
            validate_layers(hidden, "spec.train.model.hidden", true)?;
            validate_dropout(*dropout)
        }
        ModelSpec::Charlm {
            layers,
            heads,
            d_model,
            context,
            dropout,
        } => {
            ensure((1..=48).contains(layers), "spec.train.model.layers", || {
                format!("must be between 1 and 48, got {layers}")
            })?;
            ensure((1..=64).contains(heads), "spec.train.model.heads", || {
                format!("must be between 1 and 64, got {heads}")
            })?;
            ensure(
                (1..=8192).contains(d_model),
                "spec.train.model.d_model",
                || format!("must be between 1 and 8192, got {d_model}"),
            )?;
            ensure(d_model % heads == 0, "spec.train.model.d_model", || {
                format!("must be divisible by heads ({heads}), got {d_model}")
            })?;
            ensure(
                (1..=8192).contains(context),
                "spec.train.model.context",
                || format!("must be between 1 and 8192, got {context}"),
            )?;
            // Each block: attention (4·d²) and a 4× feed-forward (8·d²).
            let weights = 12 * u64::from(*layers) * u64::from(*d_model).pow(2);
            ensure(weights <= MAX_WEIGHTS, "spec.train.model.d_model", || {
                format!(
                    "{layers} layers of d_model {d_model} hold about {weights} weights; the \
                     engine trains models of at most {MAX_WEIGHTS} (4 GiB of f32)"
                )
            })?;
            validate_dropout(*dropout)
        }
    }
}

fn validate_dataset(dataset: &DatasetSpec) -> Check {
    match dataset {
        DatasetSpec::Digits {} => Ok(()),
        DatasetSpec::Idx { path } | DatasetSpec::Csv { path, .. } | DatasetSpec::Text { path } => {
            ensure(!path.trim().is_empty(), "spec.train.dataset.path", || {
                "must not be empty".into()
            })
        }
        DatasetSpec::Synthetic {
            samples,
            features,
            classes,
        } => {
            ensure(
                (1..=100_000_000).contains(samples),
                "spec.train.dataset.samples",
                || format!("must be between 1 and 100000000, got {samples}"),
            )?;
            ensure(
                (1..=1_000_000).contains(features),
                "spec.train.dataset.features",
                || format!("must be between 1 and 1000000, got {features}"),
            )?;
            ensure(
                (2..=100_000).contains(classes),
                "spec.train.dataset.classes",
                || format!("must be between 2 and 100000, got {classes}"),
            )?;
            let values = samples * u64::from(*features);
            ensure(
                values <= MAX_SYNTHETIC_VALUES,
                "spec.train.dataset.samples",
                || {
                    format!(
                        "{samples} samples of {features} features are {values} values; at most \
                         {MAX_SYNTHETIC_VALUES} (4 GiB of f32)"
                    )
                },
            )
        }
    }
}

fn validate_lr(lr: f64) -> Check {
    ensure(
        lr.is_finite() && lr > 0.0 && lr <= 10.0,
        "spec.train.optimizer.lr",
        || format!("must be greater than 0 and at most 10, got {lr}"),
    )
}

fn validate_optimizer(optimizer: &OptimizerSpec) -> Check {
    let unit = |value: f64, field: &str| {
        ensure(
            value.is_finite() && (0.0..1.0).contains(&value),
            field,
            || format!("must be in [0, 1), got {value}"),
        )
    };
    let weight_decay = |value: f64| {
        ensure(
            value.is_finite() && (0.0..=1.0).contains(&value),
            "spec.train.optimizer.weight_decay",
            || format!("must be between 0 and 1, got {value}"),
        )
    };
    match *optimizer {
        OptimizerSpec::Sgd {
            lr,
            momentum,
            nesterov,
            weight_decay: wd,
        } => {
            validate_lr(lr)?;
            unit(momentum, "spec.train.optimizer.momentum")?;
            ensure(
                !nesterov || momentum > 0.0,
                "spec.train.optimizer.nesterov",
                || "Nesterov momentum needs momentum greater than 0".into(),
            )?;
            weight_decay(wd)
        }
        OptimizerSpec::Adamw {
            lr,
            weight_decay: wd,
            beta1,
            beta2,
            eps,
        } => {
            validate_lr(lr)?;
            weight_decay(wd)?;
            unit(beta1, "spec.train.optimizer.beta1")?;
            unit(beta2, "spec.train.optimizer.beta2")?;
            ensure(
                eps.is_finite() && eps > 0.0 && eps < 1.0,
                "spec.train.optimizer.eps",
                || format!("must be in (0, 1), got {eps}"),
            )
        }
    }
}
