//! Benchmarks that cross process boundaries and that the `drover` binary runs: [`fleet`], a fleet of
//! emulated executors against a real server (`drover bench fleet`). The job-submission load
//! generator is the `drover-loadgen` binary of this crate.

pub mod fleet;
