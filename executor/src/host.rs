//! The node's own CPU and memory use, from the OS (`/proc/stat`, `/proc/meminfo`), sent with each
//! heartbeat beside the GPUs' (NVML's): the share of CPU time busy since the previous sample, and
//! the memory in use (total less what the kernel counts available). Procfs reads are served from the
//! kernel's memory, never from a disk, so they do not block the agent's loop.

use drover_proto as pb;

/// CPU time counters of `/proc/stat`'s first line: busy and all, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CpuTimes {
    busy: u64,
    total: u64,
}

/// The aggregate `cpu` line: user nice system idle iowait irq softirq steal (guest time is already
/// in user and nice). Idle and iowait are not busy.
fn cpu_times(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    if fields.len() < 4 {
        return None;
    }
    let total: u64 = fields.iter().sum();
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    Some(CpuTimes {
        busy: total.saturating_sub(idle),
        total,
    })
}

/// `MemTotal` and `MemAvailable` of `/proc/meminfo`, in GiB.
fn memory_gb(meminfo: &str) -> Option<(f64, f64)> {
    let field = |name: &str| -> Option<f64> {
        let line = meminfo.lines().find(|l| l.starts_with(name))?;
        let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib / (1u64 << 20) as f64)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}

/// Samples the host; remembers the previous CPU counters to measure between heartbeats.
#[derive(Debug, Default)]
pub struct HostProbe {
    previous: Option<CpuTimes>,
}

impl HostProbe {
    /// CPU busy share since the previous sample (negative on the first, or where procfs cannot be
    /// read) and memory in use and in all.
    pub fn sample(&mut self) -> pb::HostUsage {
        let times = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| cpu_times(&s));
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| memory_gb(&s));
        self.measure(times, memory)
    }

    fn measure(&mut self, times: Option<CpuTimes>, memory: Option<(f64, f64)>) -> pb::HostUsage {
        let cpu_utilization = match (self.previous, times) {
            (Some(before), Some(now)) if now.total > before.total => {
                (now.busy.saturating_sub(before.busy)) as f64 / (now.total - before.total) as f64
            }
            _ => -1.0,
        };
        if times.is_some() {
            self.previous = times;
        }
        let (memory_total_gb, available) = memory.unwrap_or((0.0, 0.0));
        pb::HostUsage {
            cpu_utilization: cpu_utilization.min(1.0),
            memory_used_gb: (memory_total_gb - available).max(0.0),
            memory_total_gb,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_use_is_the_busy_share_between_two_samples_and_memory_what_is_not_available() {
        let first = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n";
        let second = "cpu  400 0 150 1300 150 0 0 0 0 0\n";
        let meminfo =
            "MemTotal:       16777216 kB\nMemFree:  1000 kB\nMemAvailable:    4194304 kB\n";
        let mut probe = HostProbe::default();
        let at_first = probe.measure(cpu_times(first), memory_gb(meminfo));
        assert!(
            at_first.cpu_utilization < 0.0,
            "nothing to compare with yet"
        );
        assert_eq!(at_first.memory_total_gb, 16.0);
        assert_eq!(at_first.memory_used_gb, 12.0);
        // 400 busy ticks (300 user, 100 system) of 1,000 (500 idle, 100 iowait among them).
        let at_second = probe.measure(cpu_times(second), memory_gb(meminfo));
        assert!(
            (at_second.cpu_utilization - 0.4).abs() < 1e-9,
            "{at_second:?}"
        );
        // Unreadable: unknown, not zero.
        let unknown = HostProbe::default().measure(None, None);
        assert!(unknown.cpu_utilization < 0.0);
        assert_eq!(cpu_times("intr 1 2 3"), None);
    }
}
