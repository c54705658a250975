//! Trust between the server, its executors and the tasks, with real processes: executors enrol once and
//! authenticate with their node credential; a revoked node is shut out; a tenant secret reaches the
//! task's process and nothing else.

use super::harness::*;
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};

/// Runs `drover executor` until it exits (within 30 s); its exit status and standard error.
fn executor_that_exits(cluster: &Cluster, name: &str, token: Option<&str>) -> (bool, String) {
    let mut command = Command::new(drover());
    command
        .args(["executor", "--gateway", &cluster.gateway, "--name", name])
        .args(["--slots", "1", "--memory-gb", "64", "--data-dir"])
        .arg(cluster.executor_dir(name))
        .args(sandbox_flags())
        .args(cluster.gateway_trust())
        .env_remove("DROVER_ENROLLMENT_TOKEN")
        .env("DROVER_LOG", "warn");
    if let Some(token) = token {
        command.args(["--enrollment-token", token]);
    }
    let mut child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "executor {name} did not stop");
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Starts executor `name` with this enrolment token and waits until it is healthy.
async fn enrol_and_run(cluster: &mut Cluster, name: &str, token: &str) {
    let data_dir = cluster.executor_dir(name);
    let mut args = vec![
        "executor",
        "--gateway",
        &cluster.gateway,
        "--name",
        name,
        "--slots",
        "1",
        "--memory-gb",
        "64",
        "--enrollment-token",
        token,
        "--data-dir",
        data_dir.to_str().unwrap(),
    ];
    args.extend_from_slice(sandbox_flags());
    args.extend(cluster.gateway_trust());
    let executor = Proc::spawn(&args);
    executor.wait_for_line("drover executor ");
    cluster.executors.push((name.to_owned(), executor));
    cluster
        .wait_until(
            &format!("{name} healthy"),
            Duration::from_secs(30),
            async |c| (node_health(c, name).await.as_deref() == Some("healthy")).then_some(()),
        )
        .await;
}

