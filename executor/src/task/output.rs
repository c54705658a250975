//! A task's stdout and stderr: read line by line (bounded), sent to the server in batches, the last
//! lines kept for the exit report, and contract lines turned into metrics and checkpoint records.

use super::report::{TAIL_LINES, message, now_ms};
use super::uploads::Records;
use drover_proto as pb;
use pb::executor_message::Body;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

/// Lines longer than this are cut.
const MAX_LINE_BYTES: usize = 16 * 1024;
/// Log lines sent in one message at most.
const LOG_BATCH: usize = 128;
/// How long a partial batch of log lines waits before it is sent.
const LOG_FLUSH: Duration = Duration::from_millis(200);

/// A contract line: `{"drover": "metrics", "step": N, "values": {…}}` or
/// `{"drover": "checkpoint", "step": N, "path": "…"}`.
#[derive(Debug, serde::Deserialize)]
#[serde(tag = "drover", rename_all = "lowercase")]
enum ContractLine {
    Metrics {
        step: u64,
        values: std::collections::BTreeMap<String, f64>,
    },
    Checkpoint {
        step: u64,
        path: String,
    },
}

fn size_of(path: &Path) -> u64 {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::read_dir(path)
            .map(|entries| entries.flatten().map(|e| size_of(&e.path())).sum())
            .unwrap_or(0),
        Ok(meta) => meta.len(),
        Err(_) => 0,
    }
}

/// A checkpoint announcement, checked: it must name something that exists inside the directory the
/// task was given.
fn checkpoint_record(
    key: &pb::TaskKey,
    dir: &Path,
    step: u64,
    path: &str,
) -> Result<pb::Checkpoint, String> {
    let candidate = if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else {
        dir.join(path)
    };
    let resolved = candidate
        .canonicalize()
        .map_err(|err| format!("checkpoint {} does not exist: {err}", candidate.display()))?;
    let root = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    if !resolved.starts_with(&root) || resolved == root {
        return Err(format!(
            "checkpoint {} is not inside DROVER_CHECKPOINT_DIR",
            resolved.display()
        ));
    }
    Ok(pb::Checkpoint {
        task: Some(key.clone()),
        step,
        size_bytes: size_of(&resolved),
        path: dir
            .join(resolved.strip_prefix(&root).unwrap_or(&resolved))
            .display()
            .to_string(),
    })
}

/// Turns one output stream of a task into log batches, metrics and checkpoint records.
struct Output {
    stream: &'static str,
    key: pb::TaskKey,
    /// Set for stdout, the stream contract lines are read from: where checkpoints must be, and
    /// where their records go.
    checkpoints: Option<(PathBuf, Records)>,
    events: mpsc::Sender<pb::ExecutorMessage>,
    tail: Arc<Mutex<VecDeque<String>>>,
    batch: Vec<pb::LogLine>,
}

impl Output {
    async fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let lines = std::mem::take(&mut self.batch);
        let _ = self
            .events
            .send(message(Body::Logs(pb::Logs {
                task: Some(self.key.clone()),
                lines,
            })))
            .await;
    }

    async fn line(&mut self, raw: &mut Vec<u8>) {
        while raw.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            raw.pop();
        }
        raw.truncate(MAX_LINE_BYTES);
        raw.retain(|b| *b != 0);
        let line = String::from_utf8_lossy(raw).into_owned();
        raw.clear();
        if let Ok(mut tail) = self.tail.lock() {
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line.clone());
        }
        if let Some(dir) = self.checkpoints.as_ref().map(|(dir, _)| dir.clone())
            && line.starts_with('{')
            && let Ok(contract) = serde_json::from_str::<ContractLine>(&line)
        {
            match contract {
                ContractLine::Metrics { step, values } => {
                    let _ = self
                        .events
                        .send(message(Body::Metrics(pb::Metrics {
                            task: Some(self.key.clone()),
                            step,
                            values: values.into_iter().collect(),
                            time_ms: now_ms(),
                        })))
                        .await;
                }
                ContractLine::Checkpoint { step, path } => {
                    // Lines written before the announcement are recorded before it.
                    self.flush().await;
                    let key = self.key.clone();
                    let record = tokio::task::spawn_blocking(move || {
                        checkpoint_record(&key, &dir, step, &path)
                    })
                    .await
                    .unwrap_or_else(|_| Err("the check of the checkpoint failed".to_owned()));
                    match record {
                        Ok(record) => match &self.checkpoints {
                            Some((_, Records::Upload(uploads))) => {
                                let _ = uploads.send(record).await;
                            }
                            _ => {
                                let _ = self.events.send(message(Body::Checkpoint(record))).await;
                            }
                        },
                        Err(reason) => self.batch.push(pb::LogLine {
                            stream: "stderr".to_owned(),
                            line: format!("drover: ignored a checkpoint announcement: {reason}"),
                            time_ms: now_ms(),
                        }),
                    }
                }
            }
        }
        self.batch.push(pb::LogLine {
            stream: self.stream.to_owned(),
            line,
            time_ms: now_ms(),
        });
        if self.batch.len() >= LOG_BATCH {
            self.flush().await;
        }
    }
}

pub(crate) async fn read_output(
    output: impl AsyncRead + Unpin,
    stream: &'static str,
    key: pb::TaskKey,
    checkpoints: Option<(PathBuf, Records)>,
    events: mpsc::Sender<pb::ExecutorMessage>,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    let mut reader = output;
    let mut out = Output {
        stream,
        key,
        checkpoints,
        events,
        tail,
        batch: Vec::new(),
    };
    // Lines end at `\n` or `\r` (progress bars); a line is cut at MAX_LINE_BYTES and the rest of it
    // dropped, so memory stays bounded whatever the task writes.
    let mut chunk = vec![0u8; 8192];
    let mut line = Vec::with_capacity(256);
    let mut previous = 0u8;
    loop {
        // `read` is cancel-safe: a timeout loses nothing.
        let n = match tokio::time::timeout(LOG_FLUSH, reader.read(&mut chunk)).await {
            Err(_) => {
                out.flush().await;
                continue;
            }
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => n,
        };
        for &byte in &chunk[..n] {
            let crlf = byte == b'\n' && previous == b'\r';
            previous = byte;
            if byte == b'\n' || byte == b'\r' {
                if !line.is_empty() || (byte == b'\n' && !crlf) {
                    out.line(&mut line).await;
                }
            } else if line.len() < MAX_LINE_BYTES {
                line.push(byte);
            }
        }
    }
    if !line.is_empty() {
        out.line(&mut line).await;
    }
    out.flush().await;
}
