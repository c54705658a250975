//! Tenants that cannot touch each other (issue #49), with real processes: two tenants' tasks on one
//! executor, each in its own sandbox. Tenant `bravo`'s task tries, and fails, to read the executor's
//! node credential, tenant `alpha`'s task environment through `/proc` (its secret is there), alpha's
//! checkpoint and task folders; to see or signal alpha's processes; to write the host's system
//! folders. It runs as a user of its own, with no capabilities, `no_new_privs` and a system-call
//! filter, and sees no GPU device. A bravo job that allocates past its memory is killed by the
//! kernel and fails `out_of_memory`, and a fork bomb meets its process limit, while alpha's task
//! keeps running and finishes, and the node stays connected.

use super::harness::*;
use serde_json::{Value, json};
use std::time::Duration;

const TEST: &str = "isolation::a_tenants_task_cannot_reach_another_tenants_task_or_the_node";

/// The host's process id of a process whose environment holds `needle` (a task's own variable).
fn host_pid_with(needle: &str) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            // The command itself (python), not the shim or the runtime.
            (String::from_utf8_lossy(&cmdline).contains("alpha-marker")
                && environ
                    .windows(needle.len())
                    .any(|w| w == needle.as_bytes()))
            .then_some(pid)
        })
}

fn status_field(pid: u32, field: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|line| {
            line.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_owned())
        })
}

fn command_job(name: &str, script: &str, env: Value, memory_gb: u32) -> Value {
    json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": name},
        "spec": {
            "type": "command",
            "command": {"argv": ["sh", "-c", script], "env": env},
            "resources": {"workers": {"min": 1, "max": 1}, "ps": {"min": 0, "max": 0},
                          "gpus_per_worker": 1, "cpus_per_worker": 1,
                          "memory_gb_per_task": memory_gb},
            "max_restarts": 0
        }
    })
}

async fn user_token(cluster: &Cluster, tenant: &str, user: &str) -> String {
    cluster
        .post("/api/v1/tenants", json!({"name": tenant}))
        .await;
    let made = cluster
        .post(
            "/api/v1/users",
            json!({"name": user, "role": "member", "tenant": tenant}),
        )
        .await;
    let token = cluster
        .post(
            "/api/v1/tokens",
            json!({"name": user, "user_id": made["user"]["id"]}),
        )
        .await;
    token["secret"].as_str().unwrap().to_owned()
}

async fn submit_as(cluster: &Cluster, token: &str, spec: Value) -> String {
    let reply = cluster
        .http
        .post(format!("{}/api/v1/jobs", cluster.url))
        .bearer_auth(token)
        .json(&spec)
        .send()
        .await
        .unwrap();
    let status = reply.status();
    let body: Value = reply.json().await.unwrap();
    assert!(status.is_success(), "{status} {body}");
    body["job"]["id"].as_str().unwrap().to_owned()
}

