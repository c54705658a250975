//! `drover executor` (the node agent), the hidden `drover task-shim` every task starts under, and the
//! `drover node cordon|uncordon|drain|revoke` verbs.

use crate::client::{Client, segment};
use crate::global::GlobalArgs;
use crate::output::{self, Format, out};
use anyhow::{Context, bail};
use drover_executor::{Agent, ExecutorConfig, GpuSource};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct ExecutorArgs {
    /// The server's executor gateway; several replicas' gateways comma-separated (tried in turn; a
    /// replica that does not lead redirects the executor to the one that does). `host:port` means
    /// `https://host:port` (mutual TLS, the server's default); `http://` for a server started with
    /// --gateway-plaintext.
    #[arg(
        long = "gateway",
        env = "DROVER_GATEWAY",
        default_value = "https://127.0.0.1:7070"
    )]
    pub gateway: String,
    /// This node's name, unique in the cluster (default: the host name).
    #[arg(long, env = "DROVER_NODE_NAME")]
    pub name: Option<String>,
    /// The executor's private data directory.
    #[arg(
        long,
        env = "DROVER_EXECUTOR_DATA_DIR",
        default_value = ".drover/executor"
    )]
    pub data_dir: PathBuf,
    /// Run on a CPU-only host with N task slots (advertised as N GPUs of model `cpu`).
    #[arg(long, conflicts_with = "demo_gpus", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub slots: Option<u32>,
    /// Advertise N pretend GPUs while tasks run on the CPU (a laptop showing a multi-GPU cluster).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub demo_gpus: Option<u32>,
    /// Memory of each pretend GPU, in GB.
    #[arg(long, default_value_t = 16)]
    pub demo_gpu_memory_gb: u32,
    /// The model the advertised GPUs are (demo GPUs and slots; default `demo` and `cpu`), which a
    /// job's `gpu_types` names: e.g. `V100` on a demo of a mixed cluster. Real GPUs are named by
    /// their driver.
    #[arg(long, env = "DROVER_GPU_MODEL", value_parser = gpu_model)]
    pub gpu_model: Option<String>,
    /// CPUs to offer (default: all of this host's).
    #[arg(long)]
    pub cpus: Option<u32>,
    /// Host memory to offer to tasks, in GiB (default: this host's, from /proc/meminfo).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    pub memory_gb: Option<u32>,
    /// Node labels, `key=value` (comma-separated or repeated), which a job's `node_selector` matches.
    #[arg(short = 'l', long = "label", env = "DROVER_NODE_LABELS")]
    pub labels: Vec<String>,
    /// Node taints, `key=value:NoSchedule` or `key:NoSchedule` (comma-separated or repeated): only
    /// jobs whose `tolerations` tolerate every one run here (a node kept for a team, say).
    #[arg(long = "taint", env = "DROVER_NODE_TAINTS", value_delimiter = ',', value_parser = taint)]
    pub taints: Vec<(String, String)>,
    /// Host name or address other tasks reach this node's tasks at.
    #[arg(long, env = "DROVER_ADVERTISE_HOST", default_value = "127.0.0.1")]
    pub advertise_host: String,
    /// An enrolment token (from `drover enrollment-token create`, or the server's
    /// --enrollment-token), exchanged once for this node's credential, which is then kept in the data
    /// directory (`node-credential`, mode 0600). Not needed once the node is enrolled.
    #[arg(long, env = "DROVER_ENROLLMENT_TOKEN", hide_env_values = true)]
    pub enrollment_token: Option<String>,
    /// The certificate authority (PEM file) the gateway's certificate is issued by, for an
    /// `https://` gateway: `drover gateway-ca` prints it. Kept in the data directory once enrolled.
    #[arg(long, env = "DROVER_GATEWAY_CA", conflicts_with = "gateway_ca_hash")]
    pub gateway_ca: Option<PathBuf>,
    /// Or the authority's pin, `sha256:HEX` (`drover gateway-ca` and the server's start-up line
    /// print it): the first connection trusts a gateway whose certificate that authority issued,
    /// and keeps the authority.
    #[arg(long, env = "DROVER_GATEWAY_CA_HASH", value_parser = authority_pin)]
    pub gateway_ca_hash: Option<String>,
    /// On Kubernetes: register with the labels and the NoSchedule/NoExecute taints of the Kubernetes
    /// node named --name (read once at start with the pod's service account, which needs `get` on
    /// nodes); --label wins on a clash.
    #[arg(long, env = "DROVER_KUBERNETES_NODE_LABELS")]
    pub kubernetes_node_labels: bool,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    pub pods: PodArgs,
}

