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

/// Runs `argv` and returns the shim's own exit code (0 once the status is recorded).
pub async fn run(status_file: &Path, argv: &[String]) -> i32 {
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
    let mut child = match tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .spawn()
    {
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
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    let mut watching = true;
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = match status {
                    Ok(status) => ShimStatus {
                        exit_code: status.code(),
                        signal: status.signal(),
                        spawn_error: None,
                    },
                    Err(err) => ShimStatus {
                        spawn_error: Some(format!("cannot wait for the command: {err}")),
                        ..ShimStatus::default()
                    },
                };
                kill_descendants();
                write_status(status_file, &status);
                return 0;
            }
            read = stdin.read(&mut buf), if watching => {
                if matches!(read, Ok(0) | Err(_)) {
                    // The executor is gone: take every descendant and the whole group down, this
                    // shim included.
                    kill_descendants();
                    let _ = killpg(getpgrp(), Signal::SIGKILL);
                    watching = false;
                }
            }
            Some(()) = async { match terminate.as_mut() { Some(t) => t.recv().await, None => std::future::pending().await } } => {}
            Some(()) = async { match checkpoint_requests.as_mut() { Some(s) => s.recv().await, None => std::future::pending().await } } => {}
        }
    }
}
