//! The checks of a `train` job's pipeline stages and tensor-parallel groups.

use super::{error_field, example_with, parse_yaml};

/// A pipeline splits the `charlm` transformer among a fixed multiple of `stages` workers of an
/// `allreduce` job; every shape it cannot run is refused with the field that says why.
#[test]
fn a_pipeline_is_accepted_only_in_a_shape_it_can_run() {
    const CHARLM: &str = include_str!("../../../../examples/charlm-text.yaml");
    let doc = |distributed: &str, workers: &str| {
        assert_eq!(CHARLM.matches("workers: {min: 1, max: 1}").count(), 1);
        assert_eq!(CHARLM.matches("  resources:\n").count(), 1);
        CHARLM
            .replace("workers: {min: 1, max: 1}", &format!("workers: {workers}"))
            .replace(
                "  resources:\n",
                &format!("  distributed: {distributed}\n  resources:\n"),
            )
    };
    let pipeline = |shape: &str| format!("{{mode: allreduce, parallelism: {{pipeline: {shape}}}}}");
    let job = parse_yaml(&doc(
        &pipeline("{stages: 2, micro_batches: 4, schedule: gpipe}"),
        "4",
    ))
    .unwrap();
    let p = job.spec.distributed.parallelism.pipeline.unwrap();
    assert_eq!(
        (p.stages, p.micro_batches, p.schedule.as_str()),
        (2, 4, "gpipe")
    );
    let job = parse_yaml(&doc(&pipeline("{stages: 2, micro_batches: 4}"), "2")).unwrap();
    assert_eq!(
        job.spec
            .distributed
            .parallelism
            .pipeline
            .unwrap()
            .schedule
            .as_str(),
        "1f1b"
    );
    // A tensor split alone, and with a pipeline (stages × tensor workers per replica).
    let job = parse_yaml(&doc("{mode: allreduce, parallelism: {tensor: 2}}", "4")).unwrap();
    assert_eq!(job.spec.distributed.parallelism.workers_per_replica(), 2);
    let job = parse_yaml(&doc(
        "{mode: allreduce, parallelism: {tensor: 2, pipeline: {stages: 2, micro_batches: 2}}}",
        "4",
    ))
    .unwrap();
    assert_eq!(job.spec.distributed.parallelism.workers_per_replica(), 4);
    // An elastic range of whole replicas: the scheduler sizes it a replica at a time.
    let job = parse_yaml(&doc(
        &pipeline("{stages: 2, micro_batches: 2}"),
        "{min: 2, max: 6}",
    ))
    .unwrap();
    assert_eq!(
        (
            job.spec.resources.workers.min,
            job.spec.resources.workers.max
        ),
        (2, 6)
    );
    let field = "spec.distributed.parallelism";
    for (distributed, workers, expected) in [
        // Whole heads per worker (the example has 4), at most 64.
        (
            "{mode: allreduce, parallelism: {tensor: 3}}".to_owned(),
            "3",
            "spec.distributed.parallelism.tensor",
        ),
        (
            "{mode: allreduce, parallelism: {tensor: 0}}".to_owned(),
            "2",
            "spec.distributed.parallelism.tensor",
        ),
        (
            "{mode: allreduce, parallelism: {tensor: 2, pipeline: {stages: 2, micro_batches: 2}}}"
                .to_owned(),
            "6",
            "spec.resources.workers",
        ),
        // The replicas sum by all-reduce.
        (
            "{mode: ps, parallelism: {pipeline: {stages: 2, micro_batches: 2}}}".to_owned(),
            "2",
            field,
        ),
        (
            "{mode: allreduce, local_sgd: {every_steps: 2}, parallelism: {pipeline: {stages: 2, micro_batches: 2}}}".to_owned(),
            "2",
            field,
        ),
        // A layer per stage (the example has 2), a sequence per micro-batch (its batch is 16).
        (pipeline("{stages: 3, micro_batches: 2}"), "3", "spec.distributed.parallelism.pipeline.stages"),
        (pipeline("{stages: 1, micro_batches: 2}"), "2", "spec.distributed.parallelism.pipeline.stages"),
        (pipeline("{stages: 2, micro_batches: 0}"), "2", "spec.distributed.parallelism.pipeline.micro_batches"),
        (pipeline("{stages: 2, micro_batches: 9}"), "4", "spec.distributed.parallelism.pipeline.micro_batches"),
        (pipeline("{stages: 2, micro_batches: 2, schedule: interleaved}"), "2", "spec.distributed.parallelism.pipeline.schedule"),
        // A fixed multiple of the stages.
        (pipeline("{stages: 2, micro_batches: 2}"), "3", "spec.resources.workers"),
        (pipeline("{stages: 2, micro_batches: 2}"), "{min: 1, max: 4}", "spec.resources.workers"),
        (pipeline("{stages: 2, micro_batches: 2}"), "{min: 2, max: 5}", "spec.resources.workers"),
    ] {
        let got = error_field(&doc(&distributed, workers));
        assert_eq!(got, expected, "{distributed} with {workers} workers");
    }
    // Only the transformer splits into stages.
    let mlp = example_with(
        "mode: ps,",
        "mode: allreduce, parallelism: {pipeline: {stages: 2, micro_batches: 2}},",
    )
    .replace("ps: {min: 1, max: 2}", "ps: {min: 0, max: 0}");
    assert_eq!(error_field(&mlp), field);
}
