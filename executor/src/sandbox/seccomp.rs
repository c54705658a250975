//! The default system-call filter of a task: everything a training program or a Python interpreter
//! calls is allowed, and what only serves to reach past the sandbox or into the kernel's wider
//! surface fails with `EPERM`. Written as a deny list, as systemd's `SystemCallFilter=~...` is, after
//! Docker's default profile's reasons: new namespaces (a user namespace hands an unprivileged process
//! the kernel's whole capability-checked surface), mounts, kernel modules and `kexec`, the clock,
//! swap and reboot, keyrings, eBPF and `perf_event_open`, `userfaultfd`, `io_uring`, and file handles.
//! Tasks have no capabilities and `no_new_privs`, so most of these would fail anyway; the filter keeps
//! the kernel code behind them out of reach. Filters apply to every architecture the CPU can run
//! (32-bit calls on x86-64 would otherwise pass unfiltered).

use oci_spec::OciSpecError;
use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg, LinuxSeccompArgBuilder,
    LinuxSeccompOperator, LinuxSyscall,
};

/// Calls that fail with `EPERM`.
pub const DENIED: &[&str] = &[
    // Namespaces and mounts.
    "unshare",
    "setns",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    // The kernel itself.
    "init_module",
    "finit_module",
    "delete_module",
    "create_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "syslog",
    "iopl",
    "ioperm",
    "vm86",
    "vm86old",
    "uselib",
    "lookup_dcookie",
    "quotactl",
    "quotactl_fd",
    "vhangup",
    // The clock.
    "settimeofday",
    "stime",
    "clock_settime",
    "clock_settime64",
    "clock_adjtime",
    "clock_adjtime64",
    "adjtimex",
    // Keyrings, eBPF, performance counters, fault handling in user space, io_uring.
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    // File handles (reading any file of a mounted filesystem by its handle).
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
];

/// `clone` flags that make a namespace: a `clone` with any of them fails with `EPERM`.
pub const NAMESPACE_FLAGS: [u64; 7] = [
    0x0002_0000, // CLONE_NEWNS
    0x0200_0000, // CLONE_NEWCGROUP
    0x0400_0000, // CLONE_NEWUTS
    0x0800_0000, // CLONE_NEWIPC
    0x1000_0000, // CLONE_NEWUSER
    0x2000_0000, // CLONE_NEWPID
    0x4000_0000, // CLONE_NEWNET
];

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

fn rule(names: &[&str], errno: u32, args: Option<Vec<LinuxSeccompArg>>) -> LinuxSyscall {
    let mut syscall = LinuxSyscall::default();
    syscall.set_names(names.iter().map(|n| (*n).to_owned()).collect());
    syscall.set_action(LinuxSeccompAction::ScmpActErrno);
    syscall.set_errno_ret(Some(errno));
    syscall.set_args(args);
    syscall
}

/// The architectures a process on this CPU can make calls as.
fn architectures() -> Vec<Arch> {
    if cfg!(target_arch = "x86_64") {
        vec![Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32]
    } else if cfg!(target_arch = "aarch64") {
        vec![Arch::ScmpArchAarch64, Arch::ScmpArchArm]
    } else {
        Vec::new()
    }
}

/// The filter every task runs under.
pub fn profile() -> Result<LinuxSeccomp, OciSpecError> {
    let mut syscalls = vec![rule(DENIED, EPERM, None)];
    // `clone`'s flags are its first argument on x86 and arm64 alike.
    for flag in NAMESPACE_FLAGS {
        let arg: LinuxSeccompArg = LinuxSeccompArgBuilder::default()
            .index(0usize)
            .value(flag)
            .value_two(flag)
            .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
            .build()?;
        syscalls.push(rule(&["clone"], EPERM, Some(vec![arg])));
    }
    // `clone3` passes its flags in memory, where a filter cannot look: it answers "not implemented",
    // and the C library falls back to `clone`.
    syscalls.push(rule(&["clone3"], ENOSYS, None));
    let mut seccomp = LinuxSeccomp::default();
    seccomp.set_default_action(LinuxSeccompAction::ScmpActAllow);
    seccomp.set_architectures(Some(architectures()).filter(|a| !a.is_empty()));
    seccomp.set_syscalls(Some(syscalls));
    Ok(seccomp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_allows_by_default_and_denies_namespaces_mounts_and_the_kernel() {
        let profile = serde_json::to_value(profile().unwrap()).unwrap();
        assert_eq!(profile["defaultAction"], "SCMP_ACT_ALLOW");
        let rules = profile["syscalls"].as_array().unwrap();
        let denied: Vec<&str> = rules[0]["names"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n.as_str())
            .collect();
        for name in [
            "unshare",
            "setns",
            "mount",
            "bpf",
            "kexec_load",
            "keyctl",
            "userfaultfd",
        ] {
            assert!(denied.contains(&name), "{name}");
        }
        // A clone that makes a user namespace fails; a plain one (threads, fork) is untouched.
        let user_ns = rules
            .iter()
            .find(|r| r["names"][0] == "clone" && r["args"][0]["value"] == 0x1000_0000)
            .expect("a rule for CLONE_NEWUSER");
        assert_eq!(user_ns["args"][0]["op"], "SCMP_CMP_MASKED_EQ");
        assert_eq!(user_ns["args"][0]["valueTwo"], 0x1000_0000);
        assert_eq!(user_ns["action"], "SCMP_ACT_ERRNO");
        let clone3 = rules.iter().find(|r| r["names"][0] == "clone3").unwrap();
        assert_eq!(clone3["errnoRet"], 38);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(
                profile["architectures"],
                serde_json::json!(["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"])
            );
        }
    }
}
