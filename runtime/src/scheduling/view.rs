//! The leader's view of the active jobs, live tasks and nodes: read whole when a term begins (and
//! after a failed round), then brought up to date each round from the rows written since the last
//! read ([`drover_store::ChangeStore`]), all in one snapshot. Every [`WHOLE_EVERY`] it is read whole
//! again beside the rounds, not in one: the round after that read ends takes it and brings it up to
//! date from where it was read. At 12,000 active jobs, 8,000 live tasks and 1,000 nodes, reading
//! them whole took a third of a settled round, and a round that did it was the slowest of the
//! minute (issue #55).

use crate::Runtime;
use drover_core::JobId;
use drover_store::{ActiveChanges, ChangeCursor, Job, Node, StoreResult, Task};
use std::cmp::Ordering;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How long the view goes between whole reads. Nothing is known to need them (rows are marked on
/// every write and never deleted); they bound what an unforeseen gap would cost, and refresh what
/// a job row shows of its tenant (its name).
const WHOLE_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub(super) struct ActiveView {
    /// Where the next read starts; `None` until the first whole read.
    cursor: Option<ChangeCursor>,
    /// When the view was last read whole, or a whole read began beside the rounds.
    whole_at: Option<tokio::time::Instant>,
    /// How long between whole reads ([`WHOLE_EVERY`]; tests shorten it).
    whole_every: Duration,
    /// The whole read under way beside the rounds, if one is.
    rereading: Option<JoinHandle<StoreResult<Whole>>>,
    /// Active jobs by id, with their documents.
    jobs: Vec<Job>,
    /// Live tasks in the store's order ([`drover_store::ExecStore::live_tasks`]').
    live: Vec<Task>,
    /// Every node, by name.
    nodes: Vec<Node>,
}

impl Default for ActiveView {
    fn default() -> Self {
        Self::rereading_every(WHOLE_EVERY)
    }
}

/// A whole read, sorted like the view, with the jobs' documents, and where it was read.
#[derive(Debug)]
pub(super) struct Whole {
    jobs: Vec<Job>,
    live: Vec<Task>,
    nodes: Vec<Node>,
    cursor: ChangeCursor,
}

impl Drop for ActiveView {
    /// A view dropped (a failed round's) stops its whole read: the next one reads whole anyway.
    fn drop(&mut self) {
        if let Some(rereading) = &self.rereading {
            rereading.abort();
        }
    }
}

impl ActiveView {
    pub(super) fn rereading_every(whole_every: Duration) -> Self {
        Self {
            cursor: None,
            whole_at: None,
            whole_every,
            rereading: None,
            jobs: Vec::new(),
            live: Vec::new(),
            nodes: Vec::new(),
        }
    }

    pub(super) fn jobs(&self) -> &[Job] {
        &self.jobs
    }

    pub(super) fn live(&self) -> &[Task] {
        &self.live
    }

    pub(super) fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Whether a whole read is under way beside the rounds.
    #[cfg(test)]
    pub(super) fn rereading(&self) -> Option<bool> {
        self.rereading.as_ref().map(JoinHandle::is_finished)
    }

    /// `whole`, read earlier, handed over as if it had just ended beside the rounds.
    #[cfg(test)]
    pub(super) fn hand_over(&mut self, whole: Whole) {
        self.rereading = Some(tokio::spawn(async move { Ok(whole) }));
    }

    /// Brings the view up to date; returns whether any job, task or node changed (always true
    /// after a whole read, and when one read beside the rounds is taken).
    pub(super) async fn refresh(&mut self, runtime: &Arc<Runtime>) -> StoreResult<bool> {
        let Some(mut since) = self.cursor else {
            let whole = read_whole(runtime).await?;
            self.take_whole(runtime, whole);
            return Ok(true);
        };
        let mut took_whole = false;
        if let Some(rereading) = self.rereading.take_if(|r| r.is_finished()) {
            match rereading.await {
                Ok(Ok(whole)) => {
                    since = whole.cursor;
                    self.jobs = whole.jobs;
                    self.live = whole.live;
                    self.nodes = whole.nodes;
                    took_whole = true;
                }
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "cannot read the active jobs, tasks and nodes whole; the view goes on from what changed");
                }
                Err(err) => {
                    tracing::warn!(error = %err, "the whole read of the active jobs, tasks and nodes ended early");
                }
            }
        } else if self.rereading.is_none()
            && self
                .whole_at
                .is_none_or(|at| at.elapsed() >= self.whole_every)
        {
            let runtime = runtime.clone();
            self.rereading = Some(tokio::spawn(async move { read_whole(&runtime).await }));
            self.whole_at = Some(tokio::time::Instant::now());
        }
        let changed = self.read_changes(runtime, since).await?;
        if took_whole {
            // Documents of jobs no longer active go; they were kept while only changes were read.
            let active: HashSet<JobId> = self.jobs.iter().map(|job| job.id).collect();
            runtime.keep_documents(|id| active.contains(id));
        }
        Ok(changed || took_whole)
    }

    fn take_whole(&mut self, runtime: &Runtime, whole: Whole) {
        let active: HashSet<JobId> = whole.jobs.iter().map(|job| job.id).collect();
        runtime.keep_documents(|id| active.contains(id));
        self.jobs = whole.jobs;
        self.live = whole.live;
        self.nodes = whole.nodes;
        self.cursor = Some(whole.cursor);
        self.whole_at = Some(tokio::time::Instant::now());
    }

    /// Merges what changed since `since` into the view; returns whether anything did.
    async fn read_changes(&mut self, runtime: &Runtime, since: ChangeCursor) -> StoreResult<bool> {
        let ActiveChanges {
            jobs,
            mut tasks,
            mut nodes,
            cursor,
            ..
        } = runtime.store.active_changes(Some(since)).await?;
        tasks.sort_by(task_order);
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let changed = !jobs.is_empty() || !tasks.is_empty() || !nodes.is_empty();
        let (mut changes, ended): (Vec<Job>, Vec<Job>) = jobs.into_iter().partition(is_active);
        runtime.attach_documents(&mut changes).await?;
        if !ended.is_empty() {
            let ended: HashSet<JobId> = ended.iter().map(|job| job.id).collect();
            runtime.keep_documents(|id| !ended.contains(id));
        }
        changes.extend(ended);
        changes.sort_by_key(|job| job.id);
        // Rows written around the cursor come again: a whole-row replacement is the same row.
        self.jobs = merge(
            std::mem::take(&mut self.jobs),
            changes,
            |a, b| a.id.cmp(&b.id),
            is_active,
        );
        self.live = merge(std::mem::take(&mut self.live), tasks, task_order, |task| {
            !task.state.is_final()
        });
        self.nodes = merge(
            std::mem::take(&mut self.nodes),
            nodes,
            |a, b| a.name.cmp(&b.name),
            |_| true,
        );
        self.cursor = Some(cursor);
        Ok(changed)
    }
}

