//! Tests of the `DroverJob` document: parsing (fields named, messages in words, defaults) and the
//! semantic checks, against the reference example with every field.

use crate::spec::{DroverJob, Format, JobType, ModelSpec, SpecError};

mod parallelism;

const EXAMPLE: &str = include_str!("../../../examples/reference/every-field.yaml");

fn parse_yaml(doc: &str) -> Result<DroverJob, SpecError> {
    DroverJob::parse(doc.as_bytes(), Format::Yaml)
}

/// The example with one line replaced: `from` must occur exactly once.
fn example_with(from: &str, to: &str) -> String {
    assert_eq!(
        EXAMPLE.matches(from).count(),
        1,
        "`{from}` must occur once in the example"
    );
    EXAMPLE.replace(from, to)
}

fn error_field(doc: &str) -> String {
    parse_yaml(doc)
        .expect_err("document should be rejected")
        .field
}

#[test]
fn the_design_example_parses_with_every_field() {
    let job = parse_yaml(EXAMPLE).unwrap();
    assert_eq!(job.metadata.name, "digits-mlp");
    assert_eq!(job.metadata.labels["team"], "vision");
    assert_eq!(job.spec.job_type, JobType::Train);
    let train = job.spec.train.as_ref().unwrap();
    assert_eq!(train.batch_size, 256);
    assert_eq!(
        train.model,
        ModelSpec::Mlp {
            hidden: vec![256, 128],
            dropout: 0.0
        }
    );
    assert_eq!(job.spec.resources.workers.max, 4);
    assert_eq!(job.max_gpus(), 4);
}

#[test]
fn json_and_yaml_give_the_same_job() {
    let from_yaml = parse_yaml(EXAMPLE).unwrap();
    let json = serde_json::to_vec(&from_yaml).unwrap();
    let from_json = DroverJob::parse(&json, Format::Json).unwrap();
    assert_eq!(from_yaml, from_json);
}

#[test]
fn defaults_fill_what_is_left_out() {
    let job = parse_yaml(
        "apiVersion: drover.dev/v1\nkind: DroverJob\nmetadata: {name: tiny}\nspec:\n  type: train\n  \
         train: {model: {type: mlp}, dataset: {type: digits}, batch_size: 32, max_steps: 10}\n",
    )
    .unwrap();
    assert_eq!(job.spec.resources.workers.min, 1);
    assert_eq!(job.spec.resources.ps.max, 0);
    assert_eq!(job.spec.max_restarts, 5);
    assert_eq!(job.spec.checkpoint.every_steps, 500);
    assert!(job.spec.scheduling.preemptible);
}

#[test]
fn unknown_fields_are_named() {
    let err = parse_yaml(&example_with(
        "batch_size: 256",
        "batch_size: 256\n    batchsize: 3",
    ))
    .unwrap_err();
    assert_eq!(err.field, "spec.train.batchsize");
    assert!(err.reason.contains("unknown field `batchsize`"), "{err}");
    assert_eq!(
        error_field(&example_with(
            "name: digits-mlp",
            "name: digits-mlp\n  owner: me"
        )),
        "metadata.owner"
    );
}

#[test]
fn wrong_types_are_named() {
    let err = parse_yaml(&example_with("batch_size: 256", "batch_size: lots")).unwrap_err();
    assert_eq!(err.field, "spec.train.batch_size");
    assert_eq!(
        error_field(&example_with(
            "workers: {min: 1, max: 4}",
            "workers: {min: -1, max: 4}"
        )),
        "spec.resources.workers.min"
    );
    assert_eq!(
        error_field(&example_with("type: train", "type: sometimes")),
        "spec.type"
    );
}

