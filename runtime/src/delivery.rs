//! Reports applied in order and exactly once per executor run (the contract's Delivery): the applier
//! of one executor session. What it remembers of each executor incarnation is in `applied.rs`.
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
use crate::applied::MAX_TRIES;
use drover_proto as pb;
use drover_store::StoreError;
use pb::executor_message::Body;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Reports applied between two `Applied` answers at most (one also goes whenever the queue is
/// empty).
const ACK_EVERY: u32 = 64;

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
    let mut applied = runtime.applied.applied_through(&node, &incarnation);
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
            let tries = runtime.applied.failed(&node, &incarnation, seq);
            if seq != 0 && transient(&err) && tries < MAX_TRIES {
                tracing::error!(node.name = node, error = %err, seq, tries, "cannot apply an executor's report; ending its session, so that it sends the report again");
                runtime.hub.disconnect(&node, session);
                break;
            }
            tracing::error!(node.name = node, error = %err, seq, tries, "cannot apply an executor's report; dropped");
        }
        if seq != 0 {
            applied = seq;
            runtime.applied.set_applied(&node, &incarnation, seq);
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
