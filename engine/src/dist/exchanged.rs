//! What one training step's exchange reports to the training loop, whichever way the job's workers
//! combine their work (the exchanges of `worker.rs`, a pipeline stage's step in `pipeline.rs`).

/// What happened at a step's exchange.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exchanged {
    pub lr: f64,
    /// The job stops at this step boundary (PS `Stop`, or a worker's stop in the all-reduce).
    pub stop: bool,
    /// The leader reached the target (all-reduce).
    pub finish: bool,
    /// Gradient bytes this worker put on the wire in this step.
    pub bytes: u64,
    /// A pipeline's idle and wall time this step, summed over every worker (seconds).
    pub bubble: Option<(f64, f64)>,
}
