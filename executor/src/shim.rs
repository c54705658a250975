//! The task shim: the first process of every task, between the executor and the user's command.
//!
//! The executor starts the shim as the leader of a new process group, with a pipe on its stdin that
//! only the executor holds. The shim starts the command in the same group and waits. If the pipe
//! reaches end-of-file, the executor is gone (even by `kill -9`): the shim kills the whole group, so no
//! task outlives its executor. When the command exits the shim writes how (status code or signal) to a
//! status file and exits. SIGTERM sent to the group reaches the command; the shim ignores it and keeps
//! waiting, so the command can checkpoint within its grace period.
//!
//! The shim is also a child subreaper: a descendant that leaves the process group (`setsid cmd &`)
//! is re-parented to it rather than to init, and killed with the rest when the command ends or the
//! executor dies.
//!
//! In a sandbox (`--sandboxed`, see `crate::sandbox`) the shim is the sandbox's first process, PID 1
//! of its PID namespace, and the executor's signals reach it through the runtime rather than the
//! command directly: it starts the command in a process group of its own (each of a launcher's
//! processes in its own) and passes stop and checkpoint requests (`SIGTERM`, `SIGUSR1`) on to them, reaps the orphans that are re-parented
//! to it, and ends the sandbox by exiting (the kernel then kills everything left in the namespace).
//! When the command fails it asks its own cgroup whether the out-of-memory killer struck, and records
//! so.

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgrp};
use serde::{Deserialize, Serialize};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use tokio::io::AsyncReadExt;

/// How the command ended, as the shim records it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShimStatus {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The command could not be started.
    pub spawn_error: Option<String>,
    /// Its sandbox's memory limit killed it (the out-of-memory killer struck in its cgroup).
    #[serde(default)]
    pub out_of_memory: bool,
}

/// Where a sandboxed task sees its own cgroup.
const OWN_CGROUP: &str = "/sys/fs/cgroup";

