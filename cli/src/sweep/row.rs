//! One simulation of a sweep as reported: the run's report with what the sweep compares it to
//! (the best non-oracle baseline, FIFO and DRF in the same cell).

use drover_scheduler::sim::Report;
use serde::Serialize;

/// One simulation of the sweep.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    /// The ISO week replayed (`--weeks`).
    pub week: Option<String>,
    pub cluster: String,
    pub gpus: u32,
    pub seed: u64,
    pub offered_load: f64,
    pub policy: String,
    pub avg_jct_s: f64,
    /// Average JCT over the best non-oracle baseline's on the same cluster and seed.
    pub vs_best_baseline: f64,
    pub best_baseline: String,
    pub vs_fifo: Option<f64>,
    /// The worst tenant's max ρ over its max ρ under DRF in the same cell, and the tenant (when DRF
    /// ran).
    pub worst_tenant_vs_drf: Option<f64>,
    pub worst_tenant: Option<String>,
    pub report: Report,
}
