//! Every task in a sandbox of its own, through an OCI runtime (Debian's `runc`): its own user and
//! group ids, no capabilities, `no_new_privs` and a default system-call filter; its own mount, PID, IPC
//! and UTS namespaces, where it sees the host's system folders read-only, a private `/tmp`, its own
//! folders read-write and what it reads read-only, and nothing of the executor's data, other tasks or
//! the server; a cgroup holding it to the memory, CPUs and processes it was given and to its own GPUs'
//! device nodes. The bundle (`config.json` over a shared empty root) is built by [`bundle`]; this
//! module owns the executor's side: whether the host can sandbox at all (run as root, a runtime, a
//! cgroup hierarchy with the controllers, and a trial run), the folders and ids a task is given, the
//! runtime's command line, and cleaning up what a task or a killed executor left.
//!
//! A task of a job with an image (`spec.command.image`) has the image's root (`crate::images`)
//! instead of the host's system folders, the executor's program under `/.drover`
//! ([`host_program`]), and the host's `/etc/hosts` and `/etc/resolv.conf` (it shares the host's
//! network, as everywhere outside Kubernetes).
//!
//! A task's first process is still the task shim (`drover task-shim --sandboxed`), now inside: the
//! runtime runs in the foreground with the executor's pipes, forwards the signals it is sent (stop,
//! checkpoint now) to the shim, which forwards them to the command; when the executor dies its pipe
//! closes and the shim ends everything in the sandbox. Past the grace period the runtime kills the
//! sandbox's every process (`runc kill`).

pub mod bundle;
pub mod cgroups;
pub mod host_program;
pub mod ids;
pub mod seccomp;

use crate::images::{Image, ImageSettings, Images};
use bundle::{Confinement, Device, SYSTEM_DIRS};
use cgroups::Layout;
use host_program::HostProgram;
use ids::{IdPool, IdRange};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How tasks are sandboxed, as the executor is told (`drover executor --task-uids ...`).
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    /// The OCI runtime program (`runc`, found on `PATH` unless a path is given).
    pub runtime: PathBuf,
    /// The user ids tasks run as, and the range their jobs' group ids are drawn from.
    pub ids: IdRange,
    /// Processes (and threads) one task may have at once.
    pub pids_max: u32,
    /// Host paths no task may see, beyond the executor's own data directory (the server's data
    /// directory under `drover dev`).
    pub hidden: Vec<PathBuf>,
    /// How images are pulled; `None`: this node runs no images (`--no-images`).
    pub images: Option<ImageSettings>,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings {
            runtime: PathBuf::from("runc"),
            ids: IdRange::DEFAULT,
            pids_max: 4096,
            hidden: Vec::new(),
            images: Some(ImageSettings::default()),
        }
    }
}

/// The sandboxing of one executor: its runtime state, its bundles, the shared empty root, and the
/// user ids its running tasks hold.
#[derive(Debug)]
pub struct Sandbox {
    settings: SandboxSettings,
    layout: Layout,
    /// `runc --root`: the runtime's record of this executor's containers.
    state_dir: PathBuf,
    bundles: PathBuf,
    rootfs: PathBuf,
    system_dirs: Vec<PathBuf>,
    /// Containers' cgroups go under `/drover/<node>`.
    cgroup_parent: PathBuf,
    /// Containers are named `<prefix><task>`, so this executor's are told from another's.
    prefix: String,
    /// Always hidden: the executor's data directory, and the settings' paths.
    hidden: Vec<PathBuf>,
    users: Mutex<IdPool>,
    /// The program to bind into every sandbox (this executable: the shim, the training engine).
    program: PathBuf,
    devices: Vec<(u32, Device)>,
    shared: Vec<Device>,
    /// The node's images, and how the program runs over one; or why this node runs none.
    images: Result<(Arc<Images>, HostProgram), String>,
}

