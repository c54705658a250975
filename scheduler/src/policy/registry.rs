//! The registry that the simulator and the server's scheduling loop both choose policies from by
//! name, every one held to the tenants' maximum GPUs.

use super::drf::Drf;
use super::drover::DroverPolicy;
use super::elastic::ElasticParams;
use super::fifo::Fifo;
use super::gandiva::Gandiva;
use super::gavel::Gavel;
use super::interface::{Oracle, Policy, PolicyError};
use super::limits::TenantLimited;
use super::optimus::Optimus;
use super::srtf::Srtf;
use super::tiresias::Tiresias;

/// Builds a policy by name, held to the tenants' maximum GPUs ([`TenantLimited`]). `oracle` is handed
/// to oracle baselines and dropped by every other policy.
pub fn build_policy(
    name: &str,
    oracle: Option<Box<dyn Oracle>>,
) -> Result<Box<dyn Policy>, PolicyError> {
    Ok(Box::new(TenantLimited(build_unlimited(name, oracle)?)))
}

fn build_unlimited(
    name: &str,
    oracle: Option<Box<dyn Oracle>>,
) -> Result<Box<dyn Policy>, PolicyError> {
    Ok(match name {
        "fifo" => Box::new(Fifo::strict()),
        "fifo-backfill" => Box::new(Fifo::backfill()),
        "srtf" => Box::new(Srtf::new(oracle.ok_or(PolicyError::NeedsOracle("srtf"))?)),
        "drf" => Box::new(Drf),
        "tiresias" => Box::new(Tiresias::default()),
        "optimus" => Box::new(Optimus::new()),
        "optimus-oracle" => Box::new(Optimus::with_oracle(
            oracle.ok_or(PolicyError::NeedsOracle("optimus-oracle"))?,
        )),
        "gandiva" => Box::new(Gandiva::default()),
        "gavel" => Box::new(Gavel::new(oracle.ok_or(PolicyError::NeedsOracle("gavel"))?)),
        "drover" => Box::new(DroverPolicy::default()),
        "drover-no-quotas" => Box::new(DroverPolicy {
            quotas: false,
            ..DroverPolicy::default()
        }),
        "drover-no-packing" => Box::new(DroverPolicy {
            packing: false,
            ..DroverPolicy::default()
        }),
        "drover-no-search" => Box::new(DroverPolicy {
            search: false,
            ..DroverPolicy::default()
        }),
        "drover-model-blind" => Box::new(DroverPolicy {
            by_model: false,
            ..DroverPolicy::default()
        }),
        "drover-no-elastic" => Box::new(DroverPolicy {
            params: ElasticParams {
                grow: false,
                ..DroverPolicy::default().params
            },
            ..DroverPolicy::default()
        }),
        other => return Err(PolicyError::Unknown(other.to_owned())),
    })
}