/// Every kind of mistake is told in words, at the field's full path, never with a Rust type.
#[test]
fn messages_say_what_is_expected_in_words() {
    let says = |from: &str, to: &str| {
        let err = parse_yaml(&example_with(from, to)).unwrap_err();
        for rust in ["u32", "u64", "f64", "struct", "TaskRange"] {
            assert!(!err.reason.contains(rust), "{to}: {}", err.reason);
        }
        (err.field, err.reason)
    };
    let (field, reason) = says("workers: {min: 1, max: 4}", "workers: {min: -1, max: 4}");
    assert_eq!(field, "spec.resources.workers.min");
    assert!(
        reason.contains("expected a non-negative integer"),
        "{reason}"
    );
    let (field, reason) = says("batch_size: 256", "batch_size: lots");
    assert_eq!(field, "spec.train.batch_size");
    assert!(
        reason.contains("expected a non-negative integer"),
        "{reason}"
    );
    let (field, reason) = says("batch_size: 256", "batch_size: 99999999999");
    assert_eq!(field, "spec.train.batch_size");
    assert!(reason.contains("of at most 4294967295"), "{reason}");
    let (field, reason) = says("workers: {min: 1, max: 4}", "workers: many");
    assert_eq!(field, "spec.resources.workers");
    assert!(reason.contains("a task count (`2`) or a range"), "{reason}");
    let (field, reason) = says("workers: {min: 1, max: 4}", "workers: -2");
    assert_eq!(field, "spec.resources.workers");
    assert!(reason.contains("a task count"), "{reason}");
    let (field, reason) = says("workers: {min: 1, max: 4}", "workers: {min: 1, most: 4}");
    assert_eq!(field, "spec.resources.workers.most");
    assert!(reason.contains("unknown field `most`"), "{reason}");
    let (_, reason) = says("lr: 0.001", "lr: fast");
    assert!(reason.contains("expected a number"), "{reason}");
}

#[test]
fn a_plain_count_of_tasks_is_a_fixed_range() {
    let job = parse_yaml(&example_with("workers: {min: 1, max: 4}", "workers: 2")).unwrap();
    assert_eq!(
        (
            job.spec.resources.workers.min,
            job.spec.resources.workers.max
        ),
        (2, 2)
    );
    let json = serde_json::to_value(&job).unwrap();
    assert_eq!(
        json["spec"]["resources"]["workers"],
        serde_json::json!({"min": 2, "max": 2})
    );
}

#[test]
fn malformed_documents_are_rejected() {
    assert!(parse_yaml("apiVersion: [unclosed").is_err());
    assert!(DroverJob::parse(b"{\"apiVersion\": ", Format::Json).is_err());
    let err = DroverJob::parse(b"{} trailing", Format::Json).unwrap_err();
    assert!(!err.reason.is_empty());
    assert_eq!(
        DroverJob::parse(b"[]", Format::Json).unwrap_err().field,
        "(document)"
    );
}

