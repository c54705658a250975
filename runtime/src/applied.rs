//! What this replica remembers of each executor incarnation's numbered reports (the contract's
//! Delivery): the highest one it applied, and how often one report failed to apply. The applier
//! (`delivery.rs`) reads and updates it; a new session's `Registered` tells the executor what was
//! applied already.

use std::collections::HashMap;
use std::sync::Mutex;

/// Tries at applying one report before it is dropped.
pub const MAX_TRIES: u32 = 5;

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
pub struct AppliedReports {
    nodes: Mutex<HashMap<String, Incarnation>>,
}

impl AppliedReports {
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

    pub(crate) fn set_applied(&self, node: &str, incarnation: &str, seq: u64) {
        if let Some(entry) = self.nodes().get_mut(node)
            && entry.id == incarnation
        {
            entry.through = entry.through.max(seq);
        }
    }

    /// Counts a failure to apply report `seq`; returns how many there have been in a row.
    pub(crate) fn failed(&self, node: &str, incarnation: &str, seq: u64) -> u32 {
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
