//! Which cgroup hierarchy the host has (the unified v2 one of current distributions and Kubernetes
//! nodes, or v1's one hierarchy per controller, as on hosts with the hybrid layout), whether it has
//! the controllers a task's limits need (memory, CPU, process count, devices), and how many times the
//! kernel's out-of-memory killer struck inside a cgroup: read by the task shim, inside the sandbox,
//! from the task's own cgroup, when its command dies of `SIGKILL`.

use std::path::{Path, PathBuf};

/// The controllers every task's limits need.
const NEEDED_V2: [&str; 3] = ["memory", "cpu", "pids"];
const NEEDED_V1: [&str; 4] = ["memory", "cpu", "pids", "devices"];

/// The host's cgroup hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// cgroup v2: one hierarchy; devices are fenced by an eBPF program the runtime attaches.
    Unified,
    /// cgroup v1: one hierarchy per controller (also the "hybrid" layout, v1 controllers beside an
    /// empty v2 hierarchy).
    PerController,
}

impl Layout {
    /// The layout of the hierarchy mounted at `root` (`/sys/fs/cgroup`), or why tasks cannot be
    /// limited there.
    pub fn detect(root: &Path) -> Result<Layout, String> {
        let unified = root.join("cgroup.controllers");
        if let Ok(controllers) = std::fs::read_to_string(&unified) {
            let have: Vec<&str> = controllers.split_whitespace().collect();
            let missing: Vec<&str> = NEEDED_V2
                .iter()
                .copied()
                .filter(|c| !have.contains(c))
                .collect();
            if missing.is_empty() {
                return Ok(Layout::Unified);
            }
            return Err(format!(
                "the cgroup v2 hierarchy at {} lacks the {} controller(s)",
                root.display(),
                missing.join(", ")
            ));
        }
        let missing: Vec<&str> = NEEDED_V1
            .iter()
            .copied()
            .filter(|c| !root.join(c).join("tasks").exists())
            .collect();
        if missing.is_empty() {
            return Ok(Layout::PerController);
        }
        Err(format!(
            "no cgroup hierarchy at {} with the {} controller(s) (neither v2's cgroup.controllers nor v1's {}/<controller>/tasks)",
            root.display(),
            missing.join(", "),
            root.display()
        ))
    }

    /// The file that counts the out-of-memory kills of the cgroup mounted at `root`, as a task sees
    /// its own cgroup.
    pub fn oom_events_file(self, root: &Path) -> PathBuf {
        match self {
            Layout::Unified => root.join("memory.events"),
            Layout::PerController => root.join("memory").join("memory.oom_control"),
        }
    }

    /// The layout as a task sees its own cgroup at `root`, from which files are there.
    pub fn of_own_cgroup(root: &Path) -> Option<Layout> {
        if root.join("memory.events").exists() {
            Some(Layout::Unified)
        } else if root.join("memory").join("memory.oom_control").exists() {
            Some(Layout::PerController)
        } else {
            None
        }
    }
}

/// How many processes the out-of-memory killer has killed in the cgroup mounted at `root` (the
/// `oom_kill` line of v2's `memory.events` or v1's `memory.oom_control`); `None` when it cannot tell.
pub fn oom_kills(root: &Path) -> Option<u64> {
    let layout = Layout::of_own_cgroup(root)?;
    let text = std::fs::read_to_string(layout.oom_events_file(root)).ok()?;
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == "oom_kill").then(|| value.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_unified_hierarchy_is_told_by_its_controllers() {
        let root = tempfile::tempdir().unwrap();
        write(
            &root.path().join("cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        );
        assert_eq!(Layout::detect(root.path()), Ok(Layout::Unified));
        write(
            &root.path().join("cgroup.controllers"),
            "cpuset io hugetlb\n",
        );
        let why = Layout::detect(root.path()).unwrap_err();
        assert!(why.contains("lacks the memory, cpu, pids"), "{why}");
    }

    #[test]
    fn a_hierarchy_per_controller_needs_each_of_them() {
        let root = tempfile::tempdir().unwrap();
        for controller in ["memory", "cpu", "pids"] {
            write(&root.path().join(controller).join("tasks"), "");
        }
        let why = Layout::detect(root.path()).unwrap_err();
        assert!(why.contains("devices"), "{why}");
        write(&root.path().join("devices").join("tasks"), "");
        assert_eq!(Layout::detect(root.path()), Ok(Layout::PerController));
    }

    #[test]
    fn this_hosts_hierarchy_is_one_of_the_two_or_says_why_not() {
        match Layout::detect(Path::new("/sys/fs/cgroup")) {
            Ok(layout) => eprintln!("this host: {layout:?}"),
            Err(why) => assert!(why.contains("controller"), "{why}"),
        }
    }

    #[test]
    fn out_of_memory_kills_are_read_from_either_hierarchy() {
        let v2 = tempfile::tempdir().unwrap();
        write(
            &v2.path().join("memory.events"),
            "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n",
        );
        assert_eq!(oom_kills(v2.path()), Some(1));
        let v1 = tempfile::tempdir().unwrap();
        write(
            &v1.path().join("memory").join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
        );
        assert_eq!(oom_kills(v1.path()), Some(0));
        let none = tempfile::tempdir().unwrap();
        assert_eq!(oom_kills(none.path()), None);
    }
}