#[test]
fn out_of_range_values_name_their_field() {
    let cases = [
        (
            "workers: {min: 1, max: 4}",
            "workers: {min: 0, max: 4}",
            "spec.resources.workers.min",
        ),
        (
            "workers: {min: 1, max: 4}",
            "workers: {min: 5, max: 4}",
            "spec.resources.workers",
        ),
        (
            "workers: {min: 1, max: 4}",
            "workers: {min: 1, max: 100000}",
            "spec.resources.workers.max",
        ),
        (
            "ps: {min: 1, max: 2}",
            "ps: {min: 3, max: 2}",
            "spec.resources.ps",
        ),
        (
            "ps: {min: 1, max: 2}",
            "ps: {min: 0, max: 0}",
            "spec.resources.ps.max",
        ),
        ("name: digits-mlp", "name: \"\"", "metadata.name"),
        ("name: digits-mlp", "name: Digits_MLP", "metadata.name"),
        ("name: digits-mlp", "name: -lead", "metadata.name"),
        (
            "apiVersion: drover.dev/v1",
            "apiVersion: drover.dev/v2",
            "apiVersion",
        ),
        ("kind: DroverJob", "kind: Job", "kind"),
        ("batch_size: 256", "batch_size: 0", "spec.train.batch_size"),
        ("batch_size: 256", "batch_size: 2", "spec.train.batch_size"),
        ("max_steps: 5000", "max_steps: 0", "spec.train.max_steps"),
        ("lr: 0.001,", "lr: -1,", "spec.train.optimizer.lr"),
        (
            "gpu_memory_gb: 8",
            "gpu_memory_gb: 100000",
            "spec.resources.gpu_memory_gb",
        ),
        (
            "gpus_per_worker: 1",
            "gpus_per_worker: 64",
            "spec.resources.gpus_per_worker",
        ),
        (
            "cpus_per_worker: 4",
            "cpus_per_worker: 0",
            "spec.resources.cpus_per_worker",
        ),
        ("priority: 0", "priority: 5000", "spec.scheduling.priority"),
        ("keep_last: 3", "keep_last: 0", "spec.checkpoint.keep_last"),
        ("max_restarts: 5", "max_restarts: 1000", "spec.max_restarts"),
        ("team: vision", "team: \"not ok!\"", "metadata.labels.team"),
        (
            "compression: {type: none}",
            "compression: {type: topk, ratio: 2}",
            "spec.distributed.compression.ratio",
        ),
        (
            "compression: {type: none}",
            "compression: {type: qsgd, bits: 0}",
            "spec.distributed.compression.bits",
        ),
        (
            "compression: {type: none}",
            "compression: {type: onebit, ratio: 0.01}",
            "spec.distributed.compression",
        ),
        (
            "compression: {type: none}",
            "compression: {type: none, bits: 4}",
            "spec.distributed.compression",
        ),
        (
            "hidden: [256, 128]",
            "hidden: [256, 0]",
            "spec.train.model.hidden[1]",
        ),
        (
            "dataset: {type: digits}",
            "dataset: {type: csv, path: \"\"}",
            "spec.train.dataset.path",
        ),
        (
            "dataset: {type: digits}",
            "dataset: {type: text, path: book.txt}",
            "spec.train.model.type",
        ),
        (
            "gpu_memory_gb: 8",
            "gpu_memory_gb: 8\n    node_selector: {\"bad key!\": vision}",
            "spec.resources.node_selector.bad key!",
        ),
        (
            "gpu_memory_gb: 8",
            "gpu_memory_gb: 8\n    gpu_types: [A100, a100]",
            "spec.resources.gpu_types[1]",
        ),
        (
            "gpu_memory_gb: 8",
            "gpu_memory_gb: 8\n    gpu_types: [\" \"]",
            "spec.resources.gpu_types[0]",
        ),
        (
            "model: {type: mlp, hidden: [256, 128]}",
            "model: {type: charlm}",
            "spec.train.model.type",
        ),
    ];
    for (from, to, field) in cases {
        assert_eq!(
            error_field(&example_with(from, to)),
            field,
            "{from} -> {to}"
        );
    }
}

#[test]
fn a_target_says_which_way_it_is_met_and_accuracy_is_a_fraction() {
    let with = |target: &str| {
        example_with(
            "max_steps: 5000",
            &format!("max_steps: 5000\n    target: {target}"),
        )
    };
    let err = parse_yaml(&with("{metric: val_loss, value: 0.05}")).unwrap_err();
    assert_eq!(err.field, "spec.train.target.mode");
    assert!(err.reason.contains("needs `mode: min`"), "{}", err.reason);
    let err = parse_yaml(&with("{metric: val_accuracy, value: 97}")).unwrap_err();
    assert_eq!(err.field, "spec.train.target.value");
    assert!(err.reason.contains("0.97"), "{}", err.reason);
    parse_yaml(&with("{metric: val_loss, value: 0.05, mode: min}")).unwrap();
    parse_yaml(&with("{metric: val_accuracy, value: 0.97}")).unwrap();
}