/// What a task is, for its sandbox (see [`Sandbox::confine`]).
#[derive(Debug, Clone)]
pub struct TaskSandbox {
    /// `<job>-g<generation>-<role>-<index>`: the container's name and the cgroup's.
    pub name: String,
    pub job_id: String,
    /// The shim's arguments after the program (`task-shim --sandboxed --status-file ... -- argv`).
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub workdir: PathBuf,
    pub task_dir: PathBuf,
    pub checkpoint_dir: PathBuf,
    /// The checkpoint the task starts from, when it starts from one.
    pub resume_from: Option<PathBuf>,
    /// Data the job declared (absolute).
    pub data: Vec<PathBuf>,
    pub memory_limit_bytes: u64,
    pub cpus: u32,
    /// The node's GPU indices the task was given.
    pub gpus: Vec<u32>,
    /// The image it runs in (`workdir` is then a path inside it); `None`: over the host's folders.
    pub image: Option<Image>,
    /// The host (name or address) its peers reach it at: its own host name resolves to it.
    pub advertised_host: String,
}

/// A task's sandbox while it exists: the command that runs it, and what to clean when it ends.
#[derive(Debug)]
pub struct Confined {
    sandbox: Arc<Sandbox>,
    pub container: String,
    bundle: PathBuf,
    uid: u32,
}

