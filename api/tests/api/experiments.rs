//! Experiments over the API: submit, a driver pass that starts trials as jobs of the tenant, the trials
//! view, pause/resume/cancel (which reach the trial jobs), events, tenant scoping, and bad spaces as
//! 422 naming the field.

use super::{ADMIN_TOKEN, TestApp};
use axum::http::{Method, StatusCode};
use drover_service::experiments::{Blocked, drive_all};
use serde_json::Value;

const ASHA: &str = r#"
apiVersion: drover.dev/v1
kind: DroverExperiment
metadata: {name: digits-asha}
spec:
  trial:
    type: train
    train:
      model: {type: mlp, hidden: [32]}
      dataset: {type: digits}
      optimizer: {type: adamw, lr: 0.001}
      batch_size: 32
    resources: {workers: {min: 1, max: 1}, gpus_per_worker: 0}
  parameters:
    train.optimizer.lr: {type: log_uniform, min: 0.0001, max: 0.1}
    train.model.hidden: {type: categorical, values: [[16], [32], [64]]}
  metric: {name: val_accuracy, goal: maximize}
  searcher: {type: asha, min_steps: 10, max_steps: 90, eta: 3}
  budget: {max_trials: 9, max_concurrent_trials: 3}
  seed: 5
"#;

async fn submit(app: &TestApp, token: &str, yaml: &str) -> super::Reply {
    app.call(
        Method::POST,
        "/api/v1/experiments",
        Some(token),
        Some(("application/yaml", yaml.as_bytes().to_vec())),
        &[],
    )
    .await
}

#[tokio::test]
async fn an_experiment_starts_its_trials_as_the_tenants_jobs_and_cancels_them_with_it() {
    let app = TestApp::new().await;
    let member = app.user_token("vision", "ada", "member").await;
    let created = submit(&app, &member, ASHA).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.body["experiment"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(created.body["experiment"]["state"], "active");
    assert_eq!(created.body["experiment"]["searcher"], "asha");

    drive_all(&app.state, &Blocked::default()).await.unwrap();
    let got = app.get(&format!("/api/v1/experiments/{id}"), &member).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    let trials = got.body["experiment"]["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 3, "max_concurrent_trials: {}", got.body);
    for (i, trial) in trials.iter().enumerate() {
        assert_eq!(trial["trial"], i);
        assert_eq!(trial["state"], "active");
        assert_eq!(trial["jobs"][0]["name"], format!("digits-asha-t{i}-0"));
        assert_eq!(trial["jobs"][0]["max_steps"], 10);
        assert!(trial["params"]["train.optimizer.lr"].is_number());
        // What the scheduler is told of it: nothing reported yet, so middling promise, not doomed.
        let promise = trial["promise"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&promise), "{trial}");
        assert_eq!(trial["doomed"], false);
    }
    // The trials are ordinary jobs of the tenant, labelled with their experiment, steps set by ASHA.
    let job_id = trials[0]["jobs"][0]["job_id"].as_str().unwrap();
    let job = app.get(&format!("/api/v1/jobs/{job_id}"), &member).await;
    assert_eq!(job.status, StatusCode::OK);
    assert_eq!(
        job.body["job"]["labels"]["drover.dev/experiment"],
        "digits-asha"
    );
    assert_eq!(job.body["job"]["spec"]["spec"]["train"]["max_steps"], 10);
    // A second pass with nothing new adds nothing (the trials still run).
    drive_all(&app.state, &Blocked::default()).await.unwrap();
    let again = app
        .get(&format!("/api/v1/experiments/{id}/trials"), &member)
        .await;
    assert_eq!(again.body["trials"].as_array().unwrap().len(), 3);

    // Another tenant cannot see it.
    let other = app.user_token("speech", "bo", "member").await;
    let hidden = app.get(&format!("/api/v1/experiments/{id}"), &other).await;
    assert_eq!(hidden.status, StatusCode::NOT_FOUND);
    let listed = app.get("/api/v1/experiments", &other).await;
    assert_eq!(listed.body["experiments"].as_array().unwrap().len(), 0);

    // Pause: the experiment and its queued trials pause; resume brings them back.
    let paused = app
        .post(
            &format!("/api/v1/experiments/{id}/pause"),
            &member,
            Value::Null,
        )
        .await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.body);
    assert_eq!(paused.body["experiment"]["state"], "paused");
    let job = app.get(&format!("/api/v1/jobs/{job_id}"), &member).await;
    assert_eq!(job.body["job"]["state"], "paused");
    let twice = app
        .post(
            &format!("/api/v1/experiments/{id}/pause"),
            &member,
            Value::Null,
        )
        .await;
    assert_eq!(twice.status, StatusCode::CONFLICT);
    let resumed = app
        .post(
            &format!("/api/v1/experiments/{id}/resume"),
            &member,
            Value::Null,
        )
        .await;
    assert_eq!(
        resumed.body["experiment"]["state"], "active",
        "{}",
        resumed.body
    );
    let job = app.get(&format!("/api/v1/jobs/{job_id}"), &member).await;
    assert_eq!(job.body["job"]["state"], "queued");

    // Cancel: every running trial is cancelled, saying why.
    let cancelled = app
        .post(
            &format!("/api/v1/experiments/{id}/cancel"),
            &member,
            Value::Null,
        )
        .await;
    assert_eq!(cancelled.status, StatusCode::OK, "{}", cancelled.body);
    assert_eq!(cancelled.body["experiment"]["state"], "cancelled");
    let job = app.get(&format!("/api/v1/jobs/{job_id}"), &member).await;
    assert_eq!(job.body["job"]["state"], "cancelled");
    assert_eq!(job.body["job"]["reason"], "stopped_by_search");
    let trials = cancelled.body["experiment"]["trials"].as_array().unwrap();
    assert!(
        trials
            .iter()
            .all(|t| t["state"] == "stopped" && t["promise"].is_null()),
        "{}",
        cancelled.body
    );
    // No more trials start once it has ended.
    drive_all(&app.state, &Blocked::default()).await.unwrap();
    let after = app
        .get(&format!("/api/v1/experiments/{id}/trials"), &member)
        .await;
    assert_eq!(after.body["trials"].as_array().unwrap().len(), 3);

    let events = app
        .get(&format!("/api/v1/experiments/{id}/events"), &member)
        .await;
    let messages: Vec<&str> = events.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert!(
        messages[0].starts_with("submitted by ada: asha searcher"),
        "{messages:?}"
    );
    assert!(messages.iter().any(|m| m.starts_with("trial 2 starts")));
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("cancelled by ada (3 running")),
        "{messages:?}"
    );
}

