//! The authorisation matrix: every operation of the API (taken from the OpenAPI document, which the
//! router's own route table is checked against) called by six kinds of caller, each on a fresh
//! database, with the status each must get. A route added without an entry here fails the test.

use super::{ADMIN_TOKEN, TestApp};
use axum::http::{Method, StatusCode};
use drover_store::{Gpu, NodeRegistration};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The callers, in the order of each row's statuses.
const CALLERS: [&str; 6] = [
    "anonymous",
    "viewer",
    "member",
    "tenant admin",
    "admin of another tenant",
    "cluster admin",
];

/// (method, path template, statuses for each caller in `CALLERS` order). The resource in a path
/// belongs to tenant `alpha`, whose viewer, member and admin are the second to fourth callers.
const MATRIX: &[(&str, &str, [u16; 6])] = &[
    ("get", "/healthz", [200, 200, 200, 200, 200, 200]),
    ("get", "/readyz", [200, 200, 200, 200, 200, 200]),
    ("get", "/metrics", [200, 200, 200, 200, 200, 200]),
    ("post", "/api/v1/jobs", [401, 403, 201, 201, 201, 201]),
    ("get", "/api/v1/jobs", [401, 200, 200, 200, 200, 200]),
    ("get", "/api/v1/jobs/{id}", [401, 200, 200, 200, 404, 200]),
    (
        "post",
        "/api/v1/experiments",
        [401, 403, 201, 201, 201, 201],
    ),
    ("get", "/api/v1/experiments", [401, 200, 200, 200, 200, 200]),
    (
        "get",
        "/api/v1/experiments/{id}",
        [401, 200, 200, 200, 404, 200],
    ),
    (
        "get",
        "/api/v1/experiments/{id}/trials",
        [401, 200, 200, 200, 404, 200],
    ),
    (
        "get",
        "/api/v1/experiments/{id}/events",
        [401, 200, 200, 200, 404, 200],
    ),
    (
        "post",
        "/api/v1/experiments/{id}/pause",
        [401, 403, 200, 200, 404, 200],
    ),
    // The experiment is active, not paused: 409 once the caller may resume at all.
    (
        "post",
        "/api/v1/experiments/{id}/resume",
        [401, 403, 409, 409, 404, 409],
    ),
    (
        "post",
        "/api/v1/experiments/{id}/cancel",
        [401, 403, 200, 200, 404, 200],
    ),
    (
        "post",
        "/api/v1/jobs/{id}/cancel",
        [401, 403, 200, 200, 404, 200],
    ),
    (
        "post",
        "/api/v1/jobs/{id}/pause",
        [401, 403, 200, 200, 404, 200],
    ),
    // The job is queued, not paused: 409 once the caller may resume at all.
    (
        "post",
        "/api/v1/jobs/{id}/resume",
        [401, 403, 409, 409, 404, 409],
    ),
    (
        "post",
        "/api/v1/jobs/{id}/resize",
        [401, 403, 200, 200, 404, 200],
    ),
    (
        "get",
        "/api/v1/jobs/{id}/events",
        [401, 200, 200, 200, 404, 200],
    ),
    (
        "get",
        "/api/v1/jobs/{id}/tasks",
        [401, 200, 200, 200, 404, 200],
    ),
    // A queued job has no task to ask: 409 once the caller may ask at all.
    (
        "post",
        "/api/v1/jobs/{id}/checkpoint",
        [401, 403, 409, 409, 404, 409],
    ),
    (
        "get",
        "/api/v1/jobs/{id}/metrics",
        [401, 200, 200, 200, 404, 200],
    ),
    (
        "get",
        "/api/v1/jobs/{id}/checkpoints",
        [401, 200, 200, 200, 404, 200],
    ),
    (
        "get",
        "/api/v1/jobs/{id}/checkpoints/{checkpoint}/download",
        [401, 404, 404, 404, 404, 404],
    ),
    (
        "get",
        "/api/v1/jobs/{id}/logs",
        [401, 200, 200, 200, 404, 200],
    ),
    ("post", "/api/v1/tenants", [401, 403, 403, 403, 403, 201]),
    ("get", "/api/v1/tenants", [401, 200, 200, 200, 200, 200]),
    (
        "get",
        "/api/v1/tenants/{name}",
        [401, 200, 200, 200, 404, 200],
    ),
    (
        "put",
        "/api/v1/tenants/{name}/quota",
        [401, 403, 403, 403, 403, 200],
    ),
    ("post", "/api/v1/users", [401, 403, 403, 201, 201, 201]),
    ("get", "/api/v1/users", [401, 200, 200, 200, 200, 200]),
    ("get", "/api/v1/users/{id}", [401, 200, 200, 200, 404, 200]),
    ("get", "/api/v1/me", [401, 200, 200, 200, 200, 200]),
    // Each caller's own tenant's queue and usage (the cluster admin's: every tenant's).
    ("get", "/api/v1/queue", [401, 200, 200, 200, 200, 200]),
    ("get", "/api/v1/usage", [401, 200, 200, 200, 200, 200]),
    (
        "get",
        "/api/v1/usage/metrics",
        [401, 200, 200, 200, 200, 200],
    ),
    ("post", "/api/v1/tokens", [401, 201, 201, 201, 201, 201]),
    ("get", "/api/v1/tokens", [401, 200, 200, 200, 200, 200]),
    // The viewer's own token: the viewer, their tenant admin and a cluster admin may revoke it.
    (
        "delete",
        "/api/v1/tokens/{id}",
        [401, 200, 404, 200, 404, 200],
    ),
    ("get", "/api/v1/secrets", [401, 200, 200, 200, 200, 200]),
    // Secrets belong to the caller's tenant: another tenant's admin and the cluster admin (tenant
    // `default`) set their own tenant's, and have no `s1` to delete.
    (
        "put",
        "/api/v1/secrets/{name}",
        [401, 403, 200, 200, 200, 200],
    ),
    (
        "delete",
        "/api/v1/secrets/{name}",
        [401, 403, 200, 200, 404, 404],
    ),
    ("get", "/api/v1/nodes", [401, 200, 200, 200, 200, 200]),
    (
        "get",
        "/api/v1/nodes/{name}",
        [401, 200, 200, 200, 200, 200],
    ),
    (
        "post",
        "/api/v1/nodes/{name}/cordon",
        [401, 403, 403, 403, 403, 200],
    ),
    (
        "post",
        "/api/v1/nodes/{name}/uncordon",
        [401, 403, 403, 403, 403, 200],
    ),
    (
        "post",
        "/api/v1/nodes/{name}/drain",
        [401, 403, 403, 403, 403, 200],
    ),
    (
        "post",
        "/api/v1/nodes/{name}/revoke",
        [401, 403, 403, 403, 403, 200],
    ),
    (
        "post",
        "/api/v1/enrollment-tokens",
        [401, 403, 403, 403, 403, 201],
    ),
    (
        "get",
        "/api/v1/enrollment-tokens",
        [401, 403, 403, 403, 403, 200],
    ),
    (
        "delete",
        "/api/v1/enrollment-tokens/{id}",
        [401, 403, 403, 403, 403, 200],
    ),
    ("get", "/api/v1/audit", [401, 403, 403, 403, 403, 200]),
    // Any signed-in caller may read the gateway's authority; this app runs no gateway (an e2e test
    // reads it from a cluster's).
    (
        "get",
        "/api/v1/gateway-authority",
        [401, 404, 404, 404, 404, 404],
    ),
    // Open to anyone (how a caller gets a credential); 404 from a server without single sign-on.
    ("get", "/api/v1/auth/sso", [404, 404, 404, 404, 404, 404]),
    (
        "post",
        "/api/v1/auth/sso/token",
        [404, 404, 404, 404, 404, 404],
    ),
];

