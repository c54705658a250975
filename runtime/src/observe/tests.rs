//! The observer's tests: samples read once and again only when a report touched the job, step
//! times per shape (spread steps counted apart), budgets, program keys and thinned loss samples.

use super::*;

/// The scheduling loop reads a job's samples once, then again only when a report touched it;
/// a recorded checkpoint's time reaches it without a read.
#[tokio::test]
async fn the_loop_reads_a_jobs_samples_again_only_when_a_report_touched_it() {
    use drover_store::NewMetrics;
    let db = drover_store::testing::TestDb::sqlite().await;
    let store = db.store.as_ref();
    let job = crate::ingest::tests::job_of(store, "t").await;
    let key = crate::ingest::tests::started(store, job, "n").await;
    let report = |step: u64| NewMetrics {
        key,
        num_ps: 0,
        num_workers: 1,
        worker_nodes: 1,
        gpu_model: String::new(),
        step,
        values: vec![(LOSS.to_owned(), 1.0 / step as f64)],
        recorded_at: Utc::now(),
    };
    let observer = Observer::default();
    let steps = async |observer: &Observer| {
        observer.observe_jobs(store, &[job]).await.unwrap()[&job]
            .observed
            .steps_done
    };
    store.record_metrics(&report(10)).await.unwrap();
    assert_eq!(steps(&observer).await, 10, "never read: read");
    store.record_metrics(&report(20)).await.unwrap();
    assert_eq!(steps(&observer).await, 10, "not touched: not read");
    observer.touched(job);
    assert_eq!(steps(&observer).await, 20, "touched: read");
    assert_eq!(steps(&observer).await, 20);

    let seen = observer.observe_jobs(store, &[job]).await.unwrap();
    assert_eq!(seen[&job].last_checkpoint, None);
    let record = store
        .record_checkpoint(&key, 20, "/c/step-20", 1)
        .await
        .unwrap();
    observer.checkpointed(job, record.created_at);
    let seen = observer.observe_jobs(store, &[job]).await.unwrap();
    assert_eq!(seen[&job].last_checkpoint, Some(record.created_at));
    // A job no longer active is forgotten, and read whole when it comes back.
    observer.retain(&HashSet::new());
    store.record_metrics(&report(30)).await.unwrap();
    assert_eq!(steps(&observer).await, 30);
    let seen = observer.observe_jobs(store, &[job]).await.unwrap();
    assert_eq!(
        seen[&job].last_checkpoint,
        Some(record.created_at),
        "read whole: its latest checkpoint from the store"
    );
}

/// A new leader's observer reads every job at once: each one's samples from its first, and its
/// latest checkpoint (a job without samples or checkpoints is read too, and has neither).
#[tokio::test]
async fn a_new_observer_reads_many_jobs_whole_together() {
    use drover_store::NewMetrics;
    let db = drover_store::testing::TestDb::sqlite().await;
    let store = db.store.as_ref();
    let mut jobs = Vec::new();
    for n in 0..3 {
        let job = crate::ingest::tests::job_of(store, &format!("t{n}")).await;
        let key = crate::ingest::tests::started(store, job, "n").await;
        jobs.push((job, key));
    }
    for (n, &(_, key)) in jobs.iter().enumerate().take(2) {
        for step in 1..=(n as u64 + 2) {
            let report = NewMetrics {
                key,
                num_ps: 0,
                num_workers: 1,
                worker_nodes: 1,
                gpu_model: String::new(),
                step: step * 10,
                values: vec![(LOSS.to_owned(), 1.0 / step as f64)],
                recorded_at: Utc::now(),
            };
            store.record_metrics(&report).await.unwrap();
        }
    }
    let record = store
        .record_checkpoint(&jobs[1].1, 30, "/c/step-30", 1)
        .await
        .unwrap();
    let ids: Vec<JobId> = jobs.iter().map(|&(job, _)| job).collect();
    let seen = Observer::default().observe_jobs(store, &ids).await.unwrap();
    let got: Vec<(u64, Option<DateTime<Utc>>)> = ids
        .iter()
        .map(|job| (seen[job].observed.steps_done, seen[job].last_checkpoint))
        .collect();
    assert_eq!(got, [(20, None), (30, Some(record.created_at)), (0, None)]);
}

