//! The scheduling policies: the policy interface and the oracle interface (for SRTF alone) in
//! `interface.rs` (with what a policy saves for the next leader in `state.rs`), and the registry
//! that the simulator and the server's scheduling loop both choose from by name in `registry.rs`
//! (its names in `names.rs`). Each policy is described in `README.md` here.

mod common;
mod defrag;
mod drf;
mod drover;
mod elastic;
mod fifo;
mod gandiva;
mod gavel;
mod interface;
mod lacking;
mod limits;
mod names;
mod optimus;
mod packing;
mod registry;
mod srtf;
mod state;
mod tiresias;
mod trials;
mod unplaceable;

pub use common::{arrival_if_free, min_shape, non_preemptible_first, ordered_round};
pub use drf::Drf;
pub use drover::DroverPolicy;
pub use elastic::{ElasticParams, ResizeRule, allocate, place_targets};
pub use fifo::Fifo;
pub use gandiva::Gandiva;
pub use gavel::Gavel;
pub use interface::{Oracle, Policy, PolicyError};
pub use limits::TenantLimited;
pub use names::{ablation_names, is_oracle_policy, policy_names};
pub use optimus::Optimus;
pub use registry::build_policy;
pub use srtf::Srtf;
pub use state::{Restored, SavedState};
pub use tiresias::Tiresias;
pub use unplaceable::{IMAGE_REASON, never_fits, why_never_fits};
