//! A mixed cluster (issue #52), with real processes: two executors advertising demo GPUs of two
//! models and different labels. A job that names a GPU type runs only on that model, one with a node
//! selector only on the labelled node, one naming two types on the first that has room; a tainted
//! node takes only the jobs that tolerate its taint; a job no node could ever satisfy is refused with
//! the reason, and one whose nodes are busy waits, saying so in the queue, while the other node
//! stands idle.

use super::harness::*;
use serde_json::{Value, json};
use std::time::Duration;

fn job(name: &str, resources: Value, script: &str) -> Value {
    let mut resources_all = json!({"workers": 1, "ps": 0, "gpus_per_worker": 1, "cpus_per_worker": 1,
                                   "memory_gb_per_task": 1});
    for (key, value) in resources.as_object().unwrap() {
        resources_all[key] = value.clone();
    }
    json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": name},
        "spec": {
            "type": "command",
            "command": {"argv": ["sh", "-c", script]},
            "resources": resources_all,
            "max_restarts": 0
        }
    })
}

async fn submit(cluster: &Cluster, spec: Value) -> String {
    cluster.post("/api/v1/jobs", spec).await["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn node_of(cluster: &Cluster, id: &str) -> String {
    cluster
        .wait_until(
            &format!("job {id} placed"),
            Duration::from_secs(30),
            async |c| {
                c.tasks(id)
                    .await
                    .first()
                    .and_then(|t| t["node"].as_str().map(str::to_owned))
            },
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_go_where_their_gpu_types_node_selector_and_tolerations_allow() {
    let mut cluster = Cluster::start().await;
    // exec-a: a V100 in pool `alpha`; exec-b: a K80 in pool `beta`.
    for (name, model, pool) in [("exec-a", "V100", "alpha"), ("exec-b", "Tesla K80", "beta")] {
        cluster.kill_executor(name);
        let shared = cluster.executor_env.clone();
        cluster
            .executor_env
            .push(("DROVER_GPU_MODEL".to_owned(), model.to_owned()));
        cluster
            .executor_env
            .push(("DROVER_NODE_LABELS".to_owned(), format!("pool={pool}")));
        cluster.start_executor(name);
        cluster.executor_env = shared;
    }
    let nodes = cluster
        .wait_until("both nodes described", Duration::from_secs(30), async |c| {
            let nodes = c.get("/api/v1/nodes").await["nodes"].clone();
            let described = nodes
                .as_array()
                .unwrap()
                .iter()
                .all(|n| n["health"] == "healthy" && n["labels"]["pool"].is_string());
            described.then_some(nodes)
        })
        .await;
    let model_of = |name: &str| {
        nodes
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .unwrap()["gpus"][0]["model"]
            .clone()
    };
    assert_eq!(model_of("exec-a"), "V100", "{nodes}");
    assert_eq!(model_of("exec-b"), "Tesla K80", "{nodes}");

    // By model (a word of it, case aside) and by label.
    let k80 = submit(
        &cluster,
        job("k80", json!({"gpu_types": ["k80"]}), "sleep 1"),
    )
    .await;
    assert_eq!(node_of(&cluster, &k80).await, "exec-b");
    let alpha = submit(
        &cluster,
        job(
            "alpha",
            json!({"node_selector": {"pool": "alpha"}}),
            "sleep 1",
        ),
    )
    .await;
    assert_eq!(node_of(&cluster, &alpha).await, "exec-a");
    for id in [&k80, &alpha] {
        cluster
            .wait_for_state(id, "succeeded", Duration::from_secs(60))
            .await;
    }

    // Two types: the first that has room. With the K80 busy, a [k80, v100] job takes the V100.
    let busy = submit(
        &cluster,
        job("busy-k80", json!({"gpu_types": ["k80"]}), "sleep 600"),
    )
    .await;
    assert_eq!(node_of(&cluster, &busy).await, "exec-b");
    let either = submit(
        &cluster,
        job("either", json!({"gpu_types": ["k80", "v100"]}), "sleep 1"),
    )
    .await;
    assert_eq!(node_of(&cluster, &either).await, "exec-a");
    cluster
        .wait_for_state(&either, "succeeded", Duration::from_secs(60))
        .await;

    // Only the K80 will do, and it is busy: it waits, saying why, though the V100 is free.
    let waits = submit(
        &cluster,
        job("waits", json!({"gpu_types": ["k80"]}), "sleep 1"),
    )
    .await;
    let reason = cluster.queue_reason(&waits).await;
    assert_eq!(reason, "eligible_nodes_busy");
    assert!(cluster.tasks(&waits).await.is_empty());
    cluster
        .post(&format!("/api/v1/jobs/{busy}/cancel"), json!({}))
        .await;
    assert_eq!(node_of(&cluster, &waits).await, "exec-b");

    // A tainted node takes only the jobs that tolerate its taint.
    cluster.kill_executor("exec-b");
    let shared = cluster.executor_env.clone();
    for (key, value) in [
        ("DROVER_GPU_MODEL", "Tesla K80"),
        ("DROVER_NODE_LABELS", "pool=beta"),
        ("DROVER_NODE_TAINTS", "dedicated=vision:NoSchedule"),
    ] {
        cluster
            .executor_env
            .push((key.to_owned(), value.to_owned()));
    }
    cluster.start_executor("exec-b");
    cluster.executor_env = shared;
    cluster
        .wait_until("exec-b tainted", Duration::from_secs(30), async |c| {
            let nodes = c.get("/api/v1/nodes").await["nodes"].clone();
            nodes
                .as_array()
                .unwrap()
                .iter()
                .any(|n| {
                    n["name"] == "exec-b"
                        && n["health"] == "healthy"
                        && n["taints"][0]["key"] == "dedicated"
                })
                .then_some(())
        })
        .await;
    // The server reads the nodes for this check at most every 5 s.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let untolerated = cluster
        .http
        .post(format!("{}/api/v1/jobs", cluster.url))
        .bearer_auth(ADMIN_TOKEN)
        .json(&job("untolerated", json!({"gpu_types": ["k80"]}), "true"))
        .send()
        .await
        .unwrap();
    assert_eq!(untolerated.status(), 422);
    let body: Value = untolerated.json().await.unwrap();
    assert_eq!(
        body["error"]["field"], "spec.resources.tolerations",
        "{body}"
    );
    let tolerant = submit(
        &cluster,
        job(
            "tolerant",
            json!({"gpu_types": ["k80"], "tolerations": [{"key": "dedicated", "value": "vision"}]}),
            "sleep 1",
        ),
    )
    .await;
    assert_eq!(node_of(&cluster, &tolerant).await, "exec-b");
    cluster
        .wait_for_state(&tolerant, "succeeded", Duration::from_secs(60))
        .await;
    // Two plain jobs, one V100 free and the K80 tainted: the second waits beside the idle K80.
    let plain = submit(&cluster, job("plain", json!({}), "sleep 5")).await;
    assert_eq!(node_of(&cluster, &plain).await, "exec-a");
    let second = submit(&cluster, job("second", json!({}), "sleep 1")).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        cluster.tasks(&second).await.is_empty(),
        "not on the tainted node"
    );
    assert_eq!(node_of(&cluster, &second).await, "exec-a");

    // What no node could ever satisfy is refused, naming the field and what the cluster has.
    for (resources, field, says) in [
        (
            json!({"gpu_types": ["a100"]}),
            "spec.resources.gpu_types",
            "the cluster's models are Tesla K80, V100",
        ),
        (
            json!({"node_selector": {"pool": "gamma"}}),
            "spec.resources.node_selector",
            "(pool=gamma)",
        ),
    ] {
        let refused = cluster
            .http
            .post(format!("{}/api/v1/jobs", cluster.url))
            .bearer_auth(ADMIN_TOKEN)
            .json(&job("never", resources, "true"))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 422);
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["error"]["field"], field, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_keeps_within_its_quota_of_each_gpu_model() {
    let mut cluster = Cluster::start_with_slots(2).await;
    // exec-a: two V100s; exec-b: two K80s.
    for (name, model) in [("exec-a", "Tesla V100-SXM2"), ("exec-b", "Tesla K80")] {
        cluster.kill_executor(name);
        let shared = cluster.executor_env.clone();
        cluster
            .executor_env
            .push(("DROVER_GPU_MODEL".to_owned(), model.to_owned()));
        cluster.start_executor(name);
        cluster.executor_env = shared;
    }
    cluster
        .wait_until("both nodes described", Duration::from_secs(30), async |c| {
            let nodes = c.get("/api/v1/nodes").await["nodes"].clone();
            let nodes = nodes.as_array().unwrap();
            (nodes.len() == 2
                && nodes.iter().all(|n| {
                    n["health"] == "healthy"
                        && n["gpus"].as_array().is_some_and(|g| g.len() == 2)
                        && n["gpus"][0]["model"] != "demo"
                }))
            .then_some(())
        })
        .await;
    // The admin's tenant may hold one V100 (and any number of other GPUs).
    let quota = cluster
        .http
        .put(format!("{}/api/v1/tenants/default/quota", cluster.url))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"guaranteed_gpus": 0, "flavours": [{"gpu_model": "v100", "max_gpus": 1}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(quota.status(), 200);
    let body: Value = quota.json().await.unwrap();
    assert_eq!(
        body["tenant"]["quota"]["flavours"][0]["max_gpus"], 1,
        "{body}"
    );

    // A V100-only job that needs two V100s can never run: refused, naming the quota.
    let refused = cluster
        .http
        .post(format!("{}/api/v1/jobs", cluster.url))
        .bearer_auth(ADMIN_TOKEN)
        .json(&job(
            "two-v100s",
            json!({"gpu_types": ["v100"], "workers": 2}),
            "true",
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["field"], "spec.resources.gpu_types", "{body}");

    let first = submit(
        &cluster,
        job("first", json!({"gpu_types": ["v100"]}), "sleep 600"),
    )
    .await;
    assert_eq!(node_of(&cluster, &first).await, "exec-a");
    // The second V100 is free, but the tenant holds its one: the next V100-only job waits, saying why.
    let second = submit(
        &cluster,
        job("second", json!({"gpu_types": ["v100"]}), "sleep 1"),
    )
    .await;
    assert_eq!(cluster.queue_reason(&second).await, "tenant_limit");
    // A job of any model goes to the K80s.
    let any = submit(&cluster, job("any", json!({}), "sleep 1")).await;
    assert_eq!(node_of(&cluster, &any).await, "exec-b");
    assert!(cluster.tasks(&second).await.is_empty());
    // The V100 given back, the waiting job takes it.
    cluster
        .post(&format!("/api/v1/jobs/{first}/cancel"), json!({}))
        .await;
    assert_eq!(node_of(&cluster, &second).await, "exec-a");
    cluster
        .wait_for_state(&second, "succeeded", Duration::from_secs(60))
        .await;
    // The accounting counts each job's GPU-hours by the model it held.
    let from = (chrono::Utc::now() - chrono::Duration::hours(1))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let usage = cluster
        .get(&format!("/api/v1/usage?by=job&from={from}"))
        .await;
    let by_model = |name: &str| {
        usage["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["job"] == name)
            .map(|r| r["allocated_gpu_hours_by_model"].clone())
            .unwrap_or_else(|| panic!("no row for {name}: {usage}"))
    };
    for (name, model, other) in [
        ("first", "Tesla V100-SXM2", "Tesla K80"),
        ("any", "Tesla K80", "Tesla V100-SXM2"),
    ] {
        let hours = by_model(name);
        assert!(
            hours[model].as_f64().unwrap_or(0.0) > 0.0,
            "{name}: {hours}"
        );
        assert!(hours.get(other).is_none(), "{name}: {hours}");
    }
}
