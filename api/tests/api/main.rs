//! The REST API driven in-process (`app(state)` with `oneshot`), on a real SQLite store: auth, tenancy,
//! job submission and its idempotency, the state machine, pagination, and every class of bad input.

#![expect(clippy::unwrap_used, reason = "a test helper that fails should panic")]

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use drover_api::{AppState, app};
use drover_service::bootstrap::ensure_cluster_admin;
use drover_store::testing::TestDb;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

mod authz;
mod bad_input;
mod elastic;
mod experiments;
mod limits;
mod queue_usage;
mod security;
mod submissions;
mod tenancy;

const ADMIN_TOKEN: &str = "drv_test-admin-token-0123456789";
const MAX_BODY: usize = 64 * 1024;
const EXAMPLE: &str = include_str!("../../../examples/reference/every-field.yaml");

struct TestApp {
    router: Router,
    db: TestDb,
    state: AppState,
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

impl Reply {
    fn error_code(&self) -> &str {
        self.body["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("not an error body: {}", self.body))
    }
    fn error_field(&self) -> &str {
        self.body["error"]["field"]
            .as_str()
            .unwrap_or_else(|| panic!("no field in: {}", self.body))
    }
}

impl TestApp {
    async fn new() -> TestApp {
        Self::with_limits(drover_runtime::limits::Limits::NONE).await
    }

    async fn with_limits(limits: drover_runtime::limits::Limits) -> TestApp {
        let db = TestDb::sqlite().await;
        ensure_cluster_admin(db.store.as_ref(), Some(ADMIN_TOKEN))
            .await
            .unwrap();
        let secrets = drover_store::secrets::SecretBox::new(&[42; drover_store::secrets::KEY_LEN]);
        let state = AppState::new(db.store.clone(), MAX_BODY)
            .with_secrets(secrets.into())
            .with_limits(limits);
        TestApp {
            router: app(state.clone()),
            db,
            state,
        }
    }

    async fn call(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        body: Option<(&str, Vec<u8>)>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        for (key, value) in headers {
            request = request.header(*key, *value);
        }
        let request = match body {
            Some((content_type, bytes)) => request
                .header("content-type", content_type)
                .body(Body::from(bytes)),
            None => request.body(Body::empty()),
        }
        .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Reply {
            status,
            headers,
            body,
        }
    }

    async fn get(&self, uri: &str, token: &str) -> Reply {
        self.call(Method::GET, uri, Some(token), None, &[]).await
    }

    async fn delete(&self, uri: &str, token: &str) -> Reply {
        self.call(Method::DELETE, uri, Some(token), None, &[]).await
    }

    async fn post(&self, uri: &str, token: &str, body: Value) -> Reply {
        self.call(
            Method::POST,
            uri,
            Some(token),
            Some(("application/json", serde_json::to_vec(&body).unwrap())),
            &[],
        )
        .await
    }

    async fn submit_yaml(&self, token: &str, yaml: &str) -> Reply {
        self.call(
            Method::POST,
            "/api/v1/jobs",
            Some(token),
            Some(("application/yaml", yaml.as_bytes().to_vec())),
            &[],
        )
        .await
    }

    async fn submit_yaml_with_key(&self, token: &str, yaml: &str, key: &str) -> Reply {
        self.call(
            Method::POST,
            "/api/v1/jobs",
            Some(token),
            Some(("application/yaml", yaml.as_bytes().to_vec())),
            &[("idempotency-key", key)],
        )
        .await
    }

    async fn job_count(&self) -> usize {
        let reply = self.get("/api/v1/jobs?limit=500", ADMIN_TOKEN).await;
        reply.body["jobs"].as_array().unwrap().len()
    }

