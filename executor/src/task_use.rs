//! Each running task's use of the node, from the OS: the CPU time and resident memory of its whole
//! process tree (the process the executor started and every descendant: under runc the container's
//! processes too, which the host's `/proc` lists with their parents), read from `/proc/<pid>/stat`
//! in one pass over `/proc` and sent with the heartbeat. CPU is the tree's CPU time per second of
//! wall time between two measurements (1.0: one core busy). Procfs reads are served from the
//! kernel's memory, never from a disk, so they do not block the agent's loop; a pass costs one read
//! per process of the node, and runs at most every [`EVERY`].

use drover_proto as pb;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Measurements at most this often; heartbeats between them repeat the last.
pub const EVERY: Duration = Duration::from_secs(2);

/// One process as `/proc/<pid>/stat` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Proc {
    pid: u32,
    ppid: u32,
    /// User and system time, in clock ticks.
    ticks: u64,
    /// Resident pages.
    rss_pages: u64,
}

/// A `/proc/<pid>/stat` line: the command's name (in parentheses, and may hold spaces and
/// parentheses itself) is skipped to its last `)`.
fn parse_stat(pid: u32, stat: &str) -> Option<Proc> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields from the third (state): ppid is the 4th, utime the 14th, stime the 15th, rss the 24th.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(Proc {
        pid,
        ppid: u32::try_from(field(4)?).ok()?,
        ticks: field(14)? + field(15)?,
        rss_pages: field(24)?,
    })
}

/// Every process of the node.
fn processes() -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            parse_stat(pid, &stat)
        })
        .collect()
}

/// The CPU ticks and resident pages of `root` and all its descendants among `procs`.
fn tree_total(procs: &[Proc], children: &HashMap<u32, Vec<usize>>, root: u32) -> (u64, u64) {
    let Some(start) = procs.iter().position(|p| p.pid == root) else {
        return (0, 0);
    };
    let (mut ticks, mut pages) = (0, 0);
    let mut stack = vec![start];
    // A pid seen twice (a reused pid mid-scan) is counted once.
    let mut seen = std::collections::HashSet::new();
    while let Some(i) = stack.pop() {
        let proc = procs[i];
        if !seen.insert(proc.pid) {
            continue;
        }
        ticks += proc.ticks;
        pages += proc.rss_pages;
        if let Some(kids) = children.get(&proc.pid) {
            stack.extend(kids);
        }
    }
    (ticks, pages)
}

/// Measures tasks' process trees; remembers each tree's CPU ticks to measure between passes.
#[derive(Debug)]
pub struct TaskProbe {
    ticks_per_second: f64,
    page_bytes: f64,
    /// Each root's ticks at the last pass.
    previous: HashMap<u32, u64>,
    last: Option<(Instant, HashMap<u32, pb::TaskUsage>)>,
}

impl Default for TaskProbe {
    fn default() -> Self {
        let sysconf = |name| nix::unistd::sysconf(name).ok().flatten().filter(|v| *v > 0);
        TaskProbe {
            ticks_per_second: sysconf(nix::unistd::SysconfVar::CLK_TCK).map_or(100.0, |v| v as f64),
            page_bytes: sysconf(nix::unistd::SysconfVar::PAGE_SIZE).map_or(4096.0, |v| v as f64),
            previous: HashMap::new(),
            last: None,
        }
    }
}

impl TaskProbe {
    /// The use of each tree rooted at one of `roots` (the tasks' processes), measured again when the
    /// last measurement is [`EVERY`] old (else the last repeated). A root not running is absent.
    pub fn sample(&mut self, roots: &[u32]) -> HashMap<u32, pb::TaskUsage> {
        if roots.is_empty() {
            self.previous.clear();
            self.last = None;
            return HashMap::new();
        }
        if let Some((at, last)) = &self.last
            && at.elapsed() < EVERY
            && roots.iter().all(|r| last.contains_key(r))
        {
            return last.clone();
        }
        let now = Instant::now();
        let elapsed = self.last.as_ref().map(|(at, _)| now - *at);
        let measured = self.measure(&processes(), roots, elapsed);
        self.last = Some((now, measured.clone()));
        measured
    }

    fn measure(
        &mut self,
        procs: &[Proc],
        roots: &[u32],
        elapsed: Option<Duration>,
    ) -> HashMap<u32, pb::TaskUsage> {
        let mut children: HashMap<u32, Vec<usize>> = HashMap::new();
        for (i, p) in procs.iter().enumerate() {
            children.entry(p.ppid).or_default().push(i);
        }
        let mut measured = HashMap::with_capacity(roots.len());
        let mut previous = HashMap::with_capacity(roots.len());
        for &root in roots {
            if !procs.iter().any(|p| p.pid == root) {
                continue;
            }
            let (ticks, pages) = tree_total(procs, &children, root);
            let cpu_cores = match (self.previous.get(&root), elapsed) {
                // A tree whose processes ended counts fewer ticks than before: not a rate.
                (Some(&before), Some(elapsed)) if ticks >= before && !elapsed.is_zero() => {
                    (ticks - before) as f64 / self.ticks_per_second / elapsed.as_secs_f64()
                }
                _ => -1.0,
            };
            previous.insert(root, ticks);
            measured.insert(
                root,
                pb::TaskUsage {
                    cpu_cores,
                    memory_gb: pages as f64 * self.page_bytes / 1e9,
                    ..pb::TaskUsage::default()
                },
            );
        }
        self.previous = previous;
        measured
    }
}

