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
//! command directly: it starts the command in a process group of its own and passes stop and
//! checkpoint requests (`SIGTERM`, `SIGUSR1`) on to that group, reaps the orphans that are re-parented
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

/// Reaps the shim's children that are not the command (orphans re-parented to it), without waiting.
fn reap_orphans(command: Option<u32>) {
    for pid in children() {
        if Some(pid as u32) != command {
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

/// Runs `argv` and returns the shim's own exit code (0 once the status is recorded). `sandboxed`: the
/// shim is a sandbox's first process (see the module's header).
pub async fn run(status_file: &Path, argv: &[String], sandboxed: bool) -> i32 {
    let Some((program, args)) = argv.split_first() else {
        write_status(
            status_file,
            &ShimStatus {
                spawn_error: Some("empty argv".to_owned()),
                ..ShimStatus::default()
            },
        );
        return 0;
    };
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
    if sandboxed {
        // Files the task makes are its job's group's too (the runtime sets it; older ones do not).
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o007));
    }
    let mut command = tokio::process::Command::new(program);
    command.args(args).stdin(std::process::Stdio::null());
    if sandboxed {
        command.process_group(0);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            write_status(
                status_file,
                &ShimStatus {
                    spawn_error: Some(format!("cannot run `{program}`: {err}")),
                    ..ShimStatus::default()
                },
            );
            return 0;
        }
    };
    let command_pid = child.id();
    // In a sandbox the command leads its own group; the executor's signals come to the shim.
    let pass_on = |signal: Signal| {
        if sandboxed && let Some(pid) = command_pid {
            let _ = killpg(Pid::from_raw(pid as i32), signal);
        }
    };
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    let mut watching = true;
    let mut reaper = tokio::time::interval(std::time::Duration::from_secs(5));
    loop {
        tokio::select! {
            status = child.wait() => {
                let mut status = match status {
                    Ok(status) => ShimStatus {
                        exit_code: status.code(),
                        signal: status.signal(),
                        ..ShimStatus::default()
                    },
                    Err(err) => ShimStatus {
                        spawn_error: Some(format!("cannot wait for the command: {err}")),
                        ..ShimStatus::default()
                    },
                };
                // A command that failed after the out-of-memory killer struck in its sandbox (itself,
                // or a child whose death it passed on: `sh -c` exits 137 for its killed python).
                if sandboxed && status.exit_code != Some(0) {
                    status.out_of_memory = crate::sandbox::cgroups::oom_kills(Path::new(OWN_CGROUP))
                        .is_some_and(|kills| kills > 0);
                }
                kill_descendants();
                write_status(status_file, &status);
                return 0;
            }
            read = stdin.read(&mut buf), if watching => {
                if matches!(read, Ok(0) | Err(_)) {
                    // The executor is gone: take every descendant and the whole group down, this
                    // shim included. As a sandbox's first process the shim cannot be killed from
                    // inside: it exits, and the kernel ends what is left of the sandbox.
                    kill_descendants();
                    if sandboxed {
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
            _ = reaper.tick(), if sandboxed => reap_orphans(command_pid),
        }
    }
}