impl Sandbox {
    /// The executor's sandboxing, or why this host cannot sandbox tasks (not root, no runtime, no
    /// cgroup hierarchy with the controllers, or a trial sandbox that did not run).
    pub async fn open(
        settings: SandboxSettings,
        data_dir: &Path,
        node_name: &str,
        program: &Path,
        gpus: &[crate::gpu::GpuInfo],
    ) -> Result<Arc<Sandbox>, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err(
                "sandboxes need the executor to run as root (to give each task its own user and cgroup)"
                    .to_owned(),
            );
        }
        let version = tokio::process::Command::new(&settings.runtime)
            .arg("--version")
            .output()
            .await
            .map_err(|err| {
                format!(
                    "cannot run the OCI runtime `{}` ({err}); install runc (Debian: apt-get install runc) or give --runtime",
                    settings.runtime.display()
                )
            })?;
        if !version.status.success() {
            return Err(format!(
                "`{} --version` failed: {}",
                settings.runtime.display(),
                String::from_utf8_lossy(&version.stderr).trim()
            ));
        }
        let layout = Layout::detect(Path::new("/sys/fs/cgroup"))?;
        let root = data_dir.join("sandbox");
        let (state_dir, bundles, rootfs) = (
            root.join("state"),
            root.join("bundles"),
            root.join("rootfs"),
        );
        for dir in [&state_dir, &bundles, &rootfs] {
            std::fs::create_dir_all(dir)
                .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
        }
        let system_dirs = prepare_rootfs(&rootfs)?;
        let safe_node: String = node_name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let (devices, shared) = gpu_devices(gpus);
        let mut hidden = vec![data_dir.to_path_buf()];
        hidden.extend(settings.hidden.iter().cloned());
        let images = match &settings.images {
            None => Err("--no-images".to_owned()),
            Some(image_settings) => match Images::open(image_settings.clone(), data_dir).await {
                Ok(images) => HostProgram::find(program)
                    .await
                    .map(|host| (Arc::new(images), host)),
                Err(why) => Err(why),
            },
        };
        let sandbox = Arc::new(Sandbox {
            users: Mutex::new(IdPool::new(settings.ids)),
            settings,
            layout,
            state_dir,
            bundles,
            rootfs,
            system_dirs,
            cgroup_parent: PathBuf::from("/drover").join(&safe_node),
            prefix: format!("drover-{safe_node}-"),
            hidden,
            program: program.to_path_buf(),
            devices,
            shared,
            images,
        });
        sandbox.remove_leftovers().await;
        sandbox.trial().await?;
        Ok(sandbox)
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The node's images, when it runs them.
    pub fn images(&self) -> Option<Arc<Images>> {
        self.images.as_ref().ok().map(|(images, _)| images.clone())
    }

    /// Whether tasks run in images here, in words: `skopeo 1.9.3, umoci 0.4.7`, or why not.
    pub fn describe_images(&self) -> String {
        match &self.images {
            Ok((images, _)) => format!("yes ({})", images.describe()),
            Err(why) => format!("no: {why}"),
        }
    }

    /// What the sandboxes are, in words: `runc, cgroup v1, task ids 1000000000-1000065535`.
    pub fn describe(&self) -> String {
        format!(
            "{}, cgroup {}, task ids {}, at most {} processes a task",
            self.settings.runtime.display(),
            match self.layout {
                Layout::Unified => "v2",
                Layout::PerController => "v1",
            },
            self.settings.ids,
            self.settings.pids_max
        )
    }

    fn runtime(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.settings.runtime);
        command.arg("--root").arg(&self.state_dir).env_clear().env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        );
        command
    }

    /// Containers a killed executor left (its tasks died with it; their records and cgroups did not).
    async fn remove_leftovers(&self) {
        let Ok(listed) = self.runtime().args(["list", "--quiet"]).output().await else {
            return;
        };
        for name in String::from_utf8_lossy(&listed.stdout).lines() {
            if name.starts_with(&self.prefix) {
                tracing::info!(container = name, "removing a sandbox an earlier run left");
                self.delete(name).await;
            }
        }
        if let Ok(entries) = std::fs::read_dir(&self.bundles) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }

    /// A sandbox that runs this program's `--version`: the runtime, the cgroups and the root all work.
    async fn trial(self: &Arc<Self>) -> Result<(), String> {
        let dir = tempfile_dir(&self.bundles, "trial")?;
        let task = TaskSandbox {
            name: "trial".to_owned(),
            job_id: "trial".to_owned(),
            args: vec!["--version".to_owned()],
            env: Vec::new(),
            workdir: PathBuf::from("/"),
            task_dir: dir.clone(),
            checkpoint_dir: dir.clone(),
            resume_from: None,
            data: Vec::new(),
            memory_limit_bytes: 256 << 20,
            cpus: 1,
            gpus: Vec::new(),
            image: None,
            advertised_host: "127.0.0.1".to_owned(),
        };
        let (mut command, confined) = self.confine(&task)?;
        let output = command
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|err| format!("cannot run the OCI runtime: {err}"));
        confined.finish().await;
        let _ = std::fs::remove_dir_all(&dir);
        let output = output?;
        if !output.status.success() {
            return Err(format!(
                "a trial sandbox did not run ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(())
    }

    /// Prepares a task's sandbox: takes a user id, gives its folders to that user and its job's group,
    /// writes its bundle, and returns the command that runs it (in the foreground, with the caller's
    /// pipes) and the handle that cleans up after it.
    pub fn confine(
        self: &Arc<Self>,
        task: &TaskSandbox,
    ) -> Result<(tokio::process::Command, Confined), String> {
        let uid = self
            .users
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| {
                format!(
                    "every user id of {} is taken by a running task",
                    self.settings.ids
                )
            })?;
        let container = format!("{}{}", self.prefix, task.name);
        let bundle = self.bundles.join(&container);
        let confined = Confined {
            sandbox: self.clone(),
            container: container.clone(),
            bundle: bundle.clone(),
            uid,
        };
        let gid = self.settings.ids.group_of(&task.job_id);
        // The job's checkpoint folder (all its generations); a task reads the checkpoint it starts from
        // as well when that is another job's (`init_from`), through that job's group.
        let job_dir = match task.checkpoint_dir.parent() {
            Some(parent)
                if parent
                    .file_name()
                    .is_some_and(|n| n == task.job_id.as_str()) =>
            {
                parent.to_path_buf()
            }
            _ => task.checkpoint_dir.clone(),
        };
        own(&task.task_dir, Some(uid), gid, 0o2770)?;
        own(&job_dir, None, gid, 0o2770)?;
        own(&task.checkpoint_dir, None, gid, 0o2770)?;
        // Over the host's folders: the program, the working directory (unless it is the root: the
        // root would show the whole host) and the data it reads, at their host paths. Over an
        // image: the program under /.drover, and the host's name resolution.
        let mut read_only = Vec::new();
        let mut placed = Vec::new();
        let (rootfs, system_dirs, mut args) = match &task.image {
            None => {
                read_only.push(self.program.clone());
                if task.workdir != Path::new("/") {
                    read_only.push(task.workdir.clone());
                }
                read_only.extend(task.data.iter().cloned());
                (
                    self.rootfs.clone(),
                    self.system_dirs.clone(),
                    vec![self.program.display().to_string()],
                )
            }
            Some(image) => {
                let host = match &self.images {
                    Ok((_, host)) => host,
                    Err(why) => return Err(format!("this node runs no images: {why}")),
                };
                placed = host.binds();
                let resolv = Path::new("/etc/resolv.conf");
                if resolv.is_file() {
                    placed.push((resolv.to_path_buf(), resolv.to_path_buf()));
                }
                (image.rootfs.clone(), Vec::new(), host.argv())
            }
        };
        // Its own host name resolves to the address its peers reach it at (gloo, in PyTorch and
        // JAX, binds to what the host name resolves to): the host's /etc/hosts and one line more.
        let hostname = hostname(&task.name);
        std::fs::create_dir_all(&bundle)
            .map_err(|err| format!("cannot create the bundle {}: {err}", bundle.display()))?;
        let hosts = bundle.join("hosts");
        std::fs::write(&hosts, hosts_file(&hostname, &task.advertised_host))
            .map_err(|err| format!("cannot write {}: {err}", hosts.display()))?;
        placed.push((hosts, PathBuf::from("/etc/hosts")));
        let mut groups = Vec::new();
        if let Some(from) = &task.resume_from
            && !from.starts_with(&job_dir)
        {
            read_only.push(from.clone());
            if let Some(source) = source_job(from) {
                groups.push(self.settings.ids.group_of(&source));
            }
        }
        let mut devices = self.shared.clone();
        devices.extend(
            self.devices
                .iter()
                .filter(|(index, _)| task.gpus.contains(index))
                .map(|(_, device)| device.clone()),
        );
        args.extend(task.args.iter().cloned());
        let confinement = Confinement {
            args,
            env: task.env.clone(),
            cwd: task.workdir.clone(),
            hostname,
            uid,
            gid,
            read_write: vec![task.task_dir.clone(), job_dir],
            read_only,
            placed,
            hidden: self.hidden.clone(),
            memory_limit_bytes: task.memory_limit_bytes,
            cpus: task.cpus,
            pids_max: self.settings.pids_max,
            open_files: open_files(),
            devices,
            cgroups_path: self.cgroup_parent.join(&task.name),
            layout: self.layout,
            rootfs,
            system_dirs,
        };
        let mut spec = bundle::config(&confinement)
            .map_err(|err| format!("cannot build the sandbox's configuration: {err}"))?;
        if !groups.is_empty()
            && let Some(process) = spec.process_mut()
        {
            process.user_mut().set_additional_gids(Some(groups));
        }
        let json = serde_json::to_vec_pretty(&spec)
            .map_err(|err| format!("cannot write the sandbox's configuration: {err}"))?;
        std::fs::write(bundle.join("config.json"), json)
            .map_err(|err| format!("cannot write {}: {err}", bundle.display()))?;
        let mut command = self.runtime();
        command
            .arg("run")
            .arg("--bundle")
            .arg(&bundle)
            .arg(&container);
        Ok((command, confined))
    }

    /// Sends `signal` (`KILL`, `TERM`) to every process of the container.
    pub async fn kill(&self, container: &str, signal: &str) {
        let _ = self
            .runtime()
            .args(["kill", "--all", container, signal])
            .output()
            .await;
    }

    async fn delete(&self, container: &str) {
        let _ = self
            .runtime()
            .args(["delete", "--force", container])
            .output()
            .await;
    }
}