#[test]
fn a_document_whose_aliases_expand_past_the_budget_is_refused() {
    // 2,000 zeros named by 2,000 aliases, under `status` (ignored on submit) and in a string list:
    // 4 million values from 20 KB, refused before any is built.
    let zeros = vec!["0"; 2000].join(",");
    let names = vec!["*z"; 2000].join(",");
    let bomb = format!("status: {{a: &z [{zeros}], b: [{names}]}}\n");
    let started = std::time::Instant::now();
    let err = parse_yaml(&format!("{EXAMPLE}{bomb}")).unwrap_err();
    assert_eq!(err.field, "(document)");
    assert!(err.reason.contains("expands"), "{}", err.reason);
    let word = "x".repeat(4000);
    let argv = vec!["*w"; 2000].join(",");
    let text = example_with(
        "metadata:\n",
        &format!("x-word: &w \"{word}\"\nmetadata:\n"),
    );
    let err =
        parse_yaml(&text.replace("seed: 1", &format!("seed: 1\n    bogus: [{argv}]"))).unwrap_err();
    assert!(err.reason.contains("expands"), "{}", err.reason);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // Aliases within the budget are expanded as before.
    let small = example_with("hidden: [256, 128]", "hidden: &h [256, 128]");
    parse_yaml(&small).unwrap();
}

/// A body of a few kilobytes whose aliases expand, within the alias budget, to an `argv` of
/// megabytes is refused: stored, it could never have been sent to an executor (its task definition
/// past the gRPC message limit wedged the node for every tenant).
#[test]
fn a_document_that_expands_past_the_size_limit_is_refused() {
    let word = "x".repeat(1000);
    let argv = format!("&w \"{word}\", {}", vec!["*w"; 1000].join(", "));
    let job = format!(
        "apiVersion: drover.dev/v1\nkind: DroverJob\nmetadata: {{name: big}}\n\
         spec:\n  type: command\n  command: {{argv: [{argv}]}}\n"
    );
    assert!(job.len() < 16 * 1024, "{} bytes sent", job.len());
    let err = parse_yaml(&job).unwrap_err();
    assert_eq!(err.field, "(document)");
    assert!(err.reason.contains("at most 262144"), "{}", err.reason);
    // The same job with a short argv is fine.
    let fine = job.replace(&argv, "python3, train.py");
    parse_yaml(&fine).unwrap();
}

#[test]
fn combinations_are_checked() {
    let no_train =
        "apiVersion: drover.dev/v1\nkind: DroverJob\nmetadata: {name: a}\nspec: {type: train}\n";
    assert_eq!(error_field(no_train), "spec.train");
    let no_command =
        "apiVersion: drover.dev/v1\nkind: DroverJob\nmetadata: {name: a}\nspec: {type: command}\n";
    assert_eq!(error_field(no_command), "spec.command");
    let empty_argv = "apiVersion: drover.dev/v1\nkind: DroverJob\nmetadata: {name: a}\n\
                      spec: {type: command, command: {argv: []}}\n";
    assert_eq!(error_field(empty_argv), "spec.command.argv");
    let allreduce_with_ps = example_with("mode: ps", "mode: allreduce");
    assert_eq!(error_field(&allreduce_with_ps), "spec.resources.ps");
    let compressed_allreduce = example_with("mode: ps", "mode: allreduce")
        .replace("ps: {min: 1, max: 2}", "ps: {min: 0, max: 0}")
        .replace("compression: {type: none}", "compression: {type: onebit}");
    assert_eq!(
        error_field(&compressed_allreduce),
        "spec.distributed.compression"
    );
    let nine_bits = example_with(
        "compression: {type: none}",
        "compression: {type: qsgd, bits: 9}",
    );
    assert_eq!(error_field(&nine_bits), "spec.distributed.compression.bits");
    // DGC moves an `sgd` optimizer's momentum onto the workers: it needs one with momentum.
    let dgc = example_with(
        "compression: {type: none}",
        "compression: {type: dgc, ratio: 0.01, warmup_steps: 100}",
    );
    let with_optimizer = |optimizer: &str| {
        let doc = dgc.clone();
        let start = doc.find("optimizer:").unwrap();
        let end = start + doc[start..].find('\n').unwrap();
        format!("{}optimizer: {optimizer}{}", &doc[..start], &doc[end..])
    };
    assert_eq!(error_field(&dgc), "spec.train.optimizer");
    assert!(parse_yaml(&with_optimizer("{type: sgd, lr: 0.1, momentum: 0.9}")).is_ok());
    assert_eq!(
        error_field(&with_optimizer("{type: sgd, lr: 0.1}")),
        "spec.train.optimizer"
    );
    assert_eq!(
        error_field(&with_optimizer(
            "{type: sgd, lr: 0.1, momentum: 0.9, nesterov: true}"
        )),
        "spec.train.optimizer"
    );
    assert_eq!(
        error_field(
            &with_optimizer("{type: sgd, lr: 0.1, momentum: 0.9}")
                .replace("warmup_steps: 100", "warmup_steps: 2000000")
        ),
        "spec.distributed.compression.warmup_steps"
    );
    assert_eq!(
        error_field(
            &with_optimizer("{type: sgd, lr: 0.1, momentum: 0.9}")
                .replace("ratio: 0.01", "ratio: 0")
        ),
        "spec.distributed.compression.ratio"
    );
    let no_stop = example_with("max_steps: 5000", "eval_every: 10");
    assert!(parse_yaml(&no_stop).is_err());
    let heads = "apiVersion: drover.dev/v1\nkind: DroverJob\nmetadata: {name: lm}\nspec:\n  type: train\n  \
                 train: {model: {type: charlm, heads: 3, d_model: 128}, dataset: {type: text, path: a.txt}, \
                 batch_size: 8, max_steps: 1}\n";
    assert_eq!(error_field(heads), "spec.train.model.d_model");
}

