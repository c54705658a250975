//! `drover dev` through the CLI: its local executors run a command job to the end, a restart keeps
//! its admin token and data, the CLI finds it through the data directory and the context it saved,
//! `login` and `context use`, generated names, and `--fresh` starting over.

use super::*;

#[test]
fn dev_mode_keeps_its_token_and_data() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let data = data_dir.to_str().unwrap();
    let config = dir.path().join("home").join("config.yaml");
    let config_env = [("DROVER_CONFIG", config.to_str().unwrap())];
    let first = start(
        &["--data-dir", data, "dev", "--listen", "127.0.0.1:0"],
        &config_env,
    );
    let token = std::fs::read_to_string(data_dir.join("admin-token"))
        .unwrap()
        .trim()
        .to_owned();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data_dir.join("admin-token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    assert_eq!(first.printed_token.as_deref(), Some(token.as_str()));
    let submitted = ok(drover(
        &first.url,
        &token,
        &["submit", "examples/sleep-command.yaml"],
    ));
    let id = submitted
        .split(": ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .to_owned();
    // dev runs local executors: the command job runs to the end.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok(drover(&first.url, &token, &["job", &id])).contains("State:     succeeded") {
        assert!(
            Instant::now() < deadline,
            "the dev executors did not run the job"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let logs = ok(drover(&first.url, &token, &["logs", &id]));
    assert!(logs.contains("[worker-0 g1] step 3"), "{logs}");
    // The last lines, one task's, a search (ASCII case ignored); a task that cannot be is refused.
    let tail = ok(drover(&first.url, &token, &["logs", &id, "--tail", "2"]));
    assert_eq!(
        tail.lines().collect::<Vec<_>>(),
        ["[worker-0 g1] step 2", "[worker-0 g1] step 3"],
        "{tail}"
    );
    let found = ok(drover(
        &first.url,
        &token,
        &["logs", &id, "--grep", "STEP 2", "--task", "worker-0"],
    ));
    assert_eq!(found.trim(), "[worker-0 g1] step 2", "{found}");
    let none = ok(drover(&first.url, &token, &["logs", &id, "--task", "ps-0"]));
    assert!(none.is_empty(), "{none}");
    let refused = fails(drover(&first.url, &token, &["logs", &id, "--task", "gpu"]));
    assert!(refused.contains("task"), "{refused}");
    let nodes = ok(drover(&first.url, &token, &["nodes"]));
    assert!(
        nodes.contains("local-0") && nodes.contains("local-1"),
        "{nodes}"
    );
    assert!(
        !first.lines.iter().any(|l| l.contains("earlier runs")),
        "{:?}",
        first.lines
    );
    drop(first);
    let second = start(
        &["--data-dir", data, "dev", "--listen", "127.0.0.1:0"],
        &config_env,
    );
    assert_eq!(
        second.printed_token.as_deref(),
        Some(token.as_str()),
        "the same token at every start"
    );
    // A restart says that it carries on from the data directory.
    assert!(
        second.lines.iter().any(|l| l.contains("earlier runs")),
        "{:?}",
        second.lines
    );
    // Without --token, the CLI finds dev's token in the data directory.
    let output = Command::new(DROVER)
        .args(["--data-dir", data, "--server", &second.url, "jobs"])
        .env("DROVER_CONFIG", isolated_config())
        .env_remove("DROVER_TOKEN")
        .output()
        .unwrap();
    assert!(ok(output).contains("hello-command"));

    // dev saved a context: the CLI works from any directory with no flags.
    let elsewhere = tempfile::tempdir().unwrap();
    let cli = |args: &[&str]| {
        Command::new(DROVER)
            .args(args)
            .current_dir(elsewhere.path())
            .env("DROVER_CONFIG", &config)
            .env_remove("DROVER_TOKEN")
            .env_remove("DROVER_SERVER")
            .output()
            .unwrap()
    };
    assert!(ok(cli(&["jobs"])).contains("hello-command-"));
    // Without --demo, each local executor advertises this host's CPUs (which they share).
    let host_cpus = std::thread::available_parallelism().unwrap().get();
    let nodes: serde_json::Value =
        serde_json::from_str(&ok(cli(&["nodes", "-o", "json"]))).unwrap();
    let cpus: Vec<u64> = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["cpus"].as_u64().unwrap())
        .collect();
    assert_eq!(cpus, [host_cpus as u64, host_cpus as u64], "{nodes}");
    let contexts = ok(cli(&["context", "list"]));
    assert!(
        contexts
            .lines()
            .any(|l| l.starts_with('*') && l.contains("dev") && l.contains(&second.url)),
        "{contexts}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&config).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the config file holds tokens");
    }
    // metadata.generateName: one file submitted twice makes two jobs, each with a fresh name.
    let example = repo_root().join("examples/sleep-command.yaml");
    let example = example.to_str().unwrap();
    let names: Vec<String> = (0..2)
        .map(|_| {
            let printed = ok(cli(&["submit", example]));
            printed
                .split_whitespace()
                .find(|word| word.starts_with("hello-command-"))
                .unwrap_or_else(|| panic!("no generated name in {printed}"))
                .to_owned()
        })
        .collect();
    assert_ne!(names[0], names[1]);
    assert!(
        names.iter().all(|n| n.len() == "hello-command-".len() + 5),
        "{names:?}"
    );

    // login checks the token and makes a context; `context use` switches back.
    let bad = cli(&[
        "login",
        "--server",
        &second.url,
        "--token",
        "drv_not-a-token-at-all",
        "--name",
        "x",
    ]);
    assert!(!bad.status.success());
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr).lines().count(),
        1,
        "{bad:?}"
    );
    assert!(!ok(cli(&["context", "list"])).contains(" x "));
    let login = ok(cli(&[
        "login",
        "--server",
        &second.url,
        "--token",
        &token,
        "--name",
        "again",
    ]));
    assert!(login.contains("context `again` is current"), "{login}");
    assert!(ok(cli(&["context", "use", "dev"])).contains("`dev` is current"));
    let unknown = cli(&["context", "use", "nope"]);
    assert_eq!(unknown.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert_eq!(
        stderr.trim(),
        "error: no context `nope`; the contexts are: again, dev"
    );

    // The dev server speaks plain HTTP: it refuses to listen off loopback, in one line saying why.
    let exposed = fails(cli(&["dev", "--listen", "0.0.0.0:0"]));
    assert!(
        exposed.contains("loopback only") && exposed.contains("drover server"),
        "{exposed}"
    );

    // `dev --help` offers no --server/--token (they are for the client verbs, whose help has them).
    let help = ok(cli(&["dev", "--help"]));
    assert!(
        !help.contains("--server") && !help.contains("--token") && help.contains("--fresh"),
        "{help}"
    );
    assert!(ok(cli(&["jobs", "--help"])).contains("--server"));

    // --fresh starts over: the earlier runs' jobs are gone, and it says what it removed.
    drop(second);
    let third = start(
        &[
            "--data-dir",
            data,
            "dev",
            "--listen",
            "127.0.0.1:0",
            "--fresh",
        ],
        &config_env,
    );
    assert!(
        third
            .lines
            .iter()
            .any(|l| l.starts_with("--fresh: removed")),
        "{:?}",
        third.lines
    );
    assert!(
        !third.lines.iter().any(|l| l.contains("carrying on")),
        "{:?}",
        third.lines
    );
    assert_eq!(
        third.printed_token.as_deref(),
        Some(token.as_str()),
        "the token stays"
    );
    assert!(!ok(cli(&["jobs"])).contains("hello-command"));
}

