//! What the emulated executors saw, shared by all of them and read by the run: each job's first
//! task start, the nodes registered, the tasks running, and the errors.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::time::Instant;

/// What the emulated executors saw, shared by all of them.
#[derive(Debug, Default)]
pub struct Tally {
    /// Each job's first task start.
    pub(super) starts: Mutex<HashMap<String, Instant>>,
    pub(super) registered: Mutex<HashSet<String>>,
    pub(super) running: AtomicUsize,
    pub(super) sessions_broken: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) stopped: AtomicU64,
    pub(super) errors: Mutex<Vec<String>>,
}

impl Tally {
    pub(super) fn started(&self, key: &drover_proto::TaskKey) {
        self.running.fetch_add(1, Ordering::Relaxed);
        lock(&self.starts)
            .entry(key.job_id.clone())
            .or_insert_with(Instant::now);
    }

    pub(super) fn ended(&self) {
        self.running.fetch_sub(1, Ordering::Relaxed);
    }

    pub(super) fn stopped(&self) {
        self.stopped.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn registered(&self, node: &str) {
        lock(&self.registered).insert(node.to_owned());
    }

    pub(super) fn session_broke(&self, node: &str, err: &anyhow::Error) {
        self.sessions_broken.fetch_add(1, Ordering::Relaxed);
        self.error(format!("{node}: session ended: {err:#}"));
    }

    pub(super) fn refused(&self, reason: &str) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        self.error(format!("the server refused a report: {reason}"));
    }

    /// Keeps the first few errors' words; all are counted by their kinds.
    pub(super) fn error(&self, text: String) {
        let mut errors = lock(&self.errors);
        if errors.len() < 10 {
            errors.push(text);
        }
    }

    pub(super) fn started_at(&self, job: &str) -> Option<Instant> {
        lock(&self.starts).get(job).copied()
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