fn sample(
    id: i64,
    generation: u64,
    workers: u32,
    step: u64,
    name: &str,
    value: f64,
) -> MetricSample {
    MetricSample {
        id,
        generation,
        role: TaskRole::Worker,
        index: 0,
        num_ps: 1,
        num_workers: workers,
        worker_nodes: 1,
        gpu_model: "cpu".to_owned(),
        step,
        name: name.to_owned(),
        value,
        recorded_at: DateTime::<Utc>::from_timestamp(id, 0).unwrap_or_default(),
    }
}

#[test]
fn step_times_are_averaged_per_shape_without_each_runs_first() {
    let mut tracked = Tracked::default();
    let samples = [
        sample(1, 1, 2, 10, STEP_TIME, 900.0),
        sample(2, 1, 2, 20, STEP_TIME, 10.0),
        sample(3, 1, 2, 30, STEP_TIME, 20.0),
        sample(10, 2, 3, 40, STEP_TIME, 500.0),
        sample(11, 2, 3, 50, STEP_TIME, 8.0),
    ];
    for s in &samples {
        tracked.add(s);
    }
    let observed = tracked.observed();
    assert_eq!(observed.steps_done, 50);
    assert_eq!(observed.step_stats.len(), 2);
    let two = observed.step_stats[0];
    assert_eq!((two.shape.workers, two.samples), (2, 2));
    assert!((two.mean_step_s - 0.015).abs() < 1e-12);
    let three = observed.step_stats[1];
    assert_eq!((three.shape.workers, three.samples), (3, 1));
    // Generation 1 ran from t=1 to t=3 with 2 workers, generation 2 from t=10 to t=11 with 3.
    assert!((observed.executed_s - 3.0).abs() < 1e-9);
    assert!((observed.worker_s - 7.0).abs() < 1e-9);
}

/// Step times of generations whose workers ran on several nodes are counted apart within their
/// shape's statistics, and a job measured much slower spread prefers one node.
#[test]
fn step_times_over_several_nodes_are_kept_apart() {
    let mut tracked = Tracked::default();
    let mut id = 0;
    for (generation, nodes, step_ms) in [(1, 1, 100.0), (2, 2, 150.0)] {
        for _ in 0..7 {
            id += 1;
            let mut s = sample(id, generation, 2, id as u64, STEP_TIME, step_ms);
            s.worker_nodes = nodes;
            tracked.add(&s);
        }
    }
    let observed = tracked.observed();
    let [stats] = observed.step_stats[..] else {
        panic!("one shape: {:?}", observed.step_stats);
    };
    // Each generation's first step time is left out.
    assert_eq!((stats.samples, stats.spread_samples), (12, 6));
    assert!((stats.mean_step_s - 0.125).abs() < 1e-12);
    assert!((stats.spread_mean_step_s - 0.15).abs() < 1e-12);
    assert_eq!(stats.one_node().0, 6);
    assert!((stats.one_node().1 - 0.1).abs() < 1e-12);
    let observations = observed.observations(1, Budget::default(), 0.0, None, 0);
    assert!(observations.prefers_one_node(), "1.5 times slower spread");
}

#[test]
fn the_budget_bounds_the_remaining_steps() {
    let only = Budget {
        steps: Some(1000),
        only_stop: true,
    };
    assert_eq!(only.remaining(400, Some(10)), Some((600, true)));
    let targeted = Budget {
        only_stop: false,
        ..only
    };
    assert_eq!(targeted.remaining(400, Some(10)), Some((10, false)));
    assert_eq!(targeted.remaining(400, Some(5000)), Some((600, true)));
    assert_eq!(targeted.remaining(400, None), Some((600, true)));
    assert_eq!(Budget::default().remaining(400, Some(7)), Some((7, false)));
    assert_eq!(Budget::default().remaining(400, None), None);
}

