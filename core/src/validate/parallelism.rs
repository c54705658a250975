//! Semantic checks of a `train` job's model parallelism: pipeline stages and tensor-parallel
//! groups, against the model, the workers and the batch.

use super::check::{Check, ensure, fail};
use crate::spec::{DistributedMode, DroverJob};

/// A pipeline's and tensor split's shape against the job's: an `allreduce` job of the `charlm`
/// transformer, workers in whole replicas (multiples of stages × tensor degree; an elastic range's
/// min and max too, the scheduler then sizing it in whole replicas), at least a
/// layer per stage, a sequence per micro-batch and whole heads per tensor-parallel worker.
pub(super) fn validate_parallelism(job: &DroverJob) -> Check {
    let distributed = &job.spec.distributed;
    let parallelism = distributed.parallelism;
    if parallelism.is_data_only() {
        return Ok(());
    }
    let field = "spec.distributed.parallelism";
    let tensor = parallelism.tensor;
    ensure(
        (1..=64).contains(&tensor),
        &format!("{field}.tensor"),
        || format!("must be between 1 and 64, got {tensor}"),
    )?;
    ensure(
        distributed.mode == DistributedMode::Allreduce,
        field,
        || {
            "model parallelism's replicas sum their gradients by all-reduce: it needs spec.distributed.mode `allreduce`".into()
        },
    )?;
    ensure(distributed.local_sgd.is_none(), field, || {
        "model parallelism does not combine with spec.distributed.local_sgd; remove one".into()
    })?;
    if let Some(pipeline) = parallelism.pipeline {
        ensure(
            (2..=64).contains(&pipeline.stages),
            &format!("{field}.pipeline.stages"),
            || format!("must be between 2 and 64, got {}", pipeline.stages),
        )?;
        ensure(
            (1..=1024).contains(&pipeline.micro_batches),
            &format!("{field}.pipeline.micro_batches"),
            || format!("must be between 1 and 1024, got {}", pipeline.micro_batches),
        )?;
    }
    let (layers, heads) = match job.spec.train.as_ref().map(|t| &t.model) {
        Some(crate::spec::ModelSpec::Charlm { layers, heads, .. }) => (*layers, *heads),
        _ => {
            return fail(
                field,
                "pipeline stages and tensor splits divide the `charlm` transformer: other models cannot be split yet",
            );
        }
    };
    let stages = parallelism.stages();
    ensure(
        stages <= layers,
        &format!("{field}.pipeline.stages"),
        || {
            format!(
                "{stages} stages for a model of {layers} layers: every stage needs at least one"
            )
        },
    )?;
    ensure(
        heads.is_multiple_of(tensor),
        &format!("{field}.tensor"),
        || format!("{tensor} must divide the model's {heads} heads (each worker runs whole heads)"),
    )?;
    let per_replica = parallelism.workers_per_replica();
    let workers = job.spec.resources.workers;
    ensure(
        workers.min >= per_replica
            && workers.min.is_multiple_of(per_replica)
            && workers.max.is_multiple_of(per_replica),
        "spec.resources.workers",
        || {
            format!(
                "{stages} stages × tensor {tensor} need workers in whole replicas of the model, multiples of {per_replica} (an elastic range too: its min and max), got {}",
                if workers.min == workers.max {
                    workers.max.to_string()
                } else {
                    format!("{{min: {}, max: {}}}", workers.min, workers.max)
                }
            )
        },
    )?;
    let replicas = workers.max / per_replica;
    let micro = parallelism.pipeline.map_or(1, |p| p.micro_batches);
    if let Some(train) = &job.spec.train {
        ensure(
            u64::from(train.batch_size) >= u64::from(replicas) * u64::from(micro),
            &format!("{field}.pipeline.micro_batches"),
            || {
                format!(
                    "{micro} micro-batches in each of {replicas} replicas need a batch_size of at least {}, got {}",
                    u64::from(replicas) * u64::from(micro),
                    train.batch_size
                )
            },
        )?;
    }
    Ok(())
}
