//! Jobs in OCI images (issue #51), with real processes and a real registry: the test assembles a
//! small image (a shell and its C library, a marker file, a working directory of its own), pushes it
//! with `skopeo` to a local registry (Debian's `docker-registry`), and runs command jobs in it on a
//! sandboxing executor that pulls with `skopeo` and unpacks with `umoci`. The job sees the image's
//! root (its marker, not the host's Python), starts in the image's working directory with the image's
//! `PATH`, writes its checkpoint folder and its private `/tmp`; a second job of the same image starts
//! from the node's cache without pulling. The other executor runs no images (`--no-images`): image
//! jobs never go there, and wait while the image node is cordoned. An image that does not exist fails
//! its job at once with the registry's words, without restarts.

use super::harness::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const TEST: &str = "images::a_command_job_runs_in_its_image_on_a_node_that_runs_images";

fn tool(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run(program: &str, args: &[&str]) {
    let output = Command::new(program).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A registry on `port`, storing under `dir`; killed when dropped.
struct Registry(std::process::Child);

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_registry(dir: &Path, port: u16) -> Registry {
    let config = dir.join("registry.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.join("store").display()
        ),
    )
    .unwrap();
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let registry = Registry(child);
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return registry;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the registry did not listen on {port}");
}

/// An image of a shell and nothing else (the host's `dash`, with its C library and loader; no `cat`), `/etc/image-marker`, and
/// `/app` as its working directory, pushed to `reference`.
fn build_image(dir: &Path, reference: &str) {
    let rootfs = dir.join("rootfs");
    for sub in ["bin", "etc", "app", "lib64", "lib/x86_64-linux-gnu"] {
        std::fs::create_dir_all(rootfs.join(sub)).unwrap();
    }
    std::fs::copy("/bin/dash", rootfs.join("bin/sh")).unwrap();
    // The shell's libraries, wherever this host keeps them, at the paths it looks for them.
    let listed = Command::new("ldd").arg("/bin/dash").output().unwrap();
    for line in String::from_utf8_lossy(&listed.stdout).lines() {
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.trim().split(" (").next().unwrap().to_owned(),
            None if line.trim().starts_with('/') => {
                line.trim().split(" (").next().unwrap().to_owned()
            }
            None => continue,
        };
        let inside = rootfs.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
        std::fs::copy(std::fs::canonicalize(&path).unwrap(), &inside).unwrap();
    }
    std::fs::write(rootfs.join("etc/image-marker"), "from-the-image\n").unwrap();
    let layout = dir.join("layout");
    let layout = layout.to_str().unwrap();
    let tagged = format!("{layout}:v1");
    let bundle = dir.join("bundle");
    run("umoci", &["init", "--layout", layout]);
    run("umoci", &["new", "--image", &tagged]);
    run(
        "umoci",
        &["unpack", "--image", &tagged, bundle.to_str().unwrap()],
    );
    run(
        "cp",
        &[
            "-a",
            &format!("{}/.", rootfs.display()),
            bundle.join("rootfs").to_str().unwrap(),
        ],
    );
    run(
        "umoci",
        &["repack", "--image", &tagged, bundle.to_str().unwrap()],
    );
    run(
        "umoci",
        &[
            "config",
            "--image",
            &tagged,
            "--config.env",
            "PATH=/bin",
            "--config.env",
            "IMAGE_GREETING=hello-from-env",
            "--config.workingdir",
            "/app",
        ],
    );
    run(
        "skopeo",
        &[
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            &format!("oci:{tagged}"),
            &format!("docker://{reference}"),
        ],
    );
}

fn image_job(name: &str, image: &str, script: &str) -> Value {
    json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": name},
        "spec": {
            "type": "command",
            "command": {"argv": ["sh", "-c", script], "image": image},
            "resources": {"workers": {"min": 1, "max": 1}, "ps": {"min": 0, "max": 0},
                          "gpus_per_worker": 1, "cpus_per_worker": 1, "memory_gb_per_task": 1},
            "max_restarts": 2
        }
    })
}

