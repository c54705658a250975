//! What changed among jobs, tasks and nodes since a cursor: the scheduling loop keeps its own view
//! of the active jobs, live tasks and nodes and brings it up to date each round from the rows
//! written since the last, instead of reading all of them again (12,000 jobs, 8,000 tasks and
//! 1,000 nodes took a third of a settled round at fleet scale, issue #55).
//!
//! Every insert or update of a job, task or node marks the row with its writer: on Postgres the
//! writing transaction's id (a trigger sets `changed = pg_current_xact_id()`), on SQLite a counter
//! bumped by triggers under the database's single write lock. A read is one snapshot; the cursor it
//! returns is where every transaction it could not see begins (Postgres: the snapshot's `xmin`, the
//! oldest transaction still running; SQLite: one past the last counter value committed), so a
//! transaction that commits after the read, however early it started, is in the next read. Rows
//! are never deleted (jobs and tasks end in a final state; nodes stay), so a read from a cursor misses nothing.

use super::{Job, Node, StoreResult, Task};
use async_trait::async_trait;

/// Where a view read by [`ChangeStore::active_changes`] stands; opaque, and only meaningful to the
/// store that returned it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChangeCursor(pub(crate) i64);

/// Rows written since a cursor, or every active job, live task and node when read without one.
#[derive(Debug, Clone, Default)]
pub struct ActiveChanges {
    /// Read without a cursor: `jobs` and `tasks` are the whole view, not changes to it.
    pub whole: bool,
    /// Jobs (without documents) changed since the cursor, in any state, by id; or every active
    /// job when whole.
    pub jobs: Vec<Job>,
    /// Tasks changed since the cursor, in any state, in [`super::ExecStore::live_tasks`]' order;
    /// or every live task when whole.
    pub tasks: Vec<Task>,
    /// Nodes changed since the cursor, by name; or every node when whole (nodes are never
    /// deleted).
    pub nodes: Vec<Node>,
    /// Where the next read starts.
    pub cursor: ChangeCursor,
}

/// The reads of what changed, for the scheduling loop's view.
#[async_trait]
pub trait ChangeStore: Send + Sync {
    /// Every job, task and node written since `since` (rows written at or a little before it may come
    /// again: applying them twice changes nothing), read in one snapshot; without a cursor, every
    /// active job, live task and node. A row written by a transaction still open now comes in a later read.
    async fn active_changes(&self, since: Option<ChangeCursor>) -> StoreResult<ActiveChanges>;
}
