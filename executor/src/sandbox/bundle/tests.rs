//! The sandbox's configuration, rule by rule.

use super::*;
use serde_json::Value;

fn task() -> Confinement {
    Confinement {
        args: vec!["/opt/drover/drover".into(), "task-shim".into()],
        env: vec![("DROVER_RANK".into(), "0".into())],
        cwd: "/work/repo".into(),
        hostname: "digits-worker-0".into(),
        uid: 1_000_000_007,
        gid: 1_000_004_242,
        read_write: vec![
            "/work/repo/.drover/executors/a/tasks/job-g1-worker-0".into(),
            "/work/repo/.drover/checkpoints/job".into(),
        ],
        read_only: vec!["/work/repo".into(), "/opt/drover/drover".into()],
        placed: Vec::new(),
        hidden: vec![
            "/work/repo/.drover".into(),
            "/var/lib/drover-executor".into(),
        ],
        memory_limit_bytes: 8 << 30,
        cpus: 4,
        pids_max: 4096,
        open_files: 65_536,
        devices: vec![
            Device {
                path: "/dev/nvidiactl".into(),
                major: 195,
                minor: 255,
            },
            Device {
                path: "/dev/nvidia3".into(),
                major: 195,
                minor: 3,
            },
        ],
        cgroups_path: "/drover/node-a/job-g1-worker-0".into(),
        layout: Layout::PerController,
        rootfs: "/var/lib/drover/sandbox/rootfs".into(),
        system_dirs: vec!["/usr".into(), "/etc".into(), "/opt".into()],
    }
}

fn json(task: &Confinement) -> Value {
    serde_json::to_value(config(task).unwrap()).unwrap()
}

fn destinations(config: &Value) -> Vec<String> {
    config["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["destination"].as_str().unwrap().to_owned())
        .collect()
}

fn mount<'a>(config: &'a Value, destination: &str) -> &'a Value {
    config["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["destination"] == destination)
        .unwrap_or_else(|| panic!("no mount at {destination}"))
}

