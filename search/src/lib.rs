//! Drover's hyper-parameter searchers: a pure, synchronous, deterministic library, like the scheduler.
//!
//! A search is `plan(&spec, &situation) -> Plan`: the experiment's spec and everything that has
//! happened to its trials so far (their points, their segments, the metric curve each reported) go
//! in; the decisions to carry out come out: start a trial at a point (optionally from another trial's
//! checkpoint, as PBT's exploit does), resume a trial from its own checkpoint for more steps (ASHA's
//! promotion, PBT's next round), stop a trial (early stopping, budgets), or finish the experiment.
//! There is no IO and no clock here: the server rebuilds the situation from the store every time, so a
//! restart or a change of leader loses nothing, and every random choice is drawn from a generator
//! seeded by the experiment's seed and the trial's index, so the same seed and the same results give the
//! same proposals.
//!
//! The searchers: grid ([`space::grid`]) and random ([`random_point`]), [`tpe`], [`asha`] (and
//! asynchronous Hyperband), [`pbt`]; [`stopping`] holds the median rule and learning-curve
//! extrapolation for the searchers that do not stop trials themselves. What the planner is told
//! ([`Situation`], [`TrialRecord`]) and what it decides ([`Decision`], [`Plan`]) live in modules of
//! their own that the searchers share; this root only declares the modules and re-exports.

pub mod asha;
mod decision;
pub mod math;
pub mod offline;
pub mod outlook;
pub mod pbt;
mod planner;
mod random;
pub mod space;
pub mod stopping;
pub mod tpe;
mod trials;

pub use decision::{Decision, Plan, apply};
pub use outlook::{Outlook, outlook};
pub use planner::{max_trials, plan};
pub use random::{random_point, trial_rng};
pub use trials::{Segment, SegmentState, Situation, Source, TrialRecord, best_trial};
