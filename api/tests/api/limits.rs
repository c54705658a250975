//! Limits that keep one caller or tenant from taking the server (request rate, waiting jobs) and the
//! audit log of privileged actions.

use super::security::command_job;
use super::{ADMIN_TOKEN, TestApp};
use axum::http::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn a_token_over_its_rate_is_told_when_to_retry() {
    use drover_runtime::limits::{Limits, Rate};
    let app = TestApp::with_limits(Limits {
        requests: Rate {
            per_second: 0.2,
            burst: 3.0,
        },
        ..Limits::NONE
    })
    .await;
    let other = app.user_token("vision", "alice", "member").await;
    // The helper above spent some of the administrator's burst; spend the rest.
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(app.get("/api/v1/me", ADMIN_TOKEN).await);
    }
    let limited = statuses
        .iter()
        .find(|r| r.status == StatusCode::TOO_MANY_REQUESTS)
        .expect("no request was limited");
    assert_eq!(limited.error_code(), "rate_limited");
    let retry: u64 = limited.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=5).contains(&retry), "Retry-After: {retry}");
    // Another token has its own allowance; health checks carry none.
    assert_eq!(app.get("/api/v1/me", &other).await.status, StatusCode::OK);
    let health = app.call(Method::GET, "/healthz", None, None, &[]).await;
    assert_eq!(health.status, StatusCode::OK);
}

