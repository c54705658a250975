//! Many jobs moved in one transaction, over SQL both databases accept: queued jobs started
//! ([`super::ExecStore::start_generations`]) and started ones marked running
//! ([`super::ExecStore::transition_jobs_in_generation`]). A burst of starts (thousands of jobs placed
//! in one round) commits once a batch, in six statements whatever the batch's size, where one job at
//! a time took a transaction of seven statements (the fleet benchmark: 4–5 s for 6,000 starts); a
//! batch of jobs marked running is three statements, where it was two a job.

/// Rows of one multi-row `INSERT` of tasks: well under either database's limit on bound
/// parameters (8 a row).
pub(super) const TASK_ROWS: usize = 1_000;
/// Jobs moved by one statement (at most 7 bound parameters a row).
pub(super) const JOB_ROWS: usize = 500;

macro_rules! impl_start_generations {
    ($store:ty, $db:ty) => {
        impl $store {
            async fn start_generations_sql(
                &self,
                starts: &[(JobId, Vec<NewTask>, StateChange)],
            ) -> StoreResult<Vec<(JobId, u64, Vec<Task>)>> {
                if starts.is_empty() {
                    return Ok(Vec::new());
                }
                let mut tx = self.pool.begin_with(Self::BEGIN_WRITE).await?;
                let now = Utc::now();
                // The jobs still queued, locked in id order as any transaction locking several
                // does, with why each was queued (the ledger's cause of the allocation).
                let mut query = sqlx::QueryBuilder::<$db>::new(
                    "SELECT id, reason FROM jobs WHERE state = 'queued' AND id IN (",
                );
                let mut ids = query.separated(", ");
                for (job, _, _) in starts {
                    ids.push_bind(job.0);
                }
                query.push(") ORDER BY id").push(Self::LOCK_ROW_UPDATE);
                let causes: std::collections::HashMap<Uuid, String> = query
                    .build_query_as::<(Uuid, String)>()
                    .fetch_all(&mut *tx)
                    .await?
                    .into_iter()
                    .collect();
                let starts: Vec<&(JobId, Vec<NewTask>, StateChange)> = starts
                    .iter()
                    .filter(|(job, _, _)| causes.contains_key(&job.0))
                    .collect();
                if starts.is_empty() {
                    tx.commit().await?;
                    return Ok(Vec::new());
                }
                let changes: Vec<(JobId, &StateChange)> =
                    starts.iter().map(|(job, _, change)| (*job, change)).collect();
                let mut generations: std::collections::HashMap<Uuid, i64> =
                    std::collections::HashMap::with_capacity(changes.len());
                for chunk in changes.chunks($crate::starts_sql::JOB_ROWS) {
                    let mut query = Self::move_jobs(chunk, now);
                    query.push(", generation = generation + 1 FROM v WHERE jobs.id = v.vid RETURNING id, generation");
                    generations.extend(query.build_query_as::<(Uuid, i64)>().fetch_all(&mut *tx).await?);
                }
                let generation_of = |job: JobId| -> StoreResult<i64> {
                    generations.get(&job.0).copied().ok_or_else(|| {
                        StoreError::Corrupt(format!("job {} was locked but not moved", job.0))
                    })
                };
                // The tasks, many rows a statement, read back as stored.
                let all: Vec<(JobId, &NewTask)> = starts
                    .iter()
                    .flat_map(|(job, tasks, _)| tasks.iter().map(move |t| (*job, t)))
                    .collect();
                let mut stored: Vec<Task> = Vec::with_capacity(all.len());
                for chunk in all.chunks($crate::starts_sql::TASK_ROWS) {
                    let mut query = sqlx::QueryBuilder::<$db>::new(concat!(
                        "INSERT INTO tasks (",
                        task_columns!(),
                        ") VALUES "
                    ));
                    let mut rows = query.separated(", ");
                    for (job, task) in chunk {
                        rows.push("(");
                        rows.push_bind_unseparated(job.0);
                        rows.push_unseparated(", ");
                        rows.push_bind_unseparated(generation_of(*job)?);
                        rows.push_unseparated(", ");
                        rows.push_bind_unseparated(task.role.as_str());
                        rows.push_unseparated(", ");
                        rows.push_bind_unseparated(task.index as i32);
                        rows.push_unseparated(", ");
                        rows.push_bind_unseparated(task.node_name.as_str());
                        rows.push_unseparated(", ");
                        rows.push_bind_unseparated(Json(&task.gpus));
                        rows.push_unseparated(", ");
                        rows.push_bind_unseparated(task.cpus as i32);
                        rows.push_unseparated(", 'assigned', NULL, NULL, NULL, '', false, ");
                        rows.push_bind_unseparated(now);
                        rows.push_unseparated(")");
                    }
                    query.push(concat!(" RETURNING ", task_columns!()));
                    for row in query.build().fetch_all(&mut *tx).await? {
                        stored.push(task_from_row(&row)?);
                    }
                }
                // The GPUs each node reported, for the models each allocation holds.
                let mut nodes: Vec<&str> = all
                    .iter()
                    .filter(|(_, t)| !t.gpus.is_empty())
                    .map(|(_, t)| t.node_name.as_str())
                    .collect();
                nodes.sort_unstable();
                nodes.dedup();
                let mut reported: std::collections::HashMap<String, Vec<Gpu>> =
                    std::collections::HashMap::new();
                for chunk in nodes.chunks($crate::starts_sql::TASK_ROWS) {
                    let mut query =
                        sqlx::QueryBuilder::<$db>::new("SELECT name, gpus FROM nodes WHERE name IN (");
                    let mut names = query.separated(", ");
                    for name in chunk {
                        names.push_bind(*name);
                    }
                    query.push(")");
                    for (name, Json(gpus)) in query
                        .build_query_as::<(String, Json<Vec<Gpu>>)>()
                        .fetch_all(&mut *tx)
                        .await?
                    {
                        reported.insert(name, gpus);
                    }
                }
                // The accounting ledger's row for each allocation, closed once its tasks have
                // ended, with the GPUs of each model it holds.
                let mut query = sqlx::QueryBuilder::<$db>::new(
                    "WITH v (vid, vgeneration, vgpus, vcause, vmodels) AS (VALUES ",
                );
                let mut rows = query.separated(", ");
                for (job, tasks, _) in &starts {
                    let mut models: BTreeMap<String, u32> = BTreeMap::new();
                    for task in tasks {
                        let Some(gpus) = reported.get(&task.node_name) else {
                            continue;
                        };
                        for &index in &task.gpus {
                            if let Some(gpu) = gpus.iter().find(|g| g.index == u32::from(index)) {
                                *models.entry(gpu.model.clone()).or_default() += 1;
                            }
                        }
                    }
                    let count: i64 = tasks.iter().map(|t| t.gpus.len() as i64).sum();
                    rows.push("(");
                    rows.push_bind_unseparated(job.0);
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(generation_of(*job)?);
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(count);
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(causes.get(&job.0).cloned().unwrap_or_default());
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(Json(models));
                    rows.push_unseparated(")");
                }
                query
                    .push(
                        ") INSERT INTO allocations (job_id, generation, tenant_id, user_id, gpus, started_at, \
                         start_cause, gpu_models) SELECT j.id, v.vgeneration, j.tenant_id, j.submitted_by, v.vgpus, ",
                    )
                    .push_bind(now)
                    .push(", v.vcause, v.vmodels FROM jobs j JOIN v ON j.id = v.vid");
                query.build().execute(&mut *tx).await?;
                // Each job's state change, as its event.
                for chunk in changes.chunks($crate::starts_sql::JOB_ROWS) {
                    Self::insert_events(
                        &mut tx,
                        chunk.iter().map(|(job, change)| (*job, JobState::Queued, *change)),
                        now,
                    )
                    .await?;
                }
                tx.commit().await?;
                let mut by_job: std::collections::HashMap<Uuid, Vec<Task>> =
                    std::collections::HashMap::with_capacity(starts.len());
                for task in stored {
                    by_job.entry(task.key.job_id.0).or_default().push(task);
                }
                // In `generation_tasks`' order: workers, then PS shards, each by index.
                for tasks in by_job.values_mut() {
                    tasks.sort_by(|a, b| {
                        b.key.role.as_str().cmp(a.key.role.as_str()).then(a.key.index.cmp(&b.key.index))
                    });
                }
                starts
                    .iter()
                    .map(|(job, _, _)| {
                        Ok((
                            *job,
                            u64_column(generation_of(*job)?, "generation")?,
                            by_job.remove(&job.0).unwrap_or_default(),
                        ))
                    })
                    .collect()
            }

            async fn transition_jobs_in_generation_sql(
                &self,
                changes: &[(JobId, u64, StateChange)],
            ) -> StoreResult<Vec<JobId>> {
                if changes.is_empty() {
                    return Ok(Vec::new());
                }
                let mut tx = self.pool.begin_with(Self::BEGIN_WRITE).await?;
                let now = Utc::now();
                let mut moved = Vec::new();
                // Locked in id order across the batches too, as any transaction locking several is.
                let mut changes: Vec<&(JobId, u64, StateChange)> = changes.iter().collect();
                changes.sort_unstable_by_key(|(job, _, _)| job.0);
                for chunk in changes.chunks($crate::starts_sql::JOB_ROWS) {
                    let mut query =
                        sqlx::QueryBuilder::<$db>::new("SELECT id, generation, state FROM jobs WHERE id IN (");
                    let mut ids = query.separated(", ");
                    for (job, _, _) in chunk {
                        ids.push_bind(job.0);
                    }
                    // Locked in id order, as any other transaction locking several would.
                    query.push(") ORDER BY id").push(Self::LOCK_ROW_UPDATE);
                    let rows: Vec<(Uuid, i64, String)> = query.build_query_as().fetch_all(&mut *tx).await?;
                    let current: std::collections::HashMap<Uuid, (i64, String)> =
                        rows.into_iter().map(|(id, generation, state)| (id, (generation, state))).collect();
                    // Each job only while the generation given is its current one and the state
                    // machine allows the move.
                    let mut events: Vec<(JobId, JobState, &StateChange)> = Vec::with_capacity(chunk.len());
                    for &(job, generation, change) in chunk {
                        let Some((at, state)) = current.get(&job.0) else { continue };
                        let from = parse_state(state)?;
                        if *at == i64_of(*generation, "generation")? && from.can_transition_to(change.to) {
                            events.push((*job, from, change));
                        }
                    }
                    if events.is_empty() {
                        continue;
                    }
                    let changed: Vec<(JobId, &StateChange)> =
                        events.iter().map(|(job, _, change)| (*job, *change)).collect();
                    let mut query = Self::move_jobs(&changed, now);
                    query.push(" FROM v WHERE jobs.id = v.vid");
                    query.build().execute(&mut *tx).await?;
                    Self::insert_events(&mut tx, events.iter().copied(), now).await?;
                    moved.extend(changed.iter().map(|(job, _)| *job));
                }
                tx.commit().await?;
                Ok(moved)
            }

            /// The start of one `UPDATE jobs` moving each job (at most [`JOB_ROWS`]) to its own
            /// state, reason and message at `now`, joined with their list `v` (`vid` the job's id):
            /// the caller adds what else it sets and `FROM v WHERE jobs.id = v.vid`.
            fn move_jobs<'a>(
                changes: &'a [(JobId, &'a StateChange)],
                now: DateTime<Utc>,
            ) -> sqlx::QueryBuilder<$db> {
                let mut query = sqlx::QueryBuilder::<$db>::new(
                    "WITH v (vid, vstate, vreason, vmessage) AS (VALUES ",
                );
                let mut rows = query.separated(", ");
                for (job, change) in changes {
                    rows.push("(");
                    rows.push_bind_unseparated(job.0);
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(change.to.as_str());
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(change.reason.as_str());
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(change.message.as_str());
                    rows.push_unseparated(")");
                }
                query
                    .push(") UPDATE jobs SET state = v.vstate, reason = v.vreason, message = v.vmessage, updated_at = ")
                    .push_bind(now);
                query
            }

            /// Each job's state change (at most [`JOB_ROWS`]), from the state it left, as its
            /// event: one statement.
            async fn insert_events<'a>(
                tx: &mut <$db as sqlx::Database>::Connection,
                events: impl Iterator<Item = (JobId, JobState, &'a StateChange)>,
                now: DateTime<Utc>,
            ) -> StoreResult<()> {
                let mut query = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO job_events (job_id, from_state, to_state, reason, message, actor, created_at) VALUES ",
                );
                let mut rows = query.separated(", ");
                for (job, from, change) in events {
                    rows.push("(");
                    rows.push_bind_unseparated(job.0);
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(from.as_str());
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(change.to.as_str());
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(change.reason.as_str());
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(change.message.as_str());
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(change.actor.map(|a| a.0));
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(now);
                    rows.push_unseparated(")");
                }
                query.build().execute(&mut *tx).await?;
                Ok(())
            }
        }
    };
}
pub(super) use impl_start_generations;
