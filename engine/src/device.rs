//! Which device a run trains on: named explicitly (`--device cpu|cuda|cuda:N`, or the GPUs an
//! executor assigned), and refused with a clear error when this build or this host cannot use it,
//! rather than training on the CPU unnoticed.

use anyhow::{Context, bail};
use candle_core::Device;

/// Opens the device `name` names: `cpu`, `cuda` (the first visible GPU) or `cuda:N`.
pub fn open(name: &str) -> anyhow::Result<Device> {
    match name.trim() {
        "cpu" => Ok(Device::Cpu),
        "cuda" | "gpu" => open_cuda(0),
        other => {
            match other.strip_prefix("cuda:") {
                Some(ordinal) => open_cuda(ordinal.parse().with_context(|| {
                    format!("device {other:?}: {ordinal:?} is not a GPU number")
                })?),
                None => bail!("unknown device {other:?}: expected cpu, cuda or cuda:N"),
            }
        }
    }
}

/// The `ordinal`-th GPU this process sees.
pub fn open_cuda(ordinal: usize) -> anyhow::Result<Device> {
    if !candle_core::utils::cuda_is_available() {
        bail!(
            "this drover was built without CUDA support: build it with `--features cuda` \
             (scripts/cuda-toolkit installs the compiler), or train on the CPU"
        );
    }
    // candle links the CUDA libraries at build time: a process of this build only started because
    // the driver's library loaded, so opening the device is the check that is left.
    let device = Device::new_cuda(ordinal)
        .map_err(|err| anyhow::anyhow!("cannot open GPU {ordinal}: {err}"))?;
    single_stream(&device);
    Ok(device)
}

/// The engine runs every kernel on the device's one stream, in order, so cudarc's bookkeeping of
/// which stream last read or wrote each buffer (two CUDA events per buffer use) protects nothing.
#[cfg(feature = "cuda")]
#[expect(
    unsafe_code,
    reason = "turning off cross-stream event tracking is an unsafe fn; the engine uses one stream"
)]
fn single_stream(device: &Device) {
    if let Device::Cuda(cuda) = device {
        // SAFETY: every tensor of this device is made, used and freed on its one stream (candle
        // gives each device a single stream and the engine starts no other), so no use needs an
        // event to order it against another stream.
        unsafe { cuda.disable_event_tracking() }
    }
}

#[cfg(not(feature = "cuda"))]
fn single_stream(_device: &Device) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_named_explicitly_and_refused_clearly() {
        assert!(open("cpu").unwrap().is_cpu());
        let unknown = open("tpu").unwrap_err().to_string();
        assert!(
            unknown.contains("expected cpu, cuda or cuda:N"),
            "{unknown}"
        );
        let bad = open("cuda:x").unwrap_err().to_string();
        assert!(bad.contains("not a GPU number"), "{bad}");
        if !candle_core::utils::cuda_is_available() {
            let refused = open("cuda").unwrap_err().to_string();
            assert!(refused.contains("built without CUDA support"), "{refused}");
        }
    }
}
