//! `drover sim sweep`: the policy comparison across cluster sizes (light to overloaded), seeds and
//! (`--weeks`) weeks of the trace, with one table, a CSV of every run, a chart of each policy's
//! average JCT over the best non-oracle baseline's against offered load, and `drover`'s targets per
//! cell ([`targets`]).

mod row;
mod targets;
mod weeks;

pub use row::SweepRow;

use crate::output::out;
use crate::sim::workload::{WorkloadArgs, parse_cluster, print_settings};
use anyhow::{Context, bail};
use drover_scheduler::sim::{self, Report, SimConfig, Stopwatch, Workload};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Cluster sizes, NODESxGPUS, comma-separated: each is one load. A cluster of several GPU models
    /// joins its groups with `+` (`16x8:v100+16x8:p100+16x8:k80`).
    #[arg(long, default_value = "16x8,24x8,32x8,48x8,64x8,96x8")]
    clusters: String,
    /// Seeds, comma-separated: every cluster size runs with each.
    #[arg(long, default_value = "1,2,3")]
    seeds: String,
    /// ISO weeks of the trace, each replayed on its own at every cluster size and seed (Monday
    /// 00:00 UTC to the next Monday): `2017-W36..2017-W44`, `2017-W36..W44` or a comma-separated
    /// list. Not with --from/--to, which replay one window.
    #[arg(long)]
    weeks: Option<String>,
    /// Policies to compare (comma-separated). Oracle baselines (srtf, optimus-oracle) and drover's
    /// ablations may be listed; the "best baseline" is the best of the others.
    #[arg(
        long,
        default_value = "fifo,fifo-backfill,drf,tiresias,optimus,gandiva,drover"
    )]
    compare: String,
    /// Simulations run at once (default: the machine's cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Directory for sweep.csv, sweep.json and sweep.svg, and runs.jsonl (each run as it finishes).
    #[arg(long, default_value = "sweep-out")]
    out: PathBuf,
    /// Reuse the runs an earlier sweep with the same workload settings recorded in OUT/runs.jsonl, so an
    /// interrupted sweep picks up where it stopped. Runs are reused as they were: after changing a
    /// policy's code, sweep without it.
    #[arg(long)]
    resume: bool,
}

/// One finished simulation, as recorded in `runs.jsonl`.
#[derive(Debug, Serialize, Deserialize)]
struct Recorded {
    /// The workload settings and Drover's version: a run is reused only under the same.
    settings: String,
    /// The ISO week replayed (`--weeks`), if one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    week: Option<String>,
    cluster: String,
    seed: u64,
    policy: String,
    report: Report,
}

/// What a recorded run is found by: its week, cluster, seed and policy.
type RunKey = (Option<String>, String, u64, String);

/// The runs recorded in `path` under `settings`, by (week, cluster, seed, policy); a line that does
/// not parse (a run cut off while being written) is skipped.
fn recorded_runs(path: &Path, settings: &str) -> anyhow::Result<BTreeMap<RunKey, Report>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
    };
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<Recorded>(line).ok())
        .filter(|run| run.settings == settings)
        .map(|run| ((run.week, run.cluster, run.seed, run.policy), run.report))
        .collect())
}

/// One workload of the sweep: a week (or the whole window), a cluster size and a seed.
struct Unit {
    week: Option<usize>,
    cluster: usize,
    seed: u64,
    workload: Workload,
    config: SimConfig,
}

struct WallClock(Instant);

