//! Elastic jobs over the API: resizing a job's ranges, and the models fitted to what it reported.

use super::{ADMIN_TOKEN, EXAMPLE, TestApp};
use axum::http::StatusCode;
use chrono::Utc;
use drover_core::{JobId, JobState, ReasonCode};
use drover_store::{NewMetrics, NewTask, Scope, StateChange, TaskKey, TaskRole};
use serde_json::json;

#[tokio::test]
async fn resizing_a_job_changes_its_ranges_and_checks_them() {
    let app = TestApp::new().await;
    let created = app.submit_yaml(ADMIN_TOKEN, EXAMPLE).await;
    let id = created.body["job"]["id"].as_str().unwrap().to_owned();
    let path = format!("/api/v1/jobs/{id}/resize");

    let resized = app
        .post(
            &path,
            ADMIN_TOKEN,
            json!({"workers": {"min": 2, "max": 2}, "ps": {"min": 1, "max": 1}}),
        )
        .await;
    assert_eq!(resized.status, StatusCode::OK, "{}", resized.body);
    let resources = &resized.body["job"]["spec"]["spec"]["resources"];
    assert_eq!(resources["workers"], json!({"min": 2, "max": 2}));
    assert_eq!(resources["ps"], json!({"min": 1, "max": 1}));
    assert_eq!(resized.body["job"]["max_gpus"], 2);
    assert_eq!(resized.body["job"]["state"], "queued");
    let events = app
        .get(&format!("/api/v1/jobs/{id}/events"), ADMIN_TOKEN)
        .await;
    let last = events.body["events"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["reason"], "resized_by_user");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("workers 1..4 -> 2"),
        "{last}"
    );

    // Asking for what the job already has records nothing.
    let count = |body: &serde_json::Value| body["events"].as_array().unwrap().len();
    let before = count(&events.body);
    let same = app
        .post(&path, ADMIN_TOKEN, json!({"workers": {"min": 2, "max": 2}}))
        .await;
    assert_eq!(same.status, StatusCode::OK, "{}", same.body);
    assert_eq!(
        same.body["job"]["spec"]["spec"]["resources"]["workers"],
        json!({"min": 2, "max": 2})
    );
    let after = app
        .get(&format!("/api/v1/jobs/{id}/events"), ADMIN_TOKEN)
        .await;
    assert_eq!(count(&after.body), before, "{}", after.body);

    // Bad input is a 4xx naming the problem, and changes nothing: a body that is not JSON a 400,
    // JSON that is not a resize (no range, an unknown field) a 422, as every other JSON body.
    let empty = app.post(&path, ADMIN_TOKEN, json!({})).await;
    assert_eq!(
        (empty.status, empty.error_field()),
        (StatusCode::UNPROCESSABLE_ENTITY, "(body)")
    );
    let nulls = app
        .post(&path, ADMIN_TOKEN, json!({"workers": null, "ps": null}))
        .await;
    assert_eq!(nulls.status, StatusCode::UNPROCESSABLE_ENTITY);
    let unknown = app.post(&path, ADMIN_TOKEN, json!({"gpus": 3})).await;
    assert_eq!(unknown.status, StatusCode::UNPROCESSABLE_ENTITY);
    let not_json = app
        .call(
            axum::http::Method::POST,
            &path,
            Some(ADMIN_TOKEN),
            Some(("application/json", b"{workers".to_vec())),
            &[],
        )
        .await;
    assert_eq!(
        not_json.status,
        StatusCode::BAD_REQUEST,
        "{}",
        not_json.body
    );
    let inverted = app
        .post(&path, ADMIN_TOKEN, json!({"workers": {"min": 3, "max": 2}}))
        .await;
    assert_eq!(
        inverted.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        inverted.body
    );
    assert!(inverted.error_field().starts_with("spec.resources.workers"));
    let read = app.get(&format!("/api/v1/jobs/{id}"), ADMIN_TOKEN).await;
    assert_eq!(
        read.body["job"]["spec"]["spec"]["resources"]["workers"],
        json!({"min": 2, "max": 2})
    );
    let missing = app
        .post(
            "/api/v1/jobs/01a1fc7b-0000-7000-8000-000000000000/resize",
            ADMIN_TOKEN,
            json!({"workers": {"min": 1, "max": 1}}),
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    app.post(&format!("/api/v1/jobs/{id}/cancel"), ADMIN_TOKEN, json!({}))
        .await;
    let over = app
        .post(&path, ADMIN_TOKEN, json!({"workers": {"min": 1, "max": 1}}))
        .await;
    assert_eq!(over.status, StatusCode::CONFLICT, "{}", over.body);
}

