//! Checkpoints in an object store: the server and two executors that share no filesystem, an
//! S3-compatible store between them (moto's S3 server, from PyPI, installed by scripts/test). A
//! parameter-server job checkpoints on one node, is moved off it by a drain, and resumes on the other
//! from the store; retention deletes from the store what it deletes locally; the API downloads a
//! checkpoint straight from the store.

use super::harness::{
    ADMIN_TOKEN, Cluster, MLP, checkpointed_step, free_port, ps_job, repo_root, resumed_step, skip,
};
use serde_json::json;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BUCKET: &str = "drover-checkpoints";

/// The S3 server: `MOTO_SERVER`, or the one scripts/test installs into .tools/venv-s3.
fn moto_server() -> PathBuf {
    std::env::var_os("MOTO_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".tools/venv-s3/bin/moto_server"))
}

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts an S3 server on a free port with the bucket made; returns it and its endpoint.
async fn start_s3() -> (Killed, String) {
    let program = moto_server();
    assert!(
        program.exists(),
        "no S3 server at {}: run scripts/test (it installs PyPI's moto into .tools/venv-s3), \
         set MOTO_SERVER, or DROVER_S3_TESTS=skip",
        program.display()
    );
    let port = free_port();
    let child = Command::new(&program)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto_server");
    let server = Killed(child);
    let endpoint = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for attempt in 0.. {
        // Moto makes a bucket on an unsigned PUT.
        match http.put(format!("{endpoint}/{BUCKET}")).send().await {
            Ok(response) if response.status().is_success() => break,
            _ if attempt < 150 => tokio::time::sleep(Duration::from_millis(200)).await,
            other => panic!("the S3 server did not come up: {other:?}"),
        }
    }
    (server, endpoint)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_in_an_object_store_carry_a_job_between_nodes_that_share_no_disk() {
    if std::env::var("DROVER_S3_TESTS").as_deref() == Ok("skip") {
        skip(
            "object_store::checkpoints_in_an_object_store_carry_a_job_between_nodes_that_share_no_disk",
            "DROVER_S3_TESTS=skip",
        );
        return;
    }
    let (_s3, endpoint) = start_s3().await;
    let store = format!("s3://{BUCKET}/ckpt");
    let credentials = [
        ("AWS_ACCESS_KEY_ID", "drover-test"),
        ("AWS_SECRET_ACCESS_KEY", "drover-test-secret"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
    ];
    let cluster =
        Cluster::start_sharing_env(2, &["--checkpoint-store", &store], &[], &credentials).await;

    // One PS shard and two workers: they fit on one node, so the drain below moves all of them.
    let mut spec = ps_job("digits-s3", MLP, 128, 1500, 500, 100, 0);
    spec["spec"]["resources"]["workers"] = json!({"min": 2, "max": 2});
    spec["spec"]["resources"]["ps"] = json!({"min": 1, "max": 1});
    let created = cluster.post("/api/v1/jobs", spec).await;
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    let node = cluster.wait_for_checkpoint(&id, 100).await;
    let first = cluster.checkpoints(&id).await[0].clone();
    assert!(
        first["path"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{id}/g1/step-")),
        "listed where it is in the store, relative to its root: {first}"
    );
    let nodes: std::collections::BTreeSet<String> = cluster
        .tasks(&id)
        .await
        .iter()
        .map(|t| t["node"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(nodes.len(), 1, "all three tasks on one node: {nodes:?}");

    cluster
        .post(&format!("/api/v1/nodes/{node}/drain"), json!({}))
        .await;
    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(240))
        .await;
    assert_eq!(done["generation"], 2);
    let tasks = cluster.tasks(&id).await;
    let other = tasks.iter().find(|t| t["generation"] == 2).unwrap()["node"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(other, node);

    // Generation 2 resumed exactly where generation 1 stopped, from a copy the other node fetched.
    let logs = cluster.logs(&id).await;
    let stopped_at = checkpointed_step(&logs, 1).expect("generation 1 checkpointed on SIGTERM");
    assert_eq!(resumed_step(&logs, 2), Some(stopped_at));
    let fetched = cluster
        .executor_dir(&other)
        .join("checkpoints")
        .join(&id)
        .join("g1")
        .join(format!("step-{stopped_at:08}"));
    assert!(
        fetched.join("manifest.json").exists(),
        "{} was downloaded",
        fetched.display()
    );
    // The PS shard's files came to the leader over the wire, not through a shared directory.
    for file in ["ps-0.model.safetensors", "ps-0.optimizer.safetensors"] {
        assert!(fetched.join(file).exists(), "{file}");
    }
    assert!(
        !cluster.dir.path().join("server/checkpoints").exists(),
        "the server wrote no checkpoint directory of its own"
    );

    // Retention (keep 2 last, 1 best) removed older checkpoints from the store as well. Generation 2
    // wrote one every 100 steps from where it resumed to step 1,500, five or more; the list forgets
    // those no longer in the store (it listed them with dead links), and each it keeps downloads
    // from the store, the last as a tar archive.
    assert!((1500 - stopped_at) / 100 >= 5, "resumed at {stopped_at}");
    let recorded = cluster.checkpoints(&id).await;
    let second: Vec<_> = recorded.iter().filter(|c| c["generation"] == 2).collect();
    assert!((2..=3).contains(&second.len()), "{recorded:#?}");
    let mut present = Vec::new();
    for checkpoint in &second {
        let response = cluster
            .http
            .get(format!(
                "{}/api/v1/jobs/{id}/checkpoints/{}/download",
                cluster.url,
                checkpoint["id"].as_str().unwrap()
            ))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{checkpoint}");
        present.push(response.bytes().await.unwrap());
    }
    let last = present.last().unwrap();
    let mut names: Vec<String> = tar::Archive::new(&last[..])
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    names.sort();
    let step = second.last().unwrap()["step"].as_u64().unwrap();
    let base = format!("step-{step:08}");
    assert_eq!(
        names,
        [
            format!("{base}/manifest.json"),
            format!("{base}/ps-0.model.safetensors"),
            format!("{base}/ps-0.optimizer.safetensors"),
        ]
    );
}
