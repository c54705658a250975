//! `drover sim`: replay a cluster trace through one policy, or several side by side.

use crate::output::out;
use anyhow::{Context, bail};
use drover_scheduler::forecast::ForecastConfig;
use drover_scheduler::sim::experiments::{ExperimentOptions, Experiments};
use drover_scheduler::sim::predict::{self, PredictOptions};
use drover_scheduler::sim::{self, Stopwatch};
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod report;
pub(crate) mod workload;
use report::{
    experiments_csv, predictions_csv, print_accuracy, print_experiments, print_model_parallel,
    print_table,
};
use workload::{WorkloadArgs, parse_cluster, print_settings};

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SimArgs {
    #[command(subcommand)]
    command: Option<SimCommand>,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Cluster as NODESxGPUS, e.g. 48x8 (V100s); or groups of nodes with a GPU model each, e.g.
    /// 16x8:v100,16x8:p100,16x8:k80 (jobs' speed per model from --gpu-speeds).
    #[arg(long, default_value = "48x8")]
    cluster: String,
    /// The policy to run.
    #[arg(long, default_value = "tiresias")]
    policy: String,
    /// Run several policies on the same workload and seed (comma-separated, or `all`) and compare.
    #[arg(long)]
    compare: Option<String>,
    /// Seed for every random draw (models, shapes, noise).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also predict, at each arrival that has to wait, when it will start (the server's queue
    /// forecast, seeing only observations), and report how far off the predictions were.
    #[arg(long)]
    predict: bool,
    /// With --predict: predict for one waiting arrival in N (the forecast replays ahead each time).
    #[arg(long, default_value_t = 1, requires = "predict", value_parser = clap::value_parser!(u32).range(1..))]
    predict_every: u32,
    /// With --predict: expect the arrivals of the last WINDOW to repeat while predicting (`0s`: no
    /// new arrivals).
    #[arg(long, default_value = "0s", requires = "predict", value_parser = humantime::parse_duration)]
    predict_arrival_window: Duration,
    /// With --predict, a diagnostic: give the forecast every job's hidden true remaining work instead
    /// of its estimate (no server has this), to tell estimate error from the replay's own error.
    #[arg(long, requires = "predict")]
    predict_from_truth: bool,
    /// With --predict: replays per prediction, each with every job's remaining work drawn from its
    /// estimate (1: one replay with every job at its median).
    #[arg(long, default_value_t = ForecastConfig::default().samples, requires = "predict", value_parser = clap::value_parser!(u32).range(1..=64))]
    predict_samples: u32,
    /// Add this many hyper-parameter searches (ASHA over the digits example's space, run by Drover's
    /// own searcher) next to the trace's jobs, submitted evenly over its span by the tenants with the
    /// largest guarantees in turn; their trials are jobs the searcher makes, promotes and stops.
    #[arg(long, default_value_t = 0)]
    experiments: usize,
    /// With --experiments: trials per experiment.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    experiment_trials: u32,
    /// With --experiments: trials each experiment runs at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    experiment_concurrency: u32,
    /// With --experiments: hours a trial that reaches the top rung trains on one GPU.
    #[arg(long, default_value_t = 4.0)]
    trial_hours: f64,
    /// Directory for report.json, summary.csv, per-job CSVs and SVG charts.
    #[arg(long, default_value = "sim-out")]
    out: PathBuf,
}

struct WallClock(Instant);