/// What one fresh database holds: tenant `alpha` with a viewer, a member and an admin, a job and a
/// secret; tenant `beta` with an admin; a node and an enrolment token.
struct Fixture {
    tokens: [Option<String>; 6],
    job: String,
    experiment: String,
    viewer: String,
    viewer_token: String,
    enrollment_token: String,
}

async fn fixture(app: &TestApp) -> Fixture {
    let viewer = app.user_token("alpha", "val", "viewer").await;
    let member = app.user_token("alpha", "mia", "member").await;
    let admin = app.user_token("alpha", "ada", "admin").await;
    let other = app.user_token("beta", "bob", "admin").await;
    let job = app.post("/api/v1/jobs", &member, command_job("work")).await;
    assert_eq!(job.status, StatusCode::CREATED, "{}", job.body);
    let experiment = app
        .post("/api/v1/experiments", &member, experiment("search"))
        .await;
    assert_eq!(
        experiment.status,
        StatusCode::CREATED,
        "{}",
        experiment.body
    );
    let secret = app
        .call(
            Method::PUT,
            "/api/v1/secrets/s1",
            Some(&member),
            Some(("application/json", br#"{"value": "v"}"#.to_vec())),
            &[],
        )
        .await;
    assert_eq!(secret.status, StatusCode::OK, "{}", secret.body);
    let me = app.get("/api/v1/me", &viewer).await;
    let tokens = app.get("/api/v1/tokens", &viewer).await;
    let enrollment = app
        .post(
            "/api/v1/enrollment-tokens",
            ADMIN_TOKEN,
            json!({"name": "rack"}),
        )
        .await;
    app.db
        .store
        .register_node(
            &NodeRegistration {
                name: "n1".to_owned(),
                labels: Default::default(),
                gpus: vec![Gpu {
                    index: 0,
                    model: "cpu".to_owned(),
                    memory_gb: 0.0,
                }],
                // Enough for the jobs the matrix submits: a node too small would have them
                // refused (no node could ever hold them).
                cpus: 16,
                memory_gb: 64,
                gpu_source: "slots".to_owned(),
                isolation: String::new(),
                runs_images: false,
                taints: Vec::new(),
            },
            chrono::Utc::now(),
        )
        .await
        .unwrap();
    Fixture {
        tokens: [
            None,
            Some(viewer),
            Some(member),
            Some(admin),
            Some(other),
            Some(ADMIN_TOKEN.to_owned()),
        ],
        job: job.body["job"]["id"].as_str().unwrap().to_owned(),
        experiment: experiment.body["experiment"]["id"]
            .as_str()
            .unwrap()
            .to_owned(),
        viewer: me.body["user"]["id"].as_str().unwrap().to_owned(),
        viewer_token: tokens.body["tokens"][0]["id"].as_str().unwrap().to_owned(),
        enrollment_token: enrollment.body["enrollment_token"]["id"]
            .as_str()
            .unwrap()
            .to_owned(),
    }
}

fn command_job(name: &str) -> Value {
    json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverJob",
        "metadata": {"name": name},
        "spec": {
            "type": "command",
            "command": {"argv": ["true"]},
            "resources": {"workers": {"min": 1, "max": 1}, "gpus_per_worker": 0}
        }
    })
}

