//! The workload `drover sim` and `drover sim sweep` replay ([`WorkloadArgs`]): the trace, the
//! measured speeds, the cluster's nodes (`--cluster NODESxGPUS`, [`parse_cluster`]) and the rules that
//! turn trace jobs into simulated ones, read into a simulator workload; and the settings line both
//! commands print about it ([`print_settings`]).

use anyhow::{Context, bail};
use drover_scheduler::cluster::uniform_cluster;
use drover_scheduler::sim::{self, SimConfig, TraceFilter};
use std::path::PathBuf;
use std::time::Duration;

/// What to replay and on what: the trace, the measured speeds, the cluster's nodes and the rules that
/// turn trace jobs into simulated ones (shared by `drover sim` and `drover sim sweep`).
#[derive(Debug, clap::Args)]
pub struct WorkloadArgs {
    /// Job trace: the Philly CSV or the native format (`submit_s,duration_s,gpus,tenant`).
    #[arg(long, default_value = "data/traces/philly.csv")]
    trace: PathBuf,
    /// Measured PS/worker speeds that give simulated jobs their true speed.
    #[arg(long, default_value = "data/models/ps_worker_speed.txt")]
    models: PathBuf,
    /// CPUs per node.
    #[arg(long, default_value_t = 64)]
    pub(super) cpus_per_node: u32,
    /// Host memory per GPU, GB: each node has this times its GPUs.
    #[arg(long, default_value_t = 32)]
    memory_per_gpu: u32,
    /// Host memory each simulated task (worker or PS shard) needs, GB, which placement counts against
    /// its node's (`--memory-per-gpu`). 0, the default, counts none: the traces say nothing of memory.
    #[arg(long, default_value_t = 0)]
    memory_per_task: u32,
    /// Replay jobs submitted from this time (UTC, `YYYY-MM-DD HH:MM`).
    #[arg(long)]
    from: Option<String>,
    /// ... until this time (exclusive).
    #[arg(long)]
    to: Option<String>,
    /// Only this virtual cluster (tenant) of the trace.
    #[arg(long)]
    vc: Option<String>,
    /// The PS count of a job's recorded (fixed) shape: `best` (the fastest count in the range elastic
    /// jobs may use, 1..=2x workers) or `user` (the fewest within 95% of the best in 1..=workers, as
    /// users who under-provision PS choose).
    #[arg(long, default_value = "best")]
    recorded_ps: sim::RecordedPs,
    /// Tenants' guaranteed (and maximum) GPUs: a file of `tenant,guaranteed_gpus[,max_gpus]` lines.
    /// Without it every tenant of the trace is guaranteed an equal share.
    #[arg(long)]
    quotas: Option<PathBuf>,
    /// How much two jobs packed on one GPU slow each other: `drawn` (per pair, from a spread with bad
    /// pairs; hidden from policies) or a fixed fraction such as `0.25`.
    #[arg(long, default_value = "drawn", value_parser = parse_interference)]
    interference: sim::Interference,
    /// Time between scheduling rounds.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    round: Duration,
}

fn parse_interference(text: &str) -> Result<sim::Interference, String> {
    if text == "drawn" {
        return Ok(sim::Interference::Drawn);
    }
    match text.parse::<f64>() {
        Ok(x) if (0.0..1.0).contains(&x) => Ok(sim::Interference::Fixed(x)),
        _ => Err(format!(
            "`{text}` is neither `drawn` nor a slowdown fraction in [0, 1)"
        )),
    }
}

/// A parsed trace and speed measurements, ready to build workloads from.
pub struct Inputs {
    pub trace: Vec<sim::TraceJob>,
    pub models: Vec<sim::MeasuredModel>,
    pub quotas: sim::Quotas,
}