impl Stopwatch for WallClock {
    fn now_ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

#[derive(Debug, clap::Subcommand)]
enum SimCommand {
    /// Run the comparison across cluster sizes (loads) and seeds; one table, a CSV and a chart of each
    /// policy's average JCT over the best non-oracle baseline's, by load.
    Sweep(Box<crate::sweep::SweepArgs>),
}

pub fn run(args: SimArgs, json: bool) -> anyhow::Result<()> {
    if let Some(SimCommand::Sweep(sweep)) = args.command {
        return crate::sweep::run(*sweep, json);
    }
    let cluster = parse_cluster(&args.cluster)?;
    let inputs = args.workload.inputs()?;
    let models = &inputs.models;
    let (workload, config) = args.workload.workload(&inputs, &cluster, args.seed)?;
    // The fixed-shape baseline: the same jobs, the model-parallel ones held at their recorded shape.
    let held = if workload.jobs.iter().any(|j| j.view.worker_step > 1) {
        Some(
            args.workload
                .workload_held(&inputs, &cluster, args.seed, true)?
                .0,
        )
    } else {
        None
    };
    let policies: Vec<String> = match args.compare.as_deref() {
        None => vec![args.policy.clone()],
        Some("all") => drover_scheduler::policy_names()
            .into_iter()
            .map(str::to_owned)
            .collect(),
        Some(list) => list
            .split(',')
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .collect(),
    };
    if args.experiments > 0 {
        if !(args.trial_hours > 0.0 && args.trial_hours <= 1000.0) {
            bail!("--trial-hours: between 0 and 1000 hours");
        }
        if let Some(oracle) = policies
            .iter()
            .find(|p| drover_scheduler::is_oracle_policy(p))
        {
            bail!(
                "{oracle} needs every job's hidden truth in advance (its length, or its speed on each \
                 GPU model); a search's trials have none (leave it out of --compare when using \
                 --experiments)"
            );
        }
    }
    for name in &policies {
        let ablation = drover_scheduler::ablation_names().contains(&name.as_str());
        if !ablation && !drover_scheduler::policy_names().contains(&name.as_str()) {
            bail!(
                "unknown policy `{name}` (expected one of: {})",
                drover_scheduler::policy_names().join(", ")
            );
        }
    }
    eprintln!(
        "workload: {} jobs ({} skipped: larger than the cluster), {} tenants, {} GPUs ({}), offered load {:.2}, seed {}",
        workload.jobs.len(),
        workload.skipped,
        workload.tenants.len(),
        cluster.total_gpus(),
        cluster.label(),
        workload.offered_load(),
        args.seed
    );
    for model in models {
        eprintln!(
            "  speed model {:<24} {:>3} points, Optimus fit median error {:>4.1}%, residual {:>4.1}%, peak at {} workers",
            model.name,
            model.points.len(),
            100.0 * model.median_error,
            100.0 * model.residual,
            model.peak_workers()
        );
    }
    print_settings(&config, &args.workload);
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let mut reports = Vec::new();
    let mut cdfs = Vec::new();
    let mut timelines = Vec::new();
    let mut accuracies = Vec::new();
    let mut experiment_rows = Vec::new();
    let span = (
        workload.jobs.first().map_or(0.0, |j| j.view.submit_s),
        workload.jobs.last().map_or(0.0, |j| j.view.submit_s),
    );
    for name in &policies {
        let started = Instant::now();
        eprint!("running {name} ... ");
        let clock = WallClock(Instant::now());
        let predict = args.predict.then_some(PredictOptions {
            // The replay plays rounds as often as the simulated scheduler does.
            forecast: ForecastConfig {
                samples: args.predict_samples,
                round_s: config.round_s,
                ..ForecastConfig::default()
            },
            every: args.predict_every as usize,
            arrival_window_s: args.predict_arrival_window.as_secs_f64(),
            remaining_from_truth: args.predict_from_truth,
        });
        let new_searches = || {
            (args.experiments > 0).then(|| {
                let options = ExperimentOptions {
                    count: args.experiments,
                    max_trials: args.experiment_trials,
                    max_concurrent_trials: args.experiment_concurrency,
                    trial_hours: args.trial_hours,
                    ..ExperimentOptions::default()
                };
                Experiments::new(
                    options,
                    &workload.tenants,
                    models,
                    span,
                    args.workload.cpus_per_node,
                    args.seed,
                )
            })
        };
        let mut searches = new_searches();
        let spawner = searches
            .as_mut()
            .map(|s| s as &mut dyn sim::engine::Spawner);
        let (mut report, outcome) =
            sim::run_policy_with(name, &workload, config, predict, spawner, &clock)
                .with_context(|| format!("policy {name}"))?;
        if let Some(searches) = &searches {
            experiment_rows.push((name.clone(), searches.rows()));
        }
        eprintln!(
            "{} rounds in {:.1}s",
            report.rounds,
            started.elapsed().as_secs_f64()
        );
        let rows = sim::job_rows(&workload, &outcome);
        std::fs::write(
            args.out.join(format!("jobs-{name}.csv")),
            sim::jobs_csv(&rows),
        )?;
        cdfs.push((
            name.clone(),
            rows.iter().map(|r| r.jct_s).collect::<Vec<f64>>(),
        ));
        timelines.push((
            name.clone(),
            outcome
                .busy_timeline
                .iter()
                .map(|&(t, b)| (t, f64::from(b)))
                .collect::<Vec<_>>(),
        ));
        if args.predict {
            let accuracy = predict::accuracy(&outcome.predictions, &outcome, 600.0);
            std::fs::write(
                args.out.join(format!("predictions-{name}.csv")),
                predictions_csv(&outcome),
            )?;
            accuracies.push((name.clone(), accuracy, started.elapsed()));
        }
        if let Some(held) = &held {
            eprint!("running {name} with the model-parallel jobs held at their shapes ... ");
            let started = Instant::now();
            // The same searches beside them, so only the held shapes differ.
            let mut searches = new_searches();
            let spawner = searches
                .as_mut()
                .map(|s| s as &mut dyn sim::engine::Spawner);
            let (baseline, outcome) =
                sim::run_policy_with(name, held, config, None, spawner, &clock)
                    .with_context(|| format!("policy {name}, shapes held"))?;
            eprintln!(
                "{} rounds in {:.1}s",
                baseline.rounds,
                started.elapsed().as_secs_f64()
            );
            std::fs::write(
                args.out.join(format!("jobs-{name}-held.csv")),
                sim::jobs_csv(&sim::job_rows(held, &outcome)),
            )?;
            report.held = Some(sim::report::HeldRun {
                avg_jct_s: baseline.avg_jct_s,
                model_parallel: baseline.model_parallel,
            });
        }
        reports.push(report);
    }
    let gpus = cluster.total_gpus();
    std::fs::write(
        args.out.join("report.json"),
        serde_json::to_string_pretty(&reports)?,
    )?;
    std::fs::write(args.out.join("summary.csv"), sim::summary_csv(&reports))?;
    std::fs::write(args.out.join("jct-cdf.svg"), sim::svg::jct_cdf(&cdfs))?;
    std::fs::write(
        args.out.join("utilisation.svg"),
        sim::svg::utilisation(&timelines, gpus),
    )?;
    if json {
        out!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        print_table(&reports);
        if args.predict {
            print_accuracy(&accuracies);
        }
        if !experiment_rows.is_empty() {
            print_experiments(&experiment_rows);
        }
        print_model_parallel(&reports);
    }
    if !experiment_rows.is_empty() {
        std::fs::write(
            args.out.join("experiments.csv"),
            experiments_csv(&experiment_rows),
        )?;
    }
    eprintln!(
        "wrote report.json, summary.csv, jobs-<policy>.csv, jct-cdf.svg and utilisation.svg to {}",
        args.out.display()
    );
    Ok(())
}