/// On Kubernetes: tasks as Pods of their own.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PodArgs {
    /// Run each task as a Kubernetes Pod of its own on this node (in its tenant's namespace) rather
    /// than as a child process; the executor uses its Pod's service account, or KUBECONFIG.
    #[arg(long, env = "DROVER_TASK_PODS")]
    pub task_pods: bool,
    /// The image task Pods run (the executor's own; a `train` job runs this program's engine).
    #[arg(long, env = "DROVER_TASK_IMAGE", requires = "task_pods")]
    pub task_image: Option<String>,
    /// This program's path inside that image (default: its path here).
    #[arg(long, env = "DROVER_TASK_PROGRAM", requires = "task_pods")]
    pub task_program: Option<String>,
    /// The user and group task containers run as (not root).
    #[arg(long, env = "DROVER_TASK_USER", default_value_t = 10001, value_parser = clap::value_parser!(i64).range(1..))]
    pub task_user: i64,
    /// The checkpoint storage as a Kubernetes volume source (JSON), mounted in every task Pod where
    /// the server keeps checkpoints: `{"persistentVolumeClaim": {"claimName": "drover-checkpoints"}}`
    /// (a claim of that name in each tenant's namespace), or a volume any namespace may mount
    /// (`{"csi": {...}}`).
    #[arg(long, env = "DROVER_TASK_CHECKPOINT_VOLUME", requires = "task_pods")]
    pub task_checkpoint_volume: Option<String>,
    /// The namespace label naming a namespace's tenant (as the server's --kubernetes-tenant-label).
    #[arg(
        long,
        env = "DROVER_KUBERNETES_TENANT_LABEL",
        default_value = "drover.dev/tenant"
    )]
    pub tenant_label: String,
}

impl PodArgs {
    /// The executor's task Pods, when asked for.
    pub async fn open(
        &self,
        config: &ExecutorConfig,
    ) -> anyhow::Result<Option<std::sync::Arc<drover_executor::pods::Pods>>> {
        if !self.task_pods {
            return Ok(None);
        }
        let image = self.task_image.clone().context(
            "--task-pods needs --task-image (the image task Pods run: the executor's own)",
        )?;
        let program = self
            .task_program
            .clone()
            .or_else(|| config.shim.first().cloned())
            .context("no program path for train jobs' Pods")?;
        let checkpoint_volume = match &self.task_checkpoint_volume {
            None => None,
            Some(text) => {
                let source: serde_json::Value = serde_json::from_str(text)
                    .with_context(|| format!("--task-checkpoint-volume `{text}`: not JSON"))?;
                if drover_executor::pods::spec::checkpoint_volume(&source).is_none() {
                    bail!(
                        "--task-checkpoint-volume `{text}`: not a Kubernetes volume source (one of persistentVolumeClaim, csi, nfs, …)"
                    );
                }
                Some(source)
            }
        };
        let settings = drover_executor::pods::PodSettings {
            image,
            program,
            run_as: self.task_user,
            checkpoint_volume,
            tenant_label: self.tenant_label.clone(),
        };
        drover_executor::pods::Pods::connect(settings, &config.name)
            .await
            .map(Some)
            .map_err(|why| anyhow::anyhow!("--task-pods: {why}"))
    }
}

