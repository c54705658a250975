//! Semantic checks of a parsed `DroverJob`: ranges and combinations the types cannot express.
//! Each failure names the field as it appears in the document.

use crate::spec::{
    API_VERSION, Compression, DistributedMode, DroverJob, JobType, KIND, OptimizerSpec, SpecError,
    SyncMode,
};

mod check;
mod parallelism;
mod train;

pub use crate::document::{MAX_LABELS, MAX_NAME_PREFIX};
pub use crate::spec::{MAX_PS, MAX_WORKERS, TARGET_METRICS};
use check::{Check, ensure, fail};
use parallelism::validate_parallelism;
use train::validate_train;

/// Largest GPUs a worker may ask for (the largest task counts are beside their fields, in `spec`).
pub const MAX_GPUS_PER_WORKER: u32 = 16;

/// Every string of the document, keys included, must be storable (no NUL character).
fn validate_storable(job: &DroverJob) -> Check {
    let tree = serde_json::to_value(job)
        .map_err(|err| SpecError::new("(document)", format!("cannot be stored: {err}")))?;
    match crate::text::find_nul(&tree) {
        Some(path) => fail(&path, crate::text::NUL_REASON),
        None => Ok(()),
    }
}

/// Runs every check; the first failure wins.
pub fn validate(job: &DroverJob) -> Check {
    ensure(job.api_version == API_VERSION, "apiVersion", || {
        format!("must be `{API_VERSION}`, got `{}`", job.api_version)
    })?;
    ensure(job.kind == KIND, "kind", || {
        format!("must be `{KIND}`, got `{}`", job.kind)
    })?;
    match (job.metadata.name.as_str(), &job.metadata.generate_name) {
        ("", Some(prefix)) => validate_name_prefix(prefix)?,
        ("", None) => fail(
            "metadata.name",
            "required (or give metadata.generateName, a prefix the server completes to a unique name)",
        )?,
        (name, _) => validate_name(name, "metadata.name")?,
    }
    validate_storable(job)?;
    validate_labels(job)?;
    validate_resources(job)?;
    let spec = &job.spec;
    match (spec.job_type, &spec.train, &spec.command) {
        (JobType::Train, Some(train), None) => validate_train(train, job)?,
        (JobType::Train, None, _) => fail("spec.train", "required when spec.type is `train`")?,
        (JobType::Train, Some(_), Some(_)) => {
            fail("spec.command", "not allowed when spec.type is `train`")?
        }
        (JobType::Command, _, Some(command)) => {
            ensure(spec.train.is_none(), "spec.train", || {
                "not allowed when spec.type is `command`".into()
            })?;
            ensure(!command.argv.is_empty(), "spec.command.argv", || {
                "must not be empty".into()
            })?;
            for (i, arg) in command.argv.iter().enumerate() {
                ensure(
                    arg.len() <= 65_536,
                    &format!("spec.command.argv[{i}]"),
                    || "longer than 65536 bytes".into(),
                )?;
            }
            ensure(!command.argv[0].is_empty(), "spec.command.argv[0]", || {
                "the program must not be empty".into()
            })?;
            if let Some(steps) = command.max_steps {
                ensure(
                    (1..=10_000_000_000).contains(&steps),
                    "spec.command.max_steps",
                    || format!("must be between 1 and 10000000000, got {steps}"),
                )?;
            }
            if let Some(Err(why)) = command.image_reference() {
                fail("spec.command.image", &why)?;
            }
            if let Some(init) = &command.init_from {
                ensure(
                    !init.checkpoint.trim().is_empty(),
                    "spec.command.init_from.checkpoint",
                    || "must not be blank".into(),
                )?;
            }
            for (key, value) in &command.env {
                ensure(is_env_name(key), &format!("spec.command.env.{key}"), || {
                    "not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)".into()
                })?;
                if let Some(secret) = value.secret() {
                    validate_name(secret, &format!("spec.command.env.{key}.secret"))?;
                }
            }
        }
        (JobType::Command, _, None) => {
            fail("spec.command", "required when spec.type is `command`")?
        }
    }
    let distributed = &spec.distributed;
    match distributed.compression {
        Compression::Topk { ratio } => ensure(
            ratio.is_finite() && ratio > 0.0 && ratio <= 1.0,
            "spec.distributed.compression.ratio",
            || format!("must be in (0, 1], got {ratio}"),
        )?,
        Compression::Qsgd { bits } => ensure(
            (2..=8).contains(&bits),
            "spec.distributed.compression.bits",
            || {
                format!(
                    "must be between 2 and 8 (a sign bit and at least one level bit), got {bits}"
                )
            },
        )?,
        Compression::Dgc {
            ratio,
            warmup_steps,
        } => {
            ensure(
                ratio.is_finite() && ratio > 0.0 && ratio <= 1.0,
                "spec.distributed.compression.ratio",
                || format!("must be in (0, 1], got {ratio}"),
            )?;
            ensure(
                warmup_steps <= 1_000_000,
                "spec.distributed.compression.warmup_steps",
                || format!("must be at most 1000000, got {warmup_steps}"),
            )?;
            // DGC's momentum correction moves the optimizer's momentum onto the workers.
            if let Some(train) = &spec.train {
                ensure(
                    matches!(
                        train.optimizer,
                        OptimizerSpec::Sgd { momentum, nesterov: false, .. } if momentum > 0.0
                    ),
                    "spec.train.optimizer",
                    || {
                        "`dgc` applies the optimizer's momentum on the workers: it needs `sgd` with a momentum above 0 and without nesterov (without momentum, use `topk`)".into()
                    },
                )?;
            }
        }
        Compression::None | Compression::Onebit => {}
    }
    let scheduling = &spec.scheduling;
    ensure(
        (-1000..=1000).contains(&scheduling.priority),
        "spec.scheduling.priority",
        || {
            format!(
                "must be between -1000 and 1000, got {}",
                scheduling.priority
            )
        },
    )?;
    let checkpoint = &spec.checkpoint;
    ensure(
        checkpoint.every_steps >= 1,
        "spec.checkpoint.every_steps",
        || "must be at least 1".into(),
    )?;
    ensure(
        (1..=1000).contains(&checkpoint.keep_last),
        "spec.checkpoint.keep_last",
        || format!("must be between 1 and 1000, got {}", checkpoint.keep_last),
    )?;
    ensure(
        checkpoint.keep_best <= 1000,
        "spec.checkpoint.keep_best",
        || format!("must be at most 1000, got {}", checkpoint.keep_best),
    )?;
    ensure(spec.max_restarts <= 100, "spec.max_restarts", || {
        format!("must be at most 100, got {}", spec.max_restarts)
    })
}

