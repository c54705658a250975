//! One task as a child process: started through the shim in its own process group (inside its own
//! sandbox, `crate::sandbox`, when the executor sandboxes tasks), with only its GPUs visible, its
//! output captured line by line (JSON contract lines become metrics and checkpoint records), stopped
//! with SIGTERM then SIGKILL after the grace period, and reaped with its exit cause.

use crate::launcher::Launcher;
use crate::sandbox::{Confined, Sandbox, TaskSandbox};
use crate::shim::ShimStatus;
use crate::storage::Remote;
use drover_proto as pb;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use uploads::{UPLOAD_QUEUE, upload_checkpoints};

mod output;
mod report;
mod uploads;

pub(crate) use output::read_output;
pub(crate) use report::{TAIL_LINES, exited};
pub(crate) use uploads::Records;

/// Everything needed to start one task.
#[derive(Debug, Clone)]
pub struct Launch {
    pub key: pb::TaskKey,
    pub spec: pb::TaskSpec,
    pub peers: Vec<String>,
    pub address: String,
    /// The private scratch directory of this task in the executor's data directory.
    pub task_dir: PathBuf,
    /// Directory relative working directories are resolved against.
    pub base_dir: PathBuf,
    /// Program and leading arguments that run the shim (`drover task-shim`).
    pub shim: Vec<String>,
    /// Hide every GPU (advertised GPUs are not real ones).
    pub hide_gpus: bool,
    /// The object store checkpoints go to; the spec's checkpoint directory is a local copy.
    pub remote: Option<Arc<Remote>>,
    /// The sandbox tasks run in; `None` runs them as the executor's user (`--no-sandbox`).
    pub sandbox: Option<Arc<Sandbox>>,
    /// The task's GPUs as `GPU-…` ids, when it is sandboxed on real GPUs: inside, only its own GPUs'
    /// device nodes exist and the driver numbers them from 0, so indices would name the wrong ones.
    pub gpu_uuids: Vec<String>,
    /// The image it runs in, pulled while it was prepared (`spec.image`).
    pub image: Option<crate::images::Image>,
}

/// Asks a running task to stop within a grace period.
#[derive(Debug)]
pub struct StopHandle(Option<oneshot::Sender<Duration>>);

impl StopHandle {
    /// A handle that sends the grace period on `sender`.
    pub(crate) fn new(sender: oneshot::Sender<Duration>) -> Self {
        StopHandle(Some(sender))
    }

    pub fn stop(&mut self, grace: Duration) {
        if let Some(sender) = self.0.take() {
            let _ = sender.send(grace);
        }
    }
}

/// Variables of the executor's own environment a task inherits: what programs need to run (the
/// search path, locale, CUDA's and Python's locations, proxies). Nothing else, and no `DROVER_*`
/// variable but the log filter: the executor's enrolment token, and in `drover dev` the server's own
/// settings, must never reach a task.
fn inherited(name: &str) -> bool {
    const EXACT: [&str; 22] = [
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TERM",
        "LD_LIBRARY_PATH",
        "CUDA_HOME",
        "CUDA_PATH",
        "PYTHONPATH",
        "PYTHONHOME",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "DROVER_LOG",
        "DROVER_LOG_FORMAT",
        "RAYON_NUM_THREADS",
    ];
    const PREFIXES: [&str; 5] = ["LC_", "NVIDIA_", "CUDA_", "OMP_", "NCCL_"];
    const PROXIES: [&str; 6] = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    ];
    EXACT.contains(&name)
        || PROXIES.contains(&name)
        || PREFIXES.iter().any(|prefix| name.starts_with(prefix))
}

fn inherited_env() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os().filter_map(|(name, value)| {
        let name = name.into_string().ok()?;
        inherited(&name).then(|| Some((name, value.into_string().ok()?)))?
    })
}

