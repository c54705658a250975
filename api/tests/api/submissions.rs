//! Submissions arriving together are stored together (group commit), and each still gets its own
//! answer: one `201` per name, `409` for the twins, and retries with one idempotency key all given
//! the first job.

use super::{ADMIN_TOKEN, TestApp, named};
use axum::http::StatusCode;
use std::collections::{BTreeMap, BTreeSet};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_submissions_each_get_their_own_answer() {
    let app = TestApp::new().await;
    let names: Vec<String> = (0..16).map(|i| format!("burst-{i}")).collect();
    let plain = names.iter().cycle().take(48).map(|name| {
        let app = &app;
        async move {
            let reply = app.submit_yaml(ADMIN_TOKEN, &named(name)).await;
            (name.clone(), reply)
        }
    });
    let keyed_job = named("keyed");
    let keyed = (0..8).map(|_| app.submit_yaml_with_key(ADMIN_TOKEN, &keyed_job, "burst-key"));
    let (plain, keyed) = tokio::join!(
        futures::future::join_all(plain),
        futures::future::join_all(keyed)
    );

    let mut by_name: BTreeMap<String, Vec<StatusCode>> = BTreeMap::new();
    for (name, reply) in &plain {
        if reply.status == StatusCode::CONFLICT {
            assert_eq!(reply.error_field(), "metadata.name", "{}", reply.body);
        }
        by_name.entry(name.clone()).or_default().push(reply.status);
    }
    for (name, mut statuses) in by_name {
        statuses.sort();
        assert_eq!(
            statuses,
            [
                StatusCode::CREATED,
                StatusCode::CONFLICT,
                StatusCode::CONFLICT
            ],
            "{name}: one submission stored, its twins refused"
        );
    }
    let created = keyed
        .iter()
        .filter(|r| r.status == StatusCode::CREATED)
        .count();
    assert_eq!(created, 1, "one keyed submission creates the job");
    let ids: BTreeSet<&str> = keyed
        .iter()
        .map(|r| {
            assert!(r.status.is_success(), "{}", r.body);
            r.body["job"]["id"].as_str().unwrap()
        })
        .collect();
    assert_eq!(ids.len(), 1, "every retry is answered with the first job");
    assert_eq!(app.job_count().await, 17);
}