/// How a `train` job's workers exchange gradients (the engine's settings): each setting must mean
/// something for the shape asked for, or it is refused rather than ignored.
fn validate_engine_distribution(job: &DroverJob) -> Check {
    let resources = &job.spec.resources;
    let distributed = &job.spec.distributed;
    ensure(
        distributed.launcher.is_none(),
        "spec.distributed.launcher",
        || {
            format!(
                "`{}` is for command jobs: the engine starts a train job's processes; remove it",
                distributed.launcher.as_str()
            )
        },
    )?;
    validate_parallelism(job)?;
    match distributed.mode {
        DistributedMode::Allreduce => {
            ensure(resources.ps.max == 0, "spec.resources.ps", || {
                "must be {min: 0, max: 0} when spec.distributed.mode is `allreduce`".into()
            })?;
            ensure(
                distributed.compression == Compression::None,
                "spec.distributed.compression",
                || "gradient compression needs spec.distributed.mode `ps`".into(),
            )?;
            ensure(
                distributed.sync == SyncMode::Bsp,
                "spec.distributed.sync",
                || {
                    format!(
                        "all-reduce is synchronous: `{}` needs spec.distributed.mode `ps`",
                        distributed.sync.as_str()
                    )
                },
            )?;
            if let Some(local) = distributed.local_sgd {
                ensure(
                    (1..=100_000).contains(&local.every_steps),
                    "spec.distributed.local_sgd.every_steps",
                    || format!("must be between 1 and 100000, got {}", local.every_steps),
                )?;
            }
        }
        DistributedMode::Ps => {
            ensure(
                distributed.local_sgd.is_none(),
                "spec.distributed.local_sgd",
                || {
                    "local SGD averages the workers' parameters by all-reduce: it needs spec.distributed.mode `allreduce`".into()
                },
            )?;
            ensure(
                distributed.collective.is_auto(),
                "spec.distributed.collective",
                || {
                    format!(
                        "`{}` is an all-reduce algorithm: it needs spec.distributed.mode `allreduce`",
                        distributed.collective.as_str()
                    )
                },
            )?;
            ensure(
                resources.workers.max == 1 || resources.ps.max >= 1,
                "spec.resources.ps.max",
                || {
                    "a `ps` job with several workers needs at least one parameter-server shard"
                        .into()
                },
            )?;
            // Without a shard a single worker trains alone: no pushes to synchronise or compress.
            ensure(
                resources.ps.max >= 1 || distributed.sync == SyncMode::Bsp,
                "spec.distributed.sync",
                || {
                    format!(
                        "`{}` needs parameter-server shards (spec.resources.ps)",
                        distributed.sync.as_str()
                    )
                },
            )?;
            ensure(
                resources.ps.max >= 1 || distributed.compression == Compression::None,
                "spec.distributed.compression",
                || "gradient compression needs parameter-server shards (spec.resources.ps)".into(),
            )?;
        }
    }
    if distributed.sync == SyncMode::Ssp {
        ensure(
            (1..=1000).contains(&distributed.staleness),
            "spec.distributed.staleness",
            || {
                format!(
                    "must be between 1 and 1000 for ssp, got {}",
                    distributed.staleness
                )
            },
        )
    } else {
        ensure(
            distributed.staleness == crate::spec::DEFAULT_STALENESS,
            "spec.distributed.staleness",
            || {
                format!(
                    "only meaningful when spec.distributed.sync is `ssp` (it is `{}`); remove it",
                    distributed.sync.as_str()
                )
            },
        )
    }
}