impl Confined {
    /// The sandbox is over: its container (if the runtime did not remove it), its bundle and its
    /// user id go.
    pub async fn finish(self) {
        self.sandbox.delete(&self.container).await;
        let _ = std::fs::remove_dir_all(&self.bundle);
        self.sandbox
            .users
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .give_back(self.uid);
    }

    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }
}

/// The shared empty root: symbolic links where the host's system folders are links (`/bin` ->
/// `usr/bin` on merged-/usr systems), mount points for the rest, and `/tmp`'s mount point with the
/// mode a `/tmp` has (`1777`): `runc` gives a tmpfs the mode of the folder it is mounted on when that
/// folder already exists, which in this shared root it does from the second task on. Returns the
/// folders to bind.
fn prepare_rootfs(rootfs: &Path) -> Result<Vec<PathBuf>, String> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = rootfs.join("tmp");
    std::fs::create_dir_all(&tmp)
        .and_then(|()| std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)))
        .map_err(|err| format!("cannot prepare {}: {err}", tmp.display()))?;
    let mut binds = Vec::new();
    for dir in SYSTEM_DIRS {
        let host = Path::new(dir);
        let Ok(metadata) = std::fs::symlink_metadata(host) else {
            continue;
        };
        let inside = rootfs.join(dir.trim_start_matches('/'));
        if metadata.file_type().is_symlink() {
            let target = std::fs::read_link(host)
                .map_err(|err| format!("cannot read the link {dir}: {err}"))?;
            match std::fs::read_link(&inside) {
                Ok(existing) if existing == target => {}
                _ => {
                    let _ = std::fs::remove_file(&inside);
                    let _ = std::fs::remove_dir(&inside);
                    std::os::unix::fs::symlink(&target, &inside).map_err(|err| {
                        format!(
                            "cannot link {} in the sandbox root: {err}",
                            inside.display()
                        )
                    })?;
                }
            }
        } else if metadata.is_dir() {
            binds.push(host.to_path_buf());
        }
    }
    Ok(binds)
}