fn experiment(name: &str) -> Value {
    json!({
        "apiVersion": "drover.dev/v1",
        "kind": "DroverExperiment",
        "metadata": {"name": name},
        "spec": {
            "trial": {"type": "command", "command": {"argv": ["true"]},
                      "resources": {"workers": {"min": 1, "max": 1}, "gpus_per_worker": 0}},
            "parameters": {"x": {"type": "double", "min": 0, "max": 1}},
            "metric": {"name": "loss", "goal": "minimize"},
            "searcher": {"type": "random"}
        }
    })
}

/// The template with the fixture's resources in it.
fn concrete(template: &str, fx: &Fixture) -> String {
    let id = if template.starts_with("/api/v1/users/") {
        &fx.viewer
    } else if template.starts_with("/api/v1/tokens/") {
        &fx.viewer_token
    } else if template.starts_with("/api/v1/enrollment-tokens/") {
        &fx.enrollment_token
    } else if template.starts_with("/api/v1/experiments/") {
        &fx.experiment
    } else {
        &fx.job
    };
    let name = if template.starts_with("/api/v1/tenants/") {
        "alpha"
    } else if template.starts_with("/api/v1/secrets/") {
        "s1"
    } else {
        "n1"
    };
    template
        .replace("{id}", id)
        .replace("{name}", name)
        .replace("{checkpoint}", "0198a0c2-0000-7000-8000-000000000000")
}

/// A valid body for the operations that take one.
fn body(method: &str, template: &str) -> Option<Value> {
    Some(match (method, template) {
        ("post", "/api/v1/jobs") => command_job("another"),
        ("post", "/api/v1/experiments") => experiment("another"),
        ("post", "/api/v1/jobs/{id}/resize") => {
            json!({"workers": {"min": 1, "max": 2}, "ps": {"min": 1, "max": 1}})
        }
        ("post", "/api/v1/tenants") => json!({"name": "gamma"}),
        ("put", "/api/v1/tenants/{name}/quota") => json!({"guaranteed_gpus": 1, "max_gpus": 4}),
        ("post", "/api/v1/users") => json!({"name": "newcomer", "role": "viewer"}),
        ("post", "/api/v1/tokens") => json!({"name": "laptop"}),
        ("put", "/api/v1/secrets/{name}") => json!({"value": "x"}),
        ("post", "/api/v1/enrollment-tokens") => json!({"name": "rack-2"}),
        ("post", "/api/v1/auth/sso/token") => json!({"id_token": "a.b.c"}),
        ("post", _) => json!({}),
        _ => return None,
    })
}