/// A `command` job's program does its own communication: of `distributed` only the launcher
/// applies, and a launcher's ranks are the workers. The engine's settings and checkpoint policy
/// would be ignored, so they are refused.
fn validate_command_distribution(job: &DroverJob) -> Check {
    let spec = &job.spec;
    let distributed = &spec.distributed;
    let engine_only = |field: &str| -> Check {
        fail(
            &format!("spec.distributed.{field}"),
            "a train job's setting: a command job's program does its own communication (of spec.distributed only launcher applies); remove it",
        )
    };
    if distributed.mode != DistributedMode::default() {
        engine_only("mode")?;
    }
    if distributed.sync != SyncMode::default() {
        engine_only("sync")?;
    }
    if distributed.staleness != crate::spec::DEFAULT_STALENESS {
        engine_only("staleness")?;
    }
    if !distributed.collective.is_auto() {
        engine_only("collective")?;
    }
    if distributed.local_sgd.is_some() {
        engine_only("local_sgd")?;
    }
    if distributed.compression != Compression::None {
        engine_only("compression")?;
    }
    if !distributed.parallelism.is_data_only() {
        engine_only("parallelism")?;
    }
    if !distributed.launcher.is_none() {
        ensure(spec.resources.ps.max == 0, "spec.resources.ps", || {
            format!(
                "must be {{min: 0, max: 0}} with launcher `{}`: its ranks are the workers",
                distributed.launcher.as_str()
            )
        })?;
    }
    ensure(
        spec.checkpoint == crate::spec::CheckpointPolicy::default(),
        "spec.checkpoint",
        || {
            "a train job's setting: a command job's program decides when to checkpoint and what to keep; remove it".into()
        },
    )
}