/// How the executor sandboxes tasks.
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// Run tasks as this executor's own user, unconfined: every task can read what the executor
    /// reads (its node credential included), signal the others and take all of the host's memory.
    /// Without it the executor refuses to start where it cannot sandbox tasks.
    #[arg(long, env = "DROVER_NO_SANDBOX")]
    pub no_sandbox: bool,
    /// The OCI runtime that runs each task's sandbox.
    #[arg(long, env = "DROVER_OCI_RUNTIME", default_value = "runc")]
    pub runtime: PathBuf,
    /// The user ids tasks run as (one per running task), and the range their jobs' group ids are
    /// drawn from: ids no one else on the host uses.
    #[arg(long, env = "DROVER_TASK_IDS", default_value_t = drover_executor::sandbox::ids::IdRange::DEFAULT)]
    pub task_ids: drover_executor::sandbox::ids::IdRange,
    /// Processes and threads one task may have at once.
    #[arg(long, env = "DROVER_TASK_PIDS_MAX", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(64..=4_194_304))]
    pub task_pids_max: u32,
    /// Run no jobs in OCI images (`spec.command.image`), even where skopeo and umoci are installed.
    #[arg(long, env = "DROVER_NO_IMAGES")]
    pub no_images: bool,
    /// The program that pulls images.
    #[arg(long, env = "DROVER_SKOPEO", default_value = "skopeo")]
    pub skopeo: PathBuf,
    /// The program that unpacks images.
    #[arg(long, env = "DROVER_UMOCI", default_value = "umoci")]
    pub umoci: PathBuf,
    /// A registry (`host` or `host:port`) reached over plain HTTP or without verifying its
    /// certificate, e.g. a local one; repeat for several.
    #[arg(
        long = "insecure-registry",
        env = "DROVER_INSECURE_REGISTRIES",
        value_delimiter = ','
    )]
    pub insecure_registries: Vec<String>,
    /// Credentials for private registries: an `auth.json` as `skopeo login` or `podman login`
    /// write it, or a Docker `config.json`.
    #[arg(long, env = "DROVER_REGISTRY_AUTH_FILE")]
    pub registry_auth_file: Option<PathBuf>,
    /// How long one image pull may take, in seconds, before the job that needs it fails.
    #[arg(long, env = "DROVER_IMAGE_PULL_TIMEOUT", default_value_t = 1800, value_parser = clap::value_parser!(u64).range(10..=86_400))]
    pub image_pull_timeout: u64,
}

impl SandboxArgs {
    /// The executor's sandbox: `Ok(None)` when told to run tasks unconfined, `Err` with the reason
    /// when this host cannot sandbox them. `hidden`: more host paths no task may see.
    pub async fn open(
        &self,
        config: &ExecutorConfig,
        hidden: Vec<PathBuf>,
    ) -> Result<Option<std::sync::Arc<drover_executor::sandbox::Sandbox>>, String> {
        if self.no_sandbox {
            return Ok(None);
        }
        let program = config
            .shim
            .first()
            .map(PathBuf::from)
            .ok_or_else(|| "no program to run tasks with".to_owned())?;
        let settings = drover_executor::sandbox::SandboxSettings {
            runtime: self.runtime.clone(),
            ids: self.task_ids,
            pids_max: self.task_pids_max,
            hidden,
            images: (!self.no_images).then(|| drover_executor::images::ImageSettings {
                skopeo: self.skopeo.clone(),
                umoci: self.umoci.clone(),
                insecure_registries: self.insecure_registries.clone(),
                auth_file: self.registry_auth_file.clone(),
                pull_timeout: std::time::Duration::from_secs(self.image_pull_timeout),
            }),
        };
        drover_executor::sandbox::Sandbox::open(
            settings,
            &config.data_dir,
            &config.name,
            &program,
            &config.gpus,
        )
        .await
        .map(Some)
    }
}

impl Default for SandboxArgs {
    fn default() -> Self {
        SandboxArgs {
            no_sandbox: false,
            runtime: PathBuf::from("runc"),
            task_ids: drover_executor::sandbox::ids::IdRange::DEFAULT,
            task_pids_max: 4096,
            no_images: false,
            skopeo: PathBuf::from("skopeo"),
            umoci: PathBuf::from("umoci"),
            insecure_registries: Vec::new(),
            registry_auth_file: None,
            image_pull_timeout: 1800,
        }
    }
}

/// `--taint key=value:NoSchedule` (or `key:NoSchedule`): the key and the value.
fn taint(text: &str) -> Result<(String, String), String> {
    let (pair, effect) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("`{text}`: expected key=value:NoSchedule"))?;
    if effect != "NoSchedule" {
        return Err(format!(
            "`{text}`: the effect must be NoSchedule (the one Drover has), got `{effect}`"
        ));
    }
    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
    if !drover_core::validate::is_label_key(key) || !drover_core::validate::is_label_value(value) {
        return Err(format!(
            "`{text}`: a key and value as labels have them (letters, digits, '-', '_', '.')"
        ));
    }
    Ok((key.to_owned(), value.to_owned()))
}

/// `--gpu-model`: 1-64 printable characters.
fn gpu_model(value: &str) -> Result<String, String> {
    let value = value.trim();
    if value.is_empty()
        || value.len() > 64
        || !value.chars().all(|c| c.is_ascii_graphic() || c == ' ')
    {
        return Err("a GPU model is 1-64 printable ASCII characters".to_owned());
    }
    Ok(value.to_owned())
}

