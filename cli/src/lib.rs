//! The `drover` program: the control-plane server (and the composition root that assembles it:
//! [`serve::server`]), a one-command dev mode, the executor, the simulator, migrations, and the client
//! CLI. A library so that the end-to-end tests (`e2e/`) can build the same program as their own
//! binary; `src/main.rs` only calls [`main`].

mod admin;
mod bench;
mod client;
mod commands;
mod config;
mod contexts;
mod demo;
mod enrollment;
mod experiments;
mod global;
mod http;
mod limits;
mod logging;
mod node;
mod output;
mod runs;
mod secrets;
mod serve;
mod sim;
mod sso;
mod sweep;
mod train;
mod usage;

pub use global::{GlobalArgs, Interrupted};

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "drover",
    version,
    about = "Drover: a multi-tenant GPU cluster scheduler and training job manager"
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the control plane (production: Postgres).
    Server(Box<serve::ServerArgs>),
    /// Run a local control plane on SQLite in the data directory, and print its URL and admin token.
    Dev(serve::dev::DevArgs),
    /// Apply database migrations and exit.
    Migrate(serve::MigrateArgs),
    /// Check a token against a server and save them as the current context (`--server URL`; the
    /// token from --token, DROVER_TOKEN or standard input).
    Login(contexts::LoginArgs),
    /// List, switch or delete contexts (servers with their tokens, in ~/.config/drover/config.yaml).
    #[command(subcommand)]
    Context(contexts::ContextCommand),
    /// Print the CustomResourceDefinitions (DroverJob and DroverExperiment) as YAML, one document
    /// each (`drover crd | kubectl apply -f -`); the Helm chart ships the same files.
    Crd(CrdArgs),
    /// Submit a job from a YAML or JSON file (`-` reads standard input).
    Submit(commands::SubmitArgs),
    /// List jobs, newest first.
    Jobs(commands::JobsArgs),
    /// Show one job with its spec.
    Job(commands::JobIdArg),
    /// Cancel a job.
    Cancel(commands::JobIdArg),
    /// Pause a job: it checkpoints, gives its GPUs back and waits until resumed.
    Pause(commands::JobIdArg),
    /// Resume a paused job from its last checkpoint.
    Resume(commands::JobIdArg),
    /// Change a job's worker and PS ranges while it runs (it rescales through a checkpoint).
    Resize(runs::ResizeArgs),
    /// Waiting jobs in the order the policy would start them, with their predicted start.
    Queue(usage::QueueArgs),
    /// GPU-hours allocated, used by training and lost by cause; each tenant's fair share.
    Usage(usage::UsageArgs),
    /// Show a job's state changes with their reasons.
    Events(commands::JobIdArg),
    /// Show a job's output (`-f` streams it until the job ends).
    Logs(runs::LogsArgs),
    /// Show the metrics a job reported.
    Metrics(runs::MetricsArgs),
    /// List a job's recorded checkpoints.
    Checkpoints(commands::JobIdArg),
    /// Ask a running job to write a checkpoint now and go on.
    Checkpoint(commands::JobIdArg),
    /// Download a job's checkpoint (the latest by default).
    Download(runs::DownloadArgs),
    /// List tenants.
    Tenants,
    /// Manage tenants (cluster administrators).
    #[command(subcommand)]
    Tenant(admin::TenantCommand),
    /// List users.
    Users,
    /// Manage users.
    #[command(subcommand)]
    User(admin::UserCommand),
    /// List your API tokens.
    Tokens,
    /// Manage API tokens.
    #[command(subcommand)]
    Token(admin::TokenCommand),
    /// List GPU nodes with their health and tasks.
    Nodes,
    /// Cordon, uncordon, drain or revoke a node (cluster administrators).
    #[command(subcommand)]
    Node(node::NodeCommand),
    /// The newest privileged actions: who did what, to what, when (cluster administrators).
    Audit {
        /// How many, newest first.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// List the tenant's secrets (names only).
    Secrets,
    /// Set or delete a secret of the tenant.
    #[command(subcommand)]
    Secret(secrets::SecretCommand),
    /// Hyper-parameter searches: submit, follow, and take the best trial's model.
    #[command(subcommand)]
    Experiment(experiments::ExperimentCommand),
    /// Mint, list and revoke the tokens executors enrol with (cluster administrators).
    #[command(subcommand)]
    EnrollmentToken(enrollment::EnrollmentCommand),
    /// Print the certificate authority executors trust the gateway by (PEM), and its pin on
    /// stderr: `drover gateway-ca > ca.pem`, then `drover executor --gateway-ca ca.pem`, or
    /// `--gateway-ca-hash` with the pin.
    GatewayCa,
    /// Run an executor: the node agent that runs tasks on this host's GPUs.
    ///
    /// Checkpoints go where the server says: a directory every executor reaches, or an S3-compatible
    /// object store, for which this process needs the same AWS_* variables as the server
    /// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL; tasks never get them).
    Executor(node::ExecutorArgs),
    /// Train a `train` job's spec here, with Drover's engine (no server needed).
    Train(train::TrainArgs),
    /// Internal: the training engine as an executor runs it for a task of a `train` job.
    #[command(hide = true)]
    TrainTask(train::TrainTaskArgs),
    /// Internal: the process every task starts under (kills the task if the executor dies).
    #[command(hide = true)]
    TaskShim(node::ShimArgs),
    /// Show who the token belongs to.
    Whoami,
    /// Replay a cluster trace through scheduling policies (the same code the server runs).
    Sim(sim::SimArgs),
    /// Benchmarks of the whole program (a server against an emulated fleet).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

#[derive(Debug, clap::Args)]
struct CrdArgs {
    /// Print only this one (as the chart's `crds/<NAME>.yaml`).
    #[arg(value_parser = ["droverjob", "droverexperiment"])]
    name: Option<String>,
}

/// The command line, with `--server`/`--token` (global, for the client verbs) left out of the help of
/// the verbs that talk to no server: each gets a hidden stand-in, which clap then does not replace
/// with the global one.
fn command() -> clap::Command {
    // Named `drover` in usage and errors whatever the executable is called (the end-to-end tests'
    // copy is `drover-e2e`).
    let mut command = <Cli as clap::CommandFactory>::command().bin_name("drover");
    let hide_client_flags = |sub: clap::Command| {
        ["server", "token"].into_iter().fold(sub, |sub, name| {
            sub.arg(clap::Arg::new(name).long(name).hide(true).num_args(1))
        })
    };
    for verb in [
        "server", "dev", "migrate", "crd", "executor", "sim", "train",
    ] {
        command = command.mut_subcommand(verb, hide_client_flags);
    }
    command.mut_subcommand("bench", |bench| {
        bench.mut_subcommand("fleet", hide_client_flags)
    })
}

/// The whole program: parses the command line, runs the command, and says how it ended.
pub fn main() -> ExitCode {
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&command().get_matches()) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(run(cli));
    // Work left on the blocking pool (a queue forecast of thousands of jobs takes minutes) is not
    // waited for: a stopped server used to stay alive until it finished.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        // Already said what happened; 128 + SIGINT, as a shell reports an interrupted command.
        Err(err) if err.is::<Interrupted>() => ExitCode::from(130),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let global = cli.global;
    if matches!(
        cli.command,
        Command::Server(_) | Command::Dev(_) | Command::Executor(_)
    ) {
        // Long-running services: a closed standard output is no reason to stop.
        output::QUIT_ON_BROKEN_PIPE.store(false, std::sync::atomic::Ordering::Relaxed);
    }
    match cli.command {
        Command::Server(args) => serve::server(*args, &global).await,
        Command::Dev(args) => serve::dev::dev(args, &global).await,
        Command::Migrate(args) => serve::migrate(args).await,
        Command::Login(args) => contexts::login(&global, args).await,
        Command::Context(cmd) => contexts::context(&global, cmd),
        Command::Crd(args) => {
            let documents: Vec<String> = drover_controller::crd::all_crds_yaml()
                .into_iter()
                .filter(|(name, _)| args.name.as_deref().is_none_or(|wanted| wanted == *name))
                .map(|(_, yaml)| yaml.trim_end().to_owned())
                .collect();
            output::out!("{}", documents.join("\n---\n"));
            Ok(())
        }
        Command::Submit(args) => commands::submit(&global, args).await,
        Command::Jobs(args) => commands::jobs(&global, args).await,
        Command::Job(args) => commands::job(&global, args).await,
        Command::Cancel(args) => commands::cancel(&global, args).await,
        Command::Pause(args) => commands::pause(&global, args).await,
        Command::Resume(args) => commands::resume(&global, args).await,
        Command::Resize(args) => runs::resize(&global, args).await,
        Command::Queue(args) => usage::queue(&global, args).await,
        Command::Usage(args) => usage::usage(&global, args).await,
        Command::Events(args) => commands::events(&global, args).await,
        Command::Logs(args) => runs::logs(&global, args).await,
        Command::Metrics(args) => runs::metrics(&global, args).await,
        Command::Checkpoints(args) => runs::checkpoints(&global, args).await,
        Command::Checkpoint(args) => runs::request_checkpoint(&global, args).await,
        Command::Download(args) => runs::download(&global, args).await,
        Command::Tenants => admin::tenants(&global).await,
        Command::Tenant(cmd) => admin::tenant(&global, cmd).await,
        Command::Users => admin::users(&global).await,
        Command::User(cmd) => admin::user(&global, cmd).await,
        Command::Tokens => admin::tokens(&global).await,
        Command::Token(cmd) => admin::token(&global, cmd).await,
        Command::Nodes => admin::nodes(&global).await,
        Command::Node(cmd) => node::node(&global, cmd).await,
        Command::Audit { limit } => admin::audit(&global, limit).await,
        Command::Secrets => secrets::secrets(&global).await,
        Command::Secret(cmd) => secrets::secret(&global, cmd).await,
        Command::Experiment(cmd) => experiments::experiment(&global, cmd).await,
        Command::EnrollmentToken(cmd) => enrollment::enrollment_token(&global, cmd).await,
        Command::GatewayCa => enrollment::gateway_ca(&global).await,
        Command::Executor(args) => node::executor(args).await,
        Command::TaskShim(args) => node::task_shim(args).await,
        Command::Train(args) => train::train(args).await,
        Command::TrainTask(args) => train::train_task(args).await,
        Command::Whoami => admin::whoami(&global).await,
        Command::Sim(args) => sim::run(args, global.output == output::Format::Json),
        Command::Bench(cmd) => bench::bench(cmd, global.output == output::Format::Json).await,
    }
}