    /// Creates a tenant and a user with `role` in it, and returns a token of that user.
    async fn user_token(&self, tenant: &str, user: &str, role: &str) -> String {
        let tenant_reply = self
            .post("/api/v1/tenants", ADMIN_TOKEN, json!({"name": tenant}))
            .await;
        assert!(
            matches!(
                tenant_reply.status,
                StatusCode::CREATED | StatusCode::CONFLICT
            ),
            "{}",
            tenant_reply.body
        );
        let created = self
            .post(
                "/api/v1/users",
                ADMIN_TOKEN,
                json!({"name": user, "tenant": tenant, "role": role}),
            )
            .await;
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
        let user_id = created.body["user"]["id"].as_str().unwrap();
        let token = self
            .post(
                "/api/v1/tokens",
                ADMIN_TOKEN,
                json!({"name": "test", "user_id": user_id}),
            )
            .await;
        assert_eq!(token.status, StatusCode::CREATED, "{}", token.body);
        token.body["secret"].as_str().unwrap().to_owned()
    }
}

fn named(name: &str) -> String {
    EXAMPLE.replace("name: digits-mlp", &format!("name: {name}"))
}

#[tokio::test]
async fn health_metrics_and_docs_need_no_token() {
    let app = TestApp::new().await;
    for uri in [
        "/healthz",
        "/readyz",
        "/metrics",
        "/api/v1/openapi.json",
        "/api/v1/docs/",
    ] {
        let reply = app.call(Method::GET, uri, None, None, &[]).await;
        assert_eq!(reply.status, StatusCode::OK, "{uri}");
    }
    let metrics = app.call(Method::GET, "/metrics", None, None, &[]).await;
    assert!(
        metrics
            .body
            .as_str()
            .unwrap()
            .contains("drover_jobs{state=\"queued\"} 0")
    );
    let doc = app
        .call(Method::GET, "/api/v1/openapi.json", None, None, &[])
        .await;
    assert!(doc.body["paths"]["/api/v1/jobs"]["post"].is_object());
    insta::assert_json_snapshot!("openapi", doc.body);
}

#[tokio::test]
async fn every_api_call_needs_a_valid_token() {
    let app = TestApp::new().await;
    let missing = app.call(Method::GET, "/api/v1/jobs", None, None, &[]).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
    assert_eq!(missing.error_code(), "unauthenticated");
    assert_eq!(missing.headers["www-authenticate"], "Bearer");
    let basic = app
        .call(
            Method::GET,
            "/api/v1/jobs",
            None,
            None,
            &[("authorization", "Basic YWxpY2U6eA==")],
        )
        .await;
    assert_eq!(basic.status, StatusCode::UNAUTHORIZED);
    let unknown = app.get("/api/v1/jobs", "drv_not-a-real-token").await;
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
    assert_eq!(unknown.body["error"]["message"], "invalid token");

    let created = app
        .post("/api/v1/tokens", ADMIN_TOKEN, json!({"name": "short"}))
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let secret = created.body["secret"].as_str().unwrap().to_owned();
    assert_eq!(app.get("/api/v1/me", &secret).await.status, StatusCode::OK);
    let listed = app.get("/api/v1/tokens", ADMIN_TOKEN).await;
    assert!(
        !listed.body.to_string().contains(&secret),
        "listings never show secrets"
    );
    let id = created.body["token"]["id"].as_str().unwrap();
    let revoked = app
        .delete(&format!("/api/v1/tokens/{id}"), ADMIN_TOKEN)
        .await;
    assert_eq!(revoked.status, StatusCode::OK);
    let after = app.get("/api/v1/me", &secret).await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED);
    assert_eq!(after.body["error"]["message"], "this token was revoked");

    // An expired token: written straight to the store with an expiry in the past.
    let admin = app.db.store.first_cluster_admin().await.unwrap().unwrap();
    let expired = "drv_expired-token-for-the-test";
    app.db
        .store
        .create_token(&drover_store::NewToken {
            user_id: admin.id,
            name: "old".into(),
            token_hash: drover_store::tokens::hash_token(expired),
            prefix: "drv_ex".into(),
            expires_at: Some(chrono::Utc::now() - chrono::Duration::minutes(1)),
            parent: None,
        })
        .await
        .unwrap();
    let reply = app.get("/api/v1/me", expired).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.body["error"]["message"], "this token has expired");
    let bad_expiry = app
        .post(
            "/api/v1/tokens",
            ADMIN_TOKEN,
            json!({"name": "x", "expires_in": "soon"}),
        )
        .await;
    assert_eq!(
        (bad_expiry.status, bad_expiry.error_field()),
        (StatusCode::UNPROCESSABLE_ENTITY, "expires_in")
    );