/// `drover dev` sandboxes its local executors' tasks where the host allows it, and says so; a task
/// that tries to read the server's data (its database, secret key and admin token, inside the
/// working directory the task sees, as `.drover` is in a checkout) finds nothing there.
#[test]
fn dev_hides_its_server_data_from_tasks() {
    if !drover_e2e::sandboxes() {
        drover_e2e::skip(
            "dev::dev_hides_its_server_data_from_tasks",
            "executors cannot sandbox tasks here (not root, or no runc)",
        );
        return;
    }
    // Inside the checkout (the tasks' working directory), as `.drover` is.
    let data_dir = repo_root()
        .join("target")
        .join(format!("dev-sandbox-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    let data = data_dir.to_str().unwrap().to_owned();
    let config = tempfile::tempdir().unwrap();
    let config_file = config.path().join("config.yaml");
    let config_env = [("DROVER_CONFIG", config_file.to_str().unwrap())];
    let dev = start(
        &[
            "--data-dir",
            &data,
            "dev",
            "--listen",
            "127.0.0.1:0",
            "--fresh",
        ],
        &config_env,
    );
    assert!(
        dev.lines
            .iter()
            .any(|l| l.contains("Sandboxes:") && l.contains("each task in its own")),
        "{:?}",
        dev.lines
    );
    assert!(data_dir.join("secret-key").exists());
    let token = dev.printed_token.clone().unwrap();
    let job = config.path().join("probe.yaml");
    std::fs::write(
        &job,
        format!(
            r#"apiVersion: drover.dev/v1
kind: DroverJob
metadata: {{name: probe-dev-data}}
spec:
  type: command
  command:
    argv: [sh, -c, 'for f in secret-key drover.db admin-token executors/local-0/node-credential; do if cat "$DATA/$f" > /dev/null 2>&1; then echo "probe $f: ALLOWED"; else echo "probe $f: denied"; fi; done']
    env: {{DATA: "{data}"}}
  resources: {{workers: {{min: 1, max: 1}}, gpus_per_worker: 1, cpus_per_worker: 1, memory_gb_per_task: 1}}
"#
        ),
    )
    .unwrap();
    let submitted = ok(drover(&dev.url, &token, &["submit", job.to_str().unwrap()]));
    let id = submitted
        .split(": ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok(drover(&dev.url, &token, &["job", &id])).contains("State:     succeeded") {
        assert!(Instant::now() < deadline, "the probe did not run");
        std::thread::sleep(Duration::from_millis(300));
    }
    let logs = ok(drover(&dev.url, &token, &["logs", &id]));
    for file in [
        "secret-key",
        "drover.db",
        "admin-token",
        "executors/local-0/node-credential",
    ] {
        assert!(logs.contains(&format!("probe {file}: denied")), "{logs}");
    }
    drop(dev);
    let _ = std::fs::remove_dir_all(&data_dir);
}
