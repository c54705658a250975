//! SRTF: preemptive shortest-remaining-time-first, an oracle baseline. It alone is given the true
//! remaining time of every job (through [`super::Oracle`]); it runs jobs at their requested shape.

use super::common::{arrival_if_free, claim_order, ordered_round};
use super::interface::{Oracle, Policy, PolicyError};
use crate::place::Strategy;
use crate::plan::{JobPlan, Plan, RunReason};
use crate::snapshot::{ClusterSnapshot, JobView};

#[derive(Debug)]
pub struct Srtf {
    oracle: Box<dyn Oracle>,
}

impl Srtf {
    pub fn new(oracle: Box<dyn Oracle>) -> Self {
        Srtf { oracle }
    }
}

impl Policy for Srtf {
    fn fork(&self, oracle: Option<Box<dyn Oracle>>) -> Result<Box<dyn Policy>, PolicyError> {
        Ok(Box::new(Srtf::new(
            oracle.ok_or(PolicyError::NeedsOracle("srtf"))?,
        )))
    }

    fn name(&self) -> &'static str {
        "srtf"
    }

    fn schedule(&mut self, snapshot: &ClusterSnapshot, _previous: &Plan) -> Plan {
        let remaining: Vec<f64> = snapshot
            .jobs
            .iter()
            .map(|job| self.oracle.remaining_s(job.id, job.preferred))
            .collect();
        let mut order: Vec<usize> = (0..snapshot.jobs.len()).collect();
        // Shortest remaining first; ties by submission order, so the result is deterministic.
        order.sort_by(|&a, &b| remaining[a].total_cmp(&remaining[b]).then(a.cmp(&b)));
        ordered_round(snapshot, &claim_order(snapshot, &order), |_| {
            Strategy::Relaxed
        })
    }

    fn place_arrival(&mut self, snapshot: &ClusterSnapshot, job: &JobView) -> JobPlan {
        arrival_if_free(snapshot, job, Strategy::Relaxed, RunReason::PriorityOrder)
    }
}
