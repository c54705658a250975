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

/// `--weeks` replays each week on its own at every size and seed, records the week with each run
/// (a resumed sweep reuses them), and says per cell how `drover` fares against its targets.
#[test]
fn weeks_are_replayed_one_by_one_and_judged_against_the_targets() {
    let dir = tempfile::tempdir().unwrap();
    // 2017-10-02 00:00 UTC, the Monday of 2017-W40, then 30 jobs a week for two weeks.
    let monday = 1_506_902_400u64;
    let mut trace = String::from("submit_s,duration_s,gpus,tenant\n");
    for i in 0..60u64 {
        trace.push_str(&format!(
            "{},{},{},t{}\n",
            monday + i * 20_160,
            1_800 + (i % 7) * 900,
            1 << (i % 3),
            i % 3
        ));
    }
    std::fs::write(dir.path().join("trace.csv"), trace).unwrap();
    let models = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/models/ps_worker_speed.txt"
    );
    let out = dir.path().join("out");
    let argv = |extra: &[&str]| {
        let mut argv = vec![
            "sweep".to_owned(),
            format!("--trace={}", dir.path().join("trace.csv").display()),
            format!("--models={models}"),
            "--clusters=1x8".into(),
            "--seeds=1".into(),
            "--weeks=2017-W40..W41".into(),
            "--compare=fifo,drf,tiresias,drover".into(),
            "--jobs=2".into(),
            format!("--out={}", out.display()),
        ];
        argv.extend(extra.iter().map(|s| (*s).to_owned()));
        Cli::parse_from(argv).sweep
    };
    run(argv(&[]), true).unwrap();
    let runs = lines(dir.path());
    assert_eq!(runs.len(), 8, "2 weeks x 1 cluster x 1 seed x 4 policies");
    let weeks: std::collections::BTreeSet<String> = runs
        .iter()
        .map(|l| serde_json::from_str::<Recorded>(l).unwrap().week.unwrap())
        .collect();
    assert_eq!(
        weeks.into_iter().collect::<Vec<_>>(),
        ["2017-W40", "2017-W41"]
    );
    // Each week holds only its own jobs: 30 were submitted in each.
    let first: Recorded = serde_json::from_str(&runs[0]).unwrap();
    assert_eq!(first.report.jobs, 30);
    let targets = std::fs::read_to_string(out.join("targets.md")).unwrap();
    assert!(targets.contains("| 2017-W40 | 1x8 | 1 | 30 |"), "{targets}");
    assert!(targets.contains("| 2017-W41 | 1x8 | 1 | 30 |"), "{targets}");
    assert!(
        targets.contains("of 2 cells") && targets.contains("worst tenant"),
        "{targets}"
    );
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert_eq!(
        csv.lines().filter(|l| l.starts_with("2017-W41,")).count(),
        4
    );

    // Resumed: nothing to run again.
    run(argv(&["--resume"]), true).unwrap();
    assert_eq!(lines(dir.path()).len(), 8);

    // A window besides the weeks is refused; so is a week without jobs.
    let err = run(argv(&["--from=2017-10-02 00:00"]), true).unwrap_err();
    assert!(err.to_string().contains("without --from/--to"), "{err}");
    let mut args = argv(&[]);
    args.weeks = Some("2017-W50".into());
    let err = format!("{:#}", run(args, true).unwrap_err());
    assert!(err.contains("2017-W50") && err.contains("no jobs"), "{err}");
}
