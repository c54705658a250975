//! The workload `drover sim` and `drover sim sweep` replay ([`WorkloadArgs`]): the trace, the
//! measured speeds, the cluster's nodes (`--cluster NODESxGPUS[:MODEL],...`, [`parse_cluster`]) and the rules that
//! turn trace jobs into simulated ones, read into a simulator workload; and the settings line both
//! commands print about it ([`print_settings`]).

use anyhow::{Context, bail};
use drover_scheduler::cluster::mixed_cluster;
use drover_scheduler::sim::gavel::GavelTable;
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
    /// Measured throughput per GPU model (Gavel's table): on a cluster of several models, each job's
    /// speed on each.
    #[arg(long, default_value = "data/models/gavel_throughputs.json")]
    gpu_speeds: PathBuf,
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
    /// The PS count of a job's recorded (fixed) shape, a rule of its GPU count as a user picks it
    /// before any run: `workers` (one shard per worker), `half` (one per two workers) or `one`.
    #[arg(long, default_value = "workers")]
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
    /// Share (0 to 1) of the trace's jobs of two or more GPUs replayed as model-parallel language
    /// models: pipeline stages × tensor-parallel groups in replicas that all-reduce, each job's
    /// layout and speed drawn (docs/scheduler.md, "Model-parallel jobs in the simulator"). `drover
    /// sim` then also replays them held at their recorded shapes, and reports both.
    #[arg(long, default_value_t = 0.0, value_parser = parse_share)]
    pub(super) model_parallel: f64,
}

fn parse_share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("`{text}` is not a share between 0 and 1")),
    }
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
    /// The per-model throughput table, read the first time a mixed cluster needs it.
    gpu_speeds: std::sync::OnceLock<std::sync::Arc<GavelTable>>,
    gpu_speeds_path: PathBuf,
}

impl Inputs {
    fn gpu_speeds(&self) -> anyhow::Result<std::sync::Arc<GavelTable>> {
        if let Some(table) = self.gpu_speeds.get() {
            return Ok(table.clone());
        }
        let path = &self.gpu_speeds_path;
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "cannot read the per-model GPU speeds {} (the default is \
                 data/models/gavel_throughputs.json in Drover's repository; run from the repository \
                 root or pass --gpu-speeds FILE)",
                path.display()
            )
        })?;
        let table = GavelTable::parse(&text).with_context(|| format!("in {}", path.display()))?;
        Ok(self
            .gpu_speeds
            .get_or_init(|| std::sync::Arc::new(table))
            .clone())
    }
}

impl WorkloadArgs {
    /// Reads and parses the trace (in `--from`/`--to`), the measurements and the quota file.
    pub fn inputs(&self) -> anyhow::Result<Inputs> {
        self.inputs_in(None)
    }

    /// Whether `--from` or `--to` was given.
    pub fn has_window(&self) -> bool {
        self.from.is_some() || self.to.is_some()
    }