/// The lines `probe NAME: RESULT` a probing job printed.
async fn probes(cluster: &Cluster, id: &str) -> std::collections::BTreeMap<String, String> {
    cluster
        .logs(id)
        .await
        .iter()
        .filter_map(|l| l["line"].as_str())
        .filter_map(|line| line.strip_prefix("probe "))
        .filter_map(|rest| rest.split_once(": "))
        .map(|(name, result)| (name.to_owned(), result.to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_task_cannot_reach_another_tenants_task_or_the_node() {
    if !sandboxes() {
        skip(
            TEST,
            "executors cannot sandbox tasks here (not root, or no runc)",
        );
        return;
    }
    // A low process ceiling, so that the fork bomb below meets it quickly.
    let cluster = Cluster::start_sharing_env(2, &[], &[], &[("DROVER_TASK_PIDS_MAX", "96")]).await;
    // Both tenants' tasks on one node.
    cluster.post("/api/v1/nodes/exec-b/cordon", json!({})).await;
    let alpha = user_token(&cluster, "alpha", "ann").await;
    let bravo = user_token(&cluster, "bravo", "bob").await;
    let put = cluster
        .http
        .put(format!("{}/api/v1/secrets/api-key", cluster.url))
        .bearer_auth(&alpha)
        .json(&json!({"value": "alpha-s3cret-value"}))
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.status());

    // Alpha: a task with a secret in its environment, a checkpoint, and a minute of work.
    let alpha_script = "python3 -c 'import os, time
open(os.path.join(os.environ[\"DROVER_CHECKPOINT_DIR\"], \"alpha-weights\"), \"w\").write(\"alpha\")
print(\"alpha running\", flush=True)
time.sleep(45)
print(\"alpha done\", flush=True)' alpha-marker";
    let alpha_job = submit_as(
        &cluster,
        &alpha,
        command_job(
            "alpha-work",
            alpha_script,
            json!({"API_KEY": {"secret": "api-key"}}),
            1,
        ),
    )
    .await;
    cluster
        .wait_until("alpha's task to run", Duration::from_secs(60), async |c| {
            let logs = c.logs(&alpha_job).await;
            logs.iter()
                .any(|l| l["line"] == "alpha running")
                .then_some(())
        })
        .await;
    // Its use as its executor measures it (the process tree under runc, through the host's /proc):
    // memory held, CPU counted between two measurements.
    cluster
        .wait_until(
            "alpha's task use to be reported",
            Duration::from_secs(30),
            async |c| {
                let tasks = c.get(&format!("/api/v1/jobs/{alpha_job}/tasks")).await;
                let usage = &tasks["tasks"][0]["usage"];
                (usage["memory_gb"].as_f64()? > 0.001 && usage["cpu_cores"].as_f64()? >= 0.0)
                    .then_some(())
            },
        )
        .await;
    let alpha_pid = host_pid_with("API_KEY=alpha-s3cret-value").expect("alpha's task on this host");
    let alpha_uid = status_field(alpha_pid, "Uid").unwrap();
    let exec_dir = cluster.executor_dir("exec-a");
    let credential = exec_dir.join("node-credential");
    assert!(credential.exists(), "the node has a credential to steal");
    let checkpoints = cluster.dir.path().join("server").join("checkpoints");
    let alpha_checkpoints = checkpoints.join(&alpha_job);
    assert!(alpha_checkpoints.join("g1").join("alpha-weights").exists());
    let alpha_task_dir = std::fs::read_dir(exec_dir.join("tasks"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains(&alpha_job))
        .expect("alpha's task folder");

    // Bravo probes.
    let probe_script = r#"
try() { name=$1; shift; if out=$("$@" 2>&1); then echo "probe $name: ALLOWED $(echo "$out" | head -c 80 | tr '\n' ' ')"; else echo "probe $name: denied $(echo "$out" | head -c 80 | tr '\n' ' ')"; fi; }
try credential cat "$CREDENTIAL"
try environ cat "/proc/$ALPHA_PID/environ"
try signal kill -0 "$ALPHA_PID"
try checkpoints ls "$ALPHA_CHECKPOINTS"
try weights cat "$ALPHA_CHECKPOINTS/g1/alpha-weights"
try task-dir ls "$ALPHA_TASK_DIR"
try system-write touch /usr/bravo-was-here
try executor-dir sh -c 'ls "$EXECUTOR_DIR/tasks" | grep "$ALPHA_JOB"'
try unshare unshare --user --map-root-user true
try tmp python3 -c 'import tempfile; f = tempfile.NamedTemporaryFile(); f.write(b"x"); print(tempfile.gettempdir())'
echo "probe uid: $(id -u)"
echo "probe processes: $(ls /proc | grep -c '^[0-9]')"
echo "probe capabilities: $(grep CapEff /proc/self/status | tr -s ' \t' ' ')"
echo "probe no-new-privs: $(grep NoNewPrivs /proc/self/status | tr -s ' \t' ' ')"
echo "probe seccomp: $(grep '^Seccomp:' /proc/self/status | tr -s ' \t' ' ')"
echo "probe gpu-devices: $(ls /dev | grep -c nvidia)"
"#;
    let env = json!({
        "CREDENTIAL": credential.display().to_string(),
        "ALPHA_PID": alpha_pid.to_string(),
        "ALPHA_CHECKPOINTS": alpha_checkpoints.display().to_string(),
        "ALPHA_TASK_DIR": alpha_task_dir.display().to_string(),
        "EXECUTOR_DIR": exec_dir.display().to_string(),
        "ALPHA_JOB": alpha_job,
    });
    let probe = submit_as(
        &cluster,
        &bravo,
        command_job("bravo-probe", probe_script, env, 1),
    )
    .await;
    cluster
        .wait_for_state(&probe, "succeeded", Duration::from_secs(60))
        .await;
    let found = probes(&cluster, &probe).await;
    for name in [
        "credential",
        "environ",
        "signal",
        "checkpoints",
        "weights",
        "task-dir",
        "system-write",
        "executor-dir",
        "unshare",
    ] {
        let result = found
            .get(name)
            .unwrap_or_else(|| panic!("no probe {name}: {found:?}"));
        assert!(result.starts_with("denied"), "{name}: {result}");
        assert!(!result.contains("alpha-s3cret"), "{name}: {result}");
    }
    // Its own /tmp is writable, though it is not the node's first task (runc gives a tmpfs the mode
    // of the folder it covers, and the shared root's /tmp is there from the first task on).
    assert!(
        found
            .get("tmp")
            .is_some_and(|r| r.starts_with("ALLOWED /tmp")),
        "{found:?}"
    );
    let uid: u32 = found["uid"].parse().unwrap();
    assert_ne!(uid, 0, "not root");
    assert!(
        !alpha_uid.split_whitespace().any(|u| u == uid.to_string()),
        "bravo's task runs as a user of its own ({uid}), not alpha's ({alpha_uid})"
    );
    let processes: u32 = found["processes"].parse().unwrap();
    assert!(
        processes < 10,
        "it sees only its own processes: {processes}"
    );
    assert_eq!(found["capabilities"], "CapEff: 0000000000000000");
    assert_eq!(found["no-new-privs"], "NoNewPrivs: 1");
    assert_eq!(found["seccomp"], "Seccomp: 2", "a system-call filter");
    assert_eq!(found["gpu-devices"], "0");

    // Past its memory: killed by the kernel, the job's failure, not the node's.
    let hog = submit_as(
        &cluster,
        &bravo,
        command_job(
            "bravo-hog",
            "python3 -c 'x = bytearray(3 << 30); print(len(x))'",
            json!({}),
            1,
        ),
    )
    .await;
    let failed = cluster
        .wait_for_state(&hog, "failed", Duration::from_secs(60))
        .await;
    assert_eq!(failed["reason"], "out_of_memory", "{failed}");
    let message = failed["message"].as_str().unwrap();
    assert!(message.contains("used more than its 1 GiB"), "{message}");

    // A fork bomb meets its process limit; the node goes on.
    let bomb_script = "python3 -c 'import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError as err:
        print(\"fork refused after\", n, err, flush=True)
        time.sleep(600)
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    n += 1'";
    let bomb = submit_as(
        &cluster,
        &bravo,
        command_job("bravo-bomb", bomb_script, json!({}), 1),
    )
    .await;
    let refused = cluster
        .wait_until(
            "the fork bomb to meet its limit",
            Duration::from_secs(60),
            async |c| {
                c.logs(&bomb)
                    .await
                    .iter()
                    .filter_map(|l| l["line"].as_str())
                    .find(|l| l.starts_with("fork refused after"))
                    .map(str::to_owned)
            },
        )
        .await;
    let forks: u32 = refused.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(forks < 96, "{refused}");
    cluster
        .post(&format!("/api/v1/jobs/{bomb}/cancel"), json!({}))
        .await;

    // By now alpha's task has a short history of its use (a point every 10 s).
    cluster
        .wait_until(
            "alpha's task use history",
            Duration::from_secs(30),
            async |c| {
                let tasks = c.get(&format!("/api/v1/jobs/{alpha_job}/tasks")).await;
                let history = tasks["tasks"][0]["usage"]["history"].as_array()?.clone();
                let memory: Vec<f64> = history
                    .iter()
                    .filter_map(|p| p["memory_gb"].as_f64())
                    .collect();
                (history.len() >= 2 && memory.iter().all(|m| *m > 0.001)).then_some(())
            },
        )
        .await;

    // Alpha's task ran through all of it, and its node never left.
    let done = cluster
        .wait_for_state(&alpha_job, "succeeded", Duration::from_secs(90))
        .await;
    assert_eq!(done["generation"], 1, "alpha was never restarted: {done}");
    let nodes = cluster.get("/api/v1/nodes").await;
    let exec_a = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "exec-a")
        .unwrap();
    assert_eq!(exec_a["health"], "healthy", "{exec_a}");
    assert_eq!(
        exec_a["isolation"], "runc",
        "the node says it sandboxes: {exec_a}"
    );
    // Once cancelled, nothing of the bomb is left on the host.
    cluster
        .wait_until(
            "the bomb's processes to go",
            Duration::from_secs(30),
            async |_| {
                let left = std::fs::read_dir("/proc")
                    .unwrap()
                    .flatten()
                    .filter(|e| {
                        std::fs::read(e.path().join("cmdline"))
                            .is_ok_and(|c| String::from_utf8_lossy(&c).contains("fork refused"))
                    })
                    .count();
                (left == 0).then_some(())
            },
        )
        .await;
}
