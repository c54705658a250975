//! Many queued jobs started in one transaction ([`super::ExecStore::start_generations`]), over SQL
//! both databases accept: a burst of starts (thousands of jobs placed in one round) commits once a
//! batch, in six statements whatever the batch's size, where one job at a time took a transaction
//! of seven statements (the fleet benchmark: 4–5 s for 6,000 starts).

/// Rows of one multi-row `INSERT` of tasks: well under either database's limit on bound
/// parameters (8 a row).
pub(super) const TASK_ROWS: usize = 1_000;

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
                // Each job its own reason and message, in one statement joined with their list.
                let mut query = sqlx::QueryBuilder::<$db>::new(
                    "WITH v (vid, vstate, vreason, vmessage) AS (VALUES ",
                );
                let mut rows = query.separated(", ");
                for (job, _, change) in &starts {
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
                    .push_bind(now)
                    .push(", generation = generation + 1 FROM v WHERE jobs.id = v.vid RETURNING id, generation");
                let generations: std::collections::HashMap<Uuid, i64> = query
                    .build_query_as::<(Uuid, i64)>()
                    .fetch_all(&mut *tx)
                    .await?
                    .into_iter()
                    .collect();
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
                let mut query = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO job_events (job_id, from_state, to_state, reason, message, actor, created_at) VALUES ",
                );
                let mut rows = query.separated(", ");
                for (job, _, change) in &starts {
                    rows.push("(");
                    rows.push_bind_unseparated(job.0);
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(JobState::Queued.as_str());
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
        }
    };
}
pub(super) use impl_start_generations;
