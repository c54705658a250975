//! Reports applied in order and exactly once per executor run (the contract's Delivery): the applier
//! of one executor session, and what this replica remembers of each executor incarnation — the
//! highest report it applied, and how often one report failed to apply.
//!
//! An executor numbers every task report and keeps it until the server answers `Applied` with a
//! number at or past it. The applier answers only once a report is in the store, so a report lost
//! with a broken stream, or one the database could not take (it was restarting), is sent again in
//! the executor's next session: no exit, checkpoint or log line is lost or reordered. When the
//! database cannot take a report, the applier ends the session rather than apply the ones behind it
//! out of order. A report that fails [`MAX_TRIES`] times is dropped, so one report the store always
//! refuses cannot keep a node reconnecting for ever.
//!
//! The memory is this replica's (what it applied stays applied when another replica leads for a
//! while): after a server restart, or with a replica that never led, an executor may send a report
//! that was applied just before; exits are applied idempotently, and at worst a log line or a
//! metric sample is stored twice.

use crate::Runtime;
use drover_proto as pb;
use drover_store::StoreError;
use pb::executor_message::Body;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Tries at applying one report before it is dropped.
pub const MAX_TRIES: u32 = 5;
/// Reports applied between two `Applied` answers at most (one also goes whenever the queue is
/// empty).
const ACK_EVERY: u32 = 64;

#[derive(Debug, Default, Clone)]
struct Incarnation {
    id: String,
    /// The highest sequence number applied.
    through: u64,
    /// The report that failed last, and how often.
    failing: u64,
    failures: u32,
}

/// Per node: what was applied of its executor's current incarnation.
#[derive(Debug, Default)]
pub struct Delivery {
    nodes: Mutex<HashMap<String, Incarnation>>,
}

impl Delivery {
    fn nodes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Incarnation>> {
        self.nodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The highest report of `incarnation` applied on `node` (0 for a new incarnation, which
    /// replaces what was remembered of the node's previous one).
    pub fn applied_through(&self, node: &str, incarnation: &str) -> u64 {
        let mut nodes = self.nodes();
        let entry = nodes.entry(node.to_owned()).or_default();
        if entry.id != incarnation {
            *entry = Incarnation {
                id: incarnation.to_owned(),
                ..Incarnation::default()
            };
        }
        entry.through
    }

    fn set_applied(&self, node: &str, incarnation: &str, seq: u64) {
        if let Some(entry) = self.nodes().get_mut(node)
            && entry.id == incarnation
        {
            entry.through = entry.through.max(seq);
        }
    }

    /// Counts a failure to apply report `seq`; returns how many there have been in a row.
    fn failed(&self, node: &str, incarnation: &str, seq: u64) -> u32 {
        let mut nodes = self.nodes();
        let Some(entry) = nodes.get_mut(node).filter(|e| e.id == incarnation) else {
            return 1;
        };
        if entry.failing != seq {
            entry.failing = seq;
            entry.failures = 0;
        }
        entry.failures += 1;
        entry.failures
    }
}

/// Whether the store failed for want of its database (a retry may succeed), rather than because it
/// refuses this report.
fn transient(err: &StoreError) -> bool {
    matches!(err, StoreError::Database(_))
}

/// One report of a session, in the order it arrived: its sequence number (0: not numbered) and body.
pub type Report = (u64, Body);

/// Applies `session`'s reports from `node` in order, answering `Applied` as they land in the store.
pub async fn apply(
    runtime: Arc<Runtime>,
    node: String,
    session: u64,
    incarnation: String,
    mut reports: mpsc::Receiver<Report>,
) {
    let mut applied = runtime.delivery.applied_through(&node, &incarnation);
    let mut unanswered = 0;
    while let Some((seq, body)) = reports.recv().await {
        if runtime.hub.was_kicked(session) {
            tracing::warn!(
                node.name = node,
                "dropping the reports of a revoked node's session"
            );
            break;
        }
        if seq != 0 && seq <= applied {
            // Sent again after a reconnect, and applied already.
            continue;
        }
        if let Err(err) = crate::reports::handle_report(&runtime, &node, body).await {
            let tries = runtime.delivery.failed(&node, &incarnation, seq);
            if seq != 0 && transient(&err) && tries < MAX_TRIES {
                tracing::error!(node.name = node, error = %err, seq, tries, "cannot apply an executor's report; ending its session, so that it sends the report again");
                runtime.hub.disconnect(&node, session);
                break;
            }
            tracing::error!(node.name = node, error = %err, seq, tries, "cannot apply an executor's report; dropped");
        }
        if seq != 0 {
            applied = seq;
            runtime.delivery.set_applied(&node, &incarnation, seq);
            unanswered += 1;
        }
        if unanswered > 0 && (unanswered >= ACK_EVERY || reports.is_empty()) {
            let answer = pb::ServerMessage {
                body: Some(pb::server_message::Body::Applied(pb::Applied {
                    through: applied,
                })),
            };
            // A full command queue skips this answer; a later one covers it.
            runtime.hub.send_in_session(&node, session, answer);
            unanswered = 0;
        }
    }
    runtime.hub.forget_session(session);
}