/// This host's memory in GiB (rounded down), from /proc/meminfo; 1 when it cannot be read.
pub fn host_memory_gb() -> u32 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("MemTotal:"))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
        })
        .map_or(1, |kib| u32::try_from(kib >> 20).unwrap_or(u32::MAX).max(1))
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The executor's configuration from its flags: discovers GPUs (or fails with a clear message).
pub fn executor_config(args: ExecutorArgs) -> anyhow::Result<ExecutorConfig> {
    let source = match (args.slots, args.demo_gpus) {
        (Some(n), _) => GpuSource::Slots(n),
        (None, Some(n)) => GpuSource::Demo(n, args.demo_gpu_memory_gb),
        (None, None) => GpuSource::Nvidia,
    };
    let mut gpus =
        drover_executor::gpu::discover(source).map_err(|err| anyhow::anyhow!("{err}"))?;
    if let Some(model) = &args.gpu_model {
        if matches!(source, GpuSource::Nvidia) {
            bail!(
                "--gpu-model names advertised GPUs (--demo-gpus, --slots); real GPUs are named by their driver"
            );
        }
        for gpu in &mut gpus {
            gpu.model.clone_from(model);
        }
    }
    if gpus.is_empty() {
        bail!("no GPUs to offer: the driver reports none (use --slots N for a CPU-only host)");
    }
    let mut labels = BTreeMap::new();
    for pair in args.labels.iter().flat_map(|l| l.split(',')) {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("--label `{pair}`: expected key=value");
        };
        labels.insert(key.trim().to_owned(), value.trim().to_owned());
    }
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create {}", args.data_dir.display()))?;
    let data_dir = args
        .data_dir
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", args.data_dir.display()))?;
    let exe = std::env::current_exe().context("cannot find this program to run the task shim")?;
    let cpus = args
        .cpus
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32));
    let gateway_trust = match (&args.gateway_ca, &args.gateway_ca_hash) {
        (Some(path), _) => {
            let pem = std::fs::read_to_string(path)
                .with_context(|| format!("--gateway-ca {}: cannot read it", path.display()))?;
            if !pem.contains("BEGIN CERTIFICATE") {
                anyhow::bail!("--gateway-ca {}: not a PEM certificate", path.display());
            }
            drover_executor::GatewayTrust::Authority(pem)
        }
        (None, Some(pin)) => drover_executor::GatewayTrust::Pin(pin.clone()),
        (None, None) => drover_executor::GatewayTrust::Kept,
    };
    Ok(ExecutorConfig {
        server: args.gateway,
        name: args.name.unwrap_or_else(host_name),
        data_dir,
        source,
        gpus,
        cpus,
        memory_gb: args.memory_gb.unwrap_or_else(host_memory_gb),
        labels,
        taints: args.taints,
        advertise_host: args.advertise_host,
        shim: vec![exe.display().to_string(), "task-shim".to_owned()],
        engine: vec![exe.display().to_string(), "train-task".to_owned()],
        base_dir: std::env::current_dir().context("cannot read the working directory")?,
        enrollment_token: args.enrollment_token,
        gateway_trust,
        sandbox: None,
        pods: None,
    })
}

/// `sha256:` and 64 hexadecimal digits.
fn authority_pin(text: &str) -> Result<String, String> {
    let digits = text
        .strip_prefix("sha256:")
        .unwrap_or(text)
        .to_ascii_lowercase();
    if digits.len() == 64 && digits.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(format!("sha256:{digits}"))
    } else {
        Err("expected sha256: and 64 hexadecimal digits, as `drover gateway-ca` prints".to_owned())
    }
}