    /// [`WorkloadArgs::inputs`] with the trace's jobs submitted in `window` (from, to: `YYYY-MM-DD
    /// HH:MM`) rather than `--from`/`--to`.
    pub fn inputs_in(&self, window: Option<(&str, &str)>) -> anyhow::Result<Inputs> {
        let (from, to) = match window {
            Some((from, to)) => (Some(from.to_owned()), Some(to.to_owned())),
            None => (self.from.clone(), self.to.clone()),
        };
        let filter = TraceFilter {
            from_s: time_arg(&from, "--from")?,
            to_s: time_arg(&to, "--to")?,
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
            gpu_speeds: std::sync::OnceLock::new(),
            gpu_speeds_path: self.gpu_speeds.clone(),
        })
    }

    /// The workload on `cluster` with `seed`, and the simulator's configuration.
    pub fn workload(
        &self,
        inputs: &Inputs,
        cluster: &ClusterSpec,
        seed: u64,
    ) -> anyhow::Result<(sim::Workload, SimConfig)> {
        self.workload_held(inputs, cluster, seed, false)
    }

    /// [`WorkloadArgs::workload`], with every model-parallel job held at its recorded shape when
    /// `held` (the same jobs and draws otherwise).
    pub fn workload_held(
        &self,
        inputs: &Inputs,
        cluster: &ClusterSpec,
        seed: u64,
        held: bool,
    ) -> anyhow::Result<(sim::Workload, SimConfig)> {
        let nodes = cluster.nodes(self.cpus_per_node, self.memory_per_gpu);
        let gpu_speeds = if cluster.is_mixed() {
            let table = inputs.gpu_speeds()?;
            for (_, _, model) in &cluster.groups {
                let model = model.as_deref().unwrap_or("v100");
                if !table.knows(model) {
                    bail!(
                        "--cluster: no measured speeds for GPU model `{model}` in {} (it has: {})",
                        self.gpu_speeds.display(),
                        table.models().join(", ")
                    );
                }
            }
            Some(table)
        } else {
            None
        };
        if let sim::Quotas::Configured(rows) = &inputs.quotas {
            let guaranteed: u64 = rows.iter().map(|(_, g, _)| u64::from(*g)).sum();
            let gpus = u64::from(cluster.total_gpus());
            if guaranteed > gpus {
                bail!(
                    "the quota file guarantees {guaranteed} GPUs in all, the {} cluster has {gpus}",
                    cluster.label()
                );
            }
        }
        let options = sim::WorkloadOptions {
            seed,
            recorded_ps: self.recorded_ps,
            quotas: inputs.quotas.clone(),
            memory_gb_per_task: self.memory_per_task,
            gpu_speeds,
            model_parallel: self.model_parallel,
            model_parallel_fixed: held,
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

/// A cluster: groups of identical nodes, `NODESxGPUS` (V100s) or `NODESxGPUS:MODEL`, joined by `,` or
/// `+` (`16x8:v100,16x8:p100,16x8:k80`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClusterSpec {
    /// (nodes, GPUs per node, GPU model) per group.
    pub groups: Vec<(u32, u32, Option<String>)>,
}

impl ClusterSpec {
    pub fn total_gpus(&self) -> u32 {
        self.groups.iter().map(|(n, g, _)| n * g).sum()
    }

    /// Whether its GPUs are of more than one model.
    pub fn is_mixed(&self) -> bool {
        let model = |m: &Option<String>| m.as_deref().unwrap_or("v100").to_ascii_lowercase();
        self.groups
            .iter()
            .any(|(_, _, m)| model(m) != model(&self.groups[0].2))
    }

    /// `48x8`, or `16x8:v100+16x8:p100`.
    pub fn label(&self) -> String {
        self.groups
            .iter()
            .map(|(n, g, m)| match m {
                Some(m) => format!("{n}x{g}:{m}"),
                None => format!("{n}x{g}"),
            })
            .collect::<Vec<_>>()
            .join("+")
    }

    fn nodes(
        &self,
        cpus_per_node: u32,
        memory_per_gpu: u32,
    ) -> Vec<drover_scheduler::cluster::Node> {
        let groups: Vec<(u32, u32, &str)> = self
            .groups
            .iter()
            .map(|(n, g, m)| (*n, *g, m.as_deref().unwrap_or("V100")))
            .collect();
        mixed_cluster(&groups, cpus_per_node, memory_per_gpu)
    }
}

/// Parses `--cluster`: `48x8` (nodes x GPUs per node), or groups with a GPU model each
/// (`16x8:v100,16x8:p100`, also joined by `+`).
pub(crate) fn parse_cluster(spec: &str) -> anyhow::Result<ClusterSpec> {
    let mut groups = Vec::new();
    let mut total_nodes: u32 = 0;
    for part in spec.split([',', '+']).map(str::trim) {
        let (size, model) = match part.split_once(':') {
            Some((size, model)) => {
                let model = model.trim();
                if model.is_empty()
                    || !model
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    bail!(
                        "--cluster: `{part}`: the GPU model after `:` must be a name such as v100"
                    );
                }
                (size, Some(model.to_owned()))
            }
            None => (part, None),
        };
        let (nodes, gpus) = size.split_once('x').with_context(|| {
            format!(
                "--cluster: `{part}` must look like 48x8 (nodes x GPUs per node), or 16x8:v100 with \
                 a GPU model"
            )
        })?;
        let nodes: u32 = nodes
            .parse()
            .with_context(|| format!("--cluster: `{part}`: the node count is not a number"))?;
        let gpus: u32 = gpus
            .parse()
            .with_context(|| format!("--cluster: `{part}`: the GPUs per node is not a number"))?;
        if nodes == 0 || nodes > 100_000 || gpus == 0 || gpus > 64 {
            bail!("--cluster: `{part}`: between 1 and 100000 nodes of 1 to 64 GPUs");
        }
        total_nodes += nodes;
        if total_nodes > 100_000 {
            bail!("--cluster: between 1 and 100000 nodes in all, of 1 to 64 GPUs");
        }
        groups.push((nodes, gpus, model));
    }
    Ok(ClusterSpec { groups })
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
        "costs: checkpoint every {}s ({}s each), restart {}s, suspend/resume {}s, migration {}s; rounds every {}s, after completions and after arrivals left waiting",
        c.checkpoint_every_s,
        c.checkpoint_s,
        c.restart_s,
        c.suspend_resume_s,
        c.migration_s,
        config.round_s
    );
    eprintln!(
        "recorded shape: {}; guarantees: {}; packing interference: {}",
        match args.recorded_ps {
            sim::RecordedPs::Workers => "one PS per worker",
            sim::RecordedPs::Half => "one PS per two workers",
            sim::RecordedPs::One => "one PS",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clusters_parse_with_and_without_gpu_models() {
        let plain = parse_cluster("48x8").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plain.groups, [(48, 8, None)]);
        assert!(!plain.is_mixed());
        assert_eq!(plain.label(), "48x8");
        let mixed = parse_cluster("16x8:v100,16x8:p100+16x4:k80").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mixed.total_gpus(), 16 * 8 * 2 + 16 * 4);
        assert!(mixed.is_mixed());
        assert_eq!(mixed.label(), "16x8:v100+16x8:p100+16x4:k80");
        // One model named twice is not mixed; V100 is the default model.
        assert!(
            !parse_cluster("2x8:V100,2x8")
                .unwrap_or_else(|e| panic!("{e}"))
                .is_mixed()
        );
        for bad in [
            "48",
            "48x",
            "x8",
            "0x8",
            "4x65",
            "4x8:",
            "4x8:v 100",
            "4x8,",
            "200000x1",
        ] {
            let err = parse_cluster(bad).err().map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(|e| e.starts_with("--cluster")),
                "{bad}: {err:?}"
            );
        }
    }
}
