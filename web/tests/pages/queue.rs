//! The queue page: each waiting job's place, reason with its numbers, and predicted start.

use super::*;

/// The queue (issue #53): a job no node can ever hold says so with the numbers (not "lower
/// priority" and "beyond 30 days"); a job behind others says how many are ahead, not "lower
/// priority" when nobody's priority differs; no start is shown in the past or before a job of the
/// same size ahead; the page says how many jobs it shows, and a waiting job's own page shows its
/// place. Each check fails on the dashboard before this change.
#[tokio::test]
async fn the_queue_says_why_where_and_when() {
    let (site, [_, _, bob]) = Site::new().await;
    let bob = site.sign_in(&bob).await;
    // Submitted before any node registered (nothing is refused then); then a 2-GPU node comes.
    let huge = JOB
        .replace("NAME", "huge")
        .replace("gpus_per_worker: 1", "gpus_per_worker: 3");
    let huge = job_of(&site.submit(&bob, &huge).await);
    let first = job_of(&site.submit(&bob, &JOB.replace("NAME", "first")).await);
    let second = job_of(&site.submit(&bob, &JOB.replace("NAME", "second")).await);
    let now = chrono::Utc::now();
    site.store
        .upsert_node(&drover_store::Node {
            id: uuid::Uuid::now_v7(),
            name: "gpu-a".into(),
            labels: Default::default(),
            gpus: (0..2)
                .map(|index| drover_store::Gpu {
                    index,
                    model: "demo".into(),
                    memory_gb: 16.0,
                })
                .collect(),
            cpus: 8,
            memory_gb: 64,
            health: "healthy".into(),
            cordoned: false,
            draining: false,
            gpu_source: "demo".into(),
            isolation: "none".into(),
            runs_images: false,
            taints: Vec::new(),
            last_heartbeat_at: Some(now),
            created_at: now,
        })
        .await
        .unwrap();
    // The leader's round and forecast: the huge job is in neither (it never fits); the second
    // job, of the first's size, was forecast before the first (a head forecast newer than the
    // rest's), and the first's start has passed.
    site.store
        .record_round(&RoundRecord {
            policy: "drover".into(),
            finished_at: now,
            duration_us: 900,
            waiting: [first, second]
                .into_iter()
                .map(|job| drover_store::WaitingJob {
                    needs: Some(drover_store::Needs {
                        gpus: 2,
                        cpus: 2,
                        memory_gb: 4,
                    }),
                    ..drover_store::WaitingJob::new(job, "lower_priority")
                })
                .collect(),
            // One of the node's two GPUs free once the round's plan was carried out.
            free: Some(drover_store::RoundFree {
                gpus: 1,
                total_gpus: 2,
                cpus: 6,
                total_cpus: 8,
                memory_gb: 60,
            }),
        })
        .await
        .unwrap();
    let entry = |job, position, minutes: i64| drover_store::QueueEntry {
        job,
        position,
        reason: "lower_priority".into(),
        start: Some(now + chrono::Duration::minutes(minutes)),
        finish: Some(now + chrono::Duration::minutes(minutes + 30)),
        p10: Some(now + chrono::Duration::minutes(minutes - 5)),
        p90: Some(now + chrono::Duration::minutes(minutes + 5)),
        guesses: 0,
        made_at: None,
    };
    site.store
        .record_forecast(&drover_store::QueueForecast {
            policy: "drover".into(),
            computed_at: now,
            // The second's start rests on three guessed lengths.
            entries: vec![
                entry(first, 1, -16),
                drover_store::QueueEntry {
                    guesses: 3,
                    ..entry(second, 2, -30)
                },
            ],
            finishing: Default::default(),
        })
        .await
        .unwrap();

    let queue = site.get("/queue", &bob).await.body;
    assert!(
        queue.contains(
            "it can never run on this cluster: a worker needs 3 GPUs on one node, and no node has more than 2"
        ),
        "{queue}"
    );
    assert!(!queue.contains("lower priority"), "{queue}");
    assert!(queue.contains("1 job ahead of it"), "{queue}");
    // With the numbers: what its smallest shape needs, and what the round left free.
    assert!(
        queue.contains("; it needs 2 GPUs, 1 of 2 GPUs are free"),
        "{queue}"
    );
    assert!(queue.contains("now (overdue)"), "{queue}");
    assert_eq!(
        queue
            .matches("a rough guess: 3 jobs it waits on are like no job that has finished")
            .count(),
        1,
        "{queue}"
    );
    assert!(queue.contains("Jobs 1–3 of 3."), "{queue}");
    let rows = queue.split("<tr>").filter(|r| r.contains("/jobs/")).count();
    assert_eq!(rows, 3, "{queue}");
    // Over REST the same: starts never in the past, and never before the same-size job ahead.
    let answer = site.get("/api/v1/queue?limit=2", &bob).await;
    let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["total"], 3, "{body}");
    let jobs = body["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    let start = |j: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(j["predicted_start"].as_str().unwrap()).unwrap()
    };
    assert!(
        start(&jobs[0]) >= now && start(&jobs[1]) >= start(&jobs[0]),
        "{body}"
    );
    assert_eq!(
        (jobs[0]["overdue"].clone(), jobs[1]["overdue"].clone()),
        (true.into(), true.into())
    );
    assert_eq!(
        (jobs[0]["guesses"].as_u64(), jobs[1]["guesses"].as_u64()),
        (Some(0), Some(3))
    );
    // The huge job's own page says why it waits, and the second's where it stands.
    let page = site.get(&format!("/jobs/{}", huge.0), &bob).await.body;
    assert!(
        page.contains("In the queue") && page.contains("can never run"),
        "{page}"
    );
    let page = site.get(&format!("/jobs/{}", second.0), &bob).await.body;
    assert!(page.contains("#2: 1 job ahead of it"), "{page}");
    assert!(page.contains("a rough guess: 3 jobs it waits on"), "{page}");
    // The queue's stream starts with its rows.
    let text = site.first_event("/queue/live", &bob).await;
    assert!(
        text.starts_with("event: rows") && text.contains("huge"),
        "{text}"
    );
    // A malformed offset is said on the page, which still shows the queue.
    let page = site.get("/queue?offset=minus", &bob).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("offset: must be") && page.body.contains("second"),
        "{}",
        page.body
    );
}