/// A DNS-1123 label: 1–63 characters of `a-z`, `0-9` and `-`, starting and ending with a letter or digit.
pub fn validate_name(name: &str, field: &str) -> Check {
    if name.is_empty() {
        return fail(field, "must not be empty");
    }
    let length = name.chars().count();
    if length > 63 {
        return fail(
            field,
            format!("must be at most 63 characters, got {length}"),
        );
    }
    let valid_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let bytes = name.as_bytes();
    let alnum_ends =
        bytes[0].is_ascii_alphanumeric() && bytes[bytes.len() - 1].is_ascii_alphanumeric();
    ensure(valid_chars && alnum_ends, field, || {
        format!(
            "`{name}` is not a DNS-1123 label (lowercase letters, digits and '-', starting and ending \
             with a letter or digit)"
        )
    })
}

/// A `generateName` prefix: what a DNS-1123 label may start with (it may end with `-`).
fn validate_name_prefix(prefix: &str) -> Check {
    let field = "metadata.generateName";
    ensure(!prefix.is_empty(), field, || "must not be empty".into())?;
    let length = prefix.chars().count();
    ensure(length <= MAX_NAME_PREFIX, field, || {
        format!("must be at most {MAX_NAME_PREFIX} characters (five are appended), got {length}")
    })?;
    let valid_chars = prefix
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    ensure(
        valid_chars && prefix.as_bytes()[0].is_ascii_alphanumeric(),
        field,
        || {
            format!(
                "`{prefix}` cannot start a DNS-1123 label (lowercase letters, digits and '-', starting \
                 with a letter or digit)"
            )
        },
    )
}

/// A label (or a selector's): its key and value as Kubernetes has them.
fn check_label(key: &str, value: &str, field: &str) -> Check {
    ensure(is_label_key(key), field, || {
        "label keys are 1-63 characters of letters, digits, '-', '_' and '.', optionally with a \
         DNS prefix and '/'"
            .into()
    })?;
    ensure(is_label_value(value), field, || {
        format!(
            "label value `{value}` must be at most 63 characters of letters, digits, '-', '_' and '.'"
        )
    })?;
    Ok(())
}

fn validate_labels(job: &DroverJob) -> Check {
    let labels = &job.metadata.labels;
    ensure(labels.len() <= MAX_LABELS, "metadata.labels", || {
        format!("at most {MAX_LABELS} labels, got {}", labels.len())
    })?;
    for (key, value) in labels {
        check_label(key, value, &format!("metadata.labels.{key}"))?;
    }
    Ok(())
}

