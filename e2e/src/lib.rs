//! Drover's end-to-end tests (`tests/`) and the live resize benchmark (`benches/resize.rs`): the real
//! `drover` program (this package's `drover-e2e` binary, the same code as the `drover` binary) run as
//! separate processes against real databases, driven through the CLI, REST and gRPC.
//!
//! This library is their shared harness: a `drover server` on a fresh Postgres database and two
//! `drover executor` processes with their own data directories, all real processes talking gRPC and
//! REST, and the REST calls the tests and the resize benchmark make.

#![expect(
    clippy::unwrap_used,
    reason = "test support: a failure should panic the test"
)]

mod ports;
mod postgres;
mod tls;

pub use ports::free_port;
pub use postgres::OwnPostgres;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
pub use tls::{TestAuthority, open_session, server_certificate, test_authority};

/// Says that test `test` did not run, and why: on standard error, and as a line `test<TAB>why` in the
/// file `DROVER_SKIPPED_TESTS` names (`scripts/test` sets it), so the run's summary counts and names
/// every skip instead of counting it as passed. A test calls it and returns.
pub fn skip(test: &str, why: &str) {
    eprintln!("skipped {test}: {why}");
    if let Some(path) = std::env::var_os("DROVER_SKIPPED_TESTS") {
        use std::io::Write;
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| writeln!(file, "{test}\t{why}"));
        if let Err(err) = written {
            eprintln!(
                "cannot record the skip in {}: {err}",
                Path::new(&path).display()
            );
        }
    }
}

/// Whether executors here run tasks in sandboxes (as root, with Debian's `runc`), as production
/// executors do; elsewhere they run with `--no-sandbox`, and the tests of the sandbox itself skip,
/// saying so. `DROVER_E2E_SANDBOX=off` turns it off on purpose (to compare).
pub fn sandboxes() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        if std::env::var("DROVER_E2E_SANDBOX").is_ok_and(|v| v == "off") {
            return false;
        }
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| out.stdout.starts_with(b"0\n"));
        let runc = Command::new("runc")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        root && runc
    })
}

/// The flags an executor of these tests starts with for its sandbox: none where it sandboxes tasks,
/// `--no-sandbox` where it cannot (see [`sandboxes`]).
pub fn sandbox_flags() -> &'static [&'static str] {
    if sandboxes() { &[] } else { &["--no-sandbox"] }
}

/// A Python that imports PyTorch, for the tests and benchmarks of the code teams bring:
/// `DROVER_TEST_PYTHON`, else `.tools/venv-python/bin/python` (which `scripts/test` makes from
/// Debian's Python, so that a sandboxed task can run it too); or why there is none.
pub fn torch_python() -> Result<PathBuf, String> {
    python_importing("torch")
}

/// The tests' Python (as [`torch_python`]) when it imports `module` (`torch`, `jax`); or why not.
pub fn python_importing(module: &str) -> Result<PathBuf, String> {
    let python = match std::env::var_os("DROVER_TEST_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => repo_root().join(".tools/venv-python/bin/python"),
    };
    let probe = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .map_err(|err| format!("{}: {err}", python.display()))?;
    if !probe.status.success() {
        return Err(format!(
            "{} cannot import {module}: {}",
            python.display(),
            String::from_utf8_lossy(&probe.stderr).trim()
        ));
    }
    Ok(python)
}

/// The `drover` program under test: this package's own build of it (`src/bin/drover-e2e.rs`, the
/// `drover` library's `main`), which Cargo builds before this package's tests and benchmarks. They
/// run from `target/<profile>/deps/`; the program sits one folder up.
pub fn drover() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test binary in target/<profile>/deps");
    dir.join(format!("drover-e2e{}", std::env::consts::EXE_SUFFIX))
}