fn options(mount: &Value) -> Vec<&str> {
    mount["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect()
}

#[test]
fn the_task_sees_the_system_read_only_its_own_folders_read_write_and_the_data_folders_masked() {
    let config = json(&task());
    assert_eq!(config["root"]["readonly"], true);
    assert_eq!(config["root"]["path"], "/var/lib/drover/sandbox/rootfs");
    for dir in ["/usr", "/etc", "/opt", "/work/repo", "/opt/drover/drover"] {
        let bind = mount(&config, dir);
        assert_eq!(bind["type"], "bind", "{dir}");
        assert!(options(bind).contains(&"ro"), "{dir} read-only");
    }
    for dir in [
        "/work/repo/.drover/executors/a/tasks/job-g1-worker-0",
        "/work/repo/.drover/checkpoints/job",
    ] {
        assert!(
            options(mount(&config, dir)).contains(&"rw"),
            "{dir} writable"
        );
    }
    // The folder of the server's and the executors' data, inside the working directory, is an empty
    // file system of root's; the task's own folders inside it show through.
    let mask = mount(&config, "/work/repo/.drover");
    assert_eq!(mask["type"], "tmpfs");
    assert!(options(mask).contains(&"mode=755"));
    let order = destinations(&config);
    let at = |path: &str| order.iter().position(|d| d == path).unwrap();
    assert!(at("/work/repo") < at("/work/repo/.drover"));
    assert!(at("/work/repo/.drover") < at("/work/repo/.drover/checkpoints/job"));
    assert!(
        !order.iter().any(|d| d == "/var/lib/drover-executor"),
        "a hidden path nothing shows needs no mask"
    );
    // Device nodes work in /dev only.
    assert!(!options(mount(&config, "/dev")).contains(&"nodev"));
    assert!(options(mount(&config, "/dev/shm")).contains(&"nodev"));
    // A private /tmp, bounded by the memory limit, before anything under it.
    let tmp = mount(&config, "/tmp");
    assert_eq!(tmp["type"], "tmpfs");
    assert!(options(tmp).contains(&"size=8589934592"));
    assert!(at("/tmp") < at("/work/repo"));
}

#[test]
fn folders_under_tmp_are_mounted_after_the_private_tmp() {
    let mut task = task();
    task.read_write = vec!["/tmp/e2e/exec-a/tasks/t".into()];
    task.read_only = vec!["/tmp/e2e/repo".into()];
    let order = destinations(&json(&task));
    let at = |path: &str| order.iter().position(|d| d == path).unwrap();
    assert!(at("/tmp") < at("/tmp/e2e/repo"));
    assert!(at("/tmp") < at("/tmp/e2e/exec-a/tasks/t"));
}

#[test]
fn the_task_runs_as_its_own_user_without_capabilities_or_new_privileges() {
    let config = json(&task());
    let process = &config["process"];
    assert_eq!(process["user"]["uid"], 1_000_000_007);
    assert_eq!(process["user"]["gid"], 1_000_004_242);
    assert_eq!(process["user"]["additionalGids"], serde_json::json!([]));
    assert_eq!(process["user"]["umask"], 0o007);
    assert_eq!(process["noNewPrivileges"], true);
    for set in [
        "bounding",
        "effective",
        "inheritable",
        "permitted",
        "ambient",
    ] {
        assert_eq!(process["capabilities"][set], serde_json::json!([]), "{set}");
    }
    assert_eq!(process["terminal"], false);
    assert_eq!(process["cwd"], "/work/repo");
    assert_eq!(process["env"], serde_json::json!(["DROVER_RANK=0"]));
    assert_eq!(
        config["linux"]["seccomp"]["defaultAction"],
        "SCMP_ACT_ALLOW"
    );
}

#[test]
fn its_own_namespaces_but_the_hosts_network_and_a_cgroup_namespace_only_on_v2() {
    let types = |config: &Value| -> Vec<String> {
        config["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap().to_owned())
            .collect()
    };
    let v1 = types(&json(&task()));
    assert_eq!(v1, ["pid", "ipc", "uts", "mount"]);
    let mut unified = task();
    unified.layout = Layout::Unified;
    assert_eq!(
        types(&json(&unified)),
        ["pid", "ipc", "uts", "mount", "cgroup"]
    );
}

#[test]
fn the_cgroup_holds_its_memory_cpus_processes_and_only_its_own_gpus() {
    let config = json(&task());
    let resources = &config["linux"]["resources"];
    assert_eq!(resources["memory"]["limit"], 8i64 << 30);
    assert_eq!(resources["memory"]["swap"], 8i64 << 30, "no swap past it");
    assert_eq!(resources["cpu"]["quota"], 400_000);
    assert_eq!(resources["cpu"]["period"], 100_000);
    assert_eq!(resources["pids"]["limit"], 4096);
    let rules = resources["devices"].as_array().unwrap();
    assert_eq!(rules[0]["allow"], false, "everything refused first");
    assert_eq!(rules[0]["access"], "rwm");
    let allowed: Vec<(i64, i64)> = rules[1..]
        .iter()
        .map(|r| (r["major"].as_i64().unwrap(), r["minor"].as_i64().unwrap()))
        .collect();
    assert_eq!(allowed, [(195, 255), (195, 3)]);
    let nodes: Vec<&str> = config["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["/dev/nvidiactl", "/dev/nvidia3"]);
    assert_eq!(
        config["linux"]["cgroupsPath"],
        "/drover/node-a/job-g1-worker-0"
    );
}

#[test]
fn no_limit_is_written_for_what_the_server_did_not_say() {
    let mut task = task();
    task.memory_limit_bytes = 0;
    task.cpus = 0;
    task.devices.clear();
    let config = json(&task);
    let resources = &config["linux"]["resources"];
    assert!(resources["memory"].is_null());
    assert!(resources["cpu"].is_null());
    assert_eq!(resources["devices"].as_array().unwrap().len(), 1);
    assert!(
        !options(mount(&config, "/tmp"))
            .iter()
            .any(|o| o.starts_with("size="))
    );
}

#[test]
fn an_images_root_shows_the_program_and_its_libraries_read_only_under_drover() {
    let mut task = task();
    task.rootfs = "/var/lib/drover-executor/images/roots/sha256_ab/rootfs".into();
    task.system_dirs = Vec::new();
    task.placed = vec![
        ("/opt/drover/drover".into(), "/.drover/drover".into()),
        ("/usr/lib/x86_64-linux-gnu".into(), "/.drover/lib0".into()),
    ];
    let spec = config(&task).unwrap();
    let mounts = spec.mounts().as_ref().unwrap();
    let at = |path: &str| {
        mounts
            .iter()
            .find(|m| m.destination() == Path::new(path))
            .unwrap_or_else(|| panic!("no mount at {path}"))
    };
    let lib = at("/.drover/lib0");
    assert_eq!(
        lib.source().as_deref(),
        Some(Path::new("/usr/lib/x86_64-linux-gnu"))
    );
    assert!(lib.options().as_ref().unwrap().contains(&"ro".to_owned()));
    assert_eq!(
        at("/.drover/drover").source().as_deref(),
        Some(Path::new("/opt/drover/drover"))
    );
    // None of the host's system folders: the image has its own.
    assert!(mounts.iter().all(|m| m.destination() != Path::new("/usr")));
    assert_eq!(
        spec.root().as_ref().unwrap().path(),
        Path::new("/var/lib/drover-executor/images/roots/sha256_ab/rootfs")
    );
    assert_eq!(spec.root().as_ref().unwrap().readonly(), Some(true));
}