/// A command job's declared `max_steps` is its budget, as a train job's is; without one there
/// is none.
#[test]
fn a_command_jobs_max_steps_is_its_budget() {
    let document = |extra: &str| {
        format!(
            "apiVersion: drover.dev/v1\nkind: DroverJob\nmetadata: {{name: c}}\nspec:\n  \
             type: command\n  command: {{argv: [python3, train.py]{extra}}}\n"
        )
    };
    let parse = |text: String| {
        drover_core::spec::DroverJob::parse(text.as_bytes(), drover_core::spec::Format::Yaml)
            .expect("valid")
    };
    let budgeted = Budget::of(&parse(document(", max_steps: 900")));
    assert_eq!(
        budgeted,
        Budget {
            steps: Some(900),
            only_stop: true
        }
    );
    assert_eq!(Budget::of(&parse(document(""))), Budget::default());
}

/// Jobs differing only in what leaves a step's time alone (name, learning rate, seed, budget)
/// share a program; a batch, a model or a GPU count makes another; a command's trials share
/// their tenant's experiment whatever their arguments.
#[test]
fn a_program_is_what_decides_a_steps_time() {
    let parse = |text: String| {
        drover_core::spec::DroverJob::parse(text.as_bytes(), drover_core::spec::Format::Yaml)
            .expect("valid")
    };
    let train = |name: &str, lr: &str, batch: u32, steps: u32, gpus: u32| {
        parse(format!(
            "apiVersion: drover.dev/v1\nkind: DroverJob\nmetadata: {{name: {name}}}\nspec:\n  \
             type: train\n  resources: {{gpus_per_worker: {gpus}}}\n  train:\n    \
             model: {{type: mlp}}\n    dataset: {{type: digits}}\n    \
             optimizer: {{type: sgd, lr: {lr}}}\n    batch_size: {batch}\n    \
             max_steps: {steps}\n"
        ))
    };
    let tenant = drover_core::TenantId(uuid::Uuid::from_u128(1));
    let key = |spec| program_of(&spec, tenant).expect("a program");
    let base = key(train("a", "0.1", 64, 1000, 1));
    assert_eq!(key(train("b", "0.01", 64, 5000, 1)), base);
    assert_ne!(key(train("a", "0.1", 128, 1000, 1)), base);
    assert_ne!(key(train("a", "0.1", 64, 1000, 2)), base);
    let command = |argv: &str, experiment: Option<&str>| {
        let labels = experiment.map_or(String::new(), |e| {
            format!(", labels: {{drover.dev/experiment: {e}}}")
        });
        parse(format!(
            "apiVersion: drover.dev/v1\nkind: DroverJob\nmetadata: {{name: c{labels}}}\n\
             spec:\n  type: command\n  command: {{argv: [{argv}]}}\n"
        ))
    };
    let trial = key(command("python3, t.py, --lr, '0.1'", Some("sweep")));
    assert_eq!(
        key(command("python3, t.py, --lr, '0.3'", Some("sweep"))),
        trial
    );
    assert_ne!(
        key(command("python3, t.py, --lr, '0.1'", Some("other"))),
        trial
    );
    let other_tenant = drover_core::TenantId(uuid::Uuid::from_u128(2));
    assert_ne!(
        program_of(&command("python3, t.py", Some("sweep")), other_tenant),
        Some(trial)
    );
    let plain = key(command("python3, t.py, --lr, '0.1'", None));
    assert_ne!(key(command("python3, t.py, --lr, '0.3'", None)), plain);
    assert_eq!(key(command("python3, t.py, --lr, '0.1'", None)), plain);
}

#[test]
fn loss_samples_are_thinned_evenly_and_stay_bounded() {
    let mut tracked = Tracked::default();
    for i in 0..10_000 {
        tracked.add(&sample(
            i,
            1,
            1,
            i as u64 * 10,
            LOSS,
            1.0 / (i as f64 + 1.0),
        ));
    }
    let losses = tracked.observed().loss_samples;
    assert!(losses.len() <= MAX_LOSS_SAMPLES && losses.len() > MAX_LOSS_SAMPLES / 4);
    assert_eq!(losses[0].0, 0);
    let gaps: HashSet<u64> = losses.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert_eq!(gaps.len(), 1, "evenly spaced: {gaps:?}");
}