/// The GPUs' device nodes: each GPU's own (by index) and the driver's shared ones, from the host's
/// `/dev` (none on a host without NVIDIA's driver).
fn gpu_devices(gpus: &[crate::gpu::GpuInfo]) -> (Vec<(u32, Device)>, Vec<Device>) {
    let node = |path: &str| -> Option<Device> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let metadata = std::fs::metadata(path).ok()?;
        metadata.file_type().is_char_device().then(|| {
            let rdev = metadata.rdev();
            Device {
                path: PathBuf::from(path),
                major: i64::from(nix::sys::stat::major(rdev) as u32),
                minor: i64::from(nix::sys::stat::minor(rdev) as u32),
            }
        })
    };
    let own = gpus
        .iter()
        .filter_map(|gpu| {
            let minor = gpu.minor_number?;
            node(&format!("/dev/nvidia{minor}")).map(|device| (gpu.index, device))
        })
        .collect();
    let shared = [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
    ]
    .iter()
    .filter_map(|path| node(path))
    .collect();
    (own, shared)
}

/// Gives `path` (a folder the executor made) to `uid` (or keeps its owner) and `gid`, with `mode`,
/// through a handle opened without following links: a task of the job that can write the folder's
/// parent cannot swap in a link to make the executor change another file.
fn own(path: &Path, uid: Option<u32>, gid: u32, mode: u32) -> Result<(), String> {
    use nix::fcntl::{OFlag, open};
    use nix::sys::stat::{Mode, fchmod};
    std::fs::create_dir_all(path)
        .map_err(|err| format!("cannot create {}: {err}", path.display()))?;
    let fd = open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|err| format!("cannot open {}: {err}", path.display()))?;
    nix::unistd::fchown(
        &fd,
        uid.map(nix::unistd::Uid::from_raw),
        Some(nix::unistd::Gid::from_raw(gid)),
    )
    .and_then(|()| fchmod(&fd, Mode::from_bits_truncate(mode)))
    .map_err(|err| format!("cannot give {} to the task: {err}", path.display()))
}

