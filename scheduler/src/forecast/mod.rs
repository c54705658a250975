//! When will a queued job start? The live snapshot forked into a fast replay: the policy that runs the
//! cluster plays its own rounds ahead on a virtual clock, running jobs finish when their estimated
//! remaining work is done, queued jobs start when the policy starts them, and nothing new arrives.
//!
//! Remaining work comes from what has been observed (a step budget, cut short by a fitted loss curve
//! when the job stops at a target, times the fitted speed), or, for a job without a budget or not yet
//! measured, from how long jobs like it ran, given how long it has run ([`Priors`]: by tenant and
//! size, running jobs counted as censored lengths, a sweep as old as its [`Cohorts`], or a sweep's
//! own lengths once a quarter of it has ended). Each estimate
//! is a distribution (10th, 50th and 90th percentile); the replay runs [`ForecastConfig::samples`]
//! times with every job's remaining work drawn from it (a sweep's jobs drawn together unless
//! estimated from the sweep's own lengths), and a job's
//! predicted start is the median of its starts over the draws, its band their 10th to 90th
//! percentile. Like the policies, this is pure: no IO, no clock; the caller hands in the time.

mod arrivals;
mod cohort;
mod config;
mod estimate;
mod history;
mod lengths;
mod remaining;
mod replay;
mod scenario;
mod starts;

pub use arrivals::{Arrival, recent_arrivals};
pub use cohort::{COHORT_GAP_S, COHORT_SPAN_S, Cohorts};
pub use config::{BetweenRounds, ForecastConfig, PACKING_SLOWDOWN};
pub use estimate::{NO_HISTORY, Priors, estimate, size_class, work_done_s};
pub use history::{Finished, TENANT_HISTORY_MIN};
pub use lengths::{Lengths, Quantiles};
pub use remaining::{Basis, Remaining};
pub use starts::{Forecast, Prediction, forecast, predict_start, queue_order};