impl WorkloadArgs {
    /// Reads and parses the trace, the measurements and the quota file.
    pub fn inputs(&self) -> anyhow::Result<Inputs> {
        let filter = TraceFilter {
            from_s: time_arg(&self.from, "--from")?,
            to_s: time_arg(&self.to, "--to")?,
            tenant: self.vc.clone(),
        };
        let trace_text = std::fs::read_to_string(&self.trace).with_context(|| {
            format!(
                "cannot read the trace {} (the default is data/traces/philly.csv in Drover's \
                 repository; run from the repository root or pass --trace FILE: the Philly CSV or \
                 `submit_s,duration_s,gpus,tenant` rows)",
                self.trace.display()
            )
        })?;
        let trace = sim::parse_trace(&trace_text, &filter)
            .with_context(|| format!("in {}", self.trace.display()))?;
        if trace.is_empty() {
            bail!(
                "no jobs in {} match the window and virtual cluster given",
                self.trace.display()
            );
        }
        let models_text = std::fs::read_to_string(&self.models).with_context(|| {
            format!(
                "cannot read the measured speeds {} (the default is data/models/ps_worker_speed.txt \
                 in Drover's repository; run from the repository root or pass --models FILE)",
                self.models.display()
            )
        })?;
        let models = sim::parse_models(&models_text)
            .with_context(|| format!("in {}", self.models.display()))?;
        let quotas = match &self.quotas {
            None => sim::Quotas::EqualShares,
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read the quota file {}", path.display()))?;
                sim::Quotas::parse(&text)
                    .map_err(|reason| anyhow::anyhow!("{}: {reason}", path.display()))?
            }
        };
        Ok(Inputs {
            trace,
            models,
            quotas,
        })
    }

    /// The workload on `cluster` (`NODESxGPUS`) with `seed`, and the simulator's configuration.
    pub fn workload(
        &self,
        inputs: &Inputs,
        cluster: (u32, u32),
        seed: u64,
    ) -> anyhow::Result<(sim::Workload, SimConfig)> {
        let nodes = uniform_cluster(
            cluster.0,
            cluster.1,
            self.cpus_per_node,
            self.memory_per_gpu,
        );
        if let sim::Quotas::Configured(rows) = &inputs.quotas {
            let guaranteed: u64 = rows.iter().map(|(_, g, _)| u64::from(*g)).sum();
            let gpus = u64::from(cluster.0) * u64::from(cluster.1);
            if guaranteed > gpus {
                bail!(
                    "the quota file guarantees {guaranteed} GPUs in all, the {}x{} cluster has {gpus}",
                    cluster.0,
                    cluster.1
                );
            }
        }
        let options = sim::WorkloadOptions {
            seed,
            recorded_ps: self.recorded_ps,
            quotas: inputs.quotas.clone(),
            memory_gb_per_task: self.memory_per_task,
        };
        let workload = sim::build_workload_with(&inputs.trace, &inputs.models, nodes, &options);
        let config = SimConfig {
            round_s: self.round.as_secs_f64().max(1.0),
            seed,
            interference: self.interference,
            ..SimConfig::default()
        };
        Ok((workload, config))
    }
}

/// A cluster given as NODESxGPUS (`48x8`): its node count and GPUs per node.
pub(crate) fn parse_cluster(spec: &str) -> anyhow::Result<(u32, u32)> {
    let (nodes, gpus) = spec
        .split_once('x')
        .context("--cluster must look like 48x8 (nodes x GPUs per node)")?;
    let nodes: u32 = nodes
        .parse()
        .context("--cluster: the node count is not a number")?;
    let gpus: u32 = gpus
        .parse()
        .context("--cluster: the GPUs per node is not a number")?;
    if nodes == 0 || gpus == 0 || nodes > 100_000 || gpus > 64 {
        bail!("--cluster: between 1 and 100000 nodes of 1 to 64 GPUs");
    }
    Ok((nodes, gpus))
}

fn time_arg(value: &Option<String>, flag: &str) -> anyhow::Result<Option<f64>> {
    value
        .as_deref()
        .map(|text| {
            sim::parse_time(text)
                .with_context(|| format!("{flag}: `{text}` is not `YYYY-MM-DD HH:MM[:SS]`"))
        })
        .transpose()
}

/// The costs, round, recorded-shape rule and interference a run uses, on stderr.
pub(crate) fn print_settings(config: &SimConfig, args: &WorkloadArgs) {
    let c = config.costs;
    eprintln!(
        "costs: checkpoint every {}s ({}s each), restart {}s, suspend/resume {}s, migration {}s; rounds every {}s",
        c.checkpoint_every_s,
        c.checkpoint_s,
        c.restart_s,
        c.suspend_resume_s,
        c.migration_s,
        config.round_s
    );
    eprintln!(
        "recorded shape: {} PS count; guarantees: {}; packing interference: {}",
        match args.recorded_ps {
            sim::RecordedPs::Best => "best",
            sim::RecordedPs::User => "user",
        },
        args.quotas
            .as_ref()
            .map_or_else(|| "equal shares".to_owned(), |p| p.display().to_string()),
        match config.interference {
            sim::Interference::Drawn => "drawn per pair".to_owned(),
            sim::Interference::Fixed(x) => format!("fixed {:.0}%", 100.0 * x),
        }
    );
}
