//! The server under abuse from outside: what an attacker with a network path (and, later in this
//! suite, a member's token) does to take it or a node down, replayed against the real program, each
//! refused or survived.
//!
//! - Connections that are opened and left idle, or that trickle a header line at a time (slowloris),
//!   to the REST port and the executor gateway, past the process's descriptor limit: the server keeps
//!   answering, and closes the trickling ones within its header-read timeout.
//! - A job of a few kilobytes whose YAML aliases expand to megabytes: refused at submission.
//! - A borrower's priority-1000 job against another tenant's guarantee (`preemption.rs`, with two
//!   executors): the guarantee holds and the scheduler settles.
//! - A stolen token revoked (`sessions.rs`): its dashboard session and the tokens minted with it end.
//! - Many users of one tenant following logs (`streams.rs`): the tenant's and the server's ceilings.
//!
//! The other items of issue #50 are replayed where their parts run: a train job that checkpoints
//! often, through `kill -9` of its executor and Postgres restarts, and a submission whose COMMIT is
//! never answered (`tests/executors/durability.rs`).

#![expect(clippy::unwrap_used, reason = "a test helper that fails should panic")]

mod preemption;
mod rest;
mod sessions;
mod streams;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A `drover server` process, killed when dropped.
struct Server {
    child: Child,
    url: String,
    gateway: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `drover server` on SQLite, on loopback, allowed `descriptors` open files.
fn server(descriptors: u32) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new("prlimit")
        .arg(format!("--nofile={descriptors}:{descriptors}"))
        .arg(drover_e2e::drover())
        .args([
            "server",
            "--database-url",
            &format!("sqlite://{}/drover.db", dir.path().display()),
            "--listen",
            "127.0.0.1:0",
            "--gateway-listen",
            "127.0.0.1:0",
            "--data-dir",
            &dir.path().display().to_string(),
        ])
        .env(
            "DROVER_ADMIN_TOKEN",
            "drv_abuse-test-admin-token-0123456789",
        )
        .env("DROVER_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn prlimit drover server (util-linux's prlimit)");
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let (mut url, mut gateway) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    while url.is_none() || gateway.is_none() {
        let line = receiver
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the server says where it listens");
        if let Some(rest) = line.strip_prefix("drover server listening on ") {
            url = Some(rest.to_owned());
        }
        if let Some(rest) = line.strip_prefix("executor gateway listening on ") {
            gateway = Some(rest.to_owned());
        }
    }
    Server {
        child,
        url: url.unwrap(),
        gateway: gateway.unwrap(),
        _dir: dir,
    }
}

fn address(url: &str) -> String {
    url.split_whitespace()
        .next()
        .unwrap_or_default()
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .to_owned()
}

/// Descriptors the process holds now.
fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| dir.count())
}

/// Lets this test hold more connections than the server may: a soft limit of `at_least`
/// descriptors (root raises the hard limit too).
fn allow_descriptors(at_least: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < at_least {
        setrlimit(Resource::RLIMIT_NOFILE, at_least, hard.max(at_least))
            .expect("raise this test's descriptor limit (run as root, or raise `ulimit -n`)");
    }
}

async fn healthz(url: &str) -> Result<reqwest::StatusCode, String> {
    reqwest::Client::new()
        .get(format!("{url}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map(|r| r.status())
        .map_err(|err| err.to_string())
}

/// 1,000 idle connections to the REST port, 300 to the gateway and 300 that send a request's
/// headers one line every 2 s, against a server allowed 1,024 descriptors: it keeps answering, its
/// descriptors stay under the limit, and it closes the trickling connections within its 10 s
/// header-read timeout (a slowloris held them for ever, and idle ones took every descriptor).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_trickling_connections_do_not_take_the_servers_descriptors() {
    allow_descriptors(8192);
    let server = server(1024);
    assert_eq!(healthz(&server.url).await, Ok(reqwest::StatusCode::OK));
    let rest = address(&server.url);
    let gateway = address(&server.gateway);
    // Connections the server does not accept (a full backlog) are given up after a second: the
    // checks below then say what the server still does.
    let connect = |to: String| async move {
        tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(to))
            .await
            .ok()
            .and_then(Result::ok)
    };
    let mut idle = Vec::new();
    for _ in 0..1000 {
        idle.extend(connect(rest.clone()).await);
    }
    for _ in 0..300 {
        idle.extend(connect(gateway.clone()).await);
    }
    let started = Instant::now();
    let mut trickles = Vec::new();
    for i in 0..300 {
        let rest = rest.clone();
        trickles.push(tokio::spawn(async move {
            let Ok(Ok(mut stream)) =
                tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&rest)).await
            else {
                return None;
            };
            let _ = stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                .await;
            let mut byte = [0u8; 1];
            for line in 0..30 {
                // Closed by the server: a read sees the end (or an error) instead of waiting.
                match tokio::time::timeout(Duration::from_secs(2), stream.read(&mut byte)).await {
                    Ok(Ok(0) | Err(_)) => return Some(started.elapsed()),
                    Ok(Ok(_)) => {}
                    Err(_) => {}
                }
                let header = format!("X-Slow-{i}-{line}: 1\r\n");
                if stream.write_all(header.as_bytes()).await.is_err() {
                    return Some(started.elapsed());
                }
            }
            None
        }));
    }
    // The server answers all along.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            healthz(&server.url).await,
            Ok(reqwest::StatusCode::OK),
            "with {} idle connections and 300 trickling",
            idle.len()
        );
        let held = open_descriptors(server.child.id());
        assert!(
            held < 1024,
            "the server holds {held} descriptors of its 1,024"
        );
    }
    let mut closed = Vec::new();
    for trickle in trickles {
        closed.push(trickle.await.unwrap());
    }
    let open = closed.iter().filter(|c| c.is_none()).count();
    assert_eq!(
        open, 0,
        "{open} trickling connections still open after a minute"
    );
    let slowest = closed.iter().flatten().max().copied().unwrap_or_default();
    assert!(
        slowest < Duration::from_secs(25),
        "the last trickling connection was closed after {slowest:?}"
    );
    assert_eq!(healthz(&server.url).await, Ok(reqwest::StatusCode::OK));
}

const ADMIN: &str = "drv_abuse-test-admin-token-0123456789";

/// A member's 750 KB-style body: a few kilobytes of YAML whose aliases expand, inside the alias
/// budget, to an `argv` of megabytes. It used to be stored (201) and then never reach its node (its
/// task past the executor's message limit ended the node's session at every try, for every tenant's
/// jobs there). Now it is refused at submission, and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_aliases_expand_to_megabytes_is_refused_at_submission() {
    let server = server(4096);
    let word = "x".repeat(4000);
    let argv = format!("&w \"{word}\", {}", vec!["*w"; 900].join(", "));
    let body = format!(
        "apiVersion: drover.dev/v1\nkind: DroverJob\nmetadata: {{name: bomb}}\n\
         spec:\n  type: command\n  command: {{argv: [{argv}]}}\n"
    );
    assert!(body.len() < 16 * 1024);
    let http = reqwest::Client::new();
    let reply = http
        .post(format!("{}/api/v1/jobs", server.url))
        .bearer_auth(ADMIN)
        .header("content-type", "application/yaml")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), reqwest::StatusCode::UNPROCESSABLE_ENTITY);
    let error: serde_json::Value = reply.json().await.unwrap();
    assert_eq!(error["error"]["field"], "(document)", "{error}");
    let jobs: serde_json::Value = http
        .get(format!("{}/api/v1/jobs", server.url))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 0, "{jobs}");
}