/// The job whose checkpoint `path` is: `<root>/<job>/g<generation>/<checkpoint>`.
fn source_job(path: &Path) -> Option<String> {
    let generation = path.ancestors().find(|a| {
        a.file_name().is_some_and(|n| {
            let n = n.as_bytes();
            n.len() > 1 && n[0] == b'g' && n[1..].iter().all(u8::is_ascii_digit)
        })
    })?;
    let job = generation.parent()?.file_name()?.to_str()?;
    uuid::Uuid::parse_str(job).ok().map(|_| job.to_owned())
}

/// Files a task may have open: 65,536 (data loaders open many), or this process's own hard limit
/// if that is lower (the runtime cannot raise it past that).
fn open_files() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(_, hard)| hard)
        .min(65_536)
}

/// A task's `/etc/hosts`: the host's, and its own host name at the address `advertised` resolves
/// to (the loopback address when it resolves to none).
fn hosts_file(hostname: &str, advertised: &str) -> String {
    use std::net::ToSocketAddrs;
    let mut hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let address = (advertised, 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addresses| addresses.find(std::net::SocketAddr::is_ipv4))
        .map_or_else(|| "127.0.0.1".to_owned(), |a| a.ip().to_string());
    if !hosts.is_empty() && !hosts.ends_with('\n') {
        hosts.push('\n');
    }
    hosts.push_str(&format!("{address}\t{hostname}\n"));
    hosts
}

/// A host name of the task's name (at most 63 characters of letters, digits and '-').
fn hostname(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(63)
        .collect();
    clean.trim_matches('-').to_owned()
}

/// A fresh folder under `parent`.
fn tempfile_dir(parent: &Path, name: &str) -> Result<PathBuf, String> {
    let dir = parent.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    Ok(dir)
}

/// How long `runc kill` gets before the executor gives up waiting on it.
pub const KILL_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_checkpoint_names_its_job() {
        let job = "01a216f3-7026-74c3-9fc5-1d565169ed78";
        assert_eq!(
            source_job(Path::new(&format!("/ckpt/{job}/g3/step-000090"))),
            Some(job.to_owned())
        );
        assert_eq!(source_job(Path::new("/ckpt/not-a-job/g3/x")), None);
        assert_eq!(source_job(Path::new("/ckpt/x")), None);
    }

    #[test]
    fn a_tasks_host_name_resolves_to_its_nodes_advertised_address() {
        let hosts = hosts_file("j-g1-worker-0", "127.0.0.1");
        assert!(hosts.ends_with("127.0.0.1\tj-g1-worker-0\n"), "{hosts}");
        assert!(hosts.starts_with(&std::fs::read_to_string("/etc/hosts").unwrap_or_default()));
        let unresolvable = hosts_file("t", "no-such-host.invalid");
        assert!(unresolvable.ends_with("127.0.0.1\tt\n"), "{unresolvable}");
    }

    #[test]
    fn a_host_name_is_a_dns_label() {
        assert_eq!(hostname("01a2-g1-worker-0"), "01a2-g1-worker-0");
        assert_eq!(hostname("a_b.c"), "a-b-c");
        assert_eq!(hostname(&"x".repeat(100)).len(), 63);
    }

    #[test]
    fn a_folder_is_given_through_a_handle_and_a_link_in_its_place_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("task");
        own(&folder, None, nix::unistd::getgid().as_raw(), 0o2770).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&folder).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o2770);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        let err = own(&link, None, nix::unistd::getgid().as_raw(), 0o2770).unwrap_err();
        assert!(err.contains("cannot open"), "{err}");
    }
}