pub const ADMIN_TOKEN: &str = "drv_e2e_executors_admin_token_0123456789";
/// The server's configured (reusable) enrolment token, which the executors enrol with.
pub const ENROLLMENT_TOKEN: &str = "e2e-enrollment-token-0123456789abcdef";
/// Steps between checkpoints in the test job.
pub const CHECKPOINT_EVERY: u64 = 300;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A child process killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct Proc {
    pub child: Child,
    pub lines: std::sync::mpsc::Receiver<String>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    pub fn spawn(args: &[&str]) -> Proc {
        Self::spawn_with_env(args, &[])
    }

    /// The same, with more environment variables.
    pub fn spawn_with_env(args: &[&str], env: &[(&str, &str)]) -> Proc {
        let mut child = Command::new(drover())
            .args(args)
            .envs(env.iter().copied())
            .current_dir(repo_root())
            .env_remove("DROVER_TOKEN")
            .env_remove("DROVER_SERVER")
            .env("DROVER_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("DROVER_ENROLLMENT_TOKEN", ENROLLMENT_TOKEN)
            .env("DROVER_CA_CERT", &test_authority().file)
            // `DROVER_E2E_LOG` (a `DROVER_LOG` filter) shows a test's servers at work.
            .env(
                "DROVER_LOG",
                std::env::var("DROVER_E2E_LOG").unwrap_or_else(|_| "warn".to_owned()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn drover");
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Proc { child, lines }
    }

    /// The rest of the first stdout line starting with `prefix`.
    pub fn wait_for_line(&self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(remaining)
                .unwrap_or_else(|_| panic!("no line starting with `{prefix}`"));
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.trim().to_owned();
            }
        }
    }
}

/// GET `path` of the server at `url` as the administrator; a non-2xx answer fails the test.
pub async fn admin_get(http: &reqwest::Client, url: &str, path: &str) -> Value {
    let response = http
        .get(format!("{url}{path}"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "GET {path}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

/// POST `body` to `path` of the server at `url` as the administrator; a non-2xx answer fails the
/// test.
pub async fn admin_post(http: &reqwest::Client, url: &str, path: &str, body: Value) -> Value {
    let response = http
        .post(format!("{url}{path}"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert!(status.is_success(), "POST {path}: {status} {body}");
    body
}

/// The tests' HTTP client. The server closes a connection that sends no request for 10 s (its
/// header-read timeout); a pooled connection idle half as long is not reused, so a request after a
/// pause never races that close (which reqwest reports as an incomplete message).
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(test_authority().pem.as_bytes()).expect("a certificate"),
        )
        .pool_idle_timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client")
}

/// Fields drop in order: executors and the server stop before their database and directories go.
#[derive(Debug)]
pub struct Cluster {
    pub executors: Vec<(String, Proc)>,
    pub server: Proc,
    pub database: drover_store::testing::TempPostgres,
    pub dir: tempfile::TempDir,
    pub url: String,
    pub gateway: String,
    /// The pin of the authority the gateway's certificates are issued by (`sha256:…`), which the
    /// harness's executors trust it by (`--gateway-ca-hash`); `None` for a plaintext gateway.
    pub gateway_pin: Option<String>,
    pub http: reqwest::Client,
    /// GPU slots each executor offers.
    pub slots: u32,
    /// More environment variables for executors (an object store's credentials).
    pub executor_env: Vec<(String, String)>,
}

impl Cluster {
    /// Starts the server with this heartbeat timeout; `gateway` fixes the executor gateway's address
    /// (a restart keeps it).
    pub fn start_server_with(
        database: &str,
        data_dir: &Path,
        gateway: &str,
        executor_timeout: &str,
    ) -> (Proc, String, String) {
        Self::start_server_configured(database, data_dir, gateway, executor_timeout, &[], &[])
    }

    /// The same, with more flags and environment variables.
    pub fn start_server_configured(
        database: &str,
        data_dir: &Path,
        gateway: &str,
        executor_timeout: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> (Proc, String, String) {
        // The API over HTTPS, as a cluster's (the test authority's certificate).
        let (cert, key) = server_certificate(&data_dir.with_extension("tls"));
        let mut args = vec![
            "server",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--gateway-listen",
            gateway,
            "--database-url",
            database,
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--executor-timeout",
            executor_timeout,
            "--stop-grace",
            "10s",
            "--tick",
            "500ms",
        ];
        args.extend_from_slice(extra);
        let server = Proc::spawn_with_env(&args, env);
        let url = server.wait_for_line("drover server listening on ");
        let gateway = server.wait_for_line("executor gateway listening on ");
        (server, url, gateway)
    }

    /// The gateway's address and its authority's pin, from the server's start-up line
    /// (`https://ADDR (mutual TLS; executors trust it with --gateway-ca-hash sha256:…)`).
    pub fn gateway_line(line: &str) -> (String, Option<String>) {
        let address = line
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned();
        let pin = line
            .split_whitespace()
            .find(|word| word.starts_with("sha256:"))
            .map(|pin| pin.trim_end_matches(')').to_owned());
        (address, pin)
    }

    pub async fn start() -> Cluster {
        Self::start_with_slots(1).await
    }

    /// Two executors of `slots` GPU slots (and twice as many CPUs) each.
    pub async fn start_with_slots(slots: u32) -> Cluster {
        Self::start_configured(slots, &[], &[]).await
    }

    /// The same, the server started with more flags and environment variables.
    pub async fn start_configured(slots: u32, extra: &[&str], env: &[(&str, &str)]) -> Cluster {
        Self::start_sharing_env(slots, extra, env, &[]).await
    }

    /// The same, `shared_env` given to the server and the executors alike.
    pub async fn start_sharing_env(
        slots: u32,
        extra: &[&str],
        env: &[(&str, &str)],
        shared_env: &[(&str, &str)],
    ) -> Cluster {
        let server_env: Vec<(&str, &str)> = env.iter().chain(shared_env).copied().collect();
        let database = drover_store::testing::create_postgres_database().await;
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let (server, url, gateway) = Self::start_server_configured(
            &database.url,
            &dir.path().join("server"),
            &format!("127.0.0.1:{port}"),
            "3s",
            extra,
            &server_env,
        );
        let (gateway, gateway_pin) = Self::gateway_line(&gateway);
        let mut cluster = Cluster {
            database,
            dir,
            server,
            url,
            gateway,
            gateway_pin,
            executors: Vec::new(),
            http: http_client(),
            slots,
            executor_env: shared_env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        for name in ["exec-a", "exec-b"] {
            cluster.start_executor(name);
        }
        cluster
            .wait_until(
                "both executors healthy",
                Duration::from_secs(30),
                async |c| (c.healthy_nodes().await == 2).then_some(()),
            )
            .await;
        cluster
    }

    /// `kill -9` of the server, and a new one on the same database and gateway address.
    pub fn restart_server(&mut self) {
        self.restart_server_configured(&[], &[]);
    }

    /// The same, the new server started with more flags and environment variables.
    pub fn restart_server_configured(&mut self, extra: &[&str], env: &[(&str, &str)]) {
        self.server.child.kill().unwrap();
        self.server.child.wait().unwrap();
        let gateway = self
            .gateway
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .to_owned();
        let (server, url, _) = Self::start_server_configured(
            &self.database.url,
            &self.dir.path().join("server"),
            &gateway,
            "3s",
            extra,
            env,
        );
        self.server = server;
        self.url = url;
    }

    /// A server on `postgres` (a test's own, which it may restart) with `executor_timeout`, and no
    /// executor yet.
    pub async fn on_own_postgres(postgres: &OwnPostgres, executor_timeout: &str) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let (server, url, gateway) = Self::start_server_with(
            &postgres.url(),
            &dir.path().join("server"),
            &format!("127.0.0.1:{port}"),
            executor_timeout,
        );
        let (gateway, gateway_pin) = Self::gateway_line(&gateway);
        Cluster {
            gateway_pin,
            executors: Vec::new(),
            server,
            // Only to satisfy the type: this cluster's database is `postgres`.
            database: drover_store::testing::create_postgres_database().await,
            dir,
            url,
            gateway,
            http: http_client(),
            slots: 1,
            executor_env: Vec::new(),
        }
    }

    /// `kill -9` of the executor `name`; it is no longer in `executors`.
    pub fn kill_executor(&mut self, name: &str) {
        let position = self
            .executors
            .iter()
            .position(|(executor, _)| executor == name)
            .unwrap();
        let (_, mut victim) = self.executors.remove(position);
        victim.child.kill().unwrap();
        victim.child.wait().unwrap();
    }

    /// Waits until the server answers `/readyz` (after its database came back, say).
    pub async fn wait_ready(&self) {
        self.wait_until("the API back", Duration::from_secs(60), async |c| {
            let ready = c.http.get(format!("{}/readyz", c.url)).send().await.ok()?;
            ready.status().is_success().then_some(())
        })
        .await;
    }

    /// Where a checkpoint the API lists (its `path`, relative to the checkpoint storage) lies on
    /// this machine: under the server's checkpoint directory.
    pub fn checkpoint_path(&self, listed: &Value) -> PathBuf {
        let root = self.dir.path().join("server").join("checkpoints");
        root.canonicalize().unwrap().join(listed.as_str().unwrap())
    }

    pub fn executor_dir(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn start_executor(&mut self, name: &str) {
        let gateway = self.gateway.clone();
        self.start_executor_via(name, &gateway);
    }

    /// An executor that dials `gateway` (a proxy in front of the server's, say).
    pub fn start_executor_via(&mut self, name: &str, gateway: &str) {
        let dir = self.executor_dir(name);
        let env: Vec<(&str, &str)> = self
            .executor_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let slots = self.slots.to_string();
        let cpus = (2 * self.slots).to_string();
        let mut args = vec![
            "executor",
            "--gateway",
            gateway,
            "--name",
            name,
            "--slots",
            &slots,
            "--cpus",
            &cpus,
            // More than this host may have: the tests' jobs ask for the default 8 GB a task, and
            // a five-task job needs three tasks on one node (each task's sandbox still holds it to
            // its own 8 GB).
            "--memory-gb",
            "64",
            "--data-dir",
            dir.to_str().unwrap(),
        ];
        let trust = self.gateway_trust();
        args.extend_from_slice(&trust);
        args.extend_from_slice(sandbox_flags());
        let executor = Proc::spawn_with_env(&args, &env);
        executor.wait_for_line("drover executor ");
        self.executors.push((name.to_owned(), executor));
    }

    /// How many nodes the server calls healthy.
    pub async fn healthy_nodes(&self) -> usize {
        let nodes = self.get("/api/v1/nodes").await;
        nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["health"] == "healthy")
            .count()
    }

    /// The flags that make an executor trust this cluster's gateway (none for a plaintext one).
    pub fn gateway_trust(&self) -> Vec<&str> {
        match &self.gateway_pin {
            Some(pin) => vec!["--gateway-ca-hash", pin],
            None => Vec::new(),
        }
    }

    /// A gRPC client of the gateway as the executor `node` would dial it: over TLS with that
    /// node's client certificate (from its data directory) where the gateway uses mutual TLS, and
    /// the authority its executor kept.
    pub async fn gateway_client(
        &self,
        node: &str,
    ) -> drover_proto::executor_gateway_client::ExecutorGatewayClient<tonic::transport::Channel>
    {
        let mut endpoint = tonic::transport::Endpoint::from_shared(self.gateway.clone()).unwrap();
        if self.gateway_pin.is_some() {
            let dir = self.executor_dir(node);
            let read = |file: &str| {
                std::fs::read_to_string(dir.join(file))
                    .unwrap_or_else(|err| panic!("{file} of {node}: {err}"))
            };
            endpoint = endpoint
                .tls_config(
                    tonic::transport::ClientTlsConfig::new()
                        .ca_certificate(tonic::transport::Certificate::from_pem(read(
                            "gateway-ca.pem",
                        )))
                        .identity(tonic::transport::Identity::from_pem(
                            read("node-cert.pem"),
                            read("node-key.pem"),
                        )),
                )
                .unwrap();
        }
        drover_proto::executor_gateway_client::ExecutorGatewayClient::new(
            endpoint.connect().await.unwrap(),
        )
    }

    pub async fn get(&self, path: &str) -> Value {
        admin_get(&self.http, &self.url, path).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Value {
        admin_post(&self.http, &self.url, path, body).await
    }

    pub async fn wait_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl AsyncFnMut(&Cluster) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(value) = check(self).await {
                return value;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Submits the example's training script, slowed so the test can act while it runs.
    pub async fn submit_training(&self, name: &str) -> String {
        let spec = json!({
            "apiVersion": "drover.dev/v1",
            "kind": "DroverJob",
            "metadata": {"name": name},
            "spec": {
                "type": "command",
                "command": {
                    "argv": ["python3", "examples/command/digits_softmax.py", "--steps", "3000",
                             "--checkpoint-every", CHECKPOINT_EVERY.to_string(), "--eval-every", "100",
                             "--step-sleep", "0.004", "--final-accuracy-min", "0.9"],
                    "env": {"PYTHONUNBUFFERED": "1"}
                },
                "resources": {"workers": {"min": 1, "max": 1}, "ps": {"min": 0, "max": 0},
                              "gpus_per_worker": 1, "cpus_per_worker": 1},
                "max_restarts": 2
            }
        });
        let created = self.post("/api/v1/jobs", spec).await;
        created["job"]["id"].as_str().unwrap().to_owned()
    }

    pub async fn job(&self, id: &str) -> Value {
        self.get(&format!("/api/v1/jobs/{id}")).await["job"].clone()
    }

    pub async fn events(&self, id: &str) -> Vec<Value> {
        self.get(&format!("/api/v1/jobs/{id}/events?limit=500"))
            .await["events"]
            .as_array()
            .unwrap()
            .clone()
    }

    pub async fn tasks(&self, id: &str) -> Vec<Value> {
        self.get(&format!("/api/v1/jobs/{id}/tasks")).await["tasks"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// The reason `drover queue` gives for waiting job `id`, once the queue lists one.
    pub async fn queue_reason(&self, id: &str) -> String {
        self.wait_until("the queue's reason", Duration::from_secs(30), async |c| {
            let queue = c.get("/api/v1/queue").await;
            queue["jobs"]
                .as_array()?
                .iter()
                .find(|j| j["id"] == id)
                .and_then(|j| j["reason"].as_str().map(str::to_owned))
        })
        .await
    }

    pub async fn logs(&self, id: &str) -> Vec<Value> {
        self.get(&format!("/api/v1/jobs/{id}/logs?limit=5000"))
            .await["logs"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// The steps at which job `id` reported metric `name`, in order.
    pub async fn metric_steps(&self, id: &str, name: &str) -> Vec<u64> {
        let metrics = self
            .get(&format!("/api/v1/jobs/{id}/metrics?name={name}"))
            .await;
        metrics["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["step"].as_u64().unwrap())
            .collect()
    }

    pub async fn checkpoints(&self, id: &str) -> Vec<Value> {
        self.get(&format!("/api/v1/jobs/{id}/checkpoints")).await["checkpoints"]
            .as_array()
            .unwrap()
            .clone()
    }

    pub async fn wait_for_state(&self, id: &str, state: &str, timeout: Duration) -> Value {
        self.wait_until(&format!("job {id} to be {state}"), timeout, async |c| {
            let job = c.job(id).await;
            assert!(
                !(job["state"] == "failed" && state != "failed"),
                "the job failed: {}",
                job["message"]
            );
            (job["state"] == state).then_some(job)
        })
        .await
    }

    /// Waits until the job runs with a recorded checkpoint at `min_step` or later; returns its node.
    pub async fn wait_for_checkpoint(&self, id: &str, min_step: u64) -> String {
        self.wait_for_state(id, "running", Duration::from_secs(60))
            .await;
        self.wait_until("a checkpoint", Duration::from_secs(90), async |c| {
            let checkpoints = c.checkpoints(id).await;
            checkpoints
                .iter()
                .any(|k| k["step"].as_u64().unwrap() >= min_step)
                .then_some(())
        })
        .await;
        let tasks = self.tasks(id).await;
        tasks.last().unwrap()["node"].as_str().unwrap().to_owned()
    }
}

/// `drover ARGS` against the cluster's server as the admin; its standard output (it must succeed).
pub fn drover_cli(cluster: &Cluster, args: &[&str]) -> String {
    let output = Command::new(drover())
        .args(args)
        .args(["--server", &cluster.url, "--token", ADMIN_TOKEN])
        .env("DROVER_CA_CERT", &test_authority().file)
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "drover {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Process ids whose command line or environment mention `dir` (the executor's data directory).
pub fn processes_under(dir: &Path) -> Vec<u32> {
    let needle = dir.to_str().unwrap().as_bytes();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let mentions = |file: &str| {
            std::fs::read(entry.path().join(file))
                .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
        };
        let zombie = std::fs::read_to_string(entry.path().join("stat")).is_ok_and(|stat| {
            stat.split(") ")
                .nth(1)
                .is_some_and(|rest| rest.starts_with('Z'))
        });
        if !zombie && (mentions("cmdline") || mentions("environ")) {
            found.push(pid);
        }
    }
    found
}

/// The step a generation checkpointed at when asked to stop (its "checkpointed at step N" line).
pub fn checkpointed_step(logs: &[Value], generation: u64) -> Option<u64> {
    logs.iter()
        .filter(|l| l["generation"] == generation)
        .find_map(|l| {
            l["line"]
                .as_str()?
                .strip_prefix("checkpointed at step ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
}

pub fn resumed_step(logs: &[Value], generation: u64) -> Option<u64> {
    logs.iter()
        .filter(|l| l["generation"] == generation)
        .find_map(|l| {
            l["line"]
                .as_str()?
                .strip_prefix("resumed from step ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
}

/// The example MLP's hidden layers.
pub const MLP: &[u32] = &[256, 128];

/// An MLP on the shipped digits as a job of 2 PS shards and 3 workers (BSP, AdamW).
pub fn ps_job(
    name: &str,
    hidden: &[u32],
    batch_size: u32,
    steps: u64,
    eval_every: u64,
    checkpoint_every: u64,
    max_restarts: u32,
) -> Value {
    json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": name},
        "spec": {
            "type": "train",
            "train": {
                "model": {"type": "mlp", "hidden": hidden},
                "dataset": {"type": "digits"},
                "optimizer": {"type": "adamw", "lr": 0.001, "weight_decay": 0.01},
                "lr_schedule": {"warmup_steps": 100, "decay": "cosine"},
                "batch_size": batch_size, "max_steps": steps, "eval_every": eval_every, "seed": 1
            },
            "resources": {"workers": {"min": 3, "max": 3}, "ps": {"min": 2, "max": 2},
                          "gpus_per_worker": 1, "cpus_per_worker": 1, "cpus_per_ps": 1},
            "distributed": {"mode": "ps", "sync": "bsp"},
            "checkpoint": {"every_steps": checkpoint_every, "keep_last": 2, "keep_best": 1},
            "max_restarts": max_restarts
        }
    })
}