pub async fn executor(args: ExecutorArgs) -> anyhow::Result<()> {
    crate::logging::init_tracing(crate::logging::LogFormat::Text, "info");
    let from_kubernetes = args.kubernetes_node_labels;
    let sandbox = args.sandbox.clone();
    let pods = args.pods.clone();
    let mut config = executor_config(args)?;
    config.pods = pods.open(&config).await?;
    let opened = if config.pods.is_some() {
        // Each task a Pod of its own: the Pod is its sandbox.
        out!("drover executor: each task runs as a Kubernetes Pod of its own");
        Ok(None)
    } else {
        sandbox.open(&config, Vec::new()).await
    };
    config.sandbox = match opened {
        Ok(None) if config.pods.is_some() => None,
        Ok(Some(sandbox)) => {
            out!(
                "drover executor: tasks run sandboxed ({}); in images: {}",
                sandbox.describe(),
                sandbox.describe_images()
            );
            Some(sandbox)
        }
        Ok(None) => {
            eprintln!(
                "warning: --no-sandbox: tasks run as this executor's user, unconfined; tenants sharing this node can read each other's data and this node's credential"
            );
            None
        }
        Err(why) => bail!(
            "cannot sandbox tasks: {why}. Tasks of different tenants would share this node unconfined; fix that, or start with --no-sandbox to run them so on purpose"
        ),
    };
    if from_kubernetes {
        let room = drover_core::validate::MAX_LABELS.saturating_sub(config.labels.len());
        let (labels, taints) = drover_controller::nodes::node_description(&config.name, room)
            .await
            .map_err(|err| {
                anyhow::anyhow!(
                    "--kubernetes-node-labels: cannot read Kubernetes node `{}` (is --name the pod's node name, and may the service account get nodes?): {err}",
                    config.name
                )
            })?;
        for (key, value) in labels {
            config.labels.entry(key).or_insert(value);
        }
        for taint in taints {
            if !config.taints.contains(&taint) {
                config.taints.push(taint);
            }
        }
    }
    out!(
        "drover executor {} offering {} GPU(s) ({}) to {}",
        config.name,
        config.gpus.len(),
        config.source.as_str(),
        config.server
    );
    Agent::new(config)?
        .run(crate::serve::server::shutdown_signal())
        .await
}

#[derive(Debug, clap::Args)]
pub struct ShimArgs {
    /// Where to record how the command ended.
    #[arg(long)]
    pub status_file: Option<PathBuf>,
    /// The shim is the first process of a task's sandbox (it passes signals on to the command).
    #[arg(long)]
    pub sandboxed: bool,
    /// The shim is a task Pod's first process: no executor pipe to watch, and it exits with the
    /// command's status.
    #[arg(long)]
    pub in_pod: bool,
    /// Start this many copies of the command, each with its own LOCAL_RANK and RANK (a torch
    /// launcher's one per GPU).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub local_processes: u32,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub argv: Vec<String>,
}

/// Never returns: the shim exits as soon as the command's status is recorded (a runtime shutdown would
/// wait for the blocking read of stdin that watches the executor).
pub async fn task_shim(args: ShimArgs) -> anyhow::Result<()> {
    let mode = drover_executor::shim::ShimMode {
        sandboxed: args.sandboxed,
        in_pod: args.in_pod,
        processes: args.local_processes,
    };
    let code = drover_executor::shim::run(args.status_file.as_deref(), &args.argv, mode).await;
    std::process::exit(code)
}

#[derive(Debug, clap::Subcommand)]
pub enum NodeCommand {
    /// Take no new tasks on the node; what runs there keeps running.
    Cordon { name: String },
    /// Let the node take new tasks again.
    Uncordon { name: String },
    /// Cordon the node and move its jobs elsewhere, each through a checkpoint.
    Drain {
        name: String,
        /// Return once the node has no tasks left.
        #[arg(long)]
        wait: bool,
    },
    /// Revoke the node's credential and end its executor's session; its jobs are rescheduled. The
    /// executor must enrol again, with a new enrolment token.
    Revoke { name: String },
}

pub async fn node(global: &GlobalArgs, command: NodeCommand) -> anyhow::Result<()> {
    let client = Client::new(global).await?;
    let (name, action, wait) = match &command {
        NodeCommand::Cordon { name } => (name, "cordon", false),
        NodeCommand::Uncordon { name } => (name, "uncordon", false),
        NodeCommand::Drain { name, wait } => (name, "drain", *wait),
        NodeCommand::Revoke { name } => return crate::enrollment::revoke_node(global, name).await,
    };
    let mut response = client
        .post_json(
            &format!("/api/v1/nodes/{}/{action}", segment(name)),
            &serde_json::json!({}),
        )
        .await?;
    if wait {
        loop {
            let tasks = response["node"]["tasks"].as_array().map_or(0, Vec::len);
            if tasks == 0 {
                break;
            }
            eprintln!("{name}: {tasks} task(s) still stopping");
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            response = client
                .get(&format!("/api/v1/nodes/{}", segment(name)))
                .await?;
        }
    }
    match global.output {
        Format::Json => output::json(&response),
        Format::Table => {
            let node = &response["node"];
            out!(
                "{} cordoned={} draining={} tasks={}",
                output::text(&node["name"]),
                output::text(&node["cordoned"]),
                output::text(&node["draining"]),
                node["tasks"].as_array().map_or(0, Vec::len)
            );
        }
    }
    Ok(())
}