/// The environment contract of a task (documented in the README): what every task gets, wherever
/// it runs (`task_dir`: its private scratch folder).
pub(crate) fn contract_env(launch: &Launch, task_dir: &str) -> Vec<(&'static str, String)> {
    let spec = &launch.spec;
    let key = &launch.key;
    let port = launch.address.rsplit(':').next().unwrap_or_default();
    let mut env = vec![
        ("DROVER_JOB_ID", key.job_id.clone()),
        ("DROVER_JOB_NAME", spec.job_name.clone()),
        ("DROVER_GENERATION", key.generation.to_string()),
        ("DROVER_ROLE", key.role.clone()),
        ("DROVER_TASK_INDEX", key.index.to_string()),
        ("DROVER_RANK", spec.rank.to_string()),
        (
            "DROVER_WORLD_SIZE",
            (spec.num_workers + spec.num_ps).to_string(),
        ),
        ("DROVER_NUM_WORKERS", spec.num_workers.to_string()),
        ("DROVER_NUM_PS", spec.num_ps.to_string()),
        ("DROVER_PEERS", launch.peers.join(",")),
        ("DROVER_ADDRESS", launch.address.clone()),
        ("DROVER_PORT", port.to_owned()),
        ("DROVER_CHECKPOINT_DIR", spec.checkpoint_dir.clone()),
        ("DROVER_RESUME_FROM", spec.resume_from.clone()),
        ("DROVER_RESUME_STEP", spec.resume_step.to_string()),
        ("DROVER_TASK_DIR", task_dir.to_owned()),
    ];
    // A command job's launcher: the variables torchrun or jax.distributed would set (checked by
    // `launch_processes` before anything starts).
    let launcher = Launcher::of(spec).unwrap_or(Launcher::None);
    env.extend(crate::launcher::env(launcher, spec, key, &launch.peers));
    // The CPUs it was given: libraries that size thread pools by the machine's cores (OpenMP,
    // rayon, the engine) use as many as the task may, not all of the node's.
    if spec.cpus > 0 {
        env.push(("DROVER_CPUS", spec.cpus.to_string()));
        env.push(("OMP_NUM_THREADS", spec.cpus.to_string()));
        env.push(("RAYON_NUM_THREADS", spec.cpus.to_string()));
    }
    env
}

/// How many processes the task starts (its launcher's count), or why it cannot start.
pub(crate) fn launch_processes(spec: &pb::TaskSpec) -> Result<u32, StartError> {
    Launcher::of(spec)
        .map(|launcher| launcher.processes(spec))
        .map_err(StartError::User)
}

/// A child process's environment contract: [`contract_env`], and the GPUs it may see.
fn task_env(launch: &Launch) -> Vec<(String, String)> {
    let spec = &launch.spec;
    let mut env = contract_env(launch, &launch.task_dir.display().to_string());
    let visible = if launch.hide_gpus {
        String::new()
    } else if !launch.gpu_uuids.is_empty() {
        launch.gpu_uuids.join(",")
    } else {
        spec.gpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    env.push(("CUDA_VISIBLE_DEVICES", visible));
    // The executor numbers GPUs as NVML does (PCI bus order); CUDA's default order differs.
    env.push(("CUDA_DEVICE_ORDER", "PCI_BUS_ID".to_owned()));
    if launch.sandbox.is_some() {
        // The executor's home is not in the sandbox; its private /tmp is.
        env.push(("HOME", "/tmp".to_owned()));
    }
    env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The search path of an image that sets none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `path` without `.` and `..` (an image's working directory joined with a relative one); never
/// above the root.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(name) => out.push(name),
            _ => {}
        }
    }
    out
}

/// Starts the task; returns its process id and a handle to stop it. Everything the task does from
/// now on (output, metrics, checkpoints, its exit) arrives on `events`.
/// Why a task could not start: the job's fault (its spec), or this node's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartError {
    User(String),
    Node(String),
}

impl From<crate::images::PullError> for StartError {
    fn from(error: crate::images::PullError) -> Self {
        match error {
            crate::images::PullError::User(message) => StartError::User(message),
            crate::images::PullError::Node(message) => StartError::Node(message),
        }
    }
}

