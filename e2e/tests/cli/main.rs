//! The real `drover` binary against a real database, used through the CLI as a person would.

#![expect(clippy::unwrap_used, reason = "a test helper that fails should panic")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod dev;
mod fleet;

const DROVER: &str = env!("CARGO_BIN_EXE_drover-e2e");

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A server process, killed when dropped.
struct Server {
    child: Child,
    url: String,
    /// The admin token, when this start printed one.
    printed_token: Option<String>,
    /// What it printed up to its URL and token.
    lines: Vec<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The CLI config file the tests' `drover` processes use unless a test gives its own: never the
/// user's own (`drover dev` writes a context there).
fn isolated_config() -> PathBuf {
    std::env::temp_dir()
        .join(format!("drover-e2e-cli-{}", std::process::id()))
        .join("config.yaml")
}

/// Starts `drover <args>` and reads its stdout until it says where it listens.
fn start(args: &[&str], env: &[(&str, &str)]) -> Server {
    let mut command = Command::new(DROVER);
    command
        .env("DROVER_CONFIG", isolated_config())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .current_dir(repo_root());
    command
        .env_remove("DROVER_TOKEN")
        .env_remove("DROVER_SERVER")
        .env_remove("DROVER_ADMIN_TOKEN");
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("spawn drover");
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lines = Vec::new();
    let mut url = None;
    let mut printed_token = None;
    // `drover dev` prints its URL, then its token, then the CLI context it saved (which the tests read:
    // waiting for the token alone raced with the save on a loaded machine).
    let is_dev = args.contains(&"dev");
    let mut context_saved = false;
    while url.is_none() || (is_dev && (printed_token.is_none() || !context_saved)) {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let line = receiver
            .recv_timeout(remaining)
            .unwrap_or_else(|_| panic!("server did not start; it printed {lines:?}"));
        if let Some(rest) = line.strip_prefix("drover server listening on ") {
            url = Some(rest.trim().to_owned());
        } else if let Some(rest) = line.trim().strip_prefix("URL:") {
            url = Some(rest.trim().to_owned());
        } else if let Some(rest) = line.trim().strip_prefix("Admin token:") {
            printed_token = Some(rest.trim().to_owned());
        } else if line.trim().starts_with("drv_") {
            printed_token = Some(line.trim().to_owned());
        } else if line.trim().starts_with("CLI context:") {
            context_saved = true;
        }
        lines.push(line);
    }
    Server {
        child,
        url: url.unwrap(),
        printed_token,
        lines,
    }
}

fn drover(server: &str, token: &str, args: &[&str]) -> Output {
    Command::new(DROVER)
        .env("DROVER_CONFIG", isolated_config())
        .args(args)
        .env("DROVER_SERVER", server)
        .env("DROVER_TOKEN", token)
        .current_dir(repo_root())
        .output()
        .expect("run drover")
}

fn ok(output: Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "drover failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A failing command: exit code 1 and one line on stderr, which is returned.
fn fails(output: Output) -> String {
    assert_eq!(
        output.status.code(),
        Some(1),
        "expected failure, got {:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line of error, got: {stderr}"
    );
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_on_postgres_through_the_cli() {
    let database = drover_store::testing::create_postgres_database().await;
    let database_url = database.url.clone();
    let data_dir = tempfile::tempdir().unwrap();
    assert!(
        ok(Command::new(DROVER)
            .env("DROVER_CONFIG", isolated_config())
            .args(["migrate", "--database-url", &database_url])
            .output()
            .unwrap())
        .contains("migrations applied")
    );

    let server = start(
        &[
            "server",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &database_url,
            "--gateway-listen",
            "127.0.0.1:0",
            "--data-dir",
            data_dir.path().to_str().unwrap(),
        ],
        &[],
    );
    let admin = server
        .printed_token
        .clone()
        .expect("the first start prints the admin token");
    let url = server.url.clone();
    assert!(
        ok(drover(&url, &admin, &["whoami"]))
            .contains("admin (admin in tenant default, cluster administrator)")
    );

    let submitted = ok(drover(
        &url,
        &admin,
        &["submit", "examples/digits-mlp.yaml"],
    ));
    assert!(
        submitted.starts_with("job digits-mlp submitted: "),
        "{submitted}"
    );
    let table = ok(drover(&url, &admin, &["jobs"]));
    let header = table.lines().next().unwrap();
    assert!(
        header.starts_with("ID") && header.contains("STATE"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|line| line.contains("digits-mlp") && line.contains("queued")),
        "{table}"
    );
    let listed: serde_json::Value =
        serde_json::from_str(&ok(drover(&url, &admin, &["jobs", "-o", "json"]))).unwrap();
    let id = listed["jobs"][0]["id"].as_str().unwrap().to_owned();
    let shown = ok(drover(&url, &admin, &["job", &id]));
    assert!(
        shown.contains("State:     queued") && shown.contains("batch_size: 256"),
        "{shown}"
    );
    // A job is named by its id or by its exact name.
    let by_name = ok(drover(&url, &admin, &["job", "digits-mlp"]));
    assert!(
        by_name.contains(&id) && by_name.contains("State:     queued"),
        "{by_name}"
    );
    assert!(fails(drover(&url, &admin, &["job", "digits"])).contains("no job `digits`"));

    // A second tenant with a member: they see none of the admin's jobs.
    ok(drover(
        &url,
        &admin,
        &[
            "tenant",
            "create",
            "vision",
            "--guaranteed-gpus",
            "2",
            "--max-gpus",
            "8",
        ],
    ));
    let user: serde_json::Value = serde_json::from_str(&ok(drover(
        &url,
        &admin,
        &[
            "-o", "json", "user", "create", "alice", "--tenant", "vision", "--role", "member",
        ],
    )))
    .unwrap();
    let user_id = user["users"][0]["id"].as_str().unwrap();
    let token: serde_json::Value = serde_json::from_str(&ok(drover(
        &url,
        &admin,
        &["-o", "json", "token", "create", "laptop", "--user", user_id],
    )))
    .unwrap();
    let alice = token["secret"].as_str().unwrap();
    assert!(ok(drover(&url, alice, &["whoami"])).contains("alice (member in tenant vision)"));
    assert_eq!(
        ok(drover(&url, alice, &["jobs"])).lines().count(),
        1,
        "only the header"
    );
    assert!(fails(drover(&url, alice, &["job", &id])).contains("no job"));
    assert!(fails(drover(&url, alice, &["tenant", "create", "mine"])).contains("HTTP 403"));

    // Quotas per GPU model: set, listed, and refused with the field when inconsistent.
    let listed = ok(drover(
        &url,
        &admin,
        &[
            "tenant",
            "quota",
            "vision",
            "--guaranteed-gpus",
            "2",
            "--max-gpus",
            "8",
            "--flavour",
            "v100:guaranteed=2,max=4,lending-limit=1",
            "--flavour",
            "k80:max=6",
        ],
    ));
    assert!(listed.contains("v100 2/4 lends 1, k80 0/6"), "{listed}");
    let message = fails(drover(
        &url,
        &admin,
        &[
            "tenant",
            "quota",
            "vision",
            "--guaranteed-gpus",
            "2",
            "--flavour",
            "v100:guaranteed=3",
        ],
    ));
    assert!(
        message.contains("flavours") && message.contains("HTTP 422"),
        "{message}"
    );
    // A flag clap refuses: its own error, naming the value and why.
    let refused = drover(
        &url,
        &admin,
        &[
            "tenant",
            "quota",
            "vision",
            "--guaranteed-gpus",
            "2",
            "--flavour",
            "v100:most=3",
        ],
    );
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(message.contains("unknown key `most`"), "{message}");
    assert!(ok(drover(&url, &admin, &["tenants"])).contains("v100 2/4 lends 1"));

    // Bad input: one clear line, non-zero exit, nothing stored.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(repo_root().join("examples/reference/every-field.yaml"))
            .unwrap()
            .replace("batch_size: 256", "batch_size: -3"),
    )
    .unwrap();
    let message = fails(drover(&url, &admin, &["submit", bad.to_str().unwrap()]));
    assert!(
        message.contains("spec.train.batch_size") && message.contains("HTTP 422"),
        "{message}"
    );
    assert!(
        fails(drover(&url, &admin, &["submit", "no-such-file.yaml"]))
            .contains("cannot read no-such-file.yaml")
    );
    assert!(fails(drover(&url, "drv_wrong", &["jobs"])).contains("invalid token"));
    assert!(
        fails(drover("http://127.0.0.1:9", &admin, &["jobs"]))
            .contains("cannot reach the Drover server")
    );
    assert_eq!(
        ok(drover(&url, &admin, &["jobs", "-o", "json"]))
            .matches("\"id\"")
            .count(),
        1
    );

    // A resize says what the job now asks for.
    let resized = ok(drover(
        &url,
        &admin,
        &["resize", &id, "--workers", "1..2", "--ps", "0..1"],
    ));
    assert!(resized.contains("workers 1..2, PS 0..1"), "{resized}");
    // Pause and resume: the queued job stops waiting, then waits again; resuming it twice is refused.
    assert!(ok(drover(&url, &admin, &["pause", &id])).contains("job digits-mlp paused"));
    assert!(ok(drover(&url, &admin, &["resume", &id])).contains("job digits-mlp queued again"));
    assert!(
        fails(drover(&url, &admin, &["resume", &id])).contains("only a paused job can be resumed")
    );
    // Cancel, cancel again, and the events that tell the story.
    assert!(ok(drover(&url, &admin, &["cancel", &id])).contains("job digits-mlp cancelled"));
    assert!(fails(drover(&url, &admin, &["cancel", &id])).contains("cannot become `cancelled`"));
    let events = ok(drover(&url, &admin, &["events", &id]));
    assert!(
        events.contains("submitted")
            && events.contains("paused_by_user")
            && events.contains("resumed_by_user")
            && events.contains("cancelled_by_user"),
        "{events}"
    );

    // A restart keeps everything and prints no new token.
    drop(server);
    let again = start(
        &[
            "server",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &database_url,
            "--gateway-listen",
            "127.0.0.1:0",
            "--data-dir",
            data_dir.path().to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(again.printed_token, None);
    assert!(ok(drover(&again.url, &admin, &["job", &id])).contains("State:     cancelled"));
    assert!(ok(drover(&again.url, alice, &["whoami"])).contains("alice"));
}

/// A log that is not going to a terminal carries no colour codes (a redirected log is read as text).
#[test]
fn a_redirected_log_is_plain_text() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(DROVER)
        .args([
            "server",
            "--database-url",
            &format!("sqlite://{}/drover.db", dir.path().display()),
            "--listen",
            "127.0.0.1:0",
            "--gateway-listen",
            "127.0.0.1:0",
        ])
        .current_dir(dir.path())
        .env_remove("NO_COLOR")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    child.kill().unwrap();
    let output = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("drover server listening"), "{log}");
    assert!(!log.contains('\u{1b}'), "{log}");
}