impl Stopwatch for WallClock {
    fn now_ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

/// A policy the "best baseline" may be: not an oracle, not drover or one of its ablations.
fn is_baseline(policy: &str) -> bool {
    !drover_scheduler::is_oracle_policy(policy) && !policy.starts_with("drover")
}

fn list<T: std::str::FromStr>(text: &str, flag: &str) -> anyhow::Result<Vec<T>> {
    let items: Vec<&str> = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if items.is_empty() {
        bail!("{flag}: give at least one value");
    }
    items
        .iter()
        .map(|item| {
            item.parse::<T>()
                .map_err(|_| anyhow::anyhow!("{flag}: `{item}` is not valid"))
        })
        .collect()
}

pub fn run(args: SweepArgs, json: bool) -> anyhow::Result<()> {
    let clusters: Vec<String> = list(&args.clusters, "--clusters")?;
    let sizes = clusters
        .iter()
        .map(|c| parse_cluster(c))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let seeds: Vec<u64> = list(&args.seeds, "--seeds")?;
    let policies: Vec<String> = list(&args.compare, "--compare")?;
    for name in &policies {
        if !drover_scheduler::policy_names().contains(&name.as_str())
            && !drover_scheduler::ablation_names().contains(&name.as_str())
        {
            bail!(
                "--compare: unknown policy `{name}` (expected some of: {})",
                drover_scheduler::policy_names().join(", ")
            );
        }
    }
    if !policies.iter().any(|p| is_baseline(p)) {
        bail!(
            "--compare: list at least one non-oracle baseline (fifo, drf, tiresias, ...) to compare with"
        );
    }
    let weeks = match &args.weeks {
        None => Vec::new(),
        Some(_) if args.workload.has_window() => {
            bail!("--weeks replays each week on its own: give it without --from/--to")
        }
        Some(text) => weeks::parse_weeks(text)?,
    };
    // Every workload first (cheap), then the simulations on a pool of threads.
    let mut units: Vec<Unit> = Vec::new();
    let windows: Vec<Option<usize>> = if weeks.is_empty() {
        vec![None]
    } else {
        (0..weeks.len()).map(Some).collect()
    };
    for &week in &windows {
        let inputs = match week.map(|w| &weeks[w]) {
            None => args.workload.inputs()?,
            Some(w) => args
                .workload
                .inputs_in(Some((&w.from, &w.to)))
                .with_context(|| format!("--weeks: week {}", w.label))?,
        };
        for (c, size) in sizes.iter().enumerate() {
            for &seed in &seeds {
                let (workload, config) = args.workload.workload(&inputs, size, seed)?;
                units.push(Unit {
                    week,
                    cluster: c,
                    seed,
                    workload,
                    config,
                });
            }
        }
    }
    let week_label = |week: Option<usize>| week.map(|w| weeks[w].label.clone());
    let cell_label = |unit: &Unit| match unit.week {
        Some(w) => format!("{} {}", weeks[w].label, clusters[unit.cluster]),
        None => clusters[unit.cluster].clone(),
    };
    if let Some(unit) = units.first() {
        print_settings(&unit.config, &args.workload);
    }
    for group in units.chunk_by(|a, b| a.week == b.week && a.cluster == b.cluster) {
        let loads: Vec<String> = group
            .iter()
            .map(|u| format!("{:.2}", u.workload.offered_load()))
            .collect();
        eprintln!(
            "{}: {} jobs, offered load {} (by seed)",
            cell_label(&group[0]),
            group[0].workload.jobs.len(),
            loads.join(" / ")
        );
    }
    let tasks: Vec<(usize, &str)> = (0..units.len())
        .flat_map(|w| policies.iter().map(move |p| (w, p.as_str())))
        .collect();
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let settings = format!("drover {} {:?}", env!("CARGO_PKG_VERSION"), args.workload);
    let runs_path = args.out.join("runs.jsonl");
    let mut reused = if args.resume {
        recorded_runs(&runs_path, &settings)?
    } else {
        BTreeMap::new()
    };
    let mut results: Vec<Option<Report>> = tasks
        .iter()
        .map(|&(w, policy)| {
            let unit = &units[w];
            reused.remove(&(
                week_label(unit.week),
                clusters[unit.cluster].clone(),
                unit.seed,
                policy.to_owned(),
            ))
        })
        .collect();
    let todo: Vec<usize> = (0..tasks.len()).filter(|&t| results[t].is_none()).collect();
    if args.resume {
        eprintln!(
            "reusing {} runs recorded in {}",
            tasks.len() - todo.len(),
            runs_path.display()
        );
    }
    let runs_file = std::fs::OpenOptions::new()
        .create(true)
        .append(args.resume)
        .write(true)
        .truncate(!args.resume)
        .open(&runs_path)
        .with_context(|| format!("cannot write {}", runs_path.display()))?;
    let runs_file = Mutex::new(runs_file);
    let threads = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, todo.len().max(1));
    eprintln!(
        "{} simulations to run ({}{} cluster sizes x {} seeds x {} policies) on {threads} threads",
        todo.len(),
        if weeks.is_empty() {
            String::new()
        } else {
            format!("{} weeks x ", weeks.len())
        },
        sizes.len(),
        seeds.len(),
        policies.len()
    );
    let next = Mutex::new(0usize);
    let finished: Mutex<Vec<(usize, Report)>> = Mutex::new(Vec::new());
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let done = Mutex::new(0usize);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let task = {
                        let Ok(mut next) = next.lock() else { return };
                        let slot = *next;
                        *next += 1;
                        slot
                    };
                    let Some(&task) = todo.get(task) else { return };
                    if failure.lock().map_or(true, |f| f.is_some()) {
                        return;
                    }
                    let (w, policy) = tasks[task];
                    let unit = &units[w];
                    let seed = unit.seed;
                    let clock = WallClock(Instant::now());
                    let run_started = Instant::now();
                    match sim::run_policy(policy, &unit.workload, unit.config, &clock) {
                        Ok((report, _)) => {
                            let count = done.lock().map(|mut d| {
                                *d += 1;
                                *d
                            });
                            eprintln!(
                                "[{}/{}] {} seed {seed} {policy}: avg JCT {:.0} s ({:.1} s)",
                                count.unwrap_or(0),
                                todo.len(),
                                cell_label(unit),
                                report.avg_jct_s,
                                run_started.elapsed().as_secs_f64()
                            );
                            let line = serde_json::to_string(&Recorded {
                                settings: settings.clone(),
                                week: week_label(unit.week),
                                cluster: clusters[unit.cluster].clone(),
                                seed,
                                policy: policy.to_owned(),
                                report: report.clone(),
                            });
                            if let (Ok(line), Ok(mut file)) = (line, runs_file.lock()) {
                                // A lost line only means the run is not reused by --resume.
                                let _ = writeln!(file, "{line}");
                            }
                            if let Ok(mut finished) = finished.lock() {
                                finished.push((task, report));
                            }
                        }
                        Err(err) => {
                            if let Ok(mut failure) = failure.lock() {
                                failure.get_or_insert(anyhow::Error::new(err).context(format!(
                                    "policy {policy} on {} seed {seed}",
                                    cell_label(unit)
                                )));
                            }
                            return;
                        }
                    }
                }
            });
        }
    });
    if let Some(err) = failure.into_inner().ok().flatten() {
        return Err(err);
    }
    for (task, report) in finished
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a simulation thread panicked"))?
    {
        results[task] = Some(report);
    }
    let mut rows = Vec::new();
    for (w, unit) in units.iter().enumerate() {
        let reports: Vec<&Report> = results[w * policies.len()..(w + 1) * policies.len()]
            .iter()
            .map(|r| r.as_ref().context("a simulation did not finish"))
            .collect::<anyhow::Result<_>>()?;
        let best = reports
            .iter()
            .filter(|r| is_baseline(&r.policy))
            .min_by(|a, b| a.avg_jct_s.total_cmp(&b.avg_jct_s))
            .context("no baseline ran")?;
        let fifo = reports.iter().find(|r| r.policy == "fifo");
        let drf = reports.iter().find(|r| r.policy == "drf");
        for report in &reports {
            let worst = drf
                .filter(|drf| drf.policy != report.policy)
                .and_then(|drf| sim::tenant_rho_ratios(report, drf).into_iter().next());
            rows.push(SweepRow {
                week: week_label(unit.week),
                worst_tenant_vs_drf: worst.as_ref().map(|w| w.1),
                worst_tenant: worst.map(|w| w.0),
                cluster: clusters[unit.cluster].clone(),
                gpus: report.cluster_gpus,
                seed: unit.seed,
                offered_load: unit.workload.offered_load(),
                policy: report.policy.clone(),
                avg_jct_s: report.avg_jct_s,
                vs_best_baseline: report.avg_jct_s / best.avg_jct_s.max(1e-9),
                best_baseline: best.policy.clone(),
                vs_fifo: fifo.map(|f| report.avg_jct_s / f.avg_jct_s.max(1e-9)),
                report: (*report).clone(),
            });
        }
    }
    std::fs::write(args.out.join("sweep.csv"), sweep_csv(&rows))?;
    std::fs::write(
        args.out.join("sweep.json"),
        serde_json::to_string_pretty(&rows)?,
    )?;
    std::fs::write(
        args.out.join("sweep.svg"),
        sim::svg::sweep(&chart_series(&rows, &policies)),
    )?;
    let cells = targets::cells(&rows, policies.len());
    if !cells.is_empty() {
        std::fs::write(args.out.join("targets.md"), targets::markdown(&cells))?;
    }
    if json {
        out!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print_table(&rows, &policies);
        if !cells.is_empty() {
            out!("drover's targets, per week, cluster and seed (table in targets.md):");
            for line in targets::summary(&cells) {
                out!("  {line}");
            }
        }
    }
    eprintln!(
        "{} simulations in {:.0} s; wrote sweep.csv, sweep.json, sweep.svg{} to {}",
        todo.len(),
        started.elapsed().as_secs_f64(),
        if cells.is_empty() {
            ""
        } else {
            " and targets.md"
        },
        args.out.display()
    );
    Ok(())
}