#[tokio::test]
async fn bad_experiments_get_a_4xx_naming_the_field() {
    let app = TestApp::new().await;
    let member = app.user_token("vision", "ada", "member").await;
    let cases = [
        (
            "min: 0.0001, max: 0.1",
            "min: 0, max: 0.1",
            "spec.parameters.train.optimizer.lr.min",
        ),
        ("eta: 3", "eta: 1", "spec.searcher.eta"),
        (
            "[[16], [32], [64]]",
            "[]",
            "spec.parameters.train.model.hidden.values",
        ),
        ("train.model.hidden:", "hidden:", "spec.parameters.hidden"),
        ("max_trials: 9", "max_trials: -1", "spec.budget.max_trials"),
    ];
    for (from, to, field) in cases {
        let reply = submit(&app, &member, &ASHA.replacen(from, to, 1)).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{to}: {}",
            reply.body
        );
        assert_eq!(reply.error_field(), field, "{to}");
    }
    let malformed = app
        .call(
            Method::POST,
            "/api/v1/experiments",
            Some(&member),
            Some(("application/json", b"{\"spec\": ".to_vec())),
            &[],
        )
        .await;
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST);
    let viewer = app.user_token("vision", "val", "viewer").await;
    assert_eq!(
        submit(&app, &viewer, ASHA).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        submit(&app, &member, ASHA).await.status,
        StatusCode::CREATED
    );
    let taken = submit(&app, &member, ASHA).await;
    assert_eq!(taken.status, StatusCode::CONFLICT, "{}", taken.body);
    assert_eq!(taken.error_field(), "metadata.name");
    let unknown = app.get("/api/v1/experiments/not-an-id", ADMIN_TOKEN).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    // Pages, newest first, with a cursor.
    for name in ["second", "third"] {
        let reply = submit(&app, &member, &ASHA.replace("digits-asha", name)).await;
        assert_eq!(reply.status, StatusCode::CREATED);
    }
    let page = app.get("/api/v1/experiments?limit=2", &member).await;
    let names: Vec<&str> = page.body["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["third", "second"]);
    let cursor = page.body["meta"]["next_cursor"].as_str().unwrap();
    let rest = app
        .get(
            &format!("/api/v1/experiments?limit=2&cursor={cursor}"),
            &member,
        )
        .await;
    assert_eq!(rest.body["experiments"][0]["name"], "digits-asha");
    assert!(rest.body["meta"]["next_cursor"].is_null());
    let bad = app.get("/api/v1/experiments?cursor=nope", &member).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.error_field(), "cursor");
}
