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
    let kubeconfig = kubeconfig_for(&fake);
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

/// A kubeconfig that points at the fake API server.
fn kubeconfig_for(fake: &FakeKube) -> tempfile::NamedTempFile {
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
    kubeconfig
}

/// The task Pods the fake API server holds, by name.
fn task_pods(fake: &FakeKube) -> Vec<Value> {
    fake.list("pods")
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "drover-executor")
        .collect()
}

/// Waits for the task Pod of job `job` to appear.
async fn pod_of_job(cluster: &Cluster, fake: &FakeKube, job: &str) -> Value {
    cluster
        .wait_until(
            &format!("the Pod of job {job}"),
            Duration::from_secs(60),
            async |_| {
                task_pods(fake)
                    .into_iter()
                    .find(|p| p["metadata"]["labels"]["drover.dev/job"] == job)
            },
        )
        .await
}

/// Waits for the task Pod `name` to be deleted.
async fn pod_gone(cluster: &Cluster, fake: &FakeKube, name: &str) {
    cluster
        .wait_until(
            &format!("Pod {name} deleted"),
            Duration::from_secs(60),
            async |_| {
                fake.get("pods", Some(NAMESPACE), name)
                    .is_none()
                    .then_some(())
            },
        )
        .await;
}

/// On Kubernetes each task is a Pod of its own (`drover executor --task-pods`, against the fake API
/// server whose fake kubelet runs a Pod as a local process): made by the executor of the node the
/// scheduler chose (`nodeName`), in the namespace of the job's tenant, with the allocation as requests
/// and limits, the restricted Pod Security Standard and no service-account token, beside the job's
/// headless Service and a NetworkPolicy that admits only the job's Pods (both owned by its Pods). Its
/// output and metrics reach the server from the Pod's log, its exit from the Pod's status; the Pod is
/// deleted when the task ends, a cancelled job's Pod is deleted with the grace period, and an executor
/// that was killed removes the Pods it left when it starts again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_kubernetes_each_task_is_a_pod_of_its_own() {
    let fake = FakeKube::start_with_kubelet().await;
    fake.seed(
        "namespaces",
        None,
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": NAMESPACE, "labels": {"drover.dev/tenant": "vision"}}}),
    );
    let kubeconfig = kubeconfig_for(&fake);
    let program = drover().display().to_string();
    let env = [
        ("KUBECONFIG", kubeconfig.path().to_str().unwrap()),
        ("DROVER_TASK_PODS", "true"),
        ("DROVER_TASK_IMAGE", "ghcr.io/drover-dev/drover:test"),
        ("DROVER_TASK_PROGRAM", program.as_str()),
    ];
    let mut cluster = Cluster::start_sharing_env(1, &[], &[], &env).await;
    cluster
        .post("/api/v1/tenants", json!({"name": "vision"}))
        .await;
    let user = cluster
        .post(
            "/api/v1/users",
            json!({"name": "vic", "role": "member", "tenant": "vision"}),
        )
        .await;
    let token = cluster
        .post(
            "/api/v1/tokens",
            json!({"name": "vic", "user_id": user["user"]["id"]}),
        )
        .await["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    let submit_in = async |name: &str, script: &str, image: Option<&str>| -> String {
        let mut command =
            json!({"argv": ["sh", "-c", script], "env": {"GREETING": "hello from a pod"}});
        if let Some(image) = image {
            command["image"] = json!(image);
        }
        let spec = json!({
            "apiVersion": "drover.dev/v1",
            "kind": "DroverJob",
            "metadata": {"name": name},
            "spec": {
                "type": "command",
                "command": command,
                "resources": {"workers": 1, "ps": 0, "gpus_per_worker": 1, "cpus_per_worker": 2,
                              "memory_gb_per_task": 1},
                "max_restarts": 0
            }
        });
        let reply = cluster
            .http
            .post(format!("{}/api/v1/jobs", cluster.url))
            .bearer_auth(&token)
            .json(&spec)
            .send()
            .await
            .unwrap();
        let body: Value = reply.json().await.unwrap();
        body["job"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{body}"))
            .to_owned()
    };
    let submit = async |name: &str, script: &str| submit_in(name, script, None).await;

    let script = r#"echo "$GREETING"; echo '{"drover": "metrics", "step": 1, "values": {"loss": 0.5}}'; sleep 3"#;
    let id = submit("in-a-pod", script).await;
    let pod = cluster
        .wait_until("the task's Pod", Duration::from_secs(60), async |_| {
            task_pods(&fake).into_iter().next()
        })
        .await;
    let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
    assert_eq!(
        pod["metadata"]["namespace"], NAMESPACE,
        "the tenant's namespace"
    );
    assert_eq!(pod["metadata"]["labels"]["drover.dev/job"], id.as_str());
    let node = cluster
        .wait_until("the job to start", Duration::from_secs(30), async |c| {
            let tasks = c.tasks(&id).await;
            tasks
                .first()
                .map(|t| t["node"].as_str().unwrap().to_owned())
        })
        .await;
    let spec = &pod["spec"];
    assert_eq!(
        spec["nodeName"],
        node.as_str(),
        "bound to the node the scheduler chose"
    );
    assert_eq!(spec["automountServiceAccountToken"], false);
    let container = &spec["containers"][0];
    assert_eq!(container["image"], "ghcr.io/drover-dev/drover:test");
    assert_eq!(
        container["resources"]["limits"],
        json!({"cpu": "2", "memory": (1u64 << 30).to_string(), "nvidia.com/gpu": "1"})
    );
    assert_eq!(
        container["resources"]["requests"],
        container["resources"]["limits"]
    );
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let service_name = format!("drover-{id}");
    // Made by the executor after the Pod (they are owned by it): waited for, not read at once.
    let (service, policy) = cluster
        .wait_until(
            "the job's Service and NetworkPolicy",
            Duration::from_secs(30),
            async |_| {
                Some((
                    fake.get("services", Some(NAMESPACE), &service_name)?,
                    fake.get("networkpolicies", Some(NAMESPACE), &service_name)?,
                ))
            },
        )
        .await;
    assert_eq!(service["spec"]["clusterIP"], "None");
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["drover.dev/job"],
        id.as_str()
    );
    for owned in [&service, &policy] {
        assert_eq!(
            owned["metadata"]["ownerReferences"][0]["uid"], pod["metadata"]["uid"],
            "owned by the job's Pods"
        );
    }
    let env: Vec<&str> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(
        env.contains(&"DROVER_JOB_ID") && env.contains(&"GREETING"),
        "{env:?}"
    );
    let address = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "DROVER_ADDRESS")
        .unwrap()["value"]
        .clone();
    assert_eq!(
        address,
        format!("{name}.{service_name}.{NAMESPACE}.svc:29400"),
        "its peers reach it at its Pod's name under the job's Service"
    );

    let done = cluster
        .wait_for_state(&id, "succeeded", Duration::from_secs(60))
        .await;
    assert_eq!(done["reason"], "completed");
    let nodes = cluster.get("/api/v1/nodes").await;
    assert!(
        nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["isolation"] == "pod" && n["runs_images"] == true),
        "{nodes}"
    );
    let logs = cluster.logs(&id).await;
    assert!(
        logs.iter().any(|l| l["line"] == "hello from a pod"),
        "{logs:?}"
    );
    let metrics = cluster
        .get(&format!("/api/v1/jobs/{id}/metrics?name=loss"))
        .await;
    assert_eq!(metrics["metrics"][0]["value"], 0.5, "{metrics}");
    pod_gone(&cluster, &fake, &name).await;

    // A job in an image: its Pod runs that image (the reference completed as registries do).
    let imaged = submit_in(
        "in-an-image",
        "echo from the image; sleep 3",
        Some("python:3.12-slim"),
    )
    .await;
    let pod = pod_of_job(&cluster, &fake, &imaged).await;
    assert_eq!(
        pod["spec"]["containers"][0]["image"],
        "docker.io/library/python:3.12-slim"
    );
    cluster
        .wait_for_state(&imaged, "succeeded", Duration::from_secs(60))
        .await;

    // A cancelled job's Pod is deleted (its process stopped).
    let long = submit("long-in-a-pod", "sleep 600").await;
    let pod = pod_of_job(&cluster, &fake, &long).await;
    let long_pod = pod["metadata"]["name"].as_str().unwrap().to_owned();
    cluster
        .wait_for_state(&long, "running", Duration::from_secs(60))
        .await;
    // Asking a task Pod to checkpoint now is refused, not accepted and dropped.
    let asked = cluster
        .http
        .post(format!("{}/api/v1/jobs/{long}/checkpoint", cluster.url))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), 409);
    let refusal: Value = asked.json().await.unwrap();
    assert_eq!(refusal["error"]["code"], "not_supported", "{refusal}");
    cluster
        .post(&format!("/api/v1/jobs/{long}/cancel"), json!({}))
        .await;
    pod_gone(&cluster, &fake, &long_pod).await;

    // A killed executor's Pods are removed when it starts again.
    let again = submit("left-behind", "sleep 600").await;
    let pod = pod_of_job(&cluster, &fake, &again).await;
    let left = pod["metadata"]["name"].as_str().unwrap().to_owned();
    let node = pod["spec"]["nodeName"].as_str().unwrap().to_owned();
    cluster.kill_executor(&node);
    assert!(
        fake.get("pods", Some(NAMESPACE), &left).is_some(),
        "left behind"
    );
    cluster.start_executor(&node);
    pod_gone(&cluster, &fake, &left).await;
}