/// Reaps the shim's children that are not the command's processes (orphans re-parented to it),
/// without waiting.
fn reap_orphans(command: &[i32]) {
    for pid in children() {
        if !command.contains(&pid) {
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}

fn write_status(path: &Path, status: &ShimStatus) {
    let tmp = path.with_extension("tmp");
    let written = serde_json::to_vec(status)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&tmp, bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(err) = written {
        eprintln!("drover task shim: cannot write {}: {err}", path.display());
    }
}

/// The shim's children (its command, and descendants re-parented to it), from every thread's list.
fn children() -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// Kills every descendant, including those that left the process group, and reaps them.
fn kill_descendants() {
    for _ in 0..100 {
        while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            if status == WaitStatus::StillAlive {
                break;
            }
        }
        let pids = children();
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// How the shim was started.
#[derive(Debug, Clone, Copy)]
pub struct ShimMode {
    /// The shim is a sandbox's first process (see the module's header).
    pub sandboxed: bool,
    /// The shim is a task Pod's first process: no executor pipe to watch, and its own exit status
    /// is the command's (the executor reads the Pod's).
    pub in_pod: bool,
    /// How many copies of the command to start (a `torch` launcher's one per GPU): each gets its own
    /// `LOCAL_RANK` and `RANK` (the shim's `RANK` plus its local rank); one failing stops the others.
    pub processes: u32,
}

/// How long the other processes of a task get to exit after one of them failed, before they are
/// killed (torchrun's agent waits 30 s).
const PEERS_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

fn status_of(waited: std::io::Result<std::process::ExitStatus>) -> ShimStatus {
    match waited {
        Ok(status) => ShimStatus {
            exit_code: status.code(),
            signal: status.signal(),
            ..ShimStatus::default()
        },
        Err(err) => ShimStatus {
            spawn_error: Some(format!("cannot wait for the command: {err}")),
            ..ShimStatus::default()
        },
    }
}

/// The shim's own exit code: 0 once the status is recorded, or in a Pod the command's.
fn finish(status_file: Option<&Path>, status: &ShimStatus, mode: ShimMode) -> i32 {
    if let Some(path) = status_file {
        write_status(path, status);
    }
    if let Some(error) = &status.spawn_error {
        eprintln!("drover task shim: {error}");
    }
    if !mode.in_pod {
        return 0;
    }
    match (status.exit_code, status.signal) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 127,
    }
}

/// Runs `argv` (`mode.processes` copies of it) and returns the shim's own exit code (see [`finish`]).
pub async fn run(status_file: Option<&Path>, argv: &[String], mode: ShimMode) -> i32 {
    let Some((program, args)) = argv.split_first() else {
        let status = ShimStatus {
            spawn_error: Some("empty argv".to_owned()),
            ..ShimStatus::default()
        };
        return finish(status_file, &status, mode);
    };
    // In a sandbox or a Pod the shim is the first process: the command leads a group of its own
    // and the shim passes signals on to it.
    let first_process = mode.sandboxed || mode.in_pod;
    if let Err(err) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!("drover task shim: cannot become a subreaper: {err}");
    }
    // Installing a handler keeps SIGTERM from killing the shim; the command gets its own copy.
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => Some(signal),
            Err(err) => {
                eprintln!("drover task shim: cannot handle SIGTERM: {err}");
                None
            }
        };
    // SIGUSR1 ("checkpoint now") is for the command; the shim only has to survive it.
    let mut checkpoint_requests =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).ok();
    if mode.sandboxed {
        // Files the task makes are its job's group's too (the runtime sets it; older ones do not).
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o007));
    }
    let processes = mode.processes.max(1);
    let base_rank: u32 = std::env::var("RANK")
        .ok()
        .and_then(|rank| rank.parse().ok())
        .unwrap_or(0);
    // Each process's end arrives here with its local rank.
    let (ended_tx, mut ended) = tokio::sync::mpsc::channel(processes as usize);
    // As the first process, each of the command's processes leads a group of its own (not one
    // group led by the first: a process that exits at once would leave the next nothing to join).
    let mut pids = Vec::with_capacity(processes as usize);
    // Signals one process, or (as the first process) its whole group.
    let signal_process = |pid: i32, signal: Signal| {
        let _ = if first_process {
            killpg(Pid::from_raw(pid), signal)
        } else {
            kill(Pid::from_raw(pid), signal)
        };
    };
    for local in 0..processes {
        let mut command = tokio::process::Command::new(program);
        command.args(args).stdin(std::process::Stdio::null());
        if processes > 1 {
            let rank = (base_rank + local).to_string();
            command
                .env("LOCAL_RANK", local.to_string())
                .env("RANK", &rank)
                .env("ROLE_RANK", &rank);
        }
        if first_process {
            command.process_group(0);
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) => {
                for &pid in &pids {
                    signal_process(pid, Signal::SIGKILL);
                }
                kill_descendants();
                let status = ShimStatus {
                    spawn_error: Some(format!("cannot run `{program}`: {err}")),
                    ..ShimStatus::default()
                };
                return finish(status_file, &status, mode);
            }
        };
        let pid = child.id().map_or(0, |pid| pid as i32);
        pids.push(pid);
        let ended_tx = ended_tx.clone();
        tokio::spawn(async move {
            let _ = ended_tx.send((local, child.wait().await)).await;
        });
    }
    drop(ended_tx);
    // The command's processes lead their groups; the executor's signals come to the shim.
    let pass_on = |signal: Signal| {
        if first_process {
            for &pid in &pids {
                signal_process(pid, signal);
            }
        }
    };
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    let mut watching = !mode.in_pod;
    let mut reaper = tokio::time::interval(std::time::Duration::from_secs(5));
    let mut running = processes;
    // The first failure (or the last success) is the task's status.
    let mut outcome: Option<ShimStatus> = None;
    let mut kill_at: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            Some((_local, waited)) = ended.recv() => {
                running -= 1;
                let status = status_of(waited);
                let failed = status.exit_code != Some(0);
                if outcome.as_ref().is_none_or(|o| o.exit_code == Some(0)) {
                    outcome = Some(status);
                }
                if failed && running > 0 && kill_at.is_none() {
                    // One process failed: the others cannot go on without it (torchrun stops the
                    // whole group too). They get SIGTERM, and SIGKILL after a grace period.
                    eprintln!("drover task shim: a process failed; stopping the other {running}");
                    for &pid in &pids {
                        signal_process(pid, Signal::SIGTERM);
                    }
                    kill_at = Some(tokio::time::Instant::now() + PEERS_GRACE);
                }
                if running == 0 {
                    let mut status = outcome.take().unwrap_or_default();
                    // A command that failed after the out-of-memory killer struck in its sandbox
                    // (itself, or a child whose death it passed on: `sh -c` exits 137 for its killed
                    // python).
                    if mode.sandboxed && status.exit_code != Some(0) {
                        status.out_of_memory = crate::sandbox::cgroups::oom_kills(Path::new(OWN_CGROUP))
                            .is_some_and(|kills| kills > 0);
                    }
                    kill_descendants();
                    return finish(status_file, &status, mode);
                }
            }
            () = async { match kill_at { Some(at) => tokio::time::sleep_until(at).await, None => std::future::pending().await } } => {
                for &pid in &pids {
                    signal_process(pid, Signal::SIGKILL);
                }
                kill_at = None;
            }
            read = stdin.read(&mut buf), if watching => {
                if matches!(read, Ok(0) | Err(_)) {
                    // The executor is gone: take every descendant and the whole group down, this
                    // shim included. As a sandbox's first process the shim cannot be killed from
                    // inside: it exits, and the kernel ends what is left of the sandbox.
                    kill_descendants();
                    if first_process {
                        return 1;
                    }
                    let _ = killpg(getpgrp(), Signal::SIGKILL);
                    watching = false;
                }
            }
            Some(()) = async { match terminate.as_mut() { Some(t) => t.recv().await, None => std::future::pending().await } } => {
                pass_on(Signal::SIGTERM);
            }
            Some(()) = async { match checkpoint_requests.as_mut() { Some(s) => s.recv().await, None => std::future::pending().await } } => {
                pass_on(Signal::SIGUSR1);
            }
            _ = reaper.tick(), if first_process => reap_orphans(&pids),
        }
    }
}
