//! A fake kubelet for the fake API server: a Pod created with a `nodeName` is run as a local process
//! (its container's command, environment and working directory; no image, no isolation, no limits:
//! the tests check the Pod's spec for those), its output kept as the Pod's log, its status updated as
//! a kubelet would (`Running`, then `Succeeded` or `Failed` with the exit code), and a deleted Pod's
//! process sent SIGTERM, then SIGKILL after the grace period.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncReadExt;
use tokio::sync::Notify;

/// One Pod's process and what it wrote.
#[derive(Debug, Default)]
pub struct Running {
    /// stdout and stderr, interleaved as they came.
    pub log: Mutex<Vec<u8>>,
    pub finished: Mutex<bool>,
    pub changed: Notify,
    pub pid: Mutex<Option<u32>>,
}

/// The kubelet's Pods: (namespace, name) → its process.
#[derive(Debug, Default)]
pub struct Kubelet {
    pub pods: Mutex<HashMap<(String, String), Arc<Running>>>,
}

/// What a status change of a Pod says, for the API server to store.
#[derive(Debug)]
pub enum PodState {
    Running,
    Exited {
        code: i32,
        signal: Option<i32>,
    },
    /// The command could not start.
    Unstartable(String),
}

impl Kubelet {
    /// Runs the Pod `pod` (its first container); `report` stores each change of its status.
    pub fn run(
        self: &Arc<Self>,
        namespace: &str,
        pod: &serde_json::Value,
        report: impl Fn(PodState) + Send + Sync + 'static,
    ) {
        let name = pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let container = &pod["spec"]["containers"][0];
        let mut argv: Vec<String> = container["command"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(container["args"].as_array().into_iter().flatten())
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect();
        let env: Vec<(String, String)> = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| {
                Some((
                    e["name"].as_str()?.to_owned(),
                    e["value"].as_str()?.to_owned(),
                ))
            })
            .collect();
        let workdir = container["workingDir"].as_str().map(str::to_owned);
        let running = Arc::new(Running::default());
        self.pods
            .lock()
            .unwrap()
            .insert((namespace.to_owned(), name), running.clone());
        if argv.is_empty() {
            report(PodState::Unstartable("no command".to_owned()));
            return;
        }
        let program = argv.remove(0);
        let mut command = tokio::process::Command::new(&program);
        command
            .args(&argv)
            .envs(env)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0);
        if let Some(dir) = workdir.filter(|d| std::path::Path::new(d).is_dir()) {
            command.current_dir(dir);
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) => {
                report(PodState::Unstartable(format!(
                    "cannot run {program}: {err}"
                )));
                return;
            }
        };
        *running.pid.lock().unwrap() = child.id();
        report(PodState::Running);
        let readers: Vec<_> = [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
        ]
        .into_iter()
        .flatten()
        .map(|mut stream| {
            let running = running.clone();
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buffer).await {
                    if n == 0 {
                        break;
                    }
                    running.log.lock().unwrap().extend_from_slice(&buffer[..n]);
                    running.changed.notify_waiters();
                }
            })
        })
        .collect();
        tokio::spawn(async move {
            let status = child.wait().await;
            for reader in readers {
                let _ = reader.await;
            }
            use std::os::unix::process::ExitStatusExt;
            let (code, signal) = match status {
                Ok(status) => (
                    status.code().unwrap_or(128 + status.signal().unwrap_or(9)),
                    status.signal(),
                ),
                Err(_) => (255, None),
            };
            *running.finished.lock().unwrap() = true;
            running.changed.notify_waiters();
            report(PodState::Exited { code, signal });
        });
    }

    /// Stops a deleted Pod's process: SIGTERM, then SIGKILL after `grace_s`.
    pub fn stop(&self, namespace: &str, name: &str, grace_s: u64) {
        let Some(running) = self
            .pods
            .lock()
            .unwrap()
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
        else {
            return;
        };
        let Some(pid) = *running.pid.lock().unwrap() else {
            return;
        };
        let group = nix::unistd::Pid::from_raw(pid as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM);
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(grace_s);
            while !*running.finished.lock().unwrap() {
                if tokio::time::Instant::now() >= deadline {
                    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        });
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Running>> {
        self.pods
            .lock()
            .unwrap()
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }
}

/// A Pod's status as a kubelet writes it.
pub fn status_of(state: &PodState) -> serde_json::Value {
    use serde_json::json;
    match state {
        PodState::Running => json!({
            "phase": "Running",
            "containerStatuses": [{"name": "task", "ready": true, "restartCount": 0, "image": "", "imageID": "",
                                   "state": {"running": {"startedAt": "2026-11-22T00:00:00Z"}}}]
        }),
        PodState::Exited { code, signal } => json!({
            "phase": if *code == 0 { "Succeeded" } else { "Failed" },
            "containerStatuses": [{"name": "task", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                                   "state": {"terminated": {
                                       "exitCode": code,
                                       "signal": signal,
                                       "reason": if *code == 0 { "Completed" } else { "Error" },
                                   }}}]
        }),
        PodState::Unstartable(message) => json!({
            "phase": "Pending",
            "containerStatuses": [{"name": "task", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                                   "state": {"waiting": {"reason": "CreateContainerError", "message": message}}}]
        }),
    }
}