/// Every active job (with its document), live task and node, in one snapshot.
pub(super) async fn read_whole(runtime: &Runtime) -> StoreResult<Whole> {
    let ActiveChanges {
        whole,
        mut jobs,
        mut tasks,
        mut nodes,
        cursor,
    } = runtime.store.active_changes(None).await?;
    debug_assert!(whole, "a read without a cursor is whole");
    tasks.sort_by(task_order);
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    jobs.sort_by_key(|job| job.id);
    runtime.attach_documents(&mut jobs).await?;
    Ok(Whole {
        jobs,
        live: tasks,
        nodes,
        cursor,
    })
}

fn is_active(job: &Job) -> bool {
    matches!(
        job.state,
        drover_core::JobState::Queued
            | drover_core::JobState::Starting
            | drover_core::JobState::Running
            | drover_core::JobState::Rescaling
    )
}

/// The store's order of tasks: by job, generation, role (descending) and index.
fn task_order(a: &Task, b: &Task) -> Ordering {
    (a.key.job_id, a.key.generation)
        .cmp(&(b.key.job_id, b.key.generation))
        .then_with(|| b.key.role.as_str().cmp(a.key.role.as_str()))
        .then_with(|| a.key.index.cmp(&b.key.index))
}

/// `old` with each of `changes` (sorted like it by `order`, one per key) in place of the element of
/// the same key, or added where there was none; a change that `keep` refuses removes its key.
/// Moves the elements, copies none: linear in both.
fn merge<T>(
    old: Vec<T>,
    changes: Vec<T>,
    order: impl Fn(&T, &T) -> Ordering,
    keep: impl Fn(&T) -> bool,
) -> Vec<T> {
    if changes.is_empty() {
        return old;
    }
    let mut merged = Vec::with_capacity(old.len() + changes.len());
    let mut old = old.into_iter().peekable();
    for change in changes {
        while let Some(kept) = old.next_if(|o| order(o, &change) == Ordering::Less) {
            merged.push(kept);
        }
        old.next_if(|o| order(o, &change) == Ordering::Equal);
        if keep(&change) {
            merged.push(change);
        }
    }
    merged.extend(old);
    merged
}

#[cfg(test)]
mod tests {
    use super::merge;

    #[test]
    fn merging_replaces_adds_and_removes_by_key() {
        let order = |a: &(u32, char), b: &(u32, char)| a.0.cmp(&b.0);
        let old = vec![(1, 'a'), (3, 'a'), (5, 'a'), (7, 'a')];
        // 0 added before all, 3 replaced, 4 added between, 5 removed, 9 added after all.
        let changes = vec![(0, 'b'), (3, 'b'), (4, 'b'), (5, 'x'), (9, 'b')];
        let merged = merge(old, changes, order, |e| e.1 != 'x');
        assert_eq!(
            merged,
            vec![(0, 'b'), (1, 'a'), (3, 'b'), (4, 'b'), (7, 'a'), (9, 'b')]
        );
        // A removal of a key not there removes nothing.
        let merged = merge(merged, vec![(2, 'x')], order, |e| e.1 != 'x');
        assert_eq!(merged.len(), 6);
        assert_eq!(
            merge(Vec::new(), vec![(1, 'a')], order, |_| true),
            vec![(1, 'a')]
        );
    }
}
