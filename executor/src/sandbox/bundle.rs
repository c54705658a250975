//! A task's OCI runtime configuration (`config.json`), built from what the task is and is given:
//! the host's system folders read-only over an empty root, a private `/tmp`, its own folders
//! read-write and what it reads read-only at the paths they have on the host, the executor's and the
//! server's data hidden where a folder it sees would show them; its own user, no capabilities,
//! `no_new_privs` and the default system-call filter; its own mount, PID, IPC and UTS namespaces (and
//! cgroup namespace on cgroup v2); and a cgroup with its memory, CPU and process-count limits and only
//! its own GPUs' device nodes. A pure function of its input, so every rule is tested here.

use super::cgroups::Layout;
use super::seccomp;
use oci_spec::OciSpecError;
use oci_spec::runtime::{
    Capabilities, Linux, LinuxCapabilities, LinuxCpu, LinuxDevice, LinuxDeviceCgroup,
    LinuxDeviceType, LinuxMemory, LinuxNamespace, LinuxNamespaceType, LinuxPids, LinuxResources,
    Mount, PosixRlimit, PosixRlimitBuilder, PosixRlimitType, Process, Root, Spec, User,
    get_default_maskedpaths, get_default_readonly_paths,
};
use std::path::{Path, PathBuf};

/// The host's system folders every task sees, read-only, where they exist.
pub const SYSTEM_DIRS: [&str; 9] = [
    "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
];

/// One device node a task may open (a GPU's, or the driver's control nodes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub path: PathBuf,
    pub major: i64,
    pub minor: i64,
}

/// Everything one task's sandbox is made of.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// The first process (the task shim) and its arguments.
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub hostname: String,
    pub uid: u32,
    pub gid: u32,
    /// Folders it writes (its task folder, its job's checkpoint folder), at their host paths.
    pub read_write: Vec<PathBuf>,
    /// What it reads: its working directory, the program, the data it declared, the checkpoint it
    /// starts from.
    pub read_only: Vec<PathBuf>,
    /// Host files and folders shown read-only at another path (host, inside): the executor's
    /// program and its libraries in an image's root.
    pub placed: Vec<(PathBuf, PathBuf)>,
    /// Host paths hidden under an empty file system wherever a folder it sees would show them.
    pub hidden: Vec<PathBuf>,
    /// 0: no limit.
    pub memory_limit_bytes: u64,
    /// 0: no quota.
    pub cpus: u32,
    pub pids_max: u32,
    /// Files it may have open at once (the runtime cannot raise it past its own hard limit).
    pub open_files: u64,
    pub devices: Vec<Device>,
    /// The cgroup, relative to the hierarchy's root.
    pub cgroups_path: PathBuf,
    pub layout: Layout,
    /// The root: the empty one the host's folders are mounted on, or an image's (shared by every
    /// task, read-only).
    pub rootfs: PathBuf,
    /// Which of [`SYSTEM_DIRS`] exist on the host as folders (not symbolic links).
    pub system_dirs: Vec<PathBuf>,
}

/// A tmpfs of `size` bytes at most (`None`: the kernel's default, half the memory), `nosuid` and
/// `nodev` (but for `/dev` itself, whose device nodes the runtime makes).
fn tmpfs(destination: &str, mode: &str, size: Option<u64>, extra: &[&str]) -> Mount {
    let base: &[&str] = if destination == "/dev" {
        &["nosuid"]
    } else {
        &["nosuid", "nodev"]
    };
    let mut options: Vec<String> = base.iter().chain(extra).map(|o| (*o).to_owned()).collect();
    options.push(format!("mode={mode}"));
    if let Some(size) = size {
        options.push(format!("size={size}"));
    }
    let mut mount = Mount::default();
    mount.set_destination(PathBuf::from(destination));
    mount.set_typ(Some("tmpfs".to_owned()));
    mount.set_source(Some(PathBuf::from("tmpfs")));
    mount.set_options(Some(options));
    mount
}

fn special(destination: &str, typ: &str, source: &str, options: &[&str]) -> Mount {
    let mut mount = Mount::default();
    mount.set_destination(PathBuf::from(destination));
    mount.set_typ(Some(typ.to_owned()));
    mount.set_source(Some(PathBuf::from(source)));
    mount.set_options(Some(options.iter().map(|o| (*o).to_owned()).collect()));
    mount
}

