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
