//! Bad input through the API: malformed and invalid submissions get a 4xx naming the problem and store
//! nothing; unknown ids, routes and query parameters are 4xx too.

use super::*;

#[tokio::test]
async fn bad_submissions_get_a_4xx_naming_the_problem_and_store_nothing() {
    let app = TestApp::new().await;
    let yaml = |doc: String| {
        let app = &app;
        async move { app.submit_yaml(ADMIN_TOKEN, &doc).await }
    };
    let cases: Vec<(Reply, StatusCode, &str)> = vec![
        (
            app.call(
                Method::POST,
                "/api/v1/jobs",
                Some(ADMIN_TOKEN),
                Some(("application/json", b"{\"apiVersion\": ".to_vec())),
                &[],
            )
            .await,
            StatusCode::BAD_REQUEST,
            "apiVersion",
        ),
        (
            yaml("apiVersion: drover.dev/v1\nmetadata: {name: a\n".to_owned()).await,
            StatusCode::BAD_REQUEST,
            "metadata",
        ),
        (
            yaml(EXAMPLE.replace("batch_size: 256", "batch_size: 256\n    batchsize: 1")).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.train.batchsize",
        ),
        (
            yaml(EXAMPLE.replace("batch_size: 256", "batch_size: many")).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.train.batch_size",
        ),
        (
            yaml(EXAMPLE.replace("workers: {min: 1, max: 4}", "workers: {min: -1, max: 4}")).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.resources.workers.min",
        ),
        (
            yaml(EXAMPLE.replace("workers: {min: 1, max: 4}", "workers: {min: 4, max: 1}")).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.resources.workers",
        ),
        (
            yaml(EXAMPLE.replace("name: digits-mlp", "name: \"\"")).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "metadata.name",
        ),
        (
            yaml(EXAMPLE.replace("gpus_per_worker: 1", "gpus_per_worker: 100000")).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.resources.gpus_per_worker",
        ),
        (
            yaml(EXAMPLE.replace("max_steps: 5000", "max_steps: 99999999999999")).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "spec.train.max_steps",
        ),
        (
            app.call(
                Method::POST,
                "/api/v1/jobs",
                Some(ADMIN_TOKEN),
                Some(("text/plain", EXAMPLE.as_bytes().to_vec())),
                &[],
            )
            .await,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type",
        ),
    ];
    for (i, (reply, status, field)) in cases.iter().enumerate() {
        assert_eq!(reply.status, *status, "case {i}: {}", reply.body);
        assert_eq!(reply.error_field(), *field, "case {i}: {}", reply.body);
        assert!(!reply.body["error"]["message"].as_str().unwrap().is_empty());
    }
    let huge = format!("{EXAMPLE}\n# {}\n", "x".repeat(MAX_BODY));
    let too_big = app.submit_yaml(ADMIN_TOKEN, &huge).await;
    assert_eq!(
        (too_big.status, too_big.error_code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large")
    );
    assert_eq!(app.job_count().await, 0, "nothing was stored");
    // ... and the server keeps serving.
    assert_eq!(
        app.submit_yaml(ADMIN_TOKEN, EXAMPLE).await.status,
        StatusCode::CREATED
    );
    let twin = app.submit_yaml(ADMIN_TOKEN, EXAMPLE).await;
    assert_eq!(
        (twin.status, twin.error_field()),
        (StatusCode::CONFLICT, "metadata.name")
    );
    assert_eq!(app.job_count().await, 1);
}

#[tokio::test]
async fn unknown_ids_routes_and_parameters_are_4xx() {
    let app = TestApp::new().await;
    for uri in [
        "/api/v1/jobs/01a1fb6a-7ae0-71e3-a726-d42f1ef51337",
        "/api/v1/jobs/not-a-uuid",
        "/api/v1/jobs/x/events",
        "/api/v1/nodes/nope",
        "/api/v1/tenants/nope",
        "/api/v1/users/nope",
        "/api/v1/nowhere",
    ] {
        let reply = app.get(uri, ADMIN_TOKEN).await;
        assert_eq!(
            (reply.status, reply.error_code()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{uri}"
        );
    }
    let cancel_unknown = app
        .post(
            "/api/v1/jobs/01a1fb6a-7ae0-71e3-a726-d42f1ef51337/cancel",
            ADMIN_TOKEN,
            json!({}),
        )
        .await;
    assert_eq!(cancel_unknown.status, StatusCode::NOT_FOUND);
    let wrong_method = app
        .call(Method::DELETE, "/api/v1/jobs", Some(ADMIN_TOKEN), None, &[])
        .await;
    assert_eq!(
        (wrong_method.status, wrong_method.error_code()),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );
    for (uri, field) in [
        ("/api/v1/jobs?limit=0", "limit"),
        ("/api/v1/jobs?limit=100000", "limit"),
        ("/api/v1/jobs?state=sleeping", "state"),
        ("/api/v1/jobs?cursor=zzz", "cursor"),
        ("/api/v1/jobs?label=novalue", "label"),
        ("/api/v1/jobs?colour=red", "colour"),
    ] {
        let reply = app.get(uri, ADMIN_TOKEN).await;
        assert_eq!(
            (reply.status, reply.error_field()),
            (StatusCode::BAD_REQUEST, field),
            "{uri}"
        );
    }
}

/// A job no node of the cluster could ever hold is refused at submission with the reason, rather
/// than queued to wait for ever (holding its place in its tenant's queue); a cluster with no node
/// yet refuses nothing.
#[tokio::test]
async fn a_job_no_node_could_ever_hold_is_refused_with_the_reason() {
    use drover_store::{Gpu, NodeRegistration};
    let app = TestApp::new().await;
    let job = |name: &str, gpus_per_worker: u32, memory_gb: u32| {
        serde_json::json!({
            "apiVersion": "drover.dev/v1",
            "kind": "DroverJob",
            "metadata": {"name": name},
            "spec": {
                "type": "command",
                "command": {"argv": ["true"]},
                "resources": {"workers": {"min": 1, "max": 1}, "ps": {"min": 0, "max": 0},
                              "gpus_per_worker": gpus_per_worker, "cpus_per_worker": 1,
                              "memory_gb_per_task": memory_gb}
            }
        })
    };
    let before = app
        .post("/api/v1/jobs", ADMIN_TOKEN, job("before-any-node", 4, 2))
        .await;
    assert_eq!(before.status, StatusCode::CREATED, "{}", before.body);
    app.db
        .store
        .register_node(
            &NodeRegistration {
                name: "gpu-01".to_owned(),
                labels: Default::default(),
                gpus: (0..2)
                    .map(|index| Gpu {
                        index,
                        model: "A100".to_owned(),
                        memory_gb: 80.0,
                    })
                    .collect(),
                cpus: 16,
                memory_gb: 32,
                gpu_source: "nvidia".to_owned(),
                isolation: String::new(),
                runs_images: false,
                taints: Vec::new(),
            },
            chrono::Utc::now(),
        )
        .await
        .unwrap();
    // The node list is read at most every few seconds.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    for (name, gpus, memory, why) in [
        (
            "four-gpu-workers",
            4,
            2,
            "a worker needs 4 GPUs on one node, and no node has more than 2",
        ),
        (
            "too-much-memory",
            1,
            64,
            "a task needs 64 GB of host memory, and no node has more than 32 GB",
        ),
    ] {
        let refused = app
            .post("/api/v1/jobs", ADMIN_TOKEN, job(name, gpus, memory))
            .await;
        assert_eq!(
            refused.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            refused.body
        );
        assert_eq!(refused.error_field(), "spec.resources");
        let message = refused.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{message}");
    }
    let fits = app
        .post("/api/v1/jobs", ADMIN_TOKEN, job("fits", 2, 32))
        .await;
    assert_eq!(fits.status, StatusCode::CREATED, "{}", fits.body);
    // In an image, where no node runs images; and an image reference that is not one.
    let mut in_image = job("in-image", 1, 2);
    in_image["spec"]["command"]["image"] = serde_json::json!("python:3.12-slim");
    let refused = app
        .post("/api/v1/jobs", ADMIN_TOKEN, in_image.clone())
        .await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.body
    );
    assert_eq!(refused.error_field(), "spec.command.image");
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("no node runs images"), "{message}");
    in_image["spec"]["command"]["image"] = serde_json::json!("Not An Image!");
    let refused = app.post("/api/v1/jobs", ADMIN_TOKEN, in_image).await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(refused.error_field(), "spec.command.image");
}
