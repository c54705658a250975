//! Retention on both stores: old log lines go, of running jobs too; an ended job's samples go once
//! it ended longer ago than the metric retention, an active job's never; batches of any size.

use super::{Batches, Pruned, Retention, THIN_BUCKET, Thinning, prune};
use chrono::{Duration as Days, Utc};
use drover_core::{JobId, JobState, ReasonCode};
use drover_store::testing::TestDb;
use drover_store::{
    LogFilter, LogWindow, MetricFilter, NewLogLine, NewMetrics, Scope, StateChange, Store, TaskKey,
};
use std::time::Duration;

const DAY: Duration = Duration::from_secs(86_400);

/// A job in its first generation, with one log line 40 days old and one a day old, and three
/// samples.
async fn started(store: &dyn Store, tenant: &str) -> (JobId, TaskKey) {
    let job = crate::ingest::tests::job_of(store, tenant).await;
    let key = crate::ingest::tests::started(store, job, "n").await;
    let line = |days: i64| NewLogLine {
        stream: "stdout".to_owned(),
        line: format!("{days} days ago"),
        logged_at: Utc::now() - Days::days(days),
    };
    store.append_logs(&key, &[line(40), line(1)]).await.unwrap();
    for step in 1..=3 {
        let sample = NewMetrics {
            key,
            num_ps: 0,
            num_workers: 1,
            worker_nodes: 1,
            gpu_model: String::new(),
            step,
            values: vec![("loss".to_owned(), 1.0)],
            recorded_at: Utc::now() - Days::days(200),
        };
        store.record_metrics(&sample).await.unwrap();
    }
    (job, key)
}

async fn samples(store: &dyn Store, job: JobId) -> usize {
    store
        .list_metrics(
            Scope::Cluster,
            job,
            &MetricFilter {
                limit: 100,
                ..MetricFilter::default()
            },
        )
        .await
        .unwrap()
        .len()
}

async fn lines(store: &dyn Store, job: JobId) -> Vec<String> {
    store
        .list_logs(
            Scope::Cluster,
            job,
            &LogFilter::default(),
            LogWindow::default(),
            100,
        )
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.line)
        .collect()
}

async fn retention_deletes_what_is_kept_no_longer(db: TestDb) {
    let store = db.store.as_ref();
    let (running, _) = started(store, "a").await;
    let (ended, _) = started(store, "b").await;
    let cancel = StateChange {
        to: JobState::Cancelled,
        reason: ReasonCode::CancelledByUser,
        message: String::new(),
        actor: None,
    };
    store
        .transition_job(Scope::Cluster, ended, &cancel)
        .await
        .unwrap();
    let retention = Retention {
        logs: Some(30 * DAY),
        metrics: Some(90 * DAY),
        thin_metrics: None,
    };
    let batches = Batches {
        rows: 1,
        pause: Duration::ZERO,
    };
    // Today: the 40-day-old lines go (one a job); the samples stay (the job ended today).
    let pruned = prune(
        store,
        retention,
        batches,
        Utc::now(),
        &mut Thinning::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        pruned,
        Pruned {
            log_lines: 2,
            metric_samples: 0,
            jobs: 0,
            thinned_samples: 0,
        }
    );
    for job in [running, ended] {
        assert_eq!(lines(store, job).await, ["1 days ago"]);
        assert_eq!(samples(store, job).await, 3);
    }
    // 89 days on, the ended job still keeps its samples; 91 days on they go, in batches of two.
    let later = |days| Utc::now() + Days::days(days);
    let keep_logs = Retention {
        logs: None,
        ..retention
    };
    let pruned = prune(
        store,
        keep_logs,
        batches,
        later(89),
        &mut Thinning::default(),
    )
    .await
    .unwrap();
    assert_eq!(pruned, Pruned::default());
    let batches = Batches { rows: 2, ..batches };
    let pruned = prune(
        store,
        keep_logs,
        batches,
        later(91),
        &mut Thinning::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        pruned,
        Pruned {
            log_lines: 0,
            metric_samples: 3,
            jobs: 1,
            thinned_samples: 0,
        }
    );
    assert_eq!(samples(store, ended).await, 0);
    assert_eq!(
        samples(store, running).await,
        3,
        "an active job keeps its samples"
    );
    // Kept for ever: nothing goes.
    let pruned = prune(
        store,
        Retention::FOREVER,
        batches,
        later(1000),
        &mut Thinning::default(),
    )
    .await
    .unwrap();
    assert_eq!(pruned, Pruned::default());
    assert_eq!(lines(store, running).await, ["1 days ago"]);
}