#[tokio::test]
async fn made_up_tokens_share_one_allowance_and_leave_real_ones_theirs() {
    use drover_runtime::limits::{Limits, Rate};
    let app = TestApp::with_limits(Limits {
        requests: Rate {
            per_second: 0.2,
            burst: 5.0,
        },
        ..Limits::NONE
    })
    .await;
    let alice = app.user_token("vision", "alice", "member").await;
    assert_eq!(app.get("/api/v1/me", &alice).await.status, StatusCode::OK);
    // Each made-up token is refused, and together they soon run out: a fresh token per request
    // does not buy a fresh burst.
    let mut statuses = Vec::new();
    for n in 0..10 {
        statuses.push(
            app.get("/api/v1/me", &format!("drv_made-up-{n}"))
                .await
                .status,
        );
    }
    assert!(
        statuses[..2].iter().all(|s| *s == StatusCode::UNAUTHORIZED),
        "{statuses:?}"
    );
    assert_eq!(statuses[9], StatusCode::TOO_MANY_REQUESTS, "{statuses:?}");
    // A token already seen to work keeps its own allowance.
    assert_eq!(app.get("/api/v1/me", &alice).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_tenant_may_keep_only_so_many_jobs_waiting() {
    use drover_runtime::limits::Limits;
    let app = TestApp::with_limits(Limits {
        max_queued_jobs_per_tenant: 2,
        ..Limits::NONE
    })
    .await;
    let alice = app.user_token("vision", "alice", "member").await;
    let nick = app.user_token("nlp", "nick", "member").await;
    let first = app.post("/api/v1/jobs", &alice, command_job("one")).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(
        app.post("/api/v1/jobs", &alice, command_job("two"))
            .await
            .status,
        StatusCode::CREATED
    );
    let third = app.post("/api/v1/jobs", &alice, command_job("three")).await;
    assert_eq!(
        third.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        third.body
    );
    assert_eq!(third.error_code(), "too_many_waiting_jobs");
    assert_eq!(
        app.post("/api/v1/jobs", &nick, command_job("one"))
            .await
            .status,
        StatusCode::CREATED
    );
    let id = first.body["job"]["id"].as_str().unwrap();
    app.post(&format!("/api/v1/jobs/{id}/cancel"), &alice, json!({}))
        .await;
    assert_eq!(
        app.post("/api/v1/jobs", &alice, command_job("three"))
            .await
            .status,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn privileged_actions_are_in_the_audit_log() {
    let app = TestApp::new().await;
    let ada = app.user_token("vision", "ada", "admin").await;
    let carol = app
        .post(
            "/api/v1/users",
            &ada,
            json!({"name": "carol", "role": "member"}),
        )
        .await;
    let carol_id = carol.body["user"]["id"].as_str().unwrap();
    app.post(
        "/api/v1/tokens",
        &ada,
        json!({"name": "c", "user_id": carol_id}),
    )
    .await;
    app.call(
        Method::PUT,
        "/api/v1/secrets/db-password",
        Some(&ada),
        Some(("application/json", br#"{"value": "hunter2"}"#.to_vec())),
        &[],
    )
    .await;
    app.post(
        "/api/v1/enrollment-tokens",
        ADMIN_TOKEN,
        json!({"name": "rack", "node": "gpu-07"}),
    )
    .await;
    let job = app.post("/api/v1/jobs", &ada, command_job("theirs")).await;
    let id = job.body["job"]["id"].as_str().unwrap();
    app.post(&format!("/api/v1/jobs/{id}/cancel"), ADMIN_TOKEN, json!({}))
        .await;

    let log = app.get("/api/v1/audit", ADMIN_TOKEN).await;
    assert_eq!(log.status, StatusCode::OK);
    let events: Vec<(String, String, String)> = log.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["actor"].as_str().unwrap().to_owned(),
                e["action"].as_str().unwrap().to_owned(),
                e["target"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let has = |actor: &str, action: &str, target: &str| {
        events
            .iter()
            .any(|(a, b, t)| a == actor && b == action && t.contains(target))
    };
    assert!(has("admin", "tenant.create", "vision"), "{events:?}");
    assert!(has("admin", "user.create", "vision/ada"), "{events:?}");
    assert!(has("ada", "user.create", "vision/carol"), "{events:?}");
    assert!(has("ada", "token.create", "(c)"), "{events:?}");
    assert!(has("ada", "secret.set", "vision/db-password"), "{events:?}");
    assert!(
        has("admin", "enrollment_token.create", "(rack)"),
        "{events:?}"
    );
    assert!(has("admin", "job.cancel", "vision/theirs"), "{events:?}");
    // Newest first, and never a secret's value.
    assert_eq!(events[0].1, "job.cancel");
    assert!(!log.body.to_string().contains("hunter2"));
    // Pages follow the cursor without repeating an event.
    let first = app.get("/api/v1/audit?limit=2", ADMIN_TOKEN).await;
    let cursor = first.body["meta"]["next_cursor"].as_str().unwrap();
    let second = app
        .get(
            &format!("/api/v1/audit?limit=2&cursor={cursor}"),
            ADMIN_TOKEN,
        )
        .await;
    assert!(second.body["events"][0]["id"].as_i64() < first.body["events"][1]["id"].as_i64());
    assert_eq!(
        app.get("/api/v1/audit", &ada).await.status,
        StatusCode::FORBIDDEN
    );
}

/// Credentials not yet seen to work share a bucket per client address: a flood of made-up tokens
/// from one address runs that address out, while a new real token and sign-ins from another address
/// are not held back (they had been: one bucket for everyone gave the flood a quarter of real
/// sign-ins).
#[tokio::test]
async fn a_flood_of_made_up_tokens_from_one_address_leaves_other_addresses_alone() {
    use axum::body::Body;
    use axum::extract::ConnectInfo;
    use axum::http::Request;
    use drover_runtime::limits::{Limits, Rate};
    use std::net::SocketAddr;
    use tower::ServiceExt;
    let app = TestApp::with_limits(Limits {
        requests: Rate {
            per_second: 0.2,
            burst: 5.0,
        },
        ..Limits::NONE
    })
    .await;
    let alice = app.user_token("vision", "alice", "member").await;
    let from = |last: u8, token: &str| {
        Request::get("/api/v1/me")
            .header("authorization", format!("Bearer {token}"))
            .extension(ConnectInfo(SocketAddr::from(([10, 0, 0, last], 40_000))))
            .body(Body::empty())
            .unwrap()
    };
    let mut statuses = Vec::new();
    for n in 0..10 {
        let reply = app
            .router
            .clone()
            .oneshot(from(1, &format!("drv_made-up-{n}")))
            .await
            .unwrap();
        statuses.push(reply.status());
    }
    assert_eq!(statuses[9], StatusCode::TOO_MANY_REQUESTS, "{statuses:?}");
    // Another address: a token never used before works, and a wrong one is simply wrong.
    let fresh = app.router.clone().oneshot(from(2, &alice)).await.unwrap();
    assert_eq!(fresh.status(), StatusCode::OK);
    let wrong = app
        .router
        .clone()
        .oneshot(from(2, "drv_made-up-x"))
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
}
