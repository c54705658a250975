//! The engine as the policy meets it: the noisy observations of running jobs that make up its
//! snapshot, and what each of its decisions does (start or resume, suspend or preempt, move or
//! resize, a new packing flag), with the costs they carry.

use super::*;

impl Engine {
    /// Noisy observations of every running job, as executors would report them.
    pub(super) fn observe(&mut self, now: f64) {
        let every = self.config.costs.checkpoint_every_s + self.config.costs.checkpoint_s;
        let ckpt_factor = self.ckpt_factor();
        let shared: Vec<bool> = self
            .snapshot
            .jobs
            .iter()
            .map(|j| j.placement.as_ref().is_some_and(|p| self.is_shared(p)))
            .collect();
        for (position, job) in self.snapshot.jobs.iter_mut().enumerate() {
            let Some(placement) = &job.placement else {
                continue;
            };
            let shared = shared[position];
            let index = index_of(job);
            let live = &self.live[index];
            job.observed.steps_done = live.steps as u64;
            if now <= live.productive_from || live.rate <= 0.0 {
                continue;
            }
            let truth = &self.truths[index];
            let shape = placement.shape();
            // Measured on its first worker's GPU model (a gang that mixes models reports that one).
            let gpu = placement
                .tasks
                .iter()
                .find(|t| !t.gpus.is_empty())
                .and_then(|t| self.node_tag.get(t.node.0 as usize))
                .copied()
                .unwrap_or_default();
            let spread = placement.worker_nodes().len() > 1;
            let step_s = noisy(
                &mut self.rng,
                1.0 / (live.rate / ckpt_factor),
                truth.step_noise,
            );
            match job
                .observed
                .step_stats
                .iter_mut()
                .find(|s| s.shape == shape && s.shared == shared && s.gpu == gpu)
            {
                Some(stats) => stats.add(step_s, spread),
                None => {
                    let mut stats = StepStats {
                        shape,
                        shared,
                        samples: 0,
                        mean_step_s: 0.0,
                        gpu,
                        spread_samples: 0,
                        spread_mean_step_s: 0.0,
                    };
                    stats.add(step_s, spread);
                    job.observed.step_stats.push(stats);
                }
            }
            // As the server does: from what was measured of it (the truth has no cost of spreading
            // a gang over nodes, so only noise could set it).
            job.consolidate = job.observed.prefers_one_node();
            let loss = noisy(&mut self.rng, truth.loss_at(live.steps), 0.05);
            let losses = Arc::make_mut(&mut job.observed.loss_samples);
            losses.push((live.steps as u64, loss));
            if losses.len() > 256 {
                // Keep a bounded, evenly thinned history.
                let mut keep = false;
                losses.retain(|_| {
                    keep = !keep;
                    keep
                });
            }
            if every > 0.0 && now - live.productive_from >= every {
                let done = ((now - live.productive_from) / every).floor();
                job.observed.last_checkpoint_s = Some(live.productive_from + done * every);
            }
        }
        if let Some(oracle) = &self.oracle
            && let Ok(mut state) = oracle.lock()
        {
            for job in &self.snapshot.jobs {
                let index = index_of(job);
                if let Some(done) = state.steps_done.get_mut(index) {
                    *done = self.live[index].steps;
                }
            }
        }
    }

    /// Carries out one decision at `now`; the caller refreshes rates afterwards.
    pub(super) fn apply(&mut self, position: usize, decision: &JobPlan, now: f64) {
        let costs = self.config.costs;
        let job = &self.snapshot.jobs[position];
        let index = index_of(job);
        match (job.placement.clone(), decision) {
            (None, JobPlan::Run { placement, .. }) => {
                self.occupy(index, placement, true);
                let live = &mut self.live[index];
                let resumed = live.first_start.is_some();
                let overhead = match live.suspended_from.take() {
                    Some(from) => {
                        let (overhead, change) = costs.resume_s(&from, placement);
                        self.outcome.disruptions.count(change);
                        overhead
                    }
                    None => live.owed_s,
                };
                live.owed_s = 0.0;
                live.productive_from = now + overhead;
                live.checkpoints_in_run = 0;
                live.checkpoint_steps = live.steps;
                live.first_start.get_or_insert(now);
                let job = &mut self.snapshot.jobs[position];
                if resumed {
                    job.observed.restarts = live.restarts;
                }
                job.observed.last_state_change_s = now;
                job.placement = Some(placement.clone());
            }
            (Some(old), JobPlan::Wait { reason }) => {
                self.occupy(index, &old, false);
                if *reason == WaitReason::Suspended {
                    self.outcome.disruptions.suspensions += 1;
                } else {
                    self.outcome.disruptions.preemptions += 1;
                }
                let live = &mut self.live[index];
                live.rate = 0.0;
                match reason {
                    // Suspended in memory at a step boundary: nothing lost, cheap to resume where
                    // it was (the resume's cost depends on where it resumes).
                    WaitReason::Suspended => {
                        live.owed_s = costs.suspend_resume_s;
                        live.suspended_from = Some(old);
                    }
                    // Killed: the work since the last checkpoint is lost; it restarts from that one.
                    WaitReason::PreemptedWithoutCheckpoint => {
                        live.steps = live.checkpoint_steps;
                        live.owed_s = costs.restart_s;
                        live.restarts += 1;
                    }
                    // Preempted: it checkpoints on the way out, then restarts.
                    _ => {
                        live.owed_s = costs.checkpoint_s + costs.restart_s;
                        live.restarts += 1;
                    }
                }
                let job = &mut self.snapshot.jobs[position];
                job.placement = None;
                job.observed.last_state_change_s = now;
                job.observed.steps_done = live.steps as u64;
            }
            (Some(old), JobPlan::Run { placement, .. }) if !old.same_resources(placement) => {
                let (overhead, change) = costs.move_s(&old, placement);
                self.outcome.disruptions.count(Some(change));
                self.occupy(index, &old, false);
                self.occupy(index, placement, true);
                let live = &mut self.live[index];
                live.productive_from = now.max(live.productive_from) + overhead;
                live.checkpoints_in_run = 0;
                live.checkpoint_steps = live.steps;
                self.snapshot.jobs[position].placement = Some(placement.clone());
            }
            (Some(old), JobPlan::Run { placement, .. }) if old != *placement => {
                // Same GPUs and nodes, new flags (a packing decision): nothing moves.
                self.snapshot.jobs[position].placement = Some(placement.clone());
            }
            _ => {}
        }
    }
}
