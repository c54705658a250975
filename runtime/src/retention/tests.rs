//! Retention on both stores: old log lines go, of running jobs too; an ended job's samples go once
//! it ended longer ago than the metric retention, an active job's never; batches of any size.

use super::{Batches, Pruned, Retention, prune};
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
    };
    let batches = Batches {
        rows: 1,
        pause: Duration::ZERO,
    };
    // Today: the 40-day-old lines go (one a job); the samples stay (the job ended today).
    let pruned = prune(store, retention, batches, Utc::now()).await.unwrap();
    assert_eq!(
        pruned,
        Pruned {
            log_lines: 2,
            metric_samples: 0,
            jobs: 0
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
    let pruned = prune(store, keep_logs, batches, later(89)).await.unwrap();
    assert_eq!(pruned, Pruned::default());
    let batches = Batches { rows: 2, ..batches };
    let pruned = prune(store, keep_logs, batches, later(91)).await.unwrap();
    assert_eq!(
        pruned,
        Pruned {
            log_lines: 0,
            metric_samples: 3,
            jobs: 1
        }
    );
    assert_eq!(samples(store, ended).await, 0);
    assert_eq!(
        samples(store, running).await,
        3,
        "an active job keeps its samples"
    );
    // Kept for ever: nothing goes.
    let pruned = prune(store, Retention::FOREVER, batches, later(1000))
        .await
        .unwrap();
    assert_eq!(pruned, Pruned::default());
    assert_eq!(lines(store, running).await, ["1 days ago"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_on_sqlite() {
    retention_deletes_what_is_kept_no_longer(TestDb::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_on_postgres() {
    retention_deletes_what_is_kept_no_longer(TestDb::postgres().await).await;
}