fn validate_resources(job: &DroverJob) -> Check {
    let resources = &job.spec.resources;
    let workers = resources.workers;
    ensure(workers.min >= 1, "spec.resources.workers.min", || {
        "must be at least 1".into()
    })?;
    ensure(workers.min <= workers.max, "spec.resources.workers", || {
        format!(
            "min ({}) must not exceed max ({})",
            workers.min, workers.max
        )
    })?;
    ensure(
        workers.max <= MAX_WORKERS,
        "spec.resources.workers.max",
        || format!("must be at most {MAX_WORKERS}, got {}", workers.max),
    )?;
    let ps = resources.ps;
    ensure(ps.min <= ps.max, "spec.resources.ps", || {
        format!("min ({}) must not exceed max ({})", ps.min, ps.max)
    })?;
    ensure(ps.max <= MAX_PS, "spec.resources.ps.max", || {
        format!("must be at most {MAX_PS}, got {}", ps.max)
    })?;
    match job.spec.job_type {
        JobType::Train => validate_engine_distribution(job)?,
        JobType::Command => validate_command_distribution(job)?,
    }
    ensure(
        resources.gpus_per_worker <= MAX_GPUS_PER_WORKER,
        "spec.resources.gpus_per_worker",
        || {
            format!(
                "must be at most {MAX_GPUS_PER_WORKER}, got {}",
                resources.gpus_per_worker
            )
        },
    )?;
    if let Some(gb) = resources.gpu_memory_gb {
        ensure(
            gb.is_finite() && gb > 0.0 && gb <= 1024.0,
            "spec.resources.gpu_memory_gb",
            || format!("must be greater than 0 and at most 1024, got {gb}"),
        )?;
        ensure(
            resources.gpus_per_worker > 0,
            "spec.resources.gpu_memory_gb",
            || "only meaningful when gpus_per_worker is at least 1".into(),
        )?;
    }
    ensure(
        resources.gpu_types.len() <= 16,
        "spec.resources.gpu_types",
        || format!("at most 16 models, got {}", resources.gpu_types.len()),
    )?;
    if !resources.gpu_types.is_empty() {
        ensure(
            resources.gpus_per_worker > 0,
            "spec.resources.gpu_types",
            || "only meaningful when gpus_per_worker is at least 1".into(),
        )?;
    }
    for (i, model) in resources.gpu_types.iter().enumerate() {
        let field = format!("spec.resources.gpu_types[{i}]");
        ensure(
            !model.trim().is_empty()
                && model.len() <= 64
                && model.chars().all(|c| c.is_ascii_graphic() || c == ' '),
            &field,
            || "a GPU model: 1-64 printable ASCII characters".into(),
        )?;
        ensure(
            !resources.gpu_types[..i]
                .iter()
                .any(|m| m.eq_ignore_ascii_case(model)),
            &field,
            || format!("`{model}` is listed twice"),
        )?;
    }
    ensure(
        resources.node_selector.len() <= 16,
        "spec.resources.node_selector",
        || format!("at most 16 labels, got {}", resources.node_selector.len()),
    )?;
    ensure(
        resources.tolerations.len() <= 16,
        "spec.resources.tolerations",
        || format!("at most 16, got {}", resources.tolerations.len()),
    )?;
    for (i, toleration) in resources.tolerations.iter().enumerate() {
        let field = format!("spec.resources.tolerations[{i}]");
        if let Some(key) = &toleration.key {
            ensure(is_label_key(key), &format!("{field}.key"), || {
                "a taint key: 1-63 characters of letters, digits, '-', '_' and '.', optionally with a \
                 DNS prefix and '/'"
                    .into()
            })?;
        }
        match toleration.operator {
            crate::spec::TolerationOperator::Exists => ensure(
                toleration.value.is_none(),
                &format!("{field}.value"),
                || "not allowed with operator Exists (it tolerates every value)".into(),
            )?,
            crate::spec::TolerationOperator::Equal => {
                ensure(toleration.key.is_some(), &format!("{field}.key"), || {
                    "required with operator Equal (only Exists may leave it out, to tolerate every taint)"
                        .into()
                })?;
                let value = toleration.value.as_deref().unwrap_or_default();
                ensure(is_label_value(value), &format!("{field}.value"), || {
                    format!("`{value}`: at most 63 characters of letters, digits, '-', '_' and '.'")
                })?;
            }
        }
        if let Some(effect) = &toleration.effect {
            ensure(effect == "NoSchedule", &format!("{field}.effect"), || {
                format!("`{effect}`: NoSchedule is the one effect nodes' taints have")
            })?;
        }
    }
    for (key, value) in &resources.node_selector {
        check_label(key, value, &format!("spec.resources.node_selector.{key}"))?;
    }
    ensure(
        (1..=1024).contains(&resources.cpus_per_worker),
        "spec.resources.cpus_per_worker",
        || {
            format!(
                "must be between 1 and 1024, got {}",
                resources.cpus_per_worker
            )
        },
    )?;
    ensure(
        (1..=1024).contains(&resources.cpus_per_ps),
        "spec.resources.cpus_per_ps",
        || format!("must be between 1 and 1024, got {}", resources.cpus_per_ps),
    )?;
    ensure(
        (1..=4096).contains(&resources.memory_gb_per_task),
        "spec.resources.memory_gb_per_task",
        || {
            format!(
                "must be between 1 and 4096, got {}",
                resources.memory_gb_per_task
            )
        },
    )
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

pub fn is_label_value(value: &str) -> bool {
    value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && value
            .chars()
            .next()
            .is_none_or(|c| c.is_ascii_alphanumeric())
        && value
            .chars()
            .last()
            .is_none_or(|c| c.is_ascii_alphanumeric())
}

pub fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty() && p.len() <= 253 && p.split('.').all(|part| validate_name(part, "").is_ok())
    });
    prefix_ok && !name.is_empty() && is_label_value(name)
}

#[cfg(test)]
mod tests;
