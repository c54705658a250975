//! FIFO and FIFO with backfill: non-preemptive, in submission order, at the requested shape.

use super::common::{arrival_if_free, claim_order};
use super::interface::{Oracle, Policy, PolicyError};
use crate::place::{FreeResources, Strategy};
use crate::plan::{JobPlan, Plan, RunReason, WaitReason};
use crate::snapshot::{ClusterSnapshot, JobView};

#[derive(Debug, Clone)]
pub struct Fifo {
    backfill: bool,
}

impl Fifo {
    /// Strict FIFO: the head of the queue blocks everyone behind it.
    pub fn strict() -> Self {
        Fifo { backfill: false }
    }

    /// FIFO with backfill: jobs behind a blocked head start if they fit now.
    pub fn backfill() -> Self {
        Fifo { backfill: true }
    }
}

impl Policy for Fifo {
    fn fork(&self, _oracle: Option<Box<dyn Oracle>>) -> Result<Box<dyn Policy>, PolicyError> {
        Ok(Box::new(self.clone()))
    }

    fn name(&self) -> &'static str {
        if self.backfill {
            "fifo-backfill"
        } else {
            "fifo"
        }
    }

    fn schedule(&mut self, snapshot: &ClusterSnapshot, _previous: &Plan) -> Plan {
        let total_gpus = snapshot.total_gpus();
        let mut free = FreeResources::with_running(snapshot, |_, _| true);
        let mut plan = Plan::default();
        let mut blocked = false;
        // Jobs are in submission order in the snapshot; higher claims (guarantees, then priority) go
        // first. What runs keeps running: FIFO never preempts, so a claim waits for running jobs to end.
        let all: Vec<usize> = (0..snapshot.jobs.len()).collect();
        for i in claim_order(snapshot, &all) {
            let job = &snapshot.jobs[i];
            let decision = if let Some(placement) = &job.placement {
                JobPlan::Run {
                    placement: placement.clone(),
                    reason: RunReason::Continuing,
                }
            } else if job.gpus_at(job.preferred) > total_gpus {
                // A job that can never fit must not block the queue forever.
                JobPlan::Wait {
                    reason: WaitReason::NeverFits,
                }
            } else if blocked && !self.backfill {
                JobPlan::Wait {
                    reason: WaitReason::BehindHeadOfLine,
                }
            } else {
                match free.place(job, job.preferred, Strategy::Relaxed) {
                    Ok(placement) => {
                        let reason = if blocked {
                            RunReason::Backfilled
                        } else {
                            RunReason::Started
                        };
                        JobPlan::Run { placement, reason }
                    }
                    Err(reason) => {
                        blocked = true;
                        JobPlan::Wait { reason }
                    }
                }
            };
            plan.jobs.insert(job.id, decision);
        }
        plan
    }

    fn place_arrival(&mut self, snapshot: &ClusterSnapshot, job: &JobView) -> JobPlan {
        let others_wait = snapshot
            .jobs
            .iter()
            .any(|j| j.id != job.id && j.placement.is_none());
        if others_wait && !self.backfill {
            return JobPlan::Wait {
                reason: WaitReason::BehindHeadOfLine,
            };
        }
        let reason = if others_wait {
            RunReason::Backfilled
        } else {
            RunReason::Started
        };
        arrival_if_free(snapshot, job, Strategy::Relaxed, reason)
    }
}