/// Step times at two shapes and a falling loss, as a job's leader would report them, show in
/// `GET /api/v1/jobs/{id}` as the fitted speed and convergence models and the remaining time.
#[tokio::test]
async fn a_job_that_reported_steps_shows_its_models_and_remaining_time() {
    let app = TestApp::new().await;
    let spec = json!({
        "apiVersion": "drover.dev/v1", "kind": "DroverJob", "metadata": {"name": "observed"},
        "spec": {"type": "train",
                 "train": {"model": {"type": "mlp", "hidden": [32]}, "dataset": {"type": "digits"},
                           "optimizer": {"type": "sgd", "lr": 0.1}, "batch_size": 64,
                           "max_steps": 2000, "eval_every": 500},
                 "resources": {"workers": {"min": 1, "max": 2}, "ps": {"min": 1, "max": 1}}}
    });
    let created = app.post("/api/v1/jobs", ADMIN_TOKEN, spec).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.body["job"]["id"].as_str().unwrap().to_owned();
    let path = format!("/api/v1/jobs/{id}");
    // Nothing reported yet: no model.
    let read = app.get(&path, ADMIN_TOKEN).await;
    assert!(read.body["job"].get("model").is_none(), "{}", read.body);

    let store = app.db.store.as_ref();
    let job: JobId = id.parse().unwrap();
    let change = |to, reason| StateChange {
        to,
        reason,
        message: String::new(),
        actor: None,
    };
    let tasks = |workers: u32| -> Vec<NewTask> {
        let task = |role, index| NewTask {
            role,
            index,
            node_name: "n".to_owned(),
            gpus: Vec::new(),
            cpus: 1,
        };
        let mut tasks: Vec<NewTask> = (0..workers).map(|i| task(TaskRole::Worker, i)).collect();
        tasks.push(task(TaskRole::Ps, 0));
        tasks
    };
    let report = |generation: u64, workers: u32, step: u64, step_ms: f64| NewMetrics {
        key: TaskKey {
            job_id: job,
            generation,
            role: TaskRole::Worker,
            index: 0,
        },
        num_ps: 1,
        num_workers: workers,
        worker_nodes: 1,
        gpu_model: "cpu".to_owned(),
        step,
        values: vec![
            ("loss".to_owned(), 1.0 / (0.01 * step as f64 + 1.0) + 0.05),
            ("step_time_ms".to_owned(), step_ms),
        ],
        recorded_at: Utc::now(),
    };
    store
        .start_generation(
            job,
            &tasks(1),
            &change(JobState::Starting, ReasonCode::Allocated),
        )
        .await
        .unwrap();
    store
        .transition_job_in_generation(
            job,
            1,
            &change(JobState::Running, ReasonCode::RendezvousComplete),
            false,
        )
        .await
        .unwrap();
    for k in 1..=10 {
        store
            .record_metrics(&report(1, 1, 50 * k, 20.0))
            .await
            .unwrap();
    }
    store
        .rescale_generation(
            job,
            1,
            &tasks(2),
            &change(JobState::Rescaling, ReasonCode::Resized),
        )
        .await
        .unwrap();
    for k in 11..=20 {
        store
            .record_metrics(&report(2, 2, 50 * k, 12.0))
            .await
            .unwrap();
    }

    let read = app.get(&path, ADMIN_TOKEN).await;
    let model = &read.body["job"]["model"];
    assert_eq!(model["steps_done"], 1000, "{model:#}");
    let shapes = model["speed"]["shapes"].as_array().unwrap();
    // Each run's first report is left out (it includes the warm-up).
    let measured: Vec<(u64, u64, f64)> = shapes
        .iter()
        .map(|s| {
            (
                s["workers"].as_u64().unwrap(),
                s["samples"].as_u64().unwrap(),
                s["mean_step_ms"].as_f64().unwrap(),
            )
        })
        .collect();
    let expected = [(1, 9, 20.0), (2, 9, 12.0)];
    assert!(
        measured.len() == 2
            && measured
                .iter()
                .zip(expected)
                .all(|(m, e)| (m.0, m.1) == (e.0, e.1) && (m.2 - e.2).abs() < 1e-9),
        "{model:#}"
    );
    // The curve l(k) = 1/(0.01·k + 1) + 0.05 the losses came from is recovered.
    let beta: Vec<f64> = model["convergence"]["beta"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_f64().unwrap())
        .collect();
    assert!(
        beta.iter()
            .zip([0.01, 1.0, 0.05])
            .all(|(b, t)| (b - t).abs() < 1e-3 * t.max(0.01)),
        "{beta:?}"
    );
    assert_eq!(
        model["speed"]["fitted"], false,
        "two shapes are not enough to fit"
    );
    // It runs to its budget at its current shape (2 workers, 1 PS): 1000 steps.
    let remaining = &model["remaining"];
    assert_eq!(remaining["basis"], "step_budget");
    assert_eq!(remaining["steps"], 1000);
    assert_eq!(
        (remaining["workers"].as_u64(), remaining["ps"].as_u64()),
        (Some(2), Some(1))
    );
    let seconds = remaining["seconds"].as_f64().unwrap();
    let predicted = shapes[1]["predicted_step_ms"].as_f64().unwrap();
    assert!(
        (seconds - predicted).abs() < 1e-6,
        "{seconds} vs 1000 × {predicted} ms"
    );

    // A finished job has no remaining time.
    let cancelled = app
        .post(&format!("{path}/cancel"), ADMIN_TOKEN, json!({}))
        .await;
    assert_eq!(cancelled.status, StatusCode::OK, "{}", cancelled.body);
    let read = app.get(&path, ADMIN_TOKEN).await;
    assert!(
        read.body["job"]["model"]["remaining"].is_null(),
        "{}",
        read.body
    );
    assert_eq!(
        store.get_job(Scope::Cluster, job).await.unwrap().state,
        JobState::Cancelled
    );
}