pub async fn start(
    launch: Launch,
    events: mpsc::Sender<pb::ExecutorMessage>,
) -> Result<(u32, StopHandle), StartError> {
    let image = match (&launch.image, launch.spec.image.is_empty()) {
        (Some(image), false) => Some(image),
        (None, true) => None,
        _ => {
            return Err(StartError::Node(format!(
                "the image {} was not pulled",
                launch.spec.image
            )));
        }
    };
    let workdir = {
        let dir = Path::new(&launch.spec.workdir);
        match image {
            _ if dir.is_absolute() => dir.to_path_buf(),
            // Relative to the image's own working directory.
            Some(image) => normal(&image.workdir.join(dir)),
            None => launch.base_dir.join(dir),
        }
    };
    match image {
        None if !workdir.is_dir() => {
            return Err(StartError::User(format!(
                "working directory {} does not exist",
                workdir.display()
            )));
        }
        Some(image)
            if !image
                .rootfs
                .join(workdir.strip_prefix("/").unwrap_or(&workdir))
                .is_dir() =>
        {
            return Err(StartError::User(format!(
                "working directory {} does not exist in the image {}",
                workdir.display(),
                launch.spec.image
            )));
        }
        _ => {}
    }
    if launch.spec.argv.is_empty() {
        return Err(StartError::User("command.argv is empty".to_owned()));
    }
    let processes = launch_processes(&launch.spec)?;
    // The shim starts the launcher's processes, each with its own LOCAL_RANK and RANK.
    let local_processes =
        (processes > 1).then(|| ["--local-processes".to_owned(), processes.to_string()]);
    std::fs::create_dir_all(&launch.task_dir)
        .and_then(|()| std::fs::create_dir_all(&launch.spec.checkpoint_dir))
        .map_err(|err| StartError::Node(format!("cannot create the task's directories: {err}")))?;
    let status_file = launch.task_dir.join("exit-status.json");
    let _ = std::fs::remove_file(&status_file);
    // An experiment's trial gets its hyper-parameters (`DROVER_HPARAMS`, set by the server: see
    // `drover_core::experiment::HPARAMS_ENV`) as a JSON file too.
    let hparams = launch.spec.env.get("DROVER_HPARAMS").map(|json| {
        let path = launch.task_dir.join("hparams.json");
        std::fs::write(&path, json).map(|()| path)
    });
    let hparams_file = match hparams {
        None => None,
        Some(Ok(path)) => Some(path.display().to_string()),
        Some(Err(err)) => {
            return Err(StartError::Node(format!(
                "cannot write the trial's hparams.json: {err}"
            )));
        }
    };
    let (shim_program, shim_args) = launch
        .shim
        .split_first()
        .ok_or_else(|| StartError::Node("no task shim configured".to_owned()))?;
    // The task's environment: what programs need of the executor's, the job's own, the contract's
    // (a later one of the same name wins).
    // Over an image, its own environment (its PATH, …) instead of the executor's.
    let mut env: std::collections::BTreeMap<String, String> = match image {
        None => inherited_env().collect(),
        Some(image) => {
            let mut env: std::collections::BTreeMap<String, String> =
                image.env.iter().cloned().collect();
            env.entry("PATH".to_owned())
                .or_insert_with(|| DEFAULT_PATH.to_owned());
            env
        }
    };
    env.extend(launch.spec.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.extend(task_env(&launch));
    env.extend(hparams_file.map(|path| ("DROVER_HPARAMS_FILE".to_owned(), path)));
    let (mut command, confined) = match &launch.sandbox {
        None if image.is_some() => {
            return Err(StartError::Node(
                "this node runs no images (it needs sandboxes)".to_owned(),
            ));
        }
        None => {
            let mut command = tokio::process::Command::new(shim_program);
            command
                .args(shim_args)
                .args(local_processes.iter().flatten())
                .arg("--status-file")
                .arg(&status_file)
                .arg("--")
                .args(&launch.spec.argv)
                .current_dir(&workdir)
                .env_clear()
                .envs(env);
            (command, None)
        }
        Some(sandbox) => {
            let mut args: Vec<String> = shim_args.to_vec();
            args.extend(local_processes.into_iter().flatten());
            args.extend(["--sandboxed".to_owned(), "--status-file".to_owned()]);
            args.push(status_file.display().to_string());
            args.push("--".to_owned());
            args.extend(launch.spec.argv.iter().cloned());
            let task = TaskSandbox {
                name: launch.task_dir.file_name().map_or_else(
                    || launch.key.job_id.clone(),
                    |n| n.to_string_lossy().into_owned(),
                ),
                job_id: launch.key.job_id.clone(),
                args,
                env: env.into_iter().collect(),
                workdir: workdir.clone(),
                task_dir: launch.task_dir.clone(),
                checkpoint_dir: PathBuf::from(&launch.spec.checkpoint_dir),
                resume_from: (!launch.spec.resume_from.is_empty())
                    .then(|| PathBuf::from(&launch.spec.resume_from)),
                data: match image {
                    // An image carries what it reads.
                    Some(_) => Vec::new(),
                    None => launch
                        .spec
                        .read_only_paths
                        .iter()
                        .map(|p| workdir.join(p))
                        .filter(|p| p.exists())
                        .collect(),
                },
                memory_limit_bytes: launch.spec.memory_limit_bytes,
                cpus: launch.spec.cpus,
                gpus: launch.spec.gpus.clone(),
                image: image.cloned(),
                advertised_host: launch
                    .address
                    .rsplit_once(':')
                    .map_or_else(|| launch.address.clone(), |(host, _)| host.to_owned()),
            };
            let sandbox = sandbox.clone();
            let confined = tokio::task::spawn_blocking(move || sandbox.confine(&task))
                .await
                .map_err(|err| StartError::Node(format!("cannot prepare the sandbox: {err}")))?
                .map_err(|err| StartError::Node(format!("cannot prepare the sandbox: {err}")))?;
            (confined.0, Some(confined.1))
        }
    };
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            if let Some(confined) = confined {
                confined.finish().await;
            }
            return Err(StartError::Node(format!(
                "cannot start the task shim {shim_program}: {err}"
            )));
        }
    };
    let pid = child.id().unwrap_or(0);
    let pgid = Pid::from_raw(pid as i32);
    let (stop_tx, stop_rx) = oneshot::channel();
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
    let checkpoint_dir = PathBuf::from(&launch.spec.checkpoint_dir);
    // With an object store, announced checkpoints are uploaded (in order) before they are recorded.
    let (records, uploader) = match launch.remote.clone() {
        Some(remote) => {
            let (tx, rx) = mpsc::channel(UPLOAD_QUEUE);
            let uploader = tokio::spawn(upload_checkpoints(remote, rx, events.clone()));
            (Records::Upload(tx), Some(uploader))
        }
        None => (Records::Direct, None),
    };
    let stdout = child.stdout.take().map(|out| {
        tokio::spawn(read_output(
            out,
            "stdout",
            launch.key.clone(),
            Some((checkpoint_dir, records)),
            events.clone(),
            tail.clone(),
        ))
    });
    let stderr = child.stderr.take().map(|err| {
        tokio::spawn(read_output(
            err,
            "stderr",
            launch.key.clone(),
            None,
            events.clone(),
            tail.clone(),
        ))
    });
    // Held until the task ends: when the executor dies, this pipe closes and the shim kills the group.
    let stdin = child.stdin.take();
    let key = launch.key.clone();
    let memory_limit_bytes = launch.spec.memory_limit_bytes;
    tokio::spawn(async move {
        let mut stop_requested = false;
        let mut killed_after_grace = None;
        let waited = tokio::select! {
            status = child.wait() => status,
            grace = stop_rx => {
                stop_requested = true;
                let grace = grace.unwrap_or(Duration::ZERO);
                let _ = killpg(pgid, Signal::SIGTERM);
                tokio::select! {
                    status = child.wait() => status,
                    () = tokio::time::sleep(grace) => {
                        killed_after_grace = Some(grace);
                        kill_all(confined.as_ref(), pgid).await;
                        child.wait().await
                    }
                }
            }
        };
        // Whatever is left of the group (a background child of the command) goes too.
        kill_all(confined.as_ref(), pgid).await;
        drop(stdin);
        if let Some(confined) = confined {
            confined.finish().await;
        }
        // A process that left the group may still hold the pipes: stop reading after a while.
        for reader in [stdout, stderr].into_iter().flatten() {
            let abort = reader.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), reader)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        // The exit is reported after the last checkpoint is in the store and recorded, so a job
        // resumes from it.
        if let Some(uploader) = uploader {
            let _ = uploader.await;
        }
        let status: Option<ShimStatus> = std::fs::read(&status_file)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let last_lines: Vec<String> = tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default();
        let report = match (status, killed_after_grace, waited) {
            (
                Some(ShimStatus {
                    spawn_error: Some(error),
                    ..
                }),
                _,
                _,
            ) => pb::Exited {
                spawn_failed: true,
                message: error,
                stop_requested,
                ..pb::Exited::default()
            },
            (Some(status), _, _) => pb::Exited {
                exit_code: status.exit_code,
                signal: status.signal,
                stop_requested,
                message: match (status.exit_code, status.signal) {
                    _ if status.out_of_memory => format!(
                        "was killed for using more than its memory limit ({} MiB)",
                        memory_limit_bytes >> 20
                    ),
                    (Some(code), _) => format!("exited with status {code}"),
                    (None, Some(signal)) => format!("was killed by signal {signal}"),
                    (None, None) => "exited".to_owned(),
                },
                last_lines,
                spawn_failed: false,
                out_of_memory: status.out_of_memory,
            },
            (None, Some(grace), _) => pb::Exited {
                signal: Some(9),
                stop_requested,
                message: format!("was killed after the {}s grace period", grace.as_secs()),
                last_lines,
                ..pb::Exited::default()
            },
            (None, None, waited) => pb::Exited {
                signal: Some(9),
                stop_requested,
                message: match waited {
                    Ok(status) => format!("ended without a status ({status})"),
                    Err(err) => format!("ended without a status ({err})"),
                },
                last_lines,
                ..pb::Exited::default()
            },
        };
        tracing::info!(
            job.id = key.job_id,
            generation = key.generation,
            role = key.role,
            index = key.index,
            message = report.message,
            "task exited"
        );
        let _ = events.send(exited(&key, report)).await;
    });
    Ok((pid, StopHandle(Some(stop_tx))))
}

/// Kills every process of the task: the sandbox's through its runtime (signals to the runtime's own
/// group would leave the sandbox running), or the process group's.
async fn kill_all(confined: Option<&Confined>, group: Pid) {
    match confined {
        Some(confined) => {
            let _ = tokio::time::timeout(
                crate::sandbox::KILL_TIMEOUT,
                confined.sandbox().kill(&confined.container, "KILL"),
            )
            .await;
        }
        None => {
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests;
