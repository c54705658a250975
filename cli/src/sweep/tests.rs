use super::*;
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    sweep: SweepArgs,
}

fn args(dir: &Path, resume: bool) -> SweepArgs {
    let models = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/models/ps_worker_speed.txt"
    );
    let trace = dir.join("trace.csv");
    let out = dir.join("out");
    let mut argv = vec![
        "sweep".to_owned(),
        format!("--trace={}", trace.display()),
        format!("--models={models}"),
        "--clusters=1x8,2x8".into(),
        "--seeds=1".into(),
        "--compare=fifo,drover".into(),
        "--jobs=2".into(),
        format!("--out={}", out.display()),
    ];
    if resume {
        argv.push("--resume".into());
    }
    Cli::parse_from(argv).sweep
}

fn lines(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("out/runs.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn records_every_run_and_resumes_from_what_was_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let mut trace = String::from("submit_s,duration_s,gpus,tenant\n");
    for i in 0..12 {
        trace.push_str(&format!(
            "{},{},{},t{}\n",
            i * 120,
            600 + i * 60,
            1 << (i % 3),
            i % 2
        ));
    }
    std::fs::write(dir.path().join("trace.csv"), trace).unwrap();
    run(args(dir.path(), false), true).unwrap();
    let first = lines(dir.path());
    assert_eq!(first.len(), 4, "2 clusters x 1 seed x 2 policies");
    let csv = std::fs::read_to_string(dir.path().join("out/sweep.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5);

    // A run cut off while being written is run again; the others are reused, not re-run.
    let mut kept = first[..3].to_vec();
    kept.push(first[3][..first[3].len() / 2].to_owned());
    std::fs::write(dir.path().join("out/runs.jsonl"), kept.join("\n") + "\n").unwrap();
    run(args(dir.path(), true), true).unwrap();
    let resumed = lines(dir.path());
    assert_eq!(resumed.len(), 5);
    assert_eq!(resumed[..3], first[..3]);
    let rerun: Recorded = serde_json::from_str(&resumed[4]).unwrap();
    let original: Recorded = serde_json::from_str(&first[3]).unwrap();
    assert_eq!(
        (rerun.cluster, rerun.policy, rerun.report.avg_jct_s),
        (original.cluster, original.policy, original.report.avg_jct_s)
    );

    // Other settings are not reused; without --resume the record starts afresh.
    let recorded = recorded_runs(&dir.path().join("out/runs.jsonl"), "other").unwrap();
    assert!(recorded.is_empty());
    run(args(dir.path(), false), true).unwrap();
    assert_eq!(lines(dir.path()).len(), 4);
}
