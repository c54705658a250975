//! The gRPC contract between the server's executor gateway and the executors.
//!
//! One bidirectional stream per executor (`ExecutorGateway.Session`): the executor dials out, registers
//! with its inventory and the tasks it still runs, then sends heartbeats and reports; the server sends
//! commands. Every report and command about a task carries its (job, generation): the server refuses
//! reports from any generation but the job's current one.

#![expect(
    clippy::allow_attributes,
    unused_qualifications,
    clippy::large_enum_variant,
    reason = "generated code"
)]

pub mod executor {
    pub mod v1 {
        tonic::include_proto!("drover.executor.v1");
    }
}

pub use executor::v1::*;

/// The gRPC metadata key with which a server replica that does not lead names the leader's gateway
/// (`http://HOST:PORT`) when it turns an executor's session away; the executor dials that next.
pub const LEADER_METADATA: &str = "drover-leader";

/// The largest message either side decodes (tonic's default, set explicitly on the executor's
/// client): the server never sends a task whose definition would not fit.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
