//! `drover server --kubernetes` as a process, with its Kubernetes client configured by KUBECONFIG
//! against the fake API server (`drover_testkit::fake_kube`; no real one can run here), and two real
//! executors: a DroverJob applied runs to the end with its status and Events written back, one deleted
//! while it runs is cancelled and its finalizer goes once its task has stopped, and cordoning a
//! Kubernetes node cordons the Drover node of the same name.

use super::harness::*;
use drover_controller::crd::DroverJob;
use drover_testkit::fake_kube::FakeKube;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const NAMESPACE: &str = "team-vision";

fn command_job(name: &str, steps: u32) -> DroverJob {
    serde_json::from_value(json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": name, "labels": {"team": "vision"}},
        "spec": {
            "type": "command",
            "command": {
                "argv": ["python3", "examples/command/digits_softmax.py", "--steps", steps.to_string(),
                         "--checkpoint-every", "200", "--eval-every", "100", "--step-sleep", "0.004"],
                "env": {"PYTHONUNBUFFERED": "1"}
            },
            "resources": {"workers": 1, "ps": 0, "gpus_per_worker": 1, "cpus_per_worker": 1},
        }
    }))
    .unwrap()
}

async fn until(fake: &FakeKube, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let object = fake
            .get("droverjobs", Some(NAMESPACE), name)
            .unwrap_or(Value::Null);
        if check(&object) {
            return object;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {object:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn condition(object: &Value, kind: &str) -> Value {
    object["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn droverjobs_run_and_cancel_through_the_controller() {
    let fake = FakeKube::start().await;
    fake.seed(
        "namespaces",
        None,
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": NAMESPACE, "labels": {"drover.dev/tenant": "vision"}}}),
    );
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        kubeconfig.path(),
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
             clusters: [{{name: fake, cluster: {{server: '{}'}}}}]\n\
             users: [{{name: fake, user: {{}}}}]\n\
             contexts: [{{name: fake, context: {{cluster: fake, user: fake}}}}]\n",
            fake.url()
        ),
    )
    .unwrap();
    let kube_env = [("KUBECONFIG", kubeconfig.path().to_str().unwrap())];
    let mut cluster = Cluster::start_configured(1, &["--kubernetes"], &kube_env).await;
    cluster
        .post(
            "/api/v1/tenants",
            json!({"name": "vision", "quota": {"guaranteed_gpus": 2}}),
        )
        .await;
    let api: Api<DroverJob> = Api::namespaced(fake.client(), NAMESPACE);

    // Applied → queued → running on an executor → succeeded, the status following along (it is
    // refreshed every 5 s while the job is active: the job runs for about 15 s).
    api.create(&PostParams::default(), &command_job("digits-k8s", 2500))
        .await
        .unwrap();
    let running = until(&fake, "digits-k8s", "the job running", |o| {
        o["status"]["state"] == "running"
    })
    .await;
    assert_eq!(running["status"]["workers"], "1");
    assert_eq!(running["status"]["gpus"], 1);
    assert_eq!(condition(&running, "Scheduled")["status"], "True");
    let id = running["status"]["jobId"].as_str().unwrap().to_owned();
    assert_eq!(cluster.job(&id).await["name"], "digits-k8s");
    let done = until(&fake, "digits-k8s", "the job succeeded", |o| {
        o["status"]["state"] == "succeeded"
    })
    .await;
    assert_eq!(condition(&done, "Complete")["status"], "True");
    assert_eq!(condition(&done, "Complete")["reason"], "Succeeded");
    assert!(done["status"]["step"].as_u64().unwrap() >= 2400, "{done:#}");
    assert!(
        done["status"]["checkpoints"].as_u64().unwrap() >= 1,
        "{done:#}"
    );
    let reasons: Vec<String> = fake
        .list("events")
        .iter()
        .filter(|e| e["regarding"]["name"] == "digits-k8s")
        .map(|e| e["reason"].as_str().unwrap_or("").to_owned())
        .collect();
    for expected in ["Submitted", "Allocated", "RendezvousComplete", "Completed"] {
        assert!(reasons.iter().any(|r| r == expected), "{reasons:?}");
    }

    // Deleted while it runs → cancelled; the object goes once its task has stopped.
    api.create(
        &PostParams::default(),
        &command_job("digits-cancel", 100_000),
    )
    .await
    .unwrap();
    let running = until(&fake, "digits-cancel", "the second job running", |o| {
        o["status"]["state"] == "running"
    })
    .await;
    let id = running["status"]["jobId"].as_str().unwrap().to_owned();
    api.delete("digits-cancel", &DeleteParams::default())
        .await
        .unwrap();
    until(&fake, "digits-cancel", "the object gone", Value::is_null).await;
    assert_eq!(cluster.job(&id).await["state"], "cancelled");
    let tasks = cluster.tasks(&id).await;
    assert!(
        tasks
            .iter()
            .all(|t| t["state"] == "exited" || t["state"] == "lost"),
        "the finalizer went before the task stopped: {tasks:?}"
    );

    // Cordoning a Kubernetes node cordons the Drover node of that name (in the audit log, by
    // `kubernetes`), and uncordoning lifts it, also after the server restarted in between (a new
    // leader learns from the audit log which cordons were the controller's).
    let node = |unschedulable: bool| {
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": "exec-a", "labels": {"nvidia.com/gpu.present": "true"}},
               "spec": {"unschedulable": unschedulable}})
    };
    // The node's state and the controller's audit events are separate writes: each step waits
    // for both (cordons, uncordons so far).
    let steps = [(true, false), (false, false), (true, true), (false, false)];
    for (step, &(cordoned, restart)) in steps.iter().enumerate() {
        if restart {
            cluster.restart_server_configured(&["--kubernetes"], &kube_env);
        }
        fake.seed("nodes", None, node(cordoned));
        let so_far = &steps[..=step];
        let want = (
            so_far.iter().filter(|(c, _)| *c).count(),
            so_far.iter().filter(|(c, _)| !*c).count(),
        );
        cluster
            .wait_until(
                "the Drover node's cordon to follow Kubernetes', in the audit log by `kubernetes`",
                Duration::from_secs(30),
                async |c| {
                    let node = c.get("/api/v1/nodes/exec-a").await;
                    let events = controller_cordons(c).await;
                    let count = |action: &str| events.iter().filter(|(a, _)| a == action).count();
                    let counted = (count("node.cordon"), count("node.uncordon"));
                    (node["node"]["cordoned"] == cordoned && counted == want).then_some(())
                },
            )
            .await;
        if restart {
            // Cordoned before the restart, uncordoned after it.
            cluster.restart_server_configured(&["--kubernetes"], &kube_env);
        }
    }
    let events = controller_cordons(&cluster).await;
    assert!(
        events.iter().all(|(_, target)| target == "exec-a"),
        "{events:?}"
    );
}

/// The (action, target) of the audit events by the controller (actor `kubernetes`), newest first.
async fn controller_cordons(cluster: &Cluster) -> Vec<(String, String)> {
    let audit = cluster.get("/api/v1/audit?limit=100").await;
    audit["events"]
        .as_array()
        .expect("an audit page")
        .iter()
        .filter(|e| e["actor"] == "kubernetes")
        .map(|e| {
            (
                e["action"].as_str().expect("an action").to_owned(),
                e["target"].as_str().expect("a target").to_owned(),
            )
        })
        .collect()
}