/// The job's log lines, once `last` is among them (logs are stored a moment after the exit).
async fn lines(cluster: &Cluster, id: &str, last: &str) -> Vec<String> {
    let read = async |c: &Cluster| -> Vec<String> {
        c.logs(id)
            .await
            .iter()
            .filter_map(|l| l["line"].as_str().map(str::to_owned))
            .collect()
    };
    for _ in 0..75 {
        let lines = read(cluster).await;
        if lines.iter().any(|l| l == last) {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    read(cluster).await
}

async fn nodes_of(cluster: &Cluster, id: &str) -> Vec<String> {
    cluster.get(&format!("/api/v1/jobs/{id}/tasks")).await["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["node"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_job_runs_in_its_image_on_a_node_that_runs_images() {
    if !sandboxes() {
        skip(
            TEST,
            "executors cannot sandbox tasks here (not root, or no runc)",
        );
        return;
    }
    if !(tool("skopeo") && tool("umoci") && Path::new("/usr/bin/docker-registry").exists()) {
        skip(
            TEST,
            "skopeo, umoci or docker-registry is not installed (apt-get install skopeo umoci docker-registry)",
        );
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let port = free_port();
    let _registry = start_registry(scratch.path(), port);
    let registry = format!("127.0.0.1:{port}");
    let image = format!("{registry}/e2e/shell:v1");
    build_image(scratch.path(), &image);

    let mut cluster =
        Cluster::start_sharing_env(1, &[], &[], &[("DROVER_INSECURE_REGISTRIES", &registry)]).await;
    // exec-b runs no images.
    cluster.kill_executor("exec-b");
    cluster
        .executor_env
        .push(("DROVER_NO_IMAGES".to_owned(), "true".to_owned()));
    cluster.start_executor("exec-b");
    let nodes = cluster
        .wait_until("exec-b back", Duration::from_secs(30), async |c| {
            let nodes = c.get("/api/v1/nodes").await["nodes"].clone();
            // Back as registered anew (its old registration may still read healthy a moment).
            let list = nodes.as_array().unwrap();
            (list.iter().all(|n| n["health"] == "healthy")
                && list
                    .iter()
                    .any(|n| n["name"] == "exec-b" && n["runs_images"] == json!(false)))
            .then_some(nodes)
        })
        .await;
    let runs_images = |name: &str| {
        nodes
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .unwrap()["runs_images"]
            .clone()
    };
    assert_eq!(runs_images("exec-a"), json!(true), "{nodes}");
    assert_eq!(runs_images("exec-b"), json!(false), "{nodes}");

    // In the image: its marker, its working directory and PATH, no host Python; its checkpoint
    // folder and /tmp writable.
    let script = "read -r marker < /etc/image-marker; echo \"probe marker: $marker\"
echo \"probe pwd: $(pwd)\"
echo \"probe env: $IMAGE_GREETING $PATH\"
if [ -e /usr/bin/python3 ]; then echo 'probe host: visible'; else echo 'probe host: hidden'; fi
echo w > \"$DROVER_CHECKPOINT_DIR/probe\" && echo 'probe checkpoint: written'
echo t > /tmp/t && echo 'probe tmp: written'";
    let first = cluster
        .post("/api/v1/jobs", image_job("in-image", &image, script))
        .await["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = cluster
        .wait_for_state(&first, "succeeded", Duration::from_secs(120))
        .await;
    let logged = lines(&cluster, &first, "probe tmp: written").await;
    let has = |line: &str| logged.iter().any(|l| l == line);
    assert!(has("probe marker: from-the-image"), "{done} {logged:#?}");
    assert!(has("probe pwd: /app"), "{logged:#?}");
    assert!(has("probe env: hello-from-env /bin"), "{logged:#?}");
    assert!(has("probe host: hidden"), "{logged:#?}");
    assert!(has("probe checkpoint: written"), "{logged:#?}");
    assert!(has("probe tmp: written"), "{logged:#?}");
    assert!(
        logged
            .iter()
            .any(|l| l.starts_with(&format!("drover: pulling image {image}"))),
        "the pull is in the job's log: {logged:#?}"
    );
    assert_eq!(nodes_of(&cluster, &first).await, vec!["exec-a".to_owned()]);

    // The same image again: from the node's cache.
    let second = cluster
        .post(
            "/api/v1/jobs",
            image_job("cached", &image, "read -r m < /etc/image-marker; echo $m"),
        )
        .await["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    cluster
        .wait_for_state(&second, "succeeded", Duration::from_secs(60))
        .await;
    let logged = lines(&cluster, &second, "from-the-image").await;
    assert!(logged.iter().any(|l| l == "from-the-image"), "{logged:#?}");
    assert!(
        !logged.iter().any(|l| l.contains("pulling image")),
        "pulled again: {logged:#?}"
    );

    // With the image node cordoned, an image job waits (exec-b has a free slot, and no images).
    cluster.post("/api/v1/nodes/exec-a/cordon", json!({})).await;
    let waiting = cluster
        .post(
            "/api/v1/jobs",
            image_job("waits", &image, "read -r m < /etc/image-marker; echo $m"),
        )
        .await["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let reason = cluster.queue_reason(&waiting).await;
    assert_eq!(reason, "eligible_nodes_busy");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let job = cluster.job(&waiting).await;
    assert_eq!(job["state"], "queued", "{job}");
    assert!(nodes_of(&cluster, &waiting).await.is_empty());
    cluster
        .post("/api/v1/nodes/exec-a/uncordon", json!({}))
        .await;
    cluster
        .wait_for_state(&waiting, "succeeded", Duration::from_secs(60))
        .await;
    assert_eq!(
        nodes_of(&cluster, &waiting).await,
        vec!["exec-a".to_owned()]
    );

    // An image the registry does not have: the job fails at once, with the registry's words.
    let missing = cluster
        .post(
            "/api/v1/jobs",
            image_job("missing", &format!("{registry}/e2e/nope:v1"), "true"),
        )
        .await["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let failed = cluster
        .wait_for_state(&missing, "failed", Duration::from_secs(60))
        .await;
    let message = failed["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("cannot pull image") && message.contains("manifest unknown"),
        "{failed}"
    );
    assert_eq!(failed["restarts"], json!(0), "no retries: {failed}");
}