async fn node_health(cluster: &Cluster, name: &str) -> Option<String> {
    let nodes = cluster.get("/api/v1/nodes").await;
    nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .map(|n| n["health"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_enrol_once_and_a_revoked_node_is_shut_out() {
    let mut cluster = Cluster::start().await;

    // Neither a credential nor an enrolment token: it stops at once and says what to do.
    let (ok, stderr) = executor_that_exits(&cluster, "stray", None);
    assert!(!ok);
    assert!(stderr.contains("not enrolled"), "{stderr}");
    let (ok, stderr) = executor_that_exits(&cluster, "stray", Some("dre_guessed"));
    assert!(!ok);
    assert!(stderr.contains("cannot enrol"), "{stderr}");
    assert_eq!(
        node_health(&cluster, "stray").await,
        None,
        "a stray node registered"
    );

    // A one-time token minted over the API enrols exactly one executor, which keeps its credential.
    let minted = cluster
        .post(
            "/api/v1/enrollment-tokens",
            json!({"name": "exec-c", "uses": 1, "expires_in": "10m"}),
        )
        .await;
    let once = minted["secret"].as_str().unwrap().to_owned();
    enrol_and_run(&mut cluster, "exec-c", &once).await;
    let tokens = cluster.get("/api/v1/enrollment-tokens").await;
    assert_eq!(tokens["enrollment_tokens"][0]["uses_left"], 0);
    assert!(!tokens.to_string().contains(&once));
    let credential =
        std::fs::read_to_string(cluster.executor_dir("exec-c").join("node-credential")).unwrap();
    assert!(credential.starts_with("drn_"));
    let (ok, stderr) = executor_that_exits(&cluster, "exec-d", Some(&once));
    assert!(
        !ok && stderr.contains("cannot enrol"),
        "a spent token enrolled again: {stderr}"
    );

    // Revoked: its session ends, it cannot come back with its old credential or its spent token,
    // and the server declares the node lost.
    let revoked = cluster.post("/api/v1/nodes/exec-c/revoke", json!({})).await;
    assert_eq!(revoked["revoked_credentials"], 1);
    assert_eq!(revoked["disconnected"], true);
    let (_, mut executor) = cluster.executors.pop().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = executor.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the revoked executor kept running"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success());
    cluster
        .wait_until("exec-c lost", Duration::from_secs(30), async |c| {
            (node_health(c, "exec-c").await.as_deref() != Some("healthy")).then_some(())
        })
        .await;
    // The server's reusable token does not bring a revoked node back; a token minted for it does.
    let (ok, stderr) = executor_that_exits(&cluster, "exec-c", Some(ENROLLMENT_TOKEN));
    assert!(!ok && stderr.contains("was revoked"), "{stderr}");
    let bound = cluster
        .post(
            "/api/v1/enrollment-tokens",
            json!({"name": "exec-c again", "node": "exec-c"}),
        )
        .await;
    assert_eq!(bound["enrollment_token"]["node"], "exec-c");
    let secret = bound["secret"].as_str().unwrap().to_owned();
    let (ok, stderr) = executor_that_exits(&cluster, "exec-e", Some(&secret));
    assert!(
        !ok && stderr.contains("cannot enrol"),
        "a token for exec-c enrolled exec-e: {stderr}"
    );
    enrol_and_run(&mut cluster, "exec-c", &secret).await;
    // The other executors, enrolled with the server's token, are untouched.
    assert_eq!(
        node_health(&cluster, "exec-a").await.as_deref(),
        Some("healthy")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_the_tasks_process_and_nothing_else() {
    let cluster = Cluster::start().await;
    const VALUE: &str = "s3cr3t-Value-4417";
    let put = cluster
        .http
        .put(format!("{}/api/v1/secrets/api-key", cluster.url))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({ "value": VALUE }))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    let put: Value = put.json().await.unwrap();
    assert!(!put.to_string().contains(VALUE));

    let job = |name: &str, secret: &str| {
        json!({
            "apiVersion": "drover.dev/v1",
            "kind": "DroverJob",
            "metadata": {"name": name},
            "spec": {
                "type": "command",
                // Prints the value reversed, so the log proves it arrived without holding it, and
                // whether the executor's own credentials leaked into the task's environment.
                "command": {
                    "argv": ["python3", "-c", "import os; print('reversed', os.environ['API_KEY'][::-1], os.environ['PLAIN'], any(k in os.environ for k in ('DROVER_ENROLLMENT_TOKEN', 'DROVER_ADMIN_TOKEN')))"],
                    "env": {"API_KEY": {"secret": secret}, "PLAIN": "visible"}
                },
                "resources": {"workers": {"min": 1, "max": 1}, "gpus_per_worker": 0, "cpus_per_worker": 1}
            }
        })
    };
    let missing = cluster
        .http
        .post(format!("{}/api/v1/jobs", cluster.url))
        .bearer_auth(ADMIN_TOKEN)
        .json(&job("typo", "api-kee"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 422);
    let missing: Value = missing.json().await.unwrap();
    assert_eq!(missing["error"]["field"], "spec.command.env.API_KEY.secret");

    let created = cluster
        .post("/api/v1/jobs", job("uses-secret", "api-key"))
        .await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(60))
        .await;
    let reversed: String = VALUE.chars().rev().collect();
    let logs = cluster.logs(&id).await;
    assert!(
        logs.iter()
            .any(|l| l["line"] == format!("reversed {reversed} visible False")),
        "{logs:?}"
    );
    let job_view = cluster.job(&id).await;
    assert_eq!(
        job_view["spec"]["spec"]["command"]["env"]["API_KEY"],
        json!({"secret": "api-key"})
    );
    for shown in [
        job_view.to_string(),
        serde_json::to_string(&cluster.events(&id).await).unwrap(),
        cluster.get("/api/v1/secrets").await.to_string(),
        serde_json::to_string(&cluster.tasks(&id).await).unwrap(),
    ] {
        assert!(!shown.contains(VALUE), "the value was shown: {shown}");
    }
    // At rest it is sealed.
    let pool = sqlx::PgPool::connect(&cluster.database.url).await.unwrap();
    let (ciphertext,): (Vec<u8>,) = sqlx::query_as("SELECT ciphertext FROM secrets")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(
        !ciphertext
            .windows(VALUE.len())
            .any(|w| w == VALUE.as_bytes())
    );
}

/// Opens a gateway session with `credential` that registers as `node` with `gpus` GPUs of `memory_gb`
/// each; the server's answer (the stream, or the refusal).
async fn register_with(
    cluster: &Cluster,
    credential: &str,
    node: &str,
    gpus: u32,
    memory_gb: f64,
) -> Result<(), tonic::Status> {
    // Over mutual TLS with the node's certificate and key, as a thief reading its data directory has.
    let mut client = cluster.gateway_client(node).await;
    open_session(&mut client, credential, node, gpus, memory_gb).await
}

/// A node's stolen credential (read from the executor's data directory, as an unsandboxed task
/// could) neither displaces the node's live executor nor inflates the node: a second session is
/// refused while the first is live (it used to take the node over, and the jobs placed there with
/// their secrets), and once the node is gone the credential still advertises no more than the node
/// was enrolled with (8 GPUs of 10⁶ GB used to be taken on any claim).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stolen_node_credential_neither_displaces_the_node_nor_inflates_it() {
    let mut cluster = Cluster::start().await;
    let stolen = std::fs::read_to_string(cluster.executor_dir("exec-a").join("node-credential"))
        .unwrap()
        .trim()
        .to_owned();
    let refused = register_with(&cluster, &stolen, "exec-a", 1, 0.0)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::AlreadyExists, "{refused:?}");
    assert!(
        refused.message().contains("already has a live session"),
        "{refused:?}"
    );
    // The real executor keeps its session and runs what it is given.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        node_health(&cluster, "exec-a").await.as_deref(),
        Some("healthy")
    );
    cluster.post("/api/v1/nodes/exec-b/cordon", json!({})).await;
    let job = cluster.submit_training("after-the-theft").await;
    let node = cluster.wait_for_checkpoint(&job, 100).await;
    assert_eq!(node, "exec-a");

    // With the node's executor gone, the credential registers only as what the node was.
    cluster.kill_executor("exec-a");
    let inflated = register_with(&cluster, &stolen, "exec-a", 8, 1e6)
        .await
        .unwrap_err();
    assert_eq!(
        inflated.code(),
        tonic::Code::PermissionDenied,
        "{inflated:?}"
    );
    assert!(
        inflated.message().contains("8 GPUs (enrolled with 1)"),
        "{inflated:?}"
    );
}