#[test]
fn command_example_parses() {
    let job = parse_yaml(include_str!("../../../examples/sleep-command.yaml")).unwrap();
    assert_eq!(job.spec.job_type, JobType::Command);
    assert_eq!(job.max_gpus(), 0);
}

/// A setting that would mean nothing for the job it is given to is refused, naming it, rather than
/// accepted and ignored; the launcher is a command job's only `distributed` setting.
#[test]
fn settings_that_would_be_ignored_are_refused() {
    let command = |extra: &str| {
        format!(
            "apiVersion: drover.dev/v1\nkind: DroverJob\nmetadata: {{name: a}}\nspec:\n  type: command\n  \
             command: {{argv: [python3, train.py]}}\n  resources: {{workers: {{min: 1, max: 3}}}}\n{extra}"
        )
    };
    for (extra, field) in [
        (
            "  distributed: {mode: allreduce}\n",
            "spec.distributed.mode",
        ),
        ("  distributed: {sync: ssp}\n", "spec.distributed.sync"),
        (
            "  distributed: {staleness: 9}\n",
            "spec.distributed.staleness",
        ),
        (
            "  distributed: {compression: {type: onebit}}\n",
            "spec.distributed.compression",
        ),
        (
            "  distributed: {collective: tree}\n",
            "spec.distributed.collective",
        ),
        (
            "  distributed: {local_sgd: {every_steps: 4}}\n",
            "spec.distributed.local_sgd",
        ),
        ("  checkpoint: {every_steps: 100}\n", "spec.checkpoint"),
        (
            "  distributed: {launcher: torch}\n  resources: {workers: 2, ps: 1}\n",
            "spec.resources.ps",
        ),
    ] {
        let mut doc = command(extra);
        if extra.contains("resources") {
            doc = doc.replace("  resources: {workers: {min: 1, max: 3}}\n", "");
        }
        assert_eq!(error_field(&doc), field, "{extra}");
    }
    // What a command job may say: a launcher over an elastic range of workers, no PS shards, and
    // more than one worker without naming a gradient exchange.
    for launcher in ["torch", "jax", "none"] {
        let job = parse_yaml(&command(&format!(
            "  distributed: {{launcher: {launcher}}}\n"
        )))
        .unwrap();
        assert_eq!(job.spec.distributed.launcher.as_str(), launcher);
    }
    // A train job's engine starts its own processes; all-reduce is synchronous; the engine's sync
    // modes and compression need shards; staleness is SSP's alone.
    let launched = example_with(
        "compression: {type: none}}",
        "compression: {type: none}, launcher: torch}",
    );
    assert_eq!(error_field(&launched), "spec.distributed.launcher");
    let async_ring = example_with("mode: ps, sync: bsp", "mode: allreduce, sync: async")
        .replace("ps: {min: 1, max: 2}", "ps: {min: 0, max: 0}");
    assert_eq!(error_field(&async_ring), "spec.distributed.sync");
    let lone_ssp = example_with("sync: bsp", "sync: ssp")
        .replace("workers: {min: 1, max: 4}", "workers: 1")
        .replace("ps: {min: 1, max: 2}", "ps: 0");
    assert_eq!(error_field(&lone_ssp), "spec.distributed.sync");
    let bsp_staleness = example_with("staleness: 4", "staleness: 8");
    assert_eq!(error_field(&bsp_staleness), "spec.distributed.staleness");
    let ssp_staleness = example_with("sync: bsp, staleness: 4", "sync: ssp, staleness: 8");
    assert!(parse_yaml(&ssp_staleness).is_ok());
    // An all-reduce algorithm means nothing to parameter servers; every one is an all-reduce's.
    let ps_tree = example_with("mode: ps,", "mode: ps, collective: tree,");
    assert_eq!(error_field(&ps_tree), "spec.distributed.collective");
    for collective in [
        "auto",
        "ring",
        "tree",
        "recursive_doubling",
        "rabenseifner",
        "hierarchical",
    ] {
        let doc = example_with(
            "mode: ps,",
            &format!("mode: allreduce, collective: {collective},"),
        )
        .replace("ps: {min: 1, max: 2}", "ps: {min: 0, max: 0}");
        let job = parse_yaml(&doc).unwrap();
        assert_eq!(job.spec.distributed.collective.as_str(), collective);
    }
    let unknown = example_with("mode: ps,", "mode: allreduce, collective: butterfly,")
        .replace("ps: {min: 1, max: 2}", "ps: {min: 0, max: 0}");
    assert_eq!(error_field(&unknown), "spec.distributed.collective");
    // Local SGD averages by all-reduce, every 1 to 100,000 steps.
    let ps_local = example_with("mode: ps,", "mode: ps, local_sgd: {every_steps: 4},");
    assert_eq!(error_field(&ps_local), "spec.distributed.local_sgd");
    let local = |every: &str| {
        example_with(
            "mode: ps,",
            &format!("mode: allreduce, local_sgd: {{every_steps: {every}}},"),
        )
        .replace("ps: {min: 1, max: 2}", "ps: {min: 0, max: 0}")
    };
    let job = parse_yaml(&local("8")).unwrap();
    assert_eq!(
        job.spec.distributed.local_sgd.map(|l| l.every_steps),
        Some(8)
    );
    assert_eq!(
        error_field(&local("0")),
        "spec.distributed.local_sgd.every_steps"
    );
    assert_eq!(
        error_field(&local("100001")),
        "spec.distributed.local_sgd.every_steps"
    );
}