    // A token never outlives the one that made it: a short-lived token cannot mint a lasting one.
    let short = app
        .post(
            "/api/v1/tokens",
            ADMIN_TOKEN,
            json!({"name": "short", "expires_in": "1h"}),
        )
        .await;
    assert_eq!(short.status, StatusCode::CREATED, "{}", short.body);
    let short_expiry = short.body["token"]["expires_at"]
        .as_str()
        .unwrap()
        .to_owned();
    let short_secret = short.body["secret"].as_str().unwrap();
    for asked in [
        json!({"name": "forever"}),
        json!({"name": "long", "expires_in": "30d"}),
    ] {
        let minted = app.post("/api/v1/tokens", short_secret, asked).await;
        assert_eq!(minted.status, StatusCode::CREATED, "{}", minted.body);
        assert_eq!(minted.body["token"]["expires_at"], short_expiry.as_str());
    }
    let sooner = app
        .post(
            "/api/v1/tokens",
            short_secret,
            json!({"name": "sooner", "expires_in": "5m"}),
        )
        .await;
    assert!(sooner.body["token"]["expires_at"].as_str().unwrap() < short_expiry.as_str());
}

#[tokio::test]
async fn submit_get_list_cancel_and_events() {
    let app = TestApp::new().await;
    let created = app.submit_yaml(ADMIN_TOKEN, EXAMPLE).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let job = &created.body["job"];
    let id = job["id"].as_str().unwrap();
    assert_eq!(created.headers["location"], format!("/api/v1/jobs/{id}"));
    assert_eq!(job["state"], "queued");
    assert_eq!(job["max_gpus"], 4);
    assert_eq!(job["spec"]["spec"]["train"]["batch_size"], 256);
    assert_eq!(job["spec"]["spec"]["max_restarts"], 5);

    let json_doc = serde_json::to_vec(&json!({
        "apiVersion": "drover.dev/v1", "kind": "DroverJob", "metadata": {"name": "cmd"},
        "spec": {"type": "command", "command": {"argv": ["true"]}, "resources": {"gpus_per_worker": 0}}
    }))
    .unwrap();
    let from_json = app
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(ADMIN_TOKEN),
            Some(("application/json", json_doc)),
            &[],
        )
        .await;
    assert_eq!(from_json.status, StatusCode::CREATED, "{}", from_json.body);

    let read = app.get(&format!("/api/v1/jobs/{id}"), ADMIN_TOKEN).await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.body["job"]["name"], "digits-mlp");
    let list = app.get("/api/v1/jobs", ADMIN_TOKEN).await;
    assert_eq!(list.body["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(list.body["jobs"][0]["name"], "cmd", "newest first");
    assert!(
        list.body["jobs"][0].get("spec").is_none(),
        "lists leave out the spec"
    );

    let cancelled = app
        .post(&format!("/api/v1/jobs/{id}/cancel"), ADMIN_TOKEN, json!({}))
        .await;
    assert_eq!(cancelled.status, StatusCode::OK);
    assert_eq!(cancelled.body["job"]["state"], "cancelled");
    assert_eq!(cancelled.body["job"]["reason"], "cancelled_by_user");
    let again = app
        .post(&format!("/api/v1/jobs/{id}/cancel"), ADMIN_TOKEN, json!({}))
        .await;
    assert_eq!(
        (again.status, again.error_code()),
        (StatusCode::CONFLICT, "illegal_transition")
    );

    let events = app
        .get(&format!("/api/v1/jobs/{id}/events"), ADMIN_TOKEN)
        .await;
    let events = events.body["events"].as_array().unwrap().clone();
    assert_eq!(events.len(), 2);
    assert_eq!(
        (events[0]["to"].as_str(), events[0]["reason"].as_str()),
        (Some("queued"), Some("submitted"))
    );
    assert_eq!(
        (events[1]["from"].as_str(), events[1]["to"].as_str()),
        (Some("queued"), Some("cancelled"))
    );
    let cancelled_only = app.get("/api/v1/jobs?state=cancelled", ADMIN_TOKEN).await;
    assert_eq!(cancelled_only.body["jobs"].as_array().unwrap().len(), 1);
    let by_label = app.get("/api/v1/jobs?label=team=vision", ADMIN_TOKEN).await;
    assert_eq!(by_label.body["jobs"][0]["name"], "digits-mlp");
}

#[tokio::test]
async fn idempotency_key_returns_the_first_job_never_a_twin() {
    let app = TestApp::new().await;
    let send = |body: &'static str| app.submit_yaml_with_key(ADMIN_TOKEN, body, "retry-1");
    let first = send(EXAMPLE).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let retry = send(EXAMPLE).await;
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(retry.headers["idempotent-replayed"], "true");
    assert_eq!(retry.body["job"]["id"], first.body["job"]["id"]);
    let different = send("apiVersion: drover.dev/v1\nkind: DroverJob\nmetadata: {name: other}\nspec: {type: command, command: {argv: [x]}}\n").await;
    assert_eq!(
        (different.status, different.error_code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused")
    );
    assert_eq!(app.job_count().await, 1);
    let long_key = "k".repeat(300);
    let too_long = app
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(ADMIN_TOKEN),
            Some(("application/yaml", EXAMPLE.as_bytes().to_vec())),
            &[("idempotency-key", &long_key)],
        )
        .await;
    assert_eq!(
        (too_long.status, too_long.error_field()),
        (StatusCode::BAD_REQUEST, "Idempotency-Key")
    );
}

#[tokio::test]
async fn generate_name_completes_to_a_fresh_name_each_time() {
    let app = TestApp::new().await;
    let name_line = EXAMPLE
        .lines()
        .find(|l| l.trim_start().starts_with("name: "))
        .unwrap();
    let generated = EXAMPLE.replace(name_line, "  generateName: nightly-");
    let mut names = Vec::new();
    for _ in 0..3 {
        let reply = app.submit_yaml(ADMIN_TOKEN, &generated).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
        let name = reply.body["job"]["name"].as_str().unwrap().to_owned();
        assert!(
            name.len() == "nightly-".len() + 5 && name.starts_with("nightly-"),
            "{name}"
        );
        let id = reply.body["job"]["id"].as_str().unwrap();
        let job = app.get(&format!("/api/v1/jobs/{id}"), ADMIN_TOKEN).await;
        assert_eq!(job.body["job"]["spec"]["metadata"]["name"], name.as_str());
        assert_eq!(
            job.body["job"]["spec"]["metadata"]["generateName"],
            "nightly-"
        );
        names.push(name);
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 3);

    // A name given wins over generateName; neither is an error; a bad prefix names its field.
    let both = EXAMPLE.replace(name_line, &format!("{name_line}\n  generateName: nightly-"));
    let reply = app.submit_yaml(ADMIN_TOKEN, &both).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
    assert_eq!(
        reply.body["job"]["name"],
        name_line.trim().trim_start_matches("name: ")
    );
    let neither = EXAMPLE.replace(name_line, "  namespace: default");
    let reply = app.submit_yaml(ADMIN_TOKEN, &neither).await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.body
    );
    assert_eq!(reply.error_field(), "metadata.name");
    for bad in ["Nightly-", "-nightly", &"n".repeat(59)] {
        let reply = app
            .submit_yaml(
                ADMIN_TOKEN,
                &EXAMPLE.replace(name_line, &format!("  generateName: {bad}")),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{bad}: {}",
            reply.body
        );
        assert_eq!(reply.error_field(), "metadata.generateName");
    }
    assert_eq!(app.job_count().await, 4);
}

