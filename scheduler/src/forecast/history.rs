//! What the forecast learns from: jobs that finished (their tenant, size, length and submission),
//! and how many of them a history bucket needs before it is used.

/// One finished job, as history: its tenant (index into the snapshot's tenants), the GPUs of its
/// preferred shape, how long it ran in seconds at that shape, and when it was submitted (on the
/// snapshot's clock; NaN when not known), which places it in its sweep's [`Cohorts`](super::Cohorts).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finished {
    pub tenant: u32,
    pub gpus: u32,
    pub seconds: f64,
    pub submit_s: f64,
}

/// A history bucket is used once it has this many finished jobs.
pub const TENANT_HISTORY_MIN: usize = 5;