/// Every manifest shipped under `examples/` (the demo submits them, the docs tell users to) passes
/// the checks a submission goes through: a rule added later cannot leave an example behind.
#[test]
fn every_shipped_example_is_valid() {
    use crate::experiment::DroverExperiment;
    fn walk(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("examples/ is readable") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|ext| ext == "yaml") {
                found.push(path);
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files = Vec::new();
    walk(&root, &mut files);
    let mut checked = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).expect("example is readable");
        if text.contains("\nkind: DroverJob") {
            parse_yaml(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
            checked += 1;
        } else if text.contains("\nkind: DroverExperiment") {
            DroverExperiment::parse(text.as_bytes(), Format::Yaml)
                .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
            checked += 1;
        }
    }
    assert!(
        checked >= 10,
        "only {checked} examples found under {}",
        root.display()
    );
}

/// A command job's step budget and starting checkpoint are checked like a train job's.
#[test]
fn a_command_jobs_budget_and_starting_checkpoint_are_checked() {
    let base = include_str!("../../../examples/sleep-command.yaml");
    let with = |extra: &str| {
        base.replace(
            "    argv: [sh, -c,",
            &format!("    {extra}\n    argv: [sh, -c,"),
        )
    };
    let job = parse_yaml(&with("max_steps: 300")).unwrap();
    assert_eq!(job.max_steps(), Some(300));
    assert_eq!(error_field(&with("max_steps: 0")), "spec.command.max_steps");
    assert_eq!(
        error_field(&with("init_from: {checkpoint: \" \"}")),
        "spec.command.init_from.checkpoint"
    );
    let job = parse_yaml(&with("init_from: {checkpoint: abc}")).unwrap();
    let (init, field) = job.init_from().unwrap();
    assert_eq!(
        (init.checkpoint.as_str(), field),
        ("abc", "spec.command.init_from.checkpoint")
    );
}

