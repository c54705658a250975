//! One job's page: its metric charts (long series, zoom, time axis, CSV, options in the address) and
//! its actions.

use super::*;

/// "Checkpoint now" on a running command job warns that it sends SIGUSR1, which kills a program
/// that does not handle it (the confirmation said only "write a checkpoint now?").
#[tokio::test]
async fn checkpoint_now_on_a_command_job_says_what_it_sends() {
    use drover_core::{JobState, ReasonCode};
    let (site, [ada, _, _]) = Site::new().await;
    let session = site.sign_in(&ada).await;
    let created = site.submit(&session, &JOB.replace("NAME", "cmd")).await;
    let job = job_of(&created);
    let generation = site.start(job).await;
    let running = drover_store::StateChange {
        to: JobState::Running,
        reason: ReasonCode::RendezvousComplete,
        message: "test".into(),
        actor: None,
    };
    site.store
        .transition_job_in_generation(job, generation, &running, false)
        .await
        .unwrap();
    let page = site.get(&created.location, &session).await.body;
    assert!(page.contains("data-action=\"checkpoint\""), "{page}");
    assert!(
        page.contains("SIGUSR1") && page.contains("terminated"),
        "{page}"
    );
    // The resize form starts from the job's ranges and says them (it started empty).
    assert!(page.contains("Now workers 1, PS 0."), "{page}");
    assert!(
        page.contains(r#"name="workers_max" min="1" max="1024" required size="4" value="1""#),
        "{page}"
    );
}

/// A failed job's message — the most important text on its page — spans the whole summary (it
/// was squeezed into a 130-px column), escaped.
#[tokio::test]
async fn a_failed_jobs_message_spans_the_summary() {
    use drover_core::{JobState, ReasonCode};
    let (site, [ada, _, _]) = Site::new().await;
    let session = site.sign_in(&ada).await;
    let created = site.submit(&session, &JOB.replace("NAME", "failing")).await;
    let job = job_of(&created);
    let generation = site.start(job).await;
    let why = "worker 0 exited with status 1: Traceback (most recent call last): <module> \
               RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB";
    let failed = drover_store::StateChange {
        to: JobState::Failed,
        reason: ReasonCode::TaskFailed,
        message: why.into(),
        actor: None,
    };
    site.store
        .transition_job_in_generation(job, generation, &failed, false)
        .await
        .unwrap();
    let page = site.get(&created.location, &session).await.body;
    assert!(
        page.contains(
            r#"<div class="wide"><dt>Message</dt><dd id="job-message">worker 0 exited with status 1: Traceback (most recent call last): &#60;module&#62; RuntimeError"#
        ),
        "{page}"
    );
    let css = site.get("/static/app.css", &session).await.body;
    assert!(
        css.contains(".facts .wide { grid-column: 1 / -1; }"),
        "{css}"
    );
}

/// Drawn by time, a chart zooms to a span of time (seconds since submission): its axis spans it,
/// and the page's CSV link holds the steps recorded in it. Zooming by time used to do nothing.
#[tokio::test]
async fn a_chart_by_time_zooms_to_a_span_of_time() {
    use drover_store::{NewMetrics, Scope};
    let (site, [ada, _, _]) = Site::new().await;
    let session = site.sign_in(&ada).await;
    let created = site.submit(&session, &JOB.replace("NAME", "timed")).await;
    let job = job_of(&created);
    let submitted = site
        .store
        .get_job(Scope::Cluster, job)
        .await
        .unwrap()
        .created_at;
    let key = site.start_worker(job).await;
    // A step a second: step k at k seconds since submission.
    for step in 0..100u64 {
        let metrics = NewMetrics {
            key,
            num_ps: 0,
            num_workers: 1,
            worker_nodes: 1,
            gpu_model: "test".into(),
            step,
            values: vec![("loss".into(), 1.0 + step as f64)],
            recorded_at: submitted + chrono::Duration::seconds(step as i64),
        };
        site.store.record_metrics(&metrics).await.unwrap();
    }
    let chart = site
        .get(
            &format!(
                "/jobs/{}/chart?metric=loss&x=time&from_s=20&to_s=40.5",
                job.0
            ),
            &session,
        )
        .await
        .body;
    assert!(
        chart.contains(r#" 20 40.5""#),
        "the axis spans the span: {chart}"
    );
    // Values 21 to 41 (steps 20 to 40) and no other.
    assert!(
        chart.contains(": loss 21</title>") && chart.contains(": loss 41</title>"),
        "{chart}"
    );
    assert!(
        !chart.contains(": loss 20</title>") && !chart.contains(": loss 42</title>"),
        "{chart}"
    );
    let page = site
        .get(
            &format!("/jobs/{}?metric=loss&x=time&from_s=20&to_s=40.5", job.0),
            &session,
        )
        .await
        .body;
    assert!(
        page.contains(
            r#"name="from_s" min="0" step="any" inputmode="decimal" size="8" value="20""#
        ),
        "{page}"
    );
    let csv = format!(
        "/api/v1/jobs/{}/metrics?format=csv&#38;name=loss&#38;from_step=20&#38;to_step=40",
        job.0
    );
    assert!(page.contains(&csv), "{page}");
    // By step, a span of time is refused with its field.
    let refused = site
        .get(
            &format!("/jobs/{}/chart?metric=loss&x=step&from_s=3", job.0),
            &session,
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(refused.body.starts_with("from_s: "), "{}", refused.body);
}

/// A long series is gathered into step ranges by the database (SQLite and Postgres alike) and drawn
/// with its spike.
async fn a_long_series_is_drawn_whole(db: TestDb) {
    use drover_store::{NewMetrics, Scope};
    let store = db.store.clone();
    let (site, [ada, _, _]) = Site::on(db).await;
    let session = site.sign_in(&ada).await;
    let created = site.submit(&session, &JOB.replace("NAME", "long")).await;
    let job = job_of(&created);
    let key = site.start_worker(job).await;
    for step in 0..3000u64 {
        let loss = if step == 1234 {
            50.0
        } else {
            1.0 + 1.0 / (step as f64 + 1.0)
        };
        let metrics = NewMetrics {
            key,
            num_ps: 0,
            num_workers: 1,
            worker_nodes: 1,
            gpu_model: "test".into(),
            step,
            values: vec![("loss".into(), loss)],
            recorded_at: chrono::Utc::now(),
        };
        store.record_metrics(&metrics).await.unwrap();
    }
    let buckets = store
        .metric_series(
            Scope::Cluster,
            job,
            "loss",
            drover_store::StepRange::ALL,
            100,
        )
        .await
        .unwrap()
        .buckets;
    assert!(buckets.len() <= 101, "{}", buckets.len());
    assert_eq!(buckets.iter().map(|b| b.samples).sum::<u64>(), 3000);
    assert_eq!(buckets.iter().map(|b| b.max).fold(0.0, f64::max), 50.0);
    let chart = site
        .get(&format!("/jobs/{}/chart?metrics=loss", job.0), &session)
        .await;
    assert_eq!(chart.status, StatusCode::OK);
    assert!(
        chart.body.contains(">50</text>"),
        "the spike sets the axis: {}",
        chart.body
    );
    let page = site.get(&created.location, &session).await;
    assert!(page.body.contains("loss ("), "the page draws the loss");
    // Points that arrive later are read on the next view (the series is kept between views).
    let metrics = NewMetrics {
        key,
        num_ps: 0,
        num_workers: 1,
        worker_nodes: 1,
        gpu_model: "test".into(),
        step: 3000,
        values: vec![("loss".into(), 80.0)],
        recorded_at: chrono::Utc::now(),
    };
    store.record_metrics(&metrics).await.unwrap();
    let chart = site
        .get(&format!("/jobs/{}/chart?metrics=loss", job.0), &session)
        .await;
    assert!(chart.body.contains(">80</text>"), "{}", chart.body);
    // A second metric gets a chart and an axis of its own (a tiny learning rate was flat under the
    // loss on a shared axis), and each line says its values on hover.
    let lr = NewMetrics {
        values: vec![("lr".into(), 0.0003)],
        step: 3001,
        ..metrics
    };
    store.record_metrics(&lr).await.unwrap();
    let both = site
        .get(&format!("/jobs/{}/chart?metrics=loss,lr", job.0), &session)
        .await
        .body;
    assert_eq!(both.matches("<svg").count(), 2, "{both}");
    assert!(
        both.contains("the job&#39;s lr by step") || both.contains("the job's lr by step"),
        "{both}"
    );
    assert!(both.contains(": lr 0.0003</title>"), "{both}");

    // Zoomed to a range of steps, gathered afresh: the spike at 1,234 sets the axis, the later 80
    // is outside; the axis spans the range asked.
    let chart = format!("/jobs/{}/chart", job.0);
    let zoomed = site
        .get(
            &format!("{chart}?metric=loss&x=step&from=1200&to=1300"),
            &session,
        )
        .await
        .body;
    assert!(
        zoomed.contains(">50</text>") && !zoomed.contains(">80</text>"),
        "{zoomed}"
    );
    assert!(
        zoomed.contains(r#" 1200 1300""#),
        "the x axis spans the zoom: {zoomed}"
    );
    let calm = site
        .get(&format!("{chart}?metric=loss&from=0&to=1000"), &session)
        .await
        .body;
    assert!(!calm.contains(">50</text>"), "{calm}");
    // By time since submission.
    let timed = site
        .get(&format!("{chart}?metric=loss&x=time"), &session)
        .await
        .body;
    assert!(timed.contains("time since submission"), "{timed}");
    // An option that cannot be read: the chart says which, as text for the page's script.
    let bad = site
        .get(&format!("{chart}?metric=loss&x=hours"), &session)
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.body, "x: `hours`: expected step or time");
    let backwards = site
        .get(&format!("{chart}?metric=loss&from=9&to=3"), &session)
        .await;
    assert_eq!(backwards.status, StatusCode::BAD_REQUEST);
    assert!(backwards.body.starts_with("to: "), "{}", backwards.body);
    // The page takes the same options in its address (its form works without a script), offers
    // the CSV of what it draws, and says an option it cannot read above the default charts.
    let page = site
        .get(
            &format!("/jobs/{}?metric=loss&x=step&from=1200&to=1300", job.0),
            &session,
        )
        .await
        .body;
    assert!(
        page.contains(r#"name="from" min="0" inputmode="numeric" size="8" value="1200""#),
        "{page}"
    );
    let csv_link = format!(
        "/api/v1/jobs/{}/metrics?format=csv&amp;name=loss&amp;from_step=1200&amp;to_step=1300",
        job.0
    );
    let csv_link = csv_link.replace("&amp;", "&#38;");
    assert!(page.contains(&csv_link), "{page}");
    let wrong = site
        .get(&format!("/jobs/{}?x=hours", job.0), &session)
        .await
        .body;
    assert!(
        wrong.contains("x: `hours`: expected step or time"),
        "{wrong}"
    );
    // The CSV: a header, then every sample asked for, in order.
    let csv = site
        .get(
            &format!(
                "/api/v1/jobs/{}/metrics?format=csv&name=loss&from_step=1233&to_step=1235",
                job.0
            ),
            &session,
        )
        .await;
    assert_eq!(csv.status, StatusCode::OK);
    let rows: Vec<&str> = csv.body.lines().collect();
    assert_eq!(
        rows[0],
        "step,name,value,recorded_at,generation,task,workers,ps,gpu_model"
    );
    assert_eq!(rows.len(), 4, "{}", csv.body);
    assert!(rows[2].starts_with("1234,loss,50,"), "{}", rows[2]);
    assert!(rows[2].ends_with(",1,worker-0,1,0,test"), "{}", rows[2]);
}

#[tokio::test]
async fn a_long_series_is_drawn_whole_on_sqlite() {
    a_long_series_is_drawn_whole(TestDb::sqlite().await).await;
}

#[tokio::test]
async fn a_long_series_is_drawn_whole_on_postgres() {
    a_long_series_is_drawn_whole(TestDb::postgres().await).await;
}
