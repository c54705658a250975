//! The experiment driver: while this replica leads, it turns each open experiment's searcher decisions
//! into jobs.
//!
//! Intent vs observed, as in the scheduling loop: the searcher ([`drover_search::plan`]) sees the
//! trials as the store has them (points, segments, the jobs' outcomes and metrics) and says what to do;
//! the driver writes each new trial and segment as a row *before* it creates the segment's job (under an
//! idempotency key made of the experiment, trial and segment), so a restart or a new leader finds the
//! row and finishes creating that job instead of proposing another. Nothing about an experiment lives
//! only in memory. [`drive`] is one pass over one experiment, safe to run again at any time.

mod blocked;
mod driver;
mod jobs;
mod situation;
pub mod steer;
mod trials;

pub use blocked::{Blocked, DriveError};
pub use driver::{EVERY, drive, drive_all, run};
pub use jobs::{cancel_running, event, segment_job_name, show, stop_trial};
pub use situation::{params_of, segment_state, trial_records};
pub use trials::{TrialJobView, TrialView, trials};