/// A running job's samples older than the thinning age keep the first and the last of each metric's
/// ten minutes; newer ones all stay; a second pass, or a new leader's, deletes nothing more; what
/// the scheduler reads of the job (its steps, its run time) is the same after.
async fn thinning_keeps_each_spans_first_and_last(db: TestDb) {
    let store = db.store.as_ref();
    let job = crate::ingest::tests::job_of(store, "t").await;
    let key = crate::ingest::tests::started(store, job, "n").await;
    // From the next ten minutes on (the job was created now): a pass three days later.
    let width = THIN_BUCKET.as_secs() as i64;
    let aligned = (Utc::now().timestamp().div_euclid(width) + 1) * width;
    let at = |seconds: i64| chrono::DateTime::from_timestamp(seconds, 0).unwrap();
    let later = at(aligned) + Days::days(3);
    let record = async |step: u64, when| {
        let sample = NewMetrics {
            key,
            num_ps: 0,
            num_workers: 1,
            worker_nodes: 1,
            gpu_model: String::new(),
            step,
            values: vec![("loss".to_owned(), 1.0), ("step_time_ms".to_owned(), 5.0)],
            recorded_at: when,
        };
        store.record_metrics(&sample).await.unwrap();
    };
    // 40 minutes of a sample a minute; three days later, three more.
    for minute in 0..40 {
        record(minute + 1, at(aligned + minute as i64 * 60 + 1)).await;
    }
    for step in 100..103 {
        record(step, later).await;
    }
    let seen = async || {
        let observer = crate::observe::Observer::default();
        let seen = observer.observe_jobs(store, &[job]).await.unwrap();
        let observed = &seen[&job].observed;
        (observed.steps_done, observed.executed_s)
    };
    let before = seen().await;
    let retention = Retention {
        logs: None,
        metrics: None,
        thin_metrics: Some(DAY),
    };
    let batches = Batches {
        rows: 7,
        pause: Duration::ZERO,
    };
    let mut thinning = Thinning::default();
    let pruned = prune(store, retention, batches, later, &mut thinning)
        .await
        .unwrap();
    // Of each metric's 4 spans of 10 samples, 2 stay.
    assert_eq!(pruned.thinned_samples, 2 * 4 * 8);
    let kept = store
        .list_metrics(
            Scope::Cluster,
            job,
            &MetricFilter {
                names: vec!["loss".to_owned()],
                limit: 100,
                ..MetricFilter::default()
            },
        )
        .await
        .unwrap();
    let steps: Vec<u64> = kept.iter().map(|s| s.step).collect();
    assert_eq!(steps, [1, 10, 11, 20, 21, 30, 31, 40, 100, 101, 102]);
    assert_eq!(seen().await, before, "the same steps done and run time");
    for mut state in [thinning, Thinning::default()] {
        let again = prune(store, retention, batches, later, &mut state)
            .await
            .unwrap();
        assert_eq!(again, Pruned::default());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinning_on_sqlite() {
    thinning_keeps_each_spans_first_and_last(TestDb::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinning_on_postgres() {
    thinning_keeps_each_spans_first_and_last(TestDb::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_on_sqlite() {
    retention_deletes_what_is_kept_no_longer(TestDb::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_on_postgres() {
    retention_deletes_what_is_kept_no_longer(TestDb::postgres().await).await;
}