fn bind(path: &Path, writable: bool) -> Mount {
    bind_at(path, path, writable)
}

fn bind_at(path: &Path, destination: &Path, writable: bool) -> Mount {
    let mut mount = Mount::default();
    mount.set_destination(destination.to_path_buf());
    mount.set_typ(Some("bind".to_owned()));
    mount.set_source(Some(path.to_path_buf()));
    let access = if writable { "rw" } else { "ro" };
    mount.set_options(Some(
        ["rbind", access, "nosuid", "nodev"]
            .iter()
            .map(|o| (*o).to_owned())
            .collect(),
    ));
    mount
}

/// What goes over the root, in order: the kernel's file systems, the system folders, a private
/// `/tmp`, then the task's own binds and the masks, parents before children (a mask hides a folder
/// inside one the task reads, and the task's own folders inside a mask show through it again).
fn mounts(task: &Confinement) -> Vec<Mount> {
    // /tmp and /dev/shm count against the task's memory; the limit bounds them too.
    let scratch = (task.memory_limit_bytes > 0).then_some(task.memory_limit_bytes);
    let mut mounts = vec![
        special("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        tmpfs("/dev", "755", Some(65536 * 1024), &["strictatime"]),
        special(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
            ],
        ),
        tmpfs("/dev/shm", "1777", scratch, &["noexec"]),
        special(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        special(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", "ro"],
        ),
        special(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", "ro"],
        ),
    ];
    mounts.extend(task.system_dirs.iter().map(|dir| bind(dir, false)));
    mounts.push(tmpfs("/tmp", "1777", scratch, &[]));
    mounts.extend(
        task.placed
            .iter()
            .map(|(host, inside)| bind_at(host, inside, false)),
    );
    enum Item<'a> {
        Bind(&'a Path, bool),
        Mask(&'a Path),
    }
    let mut items: Vec<Item<'_>> = task
        .read_only
        .iter()
        .map(|p| Item::Bind(p, false))
        .chain(task.read_write.iter().map(|p| Item::Bind(p, true)))
        .collect();
    // A mask only where something the task sees would show the hidden path.
    let shown: Vec<&Path> = task
        .system_dirs
        .iter()
        .chain(&task.read_only)
        .chain(&task.read_write)
        .map(PathBuf::as_path)
        .collect();
    for hidden in &task.hidden {
        if shown.iter().any(|s| hidden.starts_with(s) && hidden != s) {
            items.push(Item::Mask(hidden));
        }
    }
    // Parents before children; at the same path a mask before a bind.
    items.sort_by_key(|item| match item {
        Item::Mask(p) => (p.as_os_str().len(), 0),
        Item::Bind(p, _) => (p.as_os_str().len(), 1),
    });
    for item in items {
        mounts.push(match item {
            Item::Bind(path, writable) => bind(path, writable),
            Item::Mask(path) => {
                // Owned by root, mode 755: the task cannot write in it; the runtime still makes
                // the mount points of the task's own folders inside it.
                let mut mask = tmpfs("/", "755", Some(1 << 20), &["noexec"]);
                mask.set_destination(path.to_path_buf());
                mask
            }
        });
    }
    mounts
}

fn resources(task: &Confinement) -> LinuxResources {
    let mut resources = LinuxResources::default();
    if task.memory_limit_bytes > 0 {
        let limit = i64::try_from(task.memory_limit_bytes).unwrap_or(i64::MAX);
        let mut memory = LinuxMemory::default();
        memory.set_limit(Some(limit));
        // Memory and swap together: no swap beyond the limit.
        memory.set_swap(Some(limit));
        resources.set_memory(Some(memory));
    }
    if task.cpus > 0 {
        let mut cpu = LinuxCpu::default();
        cpu.set_period(Some(100_000));
        cpu.set_quota(Some(i64::from(task.cpus) * 100_000));
        resources.set_cpu(Some(cpu));
    }
    let mut pids = LinuxPids::default();
    pids.set_limit(i64::from(task.pids_max));
    resources.set_pids(Some(pids));
    // Every device is refused but the runtime's defaults (null, zero, random, tty, …) and the task's.
    let mut rules = vec![{
        let mut deny = LinuxDeviceCgroup::default();
        deny.set_allow(false);
        deny.set_access(Some("rwm".to_owned()));
        deny
    }];
    for device in &task.devices {
        let mut allow = LinuxDeviceCgroup::default();
        allow.set_allow(true);
        allow.set_typ(Some(LinuxDeviceType::C));
        allow.set_major(Some(device.major));
        allow.set_minor(Some(device.minor));
        allow.set_access(Some("rwm".to_owned()));
        rules.push(allow);
    }
    resources.set_devices(Some(rules));
    resources
}

/// The task's `config.json`.
pub fn config(task: &Confinement) -> Result<Spec, OciSpecError> {
    let mut user = User::default();
    user.set_uid(task.uid);
    user.set_gid(task.gid);
    user.set_additional_gids(Some(Vec::new()));
    // Files it makes are its job's group's too (every task of the job writes the checkpoints).
    user.set_umask(Some(0o007));
    let none = Capabilities::new();
    let mut capabilities = LinuxCapabilities::default();
    capabilities.set_bounding(Some(none.clone()));
    capabilities.set_effective(Some(none.clone()));
    capabilities.set_inheritable(Some(none.clone()));
    capabilities.set_permitted(Some(none.clone()));
    capabilities.set_ambient(Some(none));
    let rlimit = |typ, value: u64| -> Result<PosixRlimit, OciSpecError> {
        PosixRlimitBuilder::default()
            .typ(typ)
            .hard(value)
            .soft(value)
            .build()
    };
    let mut process = Process::default();
    process.set_terminal(Some(false));
    process.set_user(user);
    process.set_args(Some(task.args.clone()));
    process.set_env(Some(
        task.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
    ));
    process.set_cwd(task.cwd.clone());
    process.set_capabilities(Some(capabilities));
    process.set_no_new_privileges(Some(true));
    process.set_rlimits(Some(vec![
        rlimit(PosixRlimitType::RlimitNofile, task.open_files)?,
        rlimit(PosixRlimitType::RlimitCore, 0)?,
    ]));
    // Under the host's memory pressure, tasks go before the executor and the server.
    process.set_oom_score_adj(Some(500));
    let mut namespaces = vec![
        LinuxNamespaceType::Pid,
        LinuxNamespaceType::Ipc,
        LinuxNamespaceType::Uts,
        LinuxNamespaceType::Mount,
    ];
    if task.layout == Layout::Unified {
        namespaces.push(LinuxNamespaceType::Cgroup);
    }
    let namespaces: Vec<LinuxNamespace> = namespaces
        .into_iter()
        .map(|typ| {
            let mut namespace = LinuxNamespace::default();
            namespace.set_typ(typ);
            namespace
        })
        .collect();
    let devices: Vec<LinuxDevice> = task
        .devices
        .iter()
        .map(|device| {
            let mut node = LinuxDevice::default();
            node.set_path(device.path.clone());
            node.set_typ(LinuxDeviceType::C);
            node.set_major(device.major);
            node.set_minor(device.minor);
            node.set_file_mode(Some(0o666));
            node.set_uid(Some(0));
            node.set_gid(Some(0));
            node
        })
        .collect();
    let mut linux = Linux::default();
    linux.set_namespaces(Some(namespaces));
    linux.set_resources(Some(resources(task)));
    linux.set_cgroups_path(Some(task.cgroups_path.clone()));
    linux.set_devices(Some(devices));
    linux.set_seccomp(Some(seccomp::profile()?));
    linux.set_masked_paths(Some(get_default_maskedpaths()));
    linux.set_readonly_paths(Some(get_default_readonly_paths()));
    let mut root = Root::default();
    root.set_path(task.rootfs.clone());
    root.set_readonly(Some(true));
    let mut spec = Spec::default();
    spec.set_version("1.0.2".to_owned());
    spec.set_root(Some(root));
    spec.set_mounts(Some(mounts(task)));
    spec.set_process(Some(process));
    spec.set_hostname(Some(task.hostname.clone()));
    spec.set_linux(Some(linux));
    Ok(spec)
}

#[cfg(test)]
mod tests;
