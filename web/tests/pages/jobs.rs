//! The jobs list (counts, pages both ways, unknown filters named, its live stream) and jobs compared
//! side by side.

use super::*;

/// A job that arrives between the jobs page's render and its stream's connection is on the stream's
/// first event: the stream starts with the rows as they are, not with a silent baseline.
#[tokio::test]
async fn the_jobs_stream_starts_with_the_rows_as_they_are_now() {
    let (site, [_, _, bob]) = Site::new().await;
    let bob = site.sign_in(&bob).await;
    assert!(!site.get("/jobs", &bob).await.body.contains("late-job"));
    site.submit(&bob, &JOB.replace("NAME", "late-job")).await;
    let text = site.first_event("/jobs/live", &bob).await;
    assert!(
        text.starts_with("event: rows") && text.contains("late-job"),
        "{text}"
    );
}

/// Jobs side by side: a column each, their metrics on one chart each, their last values, and the
/// spec fields that differ apart from those they share; a job another tenant owns is not found,
/// and a job id that cannot be one is named. The jobs list offers the ticks that lead here.
#[tokio::test]
async fn jobs_compare_side_by_side() {
    use drover_store::NewMetrics;
    let (site, [ada, _, bob]) = Site::new().await;
    let session = site.sign_in(&ada).await;
    let mut jobs = Vec::new();
    for (name, seconds, rate) in [("fast-lr", "60", 0.5f64), ("slow-lr", "90", 0.9)] {
        let created = site
            .submit(
                &session,
                &JOB.replace("NAME", name)
                    .replace("'60'", &format!("'{seconds}'")),
            )
            .await;
        let job = job_of(&created);
        let key = site.start_worker(job).await;
        for step in 1..=20u64 {
            let metrics = NewMetrics {
                key,
                num_ps: 0,
                num_workers: 1,
                worker_nodes: 1,
                gpu_model: "test".into(),
                step,
                values: vec![("loss".into(), rate.powi(step as i32))],
                recorded_at: chrono::Utc::now(),
            };
            site.store.record_metrics(&metrics).await.unwrap();
        }
        jobs.push(job);
    }
    let list = site.get("/jobs", &session).await.body;
    assert!(
        list.contains(&format!(
            r#"name="job" value="{}" form="jobs-chosen""#,
            jobs[0].0
        )),
        "{list}"
    );
    assert!(
        list.contains("Compare chosen") && list.contains(r#"data-bulk="cancel""#),
        "{list}"
    );

    let compare = format!("/compare?job={}&job={}", jobs[0].0, jobs[1].0);
    let page = site.get(&compare, &session).await;
    assert_eq!(page.status, StatusCode::OK);
    let body = &page.body;
    assert!(
        body.contains(">fast-lr</a>") && body.contains(">slow-lr</a>"),
        "{body}"
    );
    assert!(body.contains("Last loss"), "{body}");
    assert!(
        body.contains(&format!("{:.4} at step 20", 0.5f64.powi(20))),
        "{body}"
    );
    // One chart of the loss, a line per job, each named in the legend.
    assert_eq!(body.matches("<svg").count(), 1, "{body}");
    assert_eq!(body.matches("<polyline").count(), 2, "{body}");
    // The argv differs; the resources are shared.
    let differ = &body[body.find("compare-differ").unwrap()..];
    assert!(differ.contains("spec.command.argv"), "{differ}");
    assert!(!differ[..differ.find("</table>").unwrap()].contains("gpus_per_worker"));
    assert!(body.contains("fields the same in every job"), "{body}");

    // Another tenant's member: not found, said on the page. A malformed id: named.
    let bob = site.sign_in(&bob).await;
    let theirs = site.get(&compare, &bob).await.body;
    assert!(
        theirs.contains(&format!("job: no job `{}`", jobs[0].0)),
        "{theirs}"
    );
    let malformed = site.get("/compare?job=nonsense", &session).await.body;
    assert!(
        malformed.contains("job: `nonsense` is not a job id"),
        "{malformed}"
    );
    let alone = site
        .get(&format!("/compare?job={}", jobs[0].0), &session)
        .await
        .body;
    assert!(alone.contains("Choose two jobs or more"), "{alone}");
}

/// The jobs list says how many jobs match, pages back to newer jobs as well as on to older ones,
/// and names a filter it does not know (it listed every job under "No jobs match." or silently).
#[tokio::test]
async fn the_jobs_list_counts_pages_both_ways_and_names_unknown_filters() {
    let (site, [ada, _, _]) = Site::new().await;
    let session = site.sign_in(&ada).await;
    for name in ["first-job", "second-job", "third-job"] {
        site.submit(&session, &JOB.replace("NAME", name)).await;
    }
    let newest = site.get("/jobs?limit=2", &session).await.body;
    assert!(newest.contains("3 jobs; newest first."), "{newest}");
    assert!(newest.contains("third-job") && newest.contains("second-job"));
    assert!(!newest.contains("first-job") && !newest.contains("Newer jobs"));
    let older = site
        .get(&link_to(&newest, "Older jobs →"), &session)
        .await
        .body;
    assert!(
        older.contains("first-job") && !older.contains("third-job"),
        "{older}"
    );
    assert!(!older.contains("Older jobs →"), "the last page");
    let newer = site
        .get(&link_to(&older, "← Newer jobs"), &session)
        .await
        .body;
    assert!(
        newer.contains("third-job") && newer.contains("second-job"),
        "{newer}"
    );
    assert!(!newer.contains("first-job"), "{newer}");
    assert!(older.contains("⇤ Newest jobs"), "{older}");

    let named = site.get("/jobs?name=second", &session).await.body;
    assert!(
        named.contains("1 job with name containing second"),
        "{named}"
    );
    let unknown = site.get("/jobs?status=running", &session).await.body;
    assert!(
        unknown.contains("unknown filter `status` (the filters are state, tenant, label and name)"),
        "{unknown}"
    );
}