/// `spec.command.image` is an OCI reference, kept as written and completed as registries do.
#[test]
fn a_command_jobs_image_is_an_oci_reference() {
    let base = include_str!("../../../examples/sleep-command.yaml");
    let with = |image: &str| {
        base.replace(
            "    argv: [sh, -c,",
            &format!("    image: \"{image}\"\n    argv: [sh, -c,"),
        )
    };
    for (written, full) in [
        ("python:3.12-slim", "docker.io/library/python:3.12-slim"),
        ("ghcr.io/team/trainer:v3", "ghcr.io/team/trainer:v3"),
        ("localhost:5000/x/y", "localhost:5000/x/y:latest"),
    ] {
        let job = parse_yaml(&with(written)).unwrap();
        let command = job.spec.command.as_ref().unwrap();
        assert_eq!(command.image.as_deref(), Some(written));
        assert_eq!(command.image_reference(), Some(Ok(full.to_owned())));
    }
    let pinned = format!("registry:5000/x@sha256:{}", "a".repeat(64));
    assert!(parse_yaml(&with(&pinned)).is_ok());
    for bad in [
        "",
        "Upper/Case",
        "x:tag:two",
        "-rm",
        "x@sha256:short",
        &"a".repeat(600),
    ] {
        assert_eq!(error_field(&with(bad)), "spec.command.image", "{bad}");
    }
}

/// A node selector and GPU types are accepted as written (placement reads them).
#[test]
fn a_node_selector_and_gpu_types_are_kept() {
    let base = include_str!("../../../examples/digits-mlp.yaml");
    let job = parse_yaml(&base.replace(
        "gpu_memory_gb: 8",
        "gpu_memory_gb: 8\n    node_selector: {pool: spot}\n    gpu_types: [v100, p100]",
    ))
    .unwrap();
    assert_eq!(job.spec.resources.node_selector["pool"], "spot");
    assert_eq!(job.spec.resources.gpu_types, vec!["v100", "p100"]);
}

/// Tolerations in Kubernetes' form: Equal needs a key, Exists takes no value, the effect is NoSchedule.
#[test]
fn tolerations_are_checked() {
    let base = include_str!("../../../examples/digits-mlp.yaml");
    let with = |tolerations: &str| {
        base.replace(
            "gpu_memory_gb: 8",
            &format!("gpu_memory_gb: 8\n    tolerations: {tolerations}"),
        )
    };
    assert!(
        parse_yaml(&with(
            "[{key: dedicated, value: vision}, {operator: Exists}]"
        ))
        .is_ok()
    );
    assert!(parse_yaml(&with("[{key: spot, operator: Exists, effect: NoSchedule}]")).is_ok());
    for (bad, field) in [
        ("[{value: vision}]", "spec.resources.tolerations[0].key"),
        (
            "[{key: a, operator: Exists, value: b}]",
            "spec.resources.tolerations[0].value",
        ),
        (
            "[{key: a, value: b, effect: NoExecute}]",
            "spec.resources.tolerations[0].effect",
        ),
        (
            "[{key: \"bad key!\", operator: Exists}]",
            "spec.resources.tolerations[0].key",
        ),
    ] {
        assert_eq!(error_field(&with(bad)), field, "{bad}");
    }
}
