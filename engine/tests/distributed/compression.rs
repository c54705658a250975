//! Compressed gradients (top-k, sign, QSGD, DGC) with error feedback: accuracy kept while the pushes
//! shrink, and no residual lost when a job stops and resumes from a checkpoint.

use super::*;

/// 2,000 steps of `spec` with 3 workers and one shard under `compression`: the last test accuracy,
/// and how many times fewer bytes than raw values the pushes took in steps 1801-1900 (the last
/// window before the final checkpoint, whose step is pushed uncompressed, the residuals flushed
/// into it).
fn accuracy_and_ratio(spec: &TrainSpec, compression: Compression) -> (f64, f64) {
    let params: f64 = (64 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10) as f64;
    let dir = tempfile::tempdir().unwrap();
    let distributed = Distributed {
        mode: DistributedMode::Ps,
        compression,
        ..Distributed::default()
    };
    let (collect, outcome) = run_job(spec, dir.path(), 3, 1, &distributed);
    assert_eq!(outcome.step, 2000);
    let ratio = 4.0 * params / collect.at(1900, "grad_bytes_per_step");
    (collect.last("val_accuracy"), ratio)
}

/// 2,000 steps of the example MLP with 3 workers: each compression scheme stays within half a point
/// of the uncompressed run's test accuracy while pushing far fewer bytes.
#[test]
fn compressed_gradients_keep_accuracy_and_shrink_the_pushes() {
    let spec = digits_mlp(
        serde_json::json!({"type": "adamw", "lr": 0.001, "weight_decay": 0.01}),
        2000,
        2000,
    );
    let run = |compression: Compression| accuracy_and_ratio(&spec, compression);
    let (baseline, raw) = run(Compression::None);
    assert!(
        (raw - 1.0).abs() < 1e-9,
        "uncompressed pushes carry 4 bytes a value: {raw}"
    );
    assert!(baseline >= 0.95, "uncompressed: {baseline:.4}");
    for (scheme, min_ratio) in [
        (Compression::Topk { ratio: 0.01 }, 20.0),
        (Compression::Onebit, 25.0),
        (Compression::Qsgd { bits: 4 }, 6.0),
    ] {
        let (accuracy, ratio) = run(scheme.clone());
        eprintln!(
            "{scheme:?}: accuracy {accuracy:.4} (uncompressed {baseline:.4}), {ratio:.1}x fewer bytes"
        );
        assert!(
            accuracy >= baseline - 0.005,
            "{scheme:?}: {accuracy:.4} vs {baseline:.4}"
        );
        assert!(ratio >= min_ratio, "{scheme:?}: only {ratio:.1}x");
    }
}

/// Deep Gradient Compression against the same job uncompressed, both with SGD and momentum 0.9
/// (under DGC the workers apply it and the shard does not): 2,000 steps, 3 workers.
#[test]
fn deep_gradient_compression_keeps_accuracy_within_half_a_point() {
    let spec = digits_mlp(
        serde_json::json!({"type": "sgd", "lr": 0.05, "momentum": 0.9}),
        2000,
        2000,
    );
    let run = |compression: Compression| accuracy_and_ratio(&spec, compression);
    let (baseline, _) = run(Compression::None);
    let (accuracy, ratio) = run(Compression::Dgc {
        ratio: 0.01,
        warmup_steps: 200,
    });
    eprintln!(
        "DGC 1%: accuracy {accuracy:.4} (uncompressed {baseline:.4}), {ratio:.1}x fewer bytes"
    );
    assert!(baseline >= 0.95, "uncompressed: {baseline:.4}");
    assert!(
        accuracy >= baseline - 0.005,
        "DGC {accuracy:.4} vs {baseline:.4}"
    );
    assert!(ratio >= 20.0, "only {ratio:.1}x");
}

/// Asks for a stop (or a checkpoint) when the leader reports a given step.
struct RequestAt<'a> {
    step: u64,
    stop: bool,
    requests: &'a Requests,
    checkpoints: Vec<(u64, PathBuf)>,
}

impl Reporter for RequestAt<'_> {
    fn metrics(&mut self, step: u64, _values: &[(&str, f64)]) {
        if step == self.step {
            let flag = if self.stop {
                &self.requests.stop
            } else {
                &self.requests.checkpoint
            };
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    fn checkpoint(&mut self, step: u64, path: &Path) {
        self.checkpoints.push((step, path.to_path_buf()));
    }
    fn info(&mut self, _line: &str) {}
}

/// Error feedback survives a stop: a top-k job (1% of each gradient sent, the rest held back in
/// the workers' residuals) stopped mid-interval and resumed in a new generation ends with exactly
/// the parameters of the same job that checkpointed at the same step and went on. The workers
/// flush their residuals into the step before the checkpoint; without that, the resumed run
/// starts from empty residuals and the two part ways.
#[test]
fn compressed_gradients_lose_no_residual_across_a_stop_and_resume() {
    let spec = digits_mlp(
        serde_json::json!({"type": "adamw", "lr": 0.001, "weight_decay": 0.01}),
        24,
        24,
    );
    let distributed = Distributed {
        mode: DistributedMode::Ps,
        sync: SyncMode::Bsp,
        staleness: 4,
        compression: Compression::Topk { ratio: 0.01 },
        collective: Default::default(),
        local_sgd: None,
        parallelism: Default::default(),
        launcher: Launcher::None,
    };
    let job = |dir: &Path, at: u64, stop: bool, resume: Option<&Path>, generation: u64| {
        let mut options = options(&spec, dir, 2, 2, &distributed);
        options.log_every = 1;
        let requests = Requests::default();
        let mut reporter = RequestAt {
            step: at,
            stop,
            requests: &requests,
            checkpoints: Vec::new(),
        };
        let outcome =
            local::run_job(&options, 2, 2, generation, resume, &mut reporter, &requests).unwrap();
        (outcome, reporter.checkpoints)
    };
    // Stopped when the leader reports step 5: it announces a flush, step 6 is pushed flushed, the
    // checkpoint is at 7.
    let (stopped_dir, went_on_dir, resumed_dir) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let (stopped, _) = job(stopped_dir.path(), 5, true, None, 1);
    assert!(stopped.interrupted);
    assert_eq!(stopped.step, 7);
    let stop_checkpoint = stopped.last_checkpoint.unwrap();
    // A checkpoint request reported at step 4 is read at the step-5 boundary: the same flush.
    let (went_on, checkpoints) = job(went_on_dir.path(), 4, false, None, 1);
    assert_eq!(went_on.step, 24);
    let steps: Vec<u64> = checkpoints.iter().map(|c| c.0).collect();
    assert_eq!(steps, [7, 24]);
    let a = checkpoint::load(&stop_checkpoint).unwrap();
    let b = checkpoint::load(&checkpoints[0].1).unwrap();
    assert_eq!(a.params, b.params);
    // Resumed in generation 2 (fresh compressors) to the end.
    let (resumed, _) = job(
        resumed_dir.path(),
        u64::MAX,
        true,
        Some(&stop_checkpoint),
        2,
    );
    assert_eq!(resumed.step, 24);
    let a = checkpoint::load(resumed.last_checkpoint.as_ref().unwrap()).unwrap();
    let b = checkpoint::load(went_on.last_checkpoint.as_ref().unwrap()).unwrap();
    assert_close(&a.params, &b.params, 1e-6);
    assert_close(&a.optimizer, &b.optimizer, 1e-6);
}