async fn call(method: &str, template: &str, caller: usize) -> StatusCode {
    let app = TestApp::new().await;
    let fx = fixture(&app).await;
    let uri = concrete(template, &fx);
    let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
    let payload = body(method.as_str().to_lowercase().as_str(), template)
        .map(|b| ("application/json", serde_json::to_vec(&b).unwrap()));
    app.call(method, &uri, fx.tokens[caller].as_deref(), payload, &[])
        .await
        .status
}

/// Every (method, path) of the OpenAPI document.
async fn documented_operations() -> BTreeSet<(String, String)> {
    let app = TestApp::new().await;
    let doc = app.get("/api/v1/openapi.json", ADMIN_TOKEN).await;
    let mut operations = BTreeSet::new();
    for (path, item) in doc.body["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                operations.insert((method.clone(), path.clone()));
            }
        }
    }
    operations
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_every_caller_as_the_matrix_says() {
    let documented = documented_operations().await;
    let listed: BTreeSet<(String, String)> = MATRIX
        .iter()
        .map(|(m, p, _)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(listed.len(), MATRIX.len(), "an operation is listed twice");
    let missing: Vec<_> = documented.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "operations without a row in MATRIX: {missing:?}"
    );
    let stale: Vec<_> = listed.difference(&documented).collect();
    assert!(
        stale.is_empty(),
        "rows for operations that do not exist: {stale:?}"
    );

    let mut cases = Vec::new();
    for &(method, template, expected) in MATRIX {
        for (caller, status) in expected.into_iter().enumerate() {
            cases.push((method, template, caller, status));
        }
    }
    let outcomes = futures::future::join_all(cases.chunks(12).map(|chunk| async move {
        let mut wrong = Vec::new();
        for &(method, template, caller, status) in chunk {
            let got = call(method, template, caller).await;
            if got.as_u16() != status {
                wrong.push(format!(
                    "{} {template} as {}: expected {status}, got {got}",
                    method.to_uppercase(),
                    CALLERS[caller]
                ));
            }
        }
        wrong
    }))
    .await;
    let wrong: Vec<String> = outcomes.into_iter().flatten().collect();
    assert!(
        wrong.is_empty(),
        "{} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[tokio::test]
async fn the_router_serves_only_documented_paths() {
    // Every path the router registers (read from its source) is in the OpenAPI document, so the
    // matrix above, which is checked against the document, covers every route.
    let source = include_str!("../../src/routes/mod.rs");
    let documented: BTreeSet<String> = documented_operations()
        .await
        .into_iter()
        .map(|(_, path)| path)
        .collect();
    let mut routed = 0;
    for line in source.lines().map(str::trim) {
        let Some(start) = line.find("\"/") else {
            continue;
        };
        let rest = &line[start + 1..];
        let path = &rest[..rest.find('"').unwrap()];
        if path == "/api/v1/docs" || path == "/api/v1/openapi.json" {
            continue;
        }
        routed += 1;
        assert!(
            documented.contains(path),
            "`{path}` is routed but not documented"
        );
    }
    assert!(
        routed >= 30,
        "found only {routed} routes in the router's source"
    );

    // And on a documented path, every method the document does not list is refused (405), so no
    // handler hides behind a documented path either.
    let operations = documented_operations().await;
    let app = TestApp::new().await;
    for path in &documented {
        for method in ["get", "post", "put", "delete", "patch"] {
            if operations.contains(&(method.to_owned(), path.clone())) {
                continue;
            }
            let uri = path
                .replace("{id}", "x")
                .replace("{name}", "x")
                .replace("{checkpoint}", "x");
            let verb = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let reply = app.call(verb, &uri, Some(ADMIN_TOKEN), None, &[]).await;
            assert_eq!(
                reply.status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path} is served but not documented"
            );
        }
    }
}