/// Per policy, (mean offered load, mean ratio to the best baseline) for each cluster size.
fn chart_series(rows: &[SweepRow], policies: &[String]) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut clusters: Vec<&str> = Vec::new();
    for row in rows {
        if !clusters.contains(&row.cluster.as_str()) {
            clusters.push(&row.cluster);
        }
    }
    policies
        .iter()
        .map(|policy| {
            let points = clusters
                .iter()
                .filter_map(|cluster| {
                    let mine: Vec<&SweepRow> = rows
                        .iter()
                        .filter(|r| r.cluster == *cluster && r.policy == *policy)
                        .collect();
                    let n = mine.len() as f64;
                    (n > 0.0).then(|| {
                        (
                            mine.iter().map(|r| r.offered_load).sum::<f64>() / n,
                            mine.iter().map(|r| r.vs_best_baseline).sum::<f64>() / n,
                        )
                    })
                })
                .collect();
            (policy.clone(), points)
        })
        .collect()
}

fn print_table(rows: &[SweepRow], policies: &[String]) {
    let weeks = rows.iter().any(|r| r.week.is_some());
    let mut header: Vec<String> = vec!["CLUSTER".into(), "SEED".into(), "LOAD".into()];
    if weeks {
        header.insert(0, "WEEK".into());
    }
    header.extend(policies.iter().map(|p| p.to_uppercase()));
    header.push("BEST BASELINE".into());
    header.push("DROVER AVG JCT (s)".into());
    let mut table = Vec::new();
    let mut misses = Vec::new();
    for group in rows.chunks(policies.len()) {
        let Some(first) = group.first() else {
            continue;
        };
        let mut line = vec![
            first.cluster.clone(),
            first.seed.to_string(),
            format!("{:.2}", first.offered_load),
        ];
        let cell = match &first.week {
            Some(week) => {
                line.insert(0, week.clone());
                format!("{week} {}", first.cluster)
            }
            None => first.cluster.clone(),
        };
        line.extend(group.iter().map(|r| format!("{:.2}", r.vs_best_baseline)));
        line.push(first.best_baseline.clone());
        let drover = group.iter().find(|r| r.policy == "drover");
        line.push(drover.map_or_else(|| "-".into(), |r| format!("{:.0}", r.avg_jct_s)));
        table.push(line);
        if let Some(drover) = drover {
            if drover.vs_best_baseline > 1.05 {
                misses.push(format!(
                    "{cell} seed {}: drover {:.2}x the best baseline ({})",
                    drover.seed, drover.vs_best_baseline, drover.best_baseline
                ));
            }
            if drover.vs_fifo.is_some_and(|v| v > 1.0) {
                misses.push(format!(
                    "{cell} seed {}: drover {:.2}x FIFO",
                    drover.seed,
                    drover.vs_fifo.unwrap_or(0.0)
                ));
            }
        }
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    out!("average JCT over the best non-oracle baseline's (1.00 = as good as the best of them):");
    crate::output::table(&header, &table);
    if policies.iter().any(|p| p == "drover") {
        if misses.is_empty() {
            out!("drover: within 1.05x the best baseline and no worse than FIFO in every run");
        } else {
            for miss in misses {
                out!("{miss}");
            }
        }
    }
}

fn sweep_csv(rows: &[SweepRow]) -> String {
    let mut text = String::from(
        "week,cluster,gpus,seed,offered_load,policy,avg_jct_s,vs_best_baseline,best_baseline,vs_fifo,median_jct_s,p99_jct_s,makespan_s,max_rho,jain_index,preemptions,suspensions,resizes,migrations,worst_tenant_vs_drf,avg_queueing_s\n",
    );
    for r in rows {
        let d = r.report.disruptions;
        text.push_str(&format!(
            "{},{},{},{},{:.3},{},{:.0},{:.4},{},{},{:.0},{:.0},{:.0},{:.2},{:.4},{},{},{},{},{},{:.0}\n",
            r.week.as_deref().unwrap_or(""),
            r.cluster,
            r.gpus,
            r.seed,
            r.offered_load,
            r.policy,
            r.avg_jct_s,
            r.vs_best_baseline,
            r.best_baseline,
            r.vs_fifo.map_or_else(String::new, |v| format!("{v:.4}")),
            r.report.median_jct_s,
            r.report.p99_jct_s,
            r.report.makespan_s,
            r.report.max_rho,
            r.report.jain_index,
            d.preemptions,
            d.suspensions,
            d.resizes,
            d.migrations,
            r.worst_tenant_vs_drf
                .map_or_else(String::new, |v| format!("{v:.4}")),
            r.report.avg_queueing_s
        ));
    }
    text
}

#[cfg(test)]
mod tests;