/// A cluster administrator's queue filtered by tenant shows that tenant's jobs alone, and pages
/// over them alone; a member asking for another tenant's queue is told why on the page, which shows
/// their own.
#[tokio::test]
async fn the_queue_is_filtered_by_tenant() {
    let (site, [ada, _, bob]) = Site::new().await;
    let ada = site.sign_in(&ada).await;
    let bob = site.sign_in(&bob).await;
    let admin = site.sign_in(&site.cluster_admin().await).await;
    site.submit(&ada, &JOB.replace("NAME", "alpha-job")).await;
    for n in 0..2 {
        site.submit(&bob, &JOB.replace("NAME", &format!("beta-job-{n}")))
            .await;
    }
    let all = site.get("/queue", &admin).await.body;
    assert!(
        all.contains("alpha-job") && all.contains("beta-job-1") && all.contains("Jobs 1–3 of 3."),
        "{all}"
    );
    let beta = site.get("/queue?tenant=beta", &admin).await.body;
    assert!(
        beta.contains("beta-job-0") && beta.contains("beta-job-1"),
        "{beta}"
    );
    assert!(!beta.contains("alpha-job"), "{beta}");
    assert!(beta.contains("Jobs 1–2 of 2."), "{beta}");
    let page = site.get("/queue?tenant=beta", &ada).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("tenant: "), "{}", page.body);
    assert!(
        page.body.contains("alpha-job") && !page.body.contains("beta-job"),
        "{}",
        page.body
    );
}