#[tokio::test]
async fn pages_follow_the_cursor() {
    let app = TestApp::new().await;
    for i in 0..5 {
        assert_eq!(
            app.submit_yaml(ADMIN_TOKEN, &named(&format!("job-{i}")))
                .await
                .status,
            StatusCode::CREATED
        );
    }
    let mut names = Vec::new();
    let mut uri = "/api/v1/jobs?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let page = app.get(&uri, ADMIN_TOKEN).await;
        pages += 1;
        names.extend(
            page.body["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["name"].as_str().unwrap().to_owned()),
        );
        match page.body["meta"]["next_cursor"].as_str() {
            Some(cursor) => uri = format!("/api/v1/jobs?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names, ["job-4", "job-3", "job-2", "job-1", "job-0"]);
    // Every page counts the whole list; the last page leads back to the newer jobs.
    let last = app.get(&uri, ADMIN_TOKEN).await;
    assert_eq!(last.body["meta"]["total"], 5, "{}", last.body);
    assert_eq!(last.body["meta"]["total_exact"], true);
    let prev = last.body["meta"]["prev_cursor"].as_str().unwrap();
    let back = app
        .get(&format!("/api/v1/jobs?limit=2&cursor={prev}"), ADMIN_TOKEN)
        .await;
    let back_names: Vec<&str> = back.body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(back_names, ["job-2", "job-1"], "{}", back.body);
    assert!(back.body["meta"]["prev_cursor"].is_string());
    assert!(back.body["meta"]["next_cursor"].is_string());
    let first = app.get("/api/v1/jobs?limit=2", ADMIN_TOKEN).await;
    assert!(
        first.body["meta"]["prev_cursor"].is_null(),
        "{}",
        first.body
    );
}

#[tokio::test]
async fn job_outputs_are_scoped_and_their_parameters_checked() {
    let app = TestApp::new().await;
    let alice = app.user_token("vision", "alice", "member").await;
    let bob = app.user_token("nlp", "bob", "member").await;
    let job = app.submit_yaml(&alice, EXAMPLE).await;
    let id = job.body["job"]["id"].as_str().unwrap();
    assert_eq!(job.body["job"]["generation"], 0);
    for (path, list) in [
        ("tasks", "tasks"),
        ("metrics", "metrics"),
        ("checkpoints", "checkpoints"),
        ("logs", "logs"),
    ] {
        let uri = format!("/api/v1/jobs/{id}/{path}");
        let mine = app.get(&uri, &alice).await;
        assert_eq!(mine.status, StatusCode::OK, "{uri}: {}", mine.body);
        assert!(mine.body[list].as_array().unwrap().is_empty());
        // Another tenant's member: the job does not exist for them.
        assert_eq!(
            app.get(&uri, &bob).await.status,
            StatusCode::NOT_FOUND,
            "{uri}"
        );
    }
    let long_search = format!("logs?q={}", "x".repeat(201));
    let bad = [
        ("metrics?from_step=ten", "from_step"),
        ("metrics?to_step=18446744073709551615", "to_step"),
        ("metrics?cursor=abc", "cursor"),
        ("metrics?limit=0", "limit"),
        ("logs?follow=maybe", "follow"),
        ("logs?cursor=-x", "cursor"),
        ("logs?before=x", "before"),
        ("logs?generation=9223372036854775808", "generation"),
        ("logs?metrics=", "metrics"),
        ("logs?tail=maybe", "tail"),
        ("logs?task=gpu", "task"),
        ("logs?task=worker-x", "task"),
        ("logs?generation=0", "generation"),
        ("logs?metrics=maybe", "metrics"),
        ("logs?format=xml", "format"),
        ("logs?follow=true&format=text", "format"),
        (long_search.as_str(), "q"),
    ];
    for (query, field) in bad {
        let reply = app.get(&format!("/api/v1/jobs/{id}/{query}"), &alice).await;
        assert_eq!(
            (reply.status, reply.error_field()),
            (StatusCode::BAD_REQUEST, field),
            "{query}: {}",
            reply.body
        );
    }
    // Steps from above the steps to select nothing: an empty page, not an error.
    let inverted = app
        .get(
            &format!("/api/v1/jobs/{id}/metrics?from_step=5&to_step=1"),
            &alice,
        )
        .await;
    assert_eq!(inverted.status, StatusCode::OK, "{}", inverted.body);
    assert_eq!(inverted.body["metrics"], json!([]));
    let unknown = app
        .get(&format!("/api/v1/jobs/{id}/metrics?step=1"), &alice)
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST, "{}", unknown.body);
    let not_an_id = app
        .get(
            &format!("/api/v1/jobs/{id}/checkpoints/nope/download"),
            &alice,
        )
        .await;
    // A malformed checkpoint id names no checkpoint, as a malformed job id names no job.
    assert_eq!(
        not_an_id.status,
        StatusCode::NOT_FOUND,
        "{}",
        not_an_id.body
    );
    let missing = app
        .get(
            &format!(
                "/api/v1/jobs/{id}/checkpoints/{}/download",
                uuid::Uuid::now_v7()
            ),
            &alice,
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);

    // Only cluster administrators cordon and drain nodes.
    let denied = app
        .post("/api/v1/nodes/gpu-1/drain", &alice, json!({}))
        .await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN);
    let absent = app
        .post("/api/v1/nodes/gpu-1/cordon", ADMIN_TOKEN, json!({}))
        .await;
    assert_eq!(absent.status, StatusCode::NOT_FOUND);
}

/// JSON bodies are read as JSON Schema, and so the OpenAPI document, reads them: a whole number
/// written with a fraction (`3.0`, as JavaScript's and Python's encoders may write one) is the integer
/// it equals, and an object names each key once.
#[tokio::test]
async fn json_bodies_take_whole_numbers_as_integers_and_refuse_repeated_keys() {
    let app = TestApp::new().await;
    let minted = app
        .post(
            "/api/v1/enrollment-tokens",
            ADMIN_TOKEN,
            json!({"name": "rack-3", "uses": 3.0}),
        )
        .await;
    assert_eq!(minted.status, StatusCode::CREATED, "{}", minted.body);
    assert_eq!(minted.body["enrollment_token"]["uses_left"], 3);
    let half = app
        .post(
            "/api/v1/enrollment-tokens",
            ADMIN_TOKEN,
            json!({"name": "rack-4", "uses": 2.5}),
        )
        .await;
    assert_eq!(
        (half.status, half.error_field()),
        (StatusCode::UNPROCESSABLE_ENTITY, "uses")
    );
    let job = json!({
        "apiVersion": "drover.dev/v1", "kind": "DroverJob", "metadata": {"name": "floats"},
        "spec": {"type": "command", "command": {"argv": ["true"]},
                 "resources": {"workers": 1.0, "gpus_per_worker": 0.0, "cpus_per_worker": 2e0}}
    });
    let submitted = app.post("/api/v1/jobs", ADMIN_TOKEN, job).await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.body);
    let id = submitted.body["job"]["id"].as_str().unwrap();
    let stored = app.get(&format!("/api/v1/jobs/{id}"), ADMIN_TOKEN).await;
    assert_eq!(
        stored.body["job"]["spec"]["spec"]["resources"]["cpus_per_worker"],
        2
    );
    for (path, body, field) in [
        (
            "/api/v1/tenants",
            br#"{"name": "a", "name": "b"}"#.as_slice(),
            "(body)",
        ),
        (
            "/api/v1/jobs",
            br#"{"apiVersion": "drover.dev/v1", "kind": "DroverJob", "kind": "DroverJob"}"#
                .as_slice(),
            "(document)",
        ),
    ] {
        let reply = app
            .call(
                Method::POST,
                path,
                Some(ADMIN_TOKEN),
                Some(("application/json", body.to_vec())),
                &[],
            )
            .await;
        assert_eq!(
            (reply.status, reply.error_field()),
            (StatusCode::UNPROCESSABLE_ENTITY, field),
            "{path}: {}",
            reply.body
        );
        assert!(
            reply.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("duplicate field"),
            "{}",
            reply.body
        );
    }
}
