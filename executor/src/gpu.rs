//! What GPUs this node has: real ones through NVML (the NVIDIA driver's management library), with
//! their utilisation, or advertised ones for CPU-only hosts (`--slots N`) and demos (`--demo-gpus N`).

use drover_proto as pb;
use std::fmt;

/// One GPU as the executor advertises it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuInfo {
    pub index: u32,
    pub model: String,
    pub memory_gb: f64,
    /// "9.0"; empty for advertised GPUs.
    pub compute_capability: String,
    /// The minor number of its device node (`/dev/nvidia<minor>`), for a real GPU: the node a
    /// sandboxed task given this GPU may open.
    pub minor_number: Option<u32>,
    /// `GPU-…`, for a real GPU: how a sandboxed task names it in `CUDA_VISIBLE_DEVICES` (inside, only
    /// its own GPUs' nodes exist, so the driver numbers them from 0).
    pub uuid: Option<String>,
}

impl From<&GpuInfo> for pb::Gpu {
    fn from(gpu: &GpuInfo) -> Self {
        pb::Gpu {
            index: gpu.index,
            model: gpu.model.clone(),
            memory_gb: gpu.memory_gb,
            compute_capability: gpu.compute_capability.clone(),
        }
    }
}

/// Where the advertised GPUs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuSource {
    Nvidia,
    /// A CPU-only host: `N` task slots, advertised as GPUs of model `cpu` so the scheduler can count them.
    Slots(u32),
    /// `N` pretend GPUs of `memory_gb` each; tasks run on the CPU.
    Demo(u32, u32),
}

impl GpuSource {
    pub fn as_str(self) -> &'static str {
        match self {
            GpuSource::Nvidia => "nvidia",
            GpuSource::Slots(_) => "slots",
            GpuSource::Demo(..) => "demo",
        }
    }

    /// Tasks see only their GPUs through `CUDA_VISIBLE_DEVICES`; advertised GPUs are hidden entirely.
    pub fn is_real(self) -> bool {
        self == GpuSource::Nvidia
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuError {
    /// No NVIDIA driver library on this host.
    NoDriver,
    /// The driver is there but failed.
    Driver(String),
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::NoDriver => write!(
                f,
                "no NVIDIA driver found on this host (libnvidia-ml cannot be loaded); run a CPU-only \
                 executor with --slots N, or advertise pretend GPUs with --demo-gpus N"
            ),
            GpuError::Driver(message) => write!(f, "the NVIDIA driver failed: {message}"),
        }
    }
}

impl std::error::Error for GpuError {}

/// The GPUs `source` advertises.
pub fn discover(source: GpuSource) -> Result<Vec<GpuInfo>, GpuError> {
    match source {
        GpuSource::Slots(n) => Ok((0..n)
            .map(|index| GpuInfo {
                index,
                model: "cpu".to_owned(),
                memory_gb: 0.0,
                compute_capability: String::new(),
                minor_number: None,
                uuid: None,
            })
            .collect()),
        GpuSource::Demo(n, memory_gb) => Ok((0..n)
            .map(|index| GpuInfo {
                index,
                model: "demo".to_owned(),
                memory_gb: f64::from(memory_gb),
                compute_capability: String::new(),
                minor_number: None,
                uuid: None,
            })
            .collect()),
        GpuSource::Nvidia => discover_nvidia(),
    }
}

/// The GPUs NVML (the driver's management library) lists, in PCI bus order; tasks see the same
/// numbering because the executor sets `CUDA_DEVICE_ORDER=PCI_BUS_ID` for them.
fn discover_nvidia() -> Result<Vec<GpuInfo>, GpuError> {
    let nvml = nvml_wrapper::Nvml::init().map_err(|err| match err {
        nvml_wrapper::error::NvmlError::LibloadingError(_)
        | nvml_wrapper::error::NvmlError::LibraryNotFound
        | nvml_wrapper::error::NvmlError::DriverNotLoaded => GpuError::NoDriver,
        other => GpuError::Driver(other.to_string()),
    })?;
    let driver = |err: nvml_wrapper::error::NvmlError| GpuError::Driver(err.to_string());
    let count = nvml.device_count().map_err(driver)?;
    let mut gpus = Vec::new();
    for index in 0..count {
        let device = nvml.device_by_index(index).map_err(driver)?;
        let capability = device.cuda_compute_capability().map_err(driver)?;
        gpus.push(GpuInfo {
            index,
            model: device.name().map_err(driver)?,
            memory_gb: device.memory_info().map_err(driver)?.total as f64 / (1u64 << 30) as f64,
            compute_capability: format!("{}.{}", capability.major, capability.minor),
            minor_number: device.minor_number().ok(),
            uuid: device.uuid().ok(),
        });
    }
    Ok(gpus)
}

/// Utilisation and memory in use per GPU, through NVML; empty when NVML is not there.
#[derive(Debug)]
pub struct UsageProbe {
    nvml: Option<nvml_wrapper::Nvml>,
}

impl UsageProbe {
    pub fn new(source: GpuSource) -> Self {
        let nvml = if source.is_real() {
            match nvml_wrapper::Nvml::init() {
                Ok(nvml) => Some(nvml),
                Err(err) => {
                    tracing::warn!(error = %err, "NVML unavailable: GPU utilisation will not be reported");
                    None
                }
            }
        } else {
            None
        };
        Self { nvml }
    }

    pub fn sample(&self, gpus: &[GpuInfo]) -> Vec<pb::GpuUsage> {
        let Some(nvml) = &self.nvml else {
            return Vec::new();
        };
        gpus.iter()
            .filter_map(|gpu| {
                let device = nvml.device_by_index(gpu.index).ok()?;
                let utilization = device
                    .utilization_rates()
                    .map_or(-1.0, |u| f64::from(u.gpu) / 100.0);
                let memory_used_gb = device
                    .memory_info()
                    .map_or(0.0, |m| m.used as f64 / (1u64 << 30) as f64);
                Some(pb::GpuUsage {
                    index: gpu.index,
                    utilization,
                    memory_used_gb,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertised_gpus_are_numbered_from_zero() {
        let slots = discover(GpuSource::Slots(3)).expect("slots need no driver");
        assert_eq!(slots.iter().map(|g| g.index).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(slots.iter().all(|g| g.model == "cpu"));
        let demo = discover(GpuSource::Demo(2, 16)).expect("demo GPUs need no driver");
        assert_eq!(demo.len(), 2);
        assert!(demo.iter().all(|g| g.memory_gb == 16.0));
    }

    #[test]
    fn a_host_without_a_driver_gets_an_error_not_a_panic() {
        match discover(GpuSource::Nvidia) {
            Ok(gpus) => assert!(gpus.iter().all(|g| !g.model.is_empty())), // a GPU host
            Err(err) => {
                assert_eq!(err, GpuError::NoDriver);
                assert!(err.to_string().contains("--slots"));
            }
        }
    }
}
