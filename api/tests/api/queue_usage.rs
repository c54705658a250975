//! The queue and usage endpoints over the API: a forecast the leader recorded, served per tenant;
//! GPU-hours from the allocation ledger that add up; CSV; and bad parameters as 4xx naming them.

use super::{ADMIN_TOKEN, TestApp, named};
use axum::http::StatusCode;
use chrono::{Duration, Utc};
use drover_core::{JobId, JobState, ReasonCode};
use drover_store::{AllocationEnd, NewTask, QueueEntry, QueueForecast, StateChange, TaskRole};
use std::collections::BTreeMap;

fn id_of(reply: &super::Reply) -> JobId {
    reply.body["job"]["id"].as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_queue_lists_each_tenants_waiting_jobs_in_forecast_order() {
    let app = TestApp::new().await;
    let vision = app.user_token("vision", "ada", "member").await;
    let speech = app.user_token("speech", "bo", "member").await;
    let first = id_of(&app.submit_yaml(&vision, &named("first")).await);
    let second = id_of(&app.submit_yaml(&speech, &named("second")).await);
    let third = id_of(&app.submit_yaml(&vision, &named("third")).await);

    // Before any forecast: listed, oldest first, with nothing predicted yet.
    let before = app.get("/api/v1/queue", &vision).await;
    assert_eq!(before.status, StatusCode::OK, "{}", before.body);
    assert_eq!(before.body["policy"], serde_json::Value::Null);
    let jobs = before.body["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "only vision's jobs: {}", before.body);
    assert_eq!(jobs[0]["name"], "first");
    assert!(jobs[0]["position"].is_null() && jobs[0]["predicted_start"].is_null());

    let now = Utc::now();
    let entry = |job: JobId, position: u32, minutes: i64| QueueEntry {
        job,
        position,
        reason: "insufficient_resources".to_owned(),
        start: Some(now + Duration::minutes(minutes)),
        finish: Some(now + Duration::minutes(minutes + 30)),
        p10: Some(now + Duration::minutes(minutes / 2)),
        p90: Some(now + Duration::minutes(minutes * 2)),
        guesses: 0,
        made_at: None,
    };
    app.db
        .store
        .record_forecast(&QueueForecast {
            policy: "drover".to_owned(),
            computed_at: now,
            entries: vec![
                entry(third, 1, 10),
                entry(second, 2, 20),
                // Kept from an older forecast of the whole queue by one of its head.
                QueueEntry {
                    made_at: Some(now - Duration::seconds(25)),
                    ..entry(first, 3, 40)
                },
            ],
            finishing: BTreeMap::new(),
        })
        .await
        .unwrap();
    let after = app.get("/api/v1/queue", &vision).await;
    let jobs = after.body["jobs"].as_array().unwrap();
    assert_eq!(after.body["policy"], "drover");
    let names: Vec<&str> = jobs.iter().map(|j| j["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["third", "first"], "{}", after.body);
    // Positions count every tenant's jobs; the other tenant's job itself is not shown.
    assert_eq!(jobs[1]["position"], 3);
    assert_eq!(jobs[1]["reason"], "insufficient_resources");
    assert!(jobs[1]["predicted_start"].is_string() && jobs[1]["p90"].is_string());
    // Each prediction says when it was made: the queue's latest forecast, or an older one's.
    let at =
        |v: &serde_json::Value| chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap()).unwrap();
    assert_eq!(at(&jobs[0]["forecast_at"]), at(&after.body["forecast_at"]));
    assert_eq!(
        at(&after.body["forecast_at"]) - at(&jobs[1]["forecast_at"]),
        Duration::seconds(25)
    );
    let everyone = app.get("/api/v1/queue", ADMIN_TOKEN).await;
    assert_eq!(everyone.body["jobs"].as_array().unwrap().len(), 3);
    let only = app
        .get("/api/v1/queue?tenant=speech&limit=1", ADMIN_TOKEN)
        .await;
    assert_eq!(only.body["jobs"][0]["name"], "second");
    // Paged: the whole queue counted, a page of it listed.
    let page = app.get("/api/v1/queue?offset=1&limit=1", ADMIN_TOKEN).await;
    assert_eq!(
        (page.body["total"].clone(), page.body["offset"].clone()),
        (3.into(), 1.into()),
        "{}",
        page.body
    );
    assert_eq!(page.body["jobs"][0]["name"], "second");
    assert_eq!(page.body["complete"], true);
    assert!(
        page.body["jobs"][0]["explanation"]
            .as_str()
            .unwrap()
            .starts_with("not enough free GPUs"),
        "{}",
        page.body
    );

    // A queued job's own view carries its place; a job that is not queued has none.
    let job = app.get(&format!("/api/v1/jobs/{first}"), &vision).await;
    assert_eq!(job.body["job"]["queue"]["position"], 3, "{}", job.body);
    app.post(
        &format!("/api/v1/jobs/{third}/cancel"),
        &vision,
        serde_json::json!({}),
    )
    .await;
    let cancelled = app.get(&format!("/api/v1/jobs/{third}"), &vision).await;
    assert!(cancelled.body["job"].get("queue").is_none());

    // Another tenant's queue is forbidden whether or not it exists; bad limits are 400s.
    for uri in ["/api/v1/queue?tenant=speech", "/api/v1/queue?tenant=nope"] {
        let reply = app.get(uri, &vision).await;
        assert_eq!(
            (reply.status, reply.error_field()),
            (StatusCode::FORBIDDEN, "tenant")
        );
    }
    let bad = app.get("/api/v1/queue?limit=0", &vision).await;
    assert_eq!(
        (bad.status, bad.error_field()),
        (StatusCode::BAD_REQUEST, "limit")
    );
    let bad = app.get("/api/v1/queue?offset=-1", &vision).await;
    assert_eq!(
        (bad.status, bad.error_field()),
        (StatusCode::BAD_REQUEST, "offset")
    );
    let unknown = app.get("/api/v1/queue?sort=x", &vision).await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn usage_adds_up_per_job_and_exports_csv() {
    let app = TestApp::new().await;
    let vision = app.user_token("vision", "ada", "member").await;
    let speech = app.user_token("speech", "bo", "member").await;
    let job = id_of(&app.submit_yaml(&vision, &named("counted")).await);
    let other = id_of(&app.submit_yaml(&speech, &named("theirs")).await);
    let store = app.db.store.as_ref();
    let allocated = StateChange {
        to: JobState::Starting,
        reason: ReasonCode::Allocated,
        message: String::new(),
        actor: None,
    };
    let task = |gpus: Vec<u16>| NewTask {
        role: TaskRole::Worker,
        index: 0,
        node_name: "gpu-a".to_owned(),
        gpus,
        cpus: 1,
    };
    // Generation 1 of `counted` on two GPUs, preempted; `theirs` still running.
    store
        .start_generation(job, &[task(vec![0, 1])], &allocated)
        .await
        .unwrap();
    store
        .start_generation(other, &[task(vec![2])], &allocated)
        .await
        .unwrap();
    let preempted = StateChange {
        to: JobState::Queued,
        reason: ReasonCode::Preempted,
        message: String::new(),
        actor: None,
    };
    store
        .transition_job_in_generation(job, 1, &preempted, false)
        .await
        .unwrap();
    let open = store.open_allocations().await.unwrap();
    let started = open.iter().find(|a| a.job_id == job).unwrap().started_at;
    store
        .close_allocation(
            job,
            1,
            &AllocationEnd {
                ended_at: started + Duration::seconds(3600),
                end_cause: "preemption".to_owned(),
                first_step_at: Some(started + Duration::seconds(60)),
                kept_until: Some(started + Duration::seconds(3000)),
                idle_gpu_s: 0.0,
            },
        )
        .await
        .unwrap();

    let window = format!(
        "from={}&to={}",
        (started - Duration::hours(1)).format("%Y-%m-%dT%H:%M:%SZ"),
        (started + Duration::hours(2)).format("%Y-%m-%dT%H:%M:%SZ")
    );
    let reply = app
        .get(&format!("/api/v1/usage?by=job&{window}"), &vision)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let rows = reply.body["rows"].as_array().unwrap();
    assert_eq!(
        rows.len(),
        1,
        "vision sees only its own job: {}",
        reply.body
    );
    let row = &rows[0];
    assert_eq!(
        (row["tenant"].as_str(), row["job"].as_str()),
        (Some("vision"), Some("counted"))
    );
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    // Generation 1: 2 GPUs × 1 h allocated; 58 min used; 1 min starting; 10 min lost to preemption.
    assert!(f(&row["allocated_gpu_hours"]) >= 2.0, "{row}");
    assert!(
        (f(&row["lost_by_cause"]["startup"]) - 2.0 / 60.0).abs() < 1e-6,
        "{row}"
    );
    assert!(
        (f(&row["lost_by_cause"]["preemption"]) - 20.0 / 60.0).abs() < 1e-6,
        "{row}"
    );
    let lost: f64 = row["lost_by_cause"]
        .as_object()
        .unwrap()
        .values()
        .map(f)
        .sum();
    assert!((f(&row["used_gpu_hours"]) + lost - f(&row["allocated_gpu_hours"])).abs() < 1e-9);
    assert!((f(&row["lost_gpu_hours"]) - lost).abs() < 1e-9);

    let days = app
        .get(
            &format!("/api/v1/usage?by=user&period=day&{window}"),
            ADMIN_TOKEN,
        )
        .await;
    let total: f64 = days.body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| f(&r["allocated_gpu_hours"]))
        .sum();
    assert!((total - f(&days.body["total"]["allocated_gpu_hours"])).abs() < 1e-9);
    assert!(
        days.body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["user"] == "bo")
    );

    let csv = app
        .get(
            &format!("/api/v1/usage?by=job&format=csv&{window}"),
            &vision,
        )
        .await;
    assert_eq!(csv.status, StatusCode::OK);
    assert!(
        csv.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/csv")
    );
    let text = csv.body.as_str().unwrap();
    let mut lines = text.lines();
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("period_start,tenant,user,job_id,job,allocated_gpu_hours")
    );
    assert_eq!(lines.count(), 1, "{text}");

    // A malformed parameter is a 400; well-formed bounds that make no window a 422.
    for (uri, status, field) in [
        ("/api/v1/usage?by=team", StatusCode::BAD_REQUEST, "by"),
        (
            "/api/v1/usage?period=month",
            StatusCode::BAD_REQUEST,
            "period",
        ),
        (
            "/api/v1/usage?format=xml",
            StatusCode::BAD_REQUEST,
            "format",
        ),
        (
            "/api/v1/usage?from=yesterday",
            StatusCode::BAD_REQUEST,
            "from",
        ),
        (
            "/api/v1/usage?from=2026-01-02&to=2026-01-01",
            StatusCode::UNPROCESSABLE_ENTITY,
            "from",
        ),
        (
            "/api/v1/usage?from=2020-01-01&to=2026-01-01",
            StatusCode::UNPROCESSABLE_ENTITY,
            "from",
        ),
    ] {
        let reply = app.get(uri, &vision).await;
        assert_eq!(
            (reply.status, reply.error_field()),
            (status, field),
            "{uri}: {}",
            reply.body
        );
    }
    let forbidden = app.get("/api/v1/usage?tenant=speech", &vision).await;
    assert_eq!(forbidden.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn tenant_metrics_need_a_token_and_show_only_the_callers_tenant() {
    let app = TestApp::new().await;
    let vision = app.user_token("vision", "ada", "member").await;
    let speech = app.user_token("speech", "bo", "member").await;
    let store = app.db.store.as_ref();
    let allocated = StateChange {
        to: JobState::Starting,
        reason: ReasonCode::Allocated,
        message: String::new(),
        actor: None,
    };
    for (token, name, gpu) in [(&vision, "mine", 0), (&speech, "theirs", 1)] {
        let job = id_of(&app.submit_yaml(token, &named(name)).await);
        let task = NewTask {
            role: TaskRole::Worker,
            index: 0,
            node_name: "gpu-a".to_owned(),
            gpus: vec![gpu],
            cpus: 1,
        };
        store
            .start_generation(job, &[task], &allocated)
            .await
            .unwrap();
    }
    let sample = drover_store::GpuUsage {
        at: Utc::now(),
        total: 4,
        allocated: 2,
        running: 2,
        by_tenant: BTreeMap::from([("vision".to_owned(), 1), ("speech".to_owned(), 1)]),
    };
    store
        .record_gpu_usage(&sample, Utc::now() - Duration::days(1))
        .await
        .unwrap();

    let anonymous = app
        .call(
            axum::http::Method::GET,
            "/api/v1/usage/metrics",
            None,
            None,
            &[],
        )
        .await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let own = app.get("/api/v1/usage/metrics", &vision).await;
    assert_eq!(own.status, StatusCode::OK);
    let text = own.body.as_str().unwrap();
    assert!(
        text.contains("drover_tenant_gpu_hours_24h{tenant=\"vision\",kind=\"allocated\"}"),
        "{text}"
    );
    assert!(
        text.contains("drover_tenant_gpus{tenant=\"vision\",kind=\"held\"} 1"),
        "{text}"
    );
    assert!(!text.contains("speech"), "{text}");
    let all = app.get("/api/v1/usage/metrics", ADMIN_TOKEN).await;
    let all = all.body.as_str().unwrap();
    assert!(
        all.contains("tenant=\"speech\",kind=\"lost_startup\""),
        "{all}"
    );
    // The unauthenticated /metrics names no tenant.
    let public = app
        .call(axum::http::Method::GET, "/metrics", None, None, &[])
        .await;
    assert!(!public.body.as_str().unwrap().contains("vision"));
}
