//! The searcher's outlook on trial jobs, handed from the experiment driver to the scheduling loop.
//!
//! Both run on the leading replica. The driver replaces an experiment's hints at each of its passes
//! and forgets those of experiments no longer open; the loop copies them onto its snapshot's jobs. A
//! new leader starts with none and has them again after its driver's first pass: until then its
//! policy orders trials as it orders any job, which is safe, only less shrewd.

use drover_core::{ExperimentId, JobId};
use drover_scheduler::{JobView, SearchHint};
use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

/// Each trial job's hint (which names its experiment).
#[derive(Debug, Default)]
pub struct SearchHints(RwLock<HashMap<JobId, SearchHint>>);

impl SearchHints {
    /// The hints of one experiment's running and queued trial jobs, replacing its last ones.
    pub fn set(
        &self,
        experiment: ExperimentId,
        hints: impl IntoIterator<Item = (JobId, SearchHint)>,
    ) {
        let mut map = self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.retain(|_, hint| hint.experiment != experiment);
        map.extend(hints);
    }

    /// Forgets the experiments not in `open`.
    pub fn retain(&self, open: &HashSet<ExperimentId>) {
        self.0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .retain(|_, hint| open.contains(&hint.experiment));
    }

    /// Sets each job's hint, when its experiment gave one.
    pub fn apply(&self, jobs: &mut [JobView]) {
        let hints = self
            .0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if hints.is_empty() {
            return;
        }
        for job in jobs {
            job.search = hints.get(&job.id).copied();
        }
    }
}
