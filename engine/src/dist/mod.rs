//! Distributed training: a job's tasks train one model together, either through sharded
//! parameter servers (BSP, SSP or asynchronous; gradients optionally compressed with error feedback) or
//! by all-reduce among the workers (ring, tree, recursive doubling, Rabenseifner or hierarchical,
//! chosen by message size from the links' measured latency and bandwidth: [`collective`]), the
//! transformer's layers optionally split into pipeline stages among them ([`pipeline`]). Tasks
//! talk over plain TCP ([`wire`]); every connection starts with the job and generation, and a PS
//! refuses any other.

mod client;
pub mod cluster;
pub mod collective;
pub mod compress;
mod exchanged;
pub mod layout;
pub mod local;
pub mod pipeline;
pub mod ps;
pub mod wire;
pub mod worker;

pub use client::{PsClient, Reply};
pub use cluster::{Cluster, Role};
pub use layout::{Layout, Slice};
pub use wire::connect;
