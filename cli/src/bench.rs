//! `drover bench`: benchmarks of the whole program. `drover bench fleet` runs a `drover server` (this
//! binary) on a fresh database in the given Postgres against a fleet of emulated executors in this
//! process (`drover_bench::fleet`) and reports what it measured.

use crate::output::out;
use clap::{Args, Subcommand};
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Emulate a fleet of executors against a real server: jobs started per second, submit to
    /// running, round times, reclaim latency, the server's CPU and memory.
    ///
    /// The server runs as a process of its own, on a database the run makes in the Postgres of
    /// --database-url and drops at the end; the emulated executors speak the real gRPC protocol
    /// (enrolment, registration, heartbeats, task updates, metrics, checkpoints) but run no
    /// processes. By default the measured phase submits one one-GPU job per GPU, with tasks that
    /// outlast the run, so the cluster ends full and a reclaim is measured.
    Fleet(FleetArgs),
}

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// A Postgres server (the run makes a database of its own there and drops it at the end).
    #[arg(long, env = "DROVER_BENCH_DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Emulated nodes.
    #[arg(long, default_value_t = 50)]
    nodes: u32,
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// The longest the measured jobs may take to start.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// One-GPU jobs submitted in the measured phase [default: one per GPU].
    #[arg(long)]
    jobs: Option<u32>,
    /// One-GPU jobs submitted and started before the measured phase.
    #[arg(long, default_value_t = 0)]
    running: u32,
    /// Each task runs for a draw between half and one and a half times this.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    task_duration: Duration,
    /// What a preempted task takes to checkpoint before it exits.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    checkpoint_delay: Duration,
    /// How long the connected, idle fleet is watched before jobs are submitted.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    idle: Duration,
    /// How long the busy fleet (every job started) is watched after the measured phase, for the
    /// database's growth and the server's CPU at steady state.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    steady: Duration,
    /// Submissions in flight at once.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Do not measure a reclaim at the end.
    #[arg(long)]
    no_reclaim: bool,
    /// The server's scheduling policy.
    #[arg(long, default_value = "drover")]
    policy: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep the server's log in this file (DROVER_LOG sets its level; warnings by default).
    #[arg(long)]
    server_log: Option<std::path::PathBuf>,
    /// Run the gateway without TLS; by default it uses mutual TLS, as a cluster does, and every
    /// emulated node enrols with a signing request and connects with its client certificate.
    #[arg(long)]
    gateway_plaintext: bool,
}

pub async fn bench(command: BenchCommand, json: bool) -> anyhow::Result<()> {
    match command {
        BenchCommand::Fleet(args) => fleet(args, json).await,
    }
}

async fn fleet(args: FleetArgs, json: bool) -> anyhow::Result<()> {
    let options = drover_bench::fleet::FleetOptions {
        server_bin: std::env::current_exe()?,
        database_url: args.database_url,
        nodes: args.nodes,
        gpus_per_node: args.gpus_per_node,
        duration: args.duration,
        jobs: args
            .jobs
            .unwrap_or_else(|| args.nodes.saturating_mul(args.gpus_per_node)),
        running: args.running,
        task_duration: args.task_duration,
        checkpoint_delay: args.checkpoint_delay,
        idle: args.idle,
        steady: args.steady,
        clients: args.clients,
        reclaim: !args.no_reclaim,
        policy: args.policy,
        seed: args.seed,
        server_log: args.server_log,
        gateway_plaintext: args.gateway_plaintext,
    };
    let report = drover_bench::fleet::run(&options, |line| eprintln!("==> {line}")).await?;
    if json {
        out!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", report.text().trim_end());
    }
    Ok(())
}