/// `usage` with the utilisation and memory of a task's GPUs (`gpus`, its indices) from the node's
/// GPUs as the driver reported them (`node`, utilisation negative where unknown); unchanged where
/// none of its GPUs reports.
pub fn with_gpus(mut usage: pb::TaskUsage, gpus: &[u32], node: &[pb::GpuUsage]) -> pb::TaskUsage {
    let mine: Vec<&pb::GpuUsage> = node.iter().filter(|g| gpus.contains(&g.index)).collect();
    let known: Vec<f64> = mine
        .iter()
        .map(|g| g.utilization)
        .filter(|u| *u >= 0.0)
        .collect();
    if !known.is_empty() {
        usage.gpu_utilization = Some(known.iter().sum::<f64>() / known.len() as f64);
        usage.gpu_memory_gb = Some(mine.iter().map(|g| g.memory_used_gb).sum());
    }
    usage
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_past_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (python3 (x) y) S 4200 4242 4200 0 -1 4194560 900 0 0 0 150 50 0 0 20 0 \
                    3 0 12345 200000000 2560 18446744073709551615";
        assert_eq!(
            parse_stat(4242, stat),
            Some(Proc {
                pid: 4242,
                ppid: 4200,
                ticks: 200,
                rss_pages: 2560,
            })
        );
        assert_eq!(parse_stat(1, "1 (init"), None);
    }

    #[test]
    fn a_tree_sums_every_descendant_and_cpu_is_a_rate_between_passes() {
        let proc = |pid, ppid, ticks, rss_pages| Proc {
            pid,
            ppid,
            ticks,
            rss_pages,
        };
        let mut probe = TaskProbe {
            ticks_per_second: 100.0,
            page_bytes: 4096.0,
            previous: HashMap::new(),
            last: None,
        };
        // 10 (the task) → 11 → 12; 20 is another task; 30 is not a task's.
        let first = [
            proc(10, 1, 100, 1000),
            proc(11, 10, 50, 500),
            proc(12, 11, 50, 500),
            proc(20, 1, 10, 100),
            proc(30, 1, 999, 999),
        ];
        let at_first = probe.measure(&first, &[10, 20, 99], None);
        assert!(
            at_first[&10].cpu_cores < 0.0,
            "no rate before a second pass"
        );
        assert!((at_first[&10].memory_gb - 2000.0 * 4096.0 / 1e9).abs() < 1e-12);
        assert!(!at_first.contains_key(&99), "a root not running is absent");
        // Two seconds later the tree used 300 more ticks (3 s of CPU): 1.5 cores.
        let second = [
            proc(10, 1, 200, 1000),
            proc(11, 10, 100, 500),
            proc(12, 11, 200, 500),
            proc(20, 1, 10, 100),
        ];
        let at_second = probe.measure(&second, &[10, 20], Some(Duration::from_secs(2)));
        assert!(
            (at_second[&10].cpu_cores - 1.5).abs() < 1e-9,
            "{at_second:?}"
        );
        assert_eq!(at_second[&20].cpu_cores, 0.0);
    }

    #[test]
    fn a_task_gets_its_own_gpus_use_only() {
        let gpu = |index, utilization, memory_used_gb| pb::GpuUsage {
            index,
            utilization,
            memory_used_gb,
        };
        let node = [gpu(0, 0.2, 1.0), gpu(1, 0.6, 3.0), gpu(2, 0.9, 7.0)];
        let base = pb::TaskUsage {
            cpu_cores: 1.0,
            memory_gb: 2.0,
            ..pb::TaskUsage::default()
        };
        let two = with_gpus(base, &[0, 1], &node);
        assert!(
            (two.gpu_utilization.unwrap() - 0.4).abs() < 1e-12,
            "{two:?}"
        );
        assert_eq!(two.gpu_memory_gb, Some(4.0));
        assert_eq!(two.memory_gb, 2.0);
        // Demo GPUs report no utilisation; a task on CPU slots holds none.
        let demo = with_gpus(base, &[0], &[gpu(0, -1.0, 0.0)]);
        assert_eq!((demo.gpu_utilization, demo.gpu_memory_gb), (None, None));
        let none = with_gpus(base, &[], &node);
        assert_eq!((none.gpu_utilization, none.gpu_memory_gb), (None, None));
    }

    /// On this machine: a real child that holds memory and spins shows both.
    #[test]
    fn a_real_process_tree_is_measured() {
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "python3 -c 'import time; b = bytearray(64 << 20); t = time.time()\nwhile time.time() - t < 4: pass'",
            ])
            .spawn()
            .expect("sh");
        let mut probe = TaskProbe::default();
        std::thread::sleep(Duration::from_millis(800));
        probe.sample(&[child.id()]);
        std::thread::sleep(EVERY + Duration::from_millis(200));
        let usage = probe.sample(&[child.id()])[&child.id()];
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            usage.memory_gb > 0.05,
            "the 64 MB the grandchild holds: {usage:?}"
        );
        assert!(
            usage.cpu_cores > 0.3,
            "the grandchild spins a core: {usage:?}"
        );
    }
}
