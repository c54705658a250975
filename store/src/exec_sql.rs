//! The one implementation of [`super::ExecStore`] over SQL both databases accept, instantiated per
//! database like [`super::sql`]'s.

macro_rules! task_columns {
    () => {
        "job_id, generation, role, idx, node_name, gpus, cpus, state, address, exit_code, exit_signal, \
         message, stop_requested, updated_at"
    };
}
pub(super) use task_columns;

macro_rules! impl_exec_store {
    ($store:ty, $db:ty) => {
        use $crate::exec_sql::task_columns;

        fn task_from_row(row: &DbRow) -> StoreResult<Task> {
            let Json(gpus): Json<Vec<u16>> = row.try_get("gpus")?;
            Ok(Task {
                key: TaskKey {
                    job_id: JobId(row.try_get("job_id")?),
                    generation: u64_column(row.try_get("generation")?, "generation")?,
                    role: parse_column::<TaskRole>(row.try_get("role")?)?,
                    index: u32_column(row.try_get::<i32, _>("idx")?.into(), "idx")?,
                },
                node_name: row.try_get("node_name")?,
                gpus,
                cpus: u32_column(row.try_get::<i32, _>("cpus")?.into(), "cpus")?,
                state: parse_column::<TaskState>(row.try_get("state")?)?,
                address: row.try_get("address")?,
                exit_code: row.try_get("exit_code")?,
                exit_signal: row.try_get("exit_signal")?,
                message: row.try_get("message")?,
                stop_requested: row.try_get("stop_requested")?,
                updated_at: row.try_get("updated_at")?,
            })
        }

        /// Inserts a checkpoint record in `tx` (fenced by the caller); `over_rate` marks one made past
        /// the per-job rate, which the next such record replaces.
        async fn insert_checkpoint(
            tx: &mut sqlx::Transaction<'static, $db>,
            key: &TaskKey,
            step: u64,
            path: &str,
            size_bytes: u64,
            over_rate: bool,
        ) -> StoreResult<CheckpointRecord> {
            let row = sqlx::query(
                "INSERT INTO checkpoints (id, job_id, generation, step, path, size_bytes, created_at, over_rate) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 RETURNING id, job_id, generation, step, path, size_bytes, created_at",
            )
            .bind(Uuid::now_v7())
            .bind(key.job_id.0)
            .bind(i64_of(key.generation, "generation")?)
            .bind(i64_of(step, "step")?)
            .bind(path)
            .bind(i64_of(size_bytes, "size_bytes")?)
            .bind(Utc::now())
            .bind(over_rate)
            .fetch_one(&mut **tx)
            .await?;
            checkpoint_from_row(&row)
        }

        fn checkpoint_from_row(row: &DbRow) -> StoreResult<CheckpointRecord> {
            Ok(CheckpointRecord {
                id: row.try_get("id")?,
                job_id: JobId(row.try_get("job_id")?),
                generation: u64_column(row.try_get("generation")?, "generation")?,
                step: u64_column(row.try_get("step")?, "step")?,
                path: row.try_get("path")?,
                size_bytes: u64_column(row.try_get("size_bytes")?, "size_bytes")?,
                created_at: row.try_get("created_at")?,
            })
        }

        fn sample_from_row(row: &DbRow) -> StoreResult<MetricSample> {
            Ok(MetricSample {
                id: row.try_get("id")?,
                generation: u64_column(row.try_get("generation")?, "generation")?,
                role: parse_column::<TaskRole>(row.try_get("role")?)?,
                index: u32_column(row.try_get::<i32, _>("idx")?.into(), "idx")?,
                num_ps: u32_column(row.try_get::<i32, _>("num_ps")?.into(), "num_ps")?,
                num_workers: u32_column(row.try_get::<i32, _>("num_workers")?.into(), "num_workers")?,
                worker_nodes: u32_column(row.try_get::<i32, _>("worker_nodes")?.into(), "worker_nodes")?,
                gpu_model: row.try_get("gpu_model")?,
                step: u64_column(row.try_get("step")?, "step")?,
                name: row.try_get("name")?,
                value: row.try_get("value")?,
                recorded_at: row.try_get("recorded_at")?,
            })
        }

        fn i64_of(value: u64, what: &str) -> StoreResult<i64> {
            i64::try_from(value).map_err(|_| StoreError::Corrupt(format!("{what} {value} is too large")))
        }

        impl $store {
            /// Moves a job from `from` (in `generation`, when given) to `change.to` under a new
            /// generation with these tasks, in one transaction; `None` when the job was not there.
            async fn new_generation(
                &self,
                job: JobId,
                from: JobState,
                generation: Option<u64>,
                tasks: &[NewTask],
                change: &StateChange,
            ) -> StoreResult<Option<u64>> {
                let mut tx = self.pool.begin_with(Self::BEGIN_WRITE).await?;
                let now = Utc::now();
                let expected = generation.map(|g| i64_of(g, "generation")).transpose()?;
                // Why it is allocated, for the ledger: a rescale's own reason, else why it was queued.
                let start_cause: String = if generation.is_some() {
                    change.reason.as_str().to_owned()
                } else {
                    sqlx::query_scalar("SELECT reason FROM jobs WHERE id = $1")
                        .bind(job.0)
                        .fetch_optional(&mut *tx)
                        .await?
                        .unwrap_or_default()
                };
                let generation: Option<i64> = sqlx::query_scalar(
                    "UPDATE jobs SET state = $2, reason = $3, message = $4, updated_at = $5, generation = generation + 1 \
                     WHERE id = $1 AND state = $6 AND ($7 IS NULL OR generation = $7) RETURNING generation",
                )
                .bind(job.0)
                .bind(change.to.as_str())
                .bind(change.reason.as_str())
                .bind(&change.message)
                .bind(now)
                .bind(from.as_str())
                .bind(expected)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(generation) = generation else { return Ok(None) };
                for task in tasks {
                    let sql = concat!("INSERT INTO tasks (", task_columns!(), ") VALUES ($1, $2, $3, $4, $5, $6, $7, 'assigned', \
                         NULL, NULL, NULL, '', false, $8)");
                    sqlx::query(sql)
                        .bind(job.0)
                        .bind(generation)
                        .bind(task.role.as_str())
                        .bind(task.index as i32)
                        .bind(&task.node_name)
                        .bind(Json(&task.gpus))
                        .bind(task.cpus as i32)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                }
                // The accounting ledger's row for this allocation, closed once its tasks have ended,
                // with the GPUs of each model it holds (from its nodes' reported GPUs, one read of
                // each node).
                let gpus: i64 = tasks.iter().map(|t| t.gpus.len() as i64).sum();
                let mut gpu_models: BTreeMap<String, u32> = BTreeMap::new();
                let mut nodes: Vec<&str> = tasks
                    .iter()
                    .filter(|t| !t.gpus.is_empty())
                    .map(|t| t.node_name.as_str())
                    .collect();
                nodes.sort_unstable();
                nodes.dedup();
                for node in nodes {
                    let reported: Option<Json<Vec<Gpu>>> =
                        sqlx::query_scalar("SELECT gpus FROM nodes WHERE name = $1")
                            .bind(node)
                            .fetch_optional(&mut *tx)
                            .await?;
                    let Some(Json(reported)) = reported else { continue };
                    for task in tasks.iter().filter(|t| t.node_name == node) {
                        for &index in &task.gpus {
                            if let Some(gpu) = reported.iter().find(|g| g.index == u32::from(index)) {
                                *gpu_models.entry(gpu.model.clone()).or_default() += 1;
                            }
                        }
                    }
                }
                sqlx::query(
                    "INSERT INTO allocations (job_id, generation, tenant_id, user_id, gpus, started_at, start_cause, gpu_models) \
                     SELECT id, $2, tenant_id, submitted_by, $3, $4, $5, $6 FROM jobs WHERE id = $1",
                )
                .bind(job.0)
                .bind(generation)
                .bind(gpus)
                .bind(now)
                .bind(start_cause)
                .bind(Json(&gpu_models))
                .execute(&mut *tx)
                .await?;
                insert_change(&mut tx, job, from, change, now).await?;
                tx.commit().await?;
                Ok(Some(u64_column(generation, "generation")?))
            }

            /// Errors with `NotFound` unless the job is visible in `scope`.
            async fn check_job_visible(&self, scope: Scope, job: JobId) -> StoreResult<()> {
                let found: Option<Uuid> =
                    sqlx::query_scalar("SELECT id FROM jobs WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2)")
                        .bind(job.0)
                        .bind(scope_tenant(scope))
                        .fetch_optional(&self.pool)
                        .await?;
                found.map(|_| ()).ok_or(StoreError::NotFound)
            }

            /// Begins a write transaction holding the job's row, and checks the report's generation:
            /// the current one, or while the job is `rescaling` the one it replaces (whose tasks
            /// write the checkpoint the new ones start from before they exit).
            async fn begin_fenced(
                &self,
                key: &TaskKey,
            ) -> StoreResult<sqlx::Transaction<'static, $db>> {
                let mut tx = self.pool.begin_with(Self::BEGIN_WRITE).await?;
                let sql = format!("SELECT generation, state FROM jobs WHERE id = $1{}", Self::LOCK_ROW);
                let row: Option<(i64, String)> =
                    sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(key.job_id.0).fetch_optional(&mut *tx).await?;
                let (current, state) = row.ok_or(StoreError::NotFound)?;
                let current = u64_column(current, "generation")?;
                let predecessor = state == JobState::Rescaling.as_str() && key.generation + 1 == current;
                if current != key.generation && !predecessor {
                    return Err(StoreError::Fenced { current, reported: key.generation });
                }
                Ok(tx)
            }
        }

        #[async_trait]
        impl ExecStore for $store {
            async fn register_node(&self, node: &NodeRegistration, at: DateTime<Utc>) -> StoreResult<Node> {
                let sql = concat!("INSERT INTO nodes (", node_columns!(), ") VALUES ($1, $2, $3, $4, $5, $6, 'healthy', \
                     false, $7, $7, false, $8, $9, $10, $11) \
                     ON CONFLICT (name) DO UPDATE SET labels = excluded.labels, gpus = excluded.gpus, \
                     cpus = excluded.cpus, memory_gb = excluded.memory_gb, health = 'healthy', \
                     last_heartbeat_at = excluded.last_heartbeat_at, gpu_source = excluded.gpu_source, \
                     isolation = excluded.isolation, runs_images = excluded.runs_images, \
                     taints = excluded.taints \
                     RETURNING ", node_columns!());
                let row = sqlx::query(sql)
                    .bind(Uuid::now_v7())
                    .bind(&node.name)
                    .bind(Json(&node.labels))
                    .bind(Json(&node.gpus))
                    .bind(node.cpus as i32)
                    .bind(node.memory_gb as i32)
                    .bind(at)
                    .bind(&node.gpu_source)
                    .bind(&node.isolation)
                    .bind(node.runs_images)
                    .bind(Json(&node.taints))
                    .fetch_one(&self.pool)
                    .await?;
                node_from_row(&row)
            }

            async fn set_node_health(&self, name: &str, health: &str, at: DateTime<Utc>) -> StoreResult<()> {
                sqlx::query("UPDATE nodes SET health = $2, last_heartbeat_at = $3 WHERE name = $1")
                    .bind(name)
                    .bind(health)
                    .bind(at)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn record_heartbeats(&self, heard: &[(String, DateTime<Utc>)]) -> StoreResult<()> {
                // A few thousand nodes at most: each chunk one statement, well under either
                // database's limit on bound parameters.
                for chunk in heard.chunks(2_000) {
                    let mut query = sqlx::QueryBuilder::<$db>::new("WITH h (name, at) AS (VALUES ");
                    let mut values = query.separated(", ");
                    for (name, at) in chunk {
                        values.push("(");
                        values.push_bind_unseparated(name.as_str());
                        values.push_unseparated(", ");
                        values.push_bind_unseparated(*at);
                        values.push_unseparated(")");
                    }
                    query.push(
                        ") UPDATE nodes SET last_heartbeat_at = h.at FROM h WHERE nodes.name = h.name",
                    );
                    query.build().execute(&self.pool).await?;
                }
                Ok(())
            }

            async fn set_node_cordon(
                &self,
                name: &str,
                cordoned: bool,
                draining: bool,
                audit: &NewAuditEvent,
            ) -> StoreResult<Node> {
                let mut tx = self.pool.begin_with(Self::BEGIN_WRITE).await?;
                let sql = concat!("UPDATE nodes SET cordoned = $2, draining = $3 WHERE name = $1 RETURNING ", node_columns!());
                let row = sqlx::query(sql)
                    .bind(name)
                    .bind(cordoned)
                    .bind(draining)
                    .fetch_optional(&mut *tx)
                    .await?;
                let node = node_from_row(&row.ok_or(StoreError::NotFound)?)?;
                insert_audit(&mut *tx, audit).await?;
                tx.commit().await?;
                Ok(node)
            }

            async fn active_jobs(&self) -> StoreResult<Vec<Job>> {
                let sql = concat!("SELECT ", job_columns!(), ", j.document FROM jobs j JOIN tenants t ON t.id = j.tenant_id \
                     WHERE j.state IN ('queued', 'starting', 'running', 'rescaling') ORDER BY j.id");
                let rows = sqlx::query(sql).fetch_all(&self.pool).await?;
                rows.iter().map(|row| job_from_row(row, true)).collect()
            }

            async fn job_documents(
                &self,
                ids: &[JobId],
            ) -> StoreResult<Vec<(JobId, u64, serde_json::Value)>> {
                let mut documents = Vec::with_capacity(ids.len());
                for chunk in ids.chunks(500) {
                    let mut query =
                        sqlx::QueryBuilder::<$db>::new("SELECT id, document_version, document FROM jobs WHERE id IN (");
                    let mut separated = query.separated(", ");
                    for id in chunk {
                        separated.push_bind(id.0);
                    }
                    separated.push_unseparated(")");
                    let rows = query.build().fetch_all(&self.pool).await?;
                    for row in &rows {
                        let Json(document): Json<serde_json::Value> = row.try_get("document")?;
                        let version = u64_column(row.try_get("document_version")?, "document_version")?;
                        documents.push((JobId(row.try_get("id")?), version, document));
                    }
                }
                Ok(documents)
            }

            async fn last_steps(&self, ids: &[JobId]) -> StoreResult<Vec<(JobId, u64)>> {
                let mut steps = Vec::with_capacity(ids.len());
                for chunk in ids.chunks(500) {
                    // One backward index seek per job (an aggregate over the IN list would read
                    // every loss sample of every job).
                    let mut query = sqlx::QueryBuilder::<$db>::new(
                        "SELECT j.id AS job_id, (SELECT m.step FROM metric_samples m WHERE m.job_id = j.id \
                         AND m.name = 'loss' ORDER BY m.step DESC LIMIT 1) AS step FROM jobs j WHERE j.id IN (",
                    );
                    let mut separated = query.separated(", ");
                    for id in chunk {
                        separated.push_bind(id.0);
                    }
                    separated.push_unseparated(")");
                    let rows = query.build().fetch_all(&self.pool).await?;
                    for row in &rows {
                        let step: Option<i64> = row.try_get("step")?;
                        if let Some(step) = step {
                            steps.push((JobId(row.try_get("job_id")?), u64::try_from(step).unwrap_or(0)));
                        }
                    }
                }
                Ok(steps)
            }

            async fn live_tasks(&self) -> StoreResult<Vec<Task>> {
                let sql = concat!("SELECT ", task_columns!(), " FROM tasks WHERE state NOT IN ('exited', 'lost') \
                     ORDER BY job_id, generation, role DESC, idx");
                let rows = sqlx::query(sql).fetch_all(&self.pool).await?;
                rows.iter().map(task_from_row).collect()
            }

            async fn live_tasks_on(&self, node: &str) -> StoreResult<Vec<Task>> {
                let sql = concat!("SELECT ", task_columns!(), " FROM tasks WHERE node_name = $1 \
                     AND state NOT IN ('exited', 'lost') ORDER BY job_id, generation, role DESC, idx");
                let rows = sqlx::query(sql).bind(node).fetch_all(&self.pool).await?;
                rows.iter().map(task_from_row).collect()
            }

            async fn update_job_document(
                &self,
                scope: Scope,
                id: JobId,
                document: &serde_json::Value,
                max_gpus: i64,
                event: &StateChange,
            ) -> StoreResult<Job> {
                let mut tx = self.pool.begin_with(Self::BEGIN_WRITE).await?;
                let state: String =
                    sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2)")
                        .bind(id.0)
                        .bind(scope.tenant().map(|t| t.0))
                        .fetch_optional(&mut *tx)
                        .await?
                        .ok_or(StoreError::NotFound)?;
                let state: JobState = state.parse().map_err(StoreError::Corrupt)?;
                if state.is_final() {
                    return Err(StoreError::Conflict {
                        field: "state",
                        message: format!("the job is {state}; only active jobs can be resized"),
                    });
                }
                let now = Utc::now();
                // `document_version` moves by a trigger on any write of the document (0028).
                sqlx::query("UPDATE jobs SET document = $1, max_gpus = $2, updated_at = $3 WHERE id = $4 AND state = $5")
                    .bind(sqlx::types::Json(document))
                    .bind(max_gpus)
                    .bind(now)
                    .bind(id.0)
                    .bind(state.as_str())
                    .execute(&mut *tx)
                    .await?;
                sqlx::query($crate::sql::INSERT_EVENT)
                    .bind(id.0)
                    .bind(state.as_str())
                    .bind(state.as_str())
                    .bind(event.reason.as_str())
                    .bind(&event.message)
                    .bind(event.actor.map(|a| a.0))
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                self.get_job(scope, id).await
            }

            async fn finishing_jobs(&self) -> StoreResult<Vec<JobId>> {
                let ids: Vec<uuid::Uuid> = sqlx::query_scalar(
                    "SELECT DISTINCT t.job_id FROM tasks t JOIN jobs j ON j.id = t.job_id AND t.generation = j.generation \
                     WHERE j.state IN ('starting', 'running', 'rescaling') AND t.state IN ('exited', 'lost') ORDER BY t.job_id",
                )
                .fetch_all(&self.pool)
                .await?;
                Ok(ids.into_iter().map(JobId).collect())
            }

            async fn generation_tasks(&self, job: JobId, generation: u64) -> StoreResult<Vec<Task>> {
                let sql = concat!("SELECT ", task_columns!(), " FROM tasks WHERE job_id = $1 AND generation = $2 \
                     ORDER BY role DESC, idx");
                let rows = sqlx::query(sql).bind(job.0).bind(i64_of(generation, "generation")?).fetch_all(&self.pool).await?;
                rows.iter().map(task_from_row).collect()
            }

            async fn tasks_of_generations(&self, generations: &[(JobId, u64)]) -> StoreResult<Vec<Task>> {
                if generations.is_empty() {
                    return Ok(Vec::new());
                }
                let wanted: std::collections::HashMap<JobId, u64> = generations.iter().copied().collect();
                let mut query = sqlx::QueryBuilder::<$db>::new(concat!(
                    "SELECT ", task_columns!(), " FROM tasks WHERE job_id IN ("
                ));
                let mut ids = query.separated(", ");
                for job in wanted.keys() {
                    ids.push_bind(job.0);
                }
                query.push(") ORDER BY job_id, generation, role DESC, idx");
                let rows = query.build().fetch_all(&self.pool).await?;
                let mut tasks = Vec::with_capacity(rows.len());
                for row in &rows {
                    let task = task_from_row(row)?;
                    if wanted.get(&task.key.job_id) == Some(&task.key.generation) {
                        tasks.push(task);
                    }
                }
                Ok(tasks)
            }

            async fn start_generation(
                &self,
                job: JobId,
                tasks: &[NewTask],
                change: &StateChange,
            ) -> StoreResult<Option<u64>> {
                self.new_generation(job, JobState::Queued, None, tasks, change).await
            }

            async fn start_generations(
                &self,
                starts: &[(JobId, Vec<NewTask>, StateChange)],
            ) -> StoreResult<Vec<(JobId, u64, Vec<Task>)>> {
                self.start_generations_sql(starts).await
            }

            async fn rescale_generation(
                &self,
                job: JobId,
                generation: u64,
                tasks: &[NewTask],
                change: &StateChange,
            ) -> StoreResult<Option<u64>> {
                self.new_generation(job, JobState::Running, Some(generation), tasks, change).await
            }

            async fn transition_job_in_generation(
                &self,
                job: JobId,
                generation: u64,
                change: &StateChange,
                count_restart: bool,
            ) -> StoreResult<Option<Job>> {
                let mut tx = self.pool.begin_with(Self::BEGIN_WRITE).await?;
                let sql = format!("SELECT state FROM jobs WHERE id = $1 AND generation = $2{}", Self::LOCK_ROW_UPDATE);
                let from: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .bind(job.0)
                    .bind(i64_of(generation, "generation")?)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(from) = from else { return Ok(None) };
                let from = parse_state(&from)?;
                if !from.can_transition_to(change.to) {
                    return Ok(None);
                }
                let now = Utc::now();
                sqlx::query(
                    "UPDATE jobs SET state = $2, reason = $3, message = $4, updated_at = $5, \
                     restarts = restarts + $6 WHERE id = $1",
                )
                .bind(job.0)
                .bind(change.to.as_str())
                .bind(change.reason.as_str())
                .bind(&change.message)
                .bind(now)
                .bind(i32::from(count_restart))
                .execute(&mut *tx)
                .await?;
                insert_change(&mut tx, job, from, change, now).await?;
                tx.commit().await?;
                self.select_job(Scope::Cluster, job).await.map(Some)
            }

            async fn transition_jobs_in_generation(
                &self,
                changes: &[(JobId, u64, StateChange)],
            ) -> StoreResult<Vec<JobId>> {
                self.transition_jobs_in_generation_sql(changes).await
            }

            async fn update_task(&self, key: &TaskKey, change: &TaskChange) -> StoreResult<()> {
                sqlx::query(
                    "UPDATE tasks SET state = COALESCE($5, state), address = COALESCE($6, address), \
                     exit_code = COALESCE($7, exit_code), exit_signal = COALESCE($8, exit_signal), \
                     message = COALESCE($9, message), stop_requested = COALESCE($10, stop_requested), \
                     updated_at = $11 WHERE job_id = $1 AND generation = $2 AND role = $3 AND idx = $4 \
                     AND state NOT IN ('exited', 'lost')",
                )
                .bind(key.job_id.0)
                .bind(i64_of(key.generation, "generation")?)
                .bind(key.role.as_str())
                .bind(key.index as i32)
                .bind(change.state.map(TaskState::as_str))
                .bind(change.address.as_deref())
                .bind(change.exit_code)
                .bind(change.exit_signal)
                .bind(change.message.as_deref())
                .bind(change.stop_requested)
                .bind(Utc::now())
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn lose_node_tasks(&self, node: &str) -> StoreResult<Vec<Task>> {
                let sql = concat!("UPDATE tasks SET state = 'lost', message = 'executor lost', updated_at = $2 \
                     WHERE node_name = $1 AND state NOT IN ('exited', 'lost') RETURNING ", task_columns!());
                let rows = sqlx::query(sql).bind(node).bind(Utc::now()).fetch_all(&self.pool).await?;
                rows.iter().map(task_from_row).collect()
            }

            async fn record_metrics(&self, metrics: &NewMetrics) -> StoreResult<()> {
                if metrics.values.is_empty() {
                    return Ok(());
                }
                // One statement, fenced like `begin_fenced` (the job's row held shared while it
                // inserts): a report is the commonest write of a busy cluster, and a transaction of
                // its own took five round trips.
                let key = &metrics.key;
                let generation = i64_of(key.generation, "generation")?;
                let mut query = sqlx::QueryBuilder::<$db>::new("WITH v (vname, vvalue) AS (VALUES ");
                let mut rows = query.separated(", ");
                for (name, value) in &metrics.values {
                    rows.push("(");
                    rows.push_bind_unseparated(name);
                    rows.push_unseparated(", ");
                    rows.push_bind_unseparated(*value);
                    rows.push_unseparated(")");
                }
                query.push(
                    ") INSERT INTO metric_samples (job_id, generation, role, idx, num_ps, num_workers, \
                     worker_nodes, gpu_model, step, name, value, recorded_at) SELECT ",
                );
                let mut columns = query.separated(", ");
                columns.push_bind(key.job_id.0);
                columns.push_bind(generation);
                columns.push_bind(key.role.as_str());
                columns.push_bind(key.index as i32);
                columns.push_bind(metrics.num_ps as i32);
                columns.push_bind(metrics.num_workers as i32);
                columns.push_bind(metrics.worker_nodes as i32);
                columns.push_bind(&metrics.gpu_model);
                columns.push_bind(i64_of(metrics.step, "step")?);
                columns.push("vname");
                columns.push("vvalue");
                columns.push_bind(metrics.recorded_at);
                query
                    .push(" FROM v WHERE EXISTS (SELECT 1 FROM jobs WHERE id = ")
                    .push_bind(key.job_id.0)
                    .push(" AND (generation = ")
                    .push_bind(generation)
                    .push(" OR (state = ")
                    .push_bind(JobState::Rescaling.as_str())
                    .push(" AND generation = ")
                    .push_bind(generation + 1)
                    .push("))")
                    .push(Self::LOCK_ROW)
                    .push(")");
                if query.build().execute(&self.pool).await?.rows_affected() > 0 {
                    return Ok(());
                }
                // Nothing stored: say why, as `begin_fenced` would have.
                let row: Option<(i64,)> = sqlx::query_as("SELECT generation FROM jobs WHERE id = $1")
                    .bind(key.job_id.0)
                    .fetch_optional(&self.pool)
                    .await?;
                let (current,) = row.ok_or(StoreError::NotFound)?;
                Err(StoreError::Fenced { current: u64_column(current, "generation")?, reported: key.generation })
            }

            async fn record_checkpoint(
                &self,
                key: &TaskKey,
                step: u64,
                path: &str,
                size_bytes: u64,
            ) -> StoreResult<CheckpointRecord> {
                let mut tx = self.begin_fenced(key).await?;
                let record = insert_checkpoint(&mut tx, key, step, path, size_bytes, false).await?;
                tx.commit().await?;
                Ok(record)
            }

            async fn record_checkpoint_over_rate(
                &self,
                key: &TaskKey,
                step: u64,
                path: &str,
                size_bytes: u64,
            ) -> StoreResult<CheckpointRecord> {
                let mut tx = self.begin_fenced(key).await?;
                sqlx::query(
                    "DELETE FROM checkpoints WHERE job_id = $1 AND generation = $2 AND over_rate = $3 AND step <= $4",
                )
                .bind(key.job_id.0)
                .bind(i64_of(key.generation, "generation")?)
                .bind(true)
                .bind(i64_of(step, "step")?)
                .execute(&mut *tx)
                .await?;
                let record = insert_checkpoint(&mut tx, key, step, path, size_bytes, true).await?;
                tx.commit().await?;
                Ok(record)
            }

            async fn recent_checkpoints(&self, job: JobId, limit: u32) -> StoreResult<Vec<CheckpointRecord>> {
                let rows = sqlx::query(
                    "SELECT id, job_id, generation, step, path, size_bytes, created_at FROM checkpoints \
                     WHERE job_id = $1 ORDER BY step DESC, created_at DESC LIMIT $2",
                )
                .bind(job.0)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(checkpoint_from_row).collect()
            }

            async fn recent_checkpoints_of(
                &self,
                jobs: &[JobId],
                limit: u32,
            ) -> StoreResult<Vec<CheckpointRecord>> {
                let mut records = Vec::new();
                for chunk in jobs.chunks(500) {
                    // Each job's first `limit` in `recent_checkpoints`' order.
                    let mut query = sqlx::QueryBuilder::<$db>::new(
                        "SELECT id, job_id, generation, step, path, size_bytes, created_at FROM \
                         (SELECT *, ROW_NUMBER() OVER (PARTITION BY job_id ORDER BY step DESC, \
                         created_at DESC) AS n FROM checkpoints WHERE job_id IN (",
                    );
                    let mut ids = query.separated(", ");
                    for job in chunk {
                        ids.push_bind(job.0);
                    }
                    query
                        .push(")) recent WHERE n <= ")
                        .push_bind(i64::from(limit))
                        .push(" ORDER BY job_id, n");
                    for row in query.build().fetch_all(&self.pool).await? {
                        records.push(checkpoint_from_row(&row)?);
                    }
                }
                Ok(records)
            }

            async fn append_logs(&self, key: &TaskKey, lines: &[NewLogLine]) -> StoreResult<()> {
                if lines.is_empty() {
                    return Ok(());
                }
                let mut tx = self.begin_fenced(key).await?;
                let mut query = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO task_logs (job_id, generation, role, idx, stream, line, logged_at, contract) ",
                );
                let generation = i64_of(key.generation, "generation")?;
                query.push_values(lines, |mut row, line| {
                    row.push_bind(key.job_id.0)
                        .push_bind(generation)
                        .push_bind(key.role.as_str())
                        .push_bind(key.index as i32)
                        .push_bind(line.stream.as_str())
                        .push_bind(line.line.as_str())
                        .push_bind(line.logged_at)
                        .push_bind(is_contract_line(&line.line));
                });
                query.build().execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn job_tasks(&self, scope: Scope, job: JobId) -> StoreResult<Vec<Task>> {
                self.check_job_visible(scope, job).await?;
                let sql = concat!("SELECT ", task_columns!(), " FROM tasks WHERE job_id = $1 ORDER BY generation, role DESC, idx");
                let rows = sqlx::query(sql).bind(job.0).fetch_all(&self.pool).await?;
                rows.iter().map(task_from_row).collect()
            }

            async fn list_metrics(
                &self,
                scope: Scope,
                job: JobId,
                filter: &MetricFilter,
            ) -> StoreResult<Vec<MetricSample>> {
                self.check_job_visible(scope, job).await?;
                let mut query = sqlx::QueryBuilder::<$db>::new(
                    "SELECT id, generation, role, idx, num_ps, num_workers, worker_nodes, gpu_model, step, name, value, \
                     recorded_at \
                     FROM metric_samples WHERE job_id = ",
                );
                query.push_bind(job.0);
                if !filter.names.is_empty() {
                    query.push(" AND name IN (");
                    let mut names = query.separated(", ");
                    for name in &filter.names {
                        names.push_bind(name.clone());
                    }
                    query.push(")");
                }
                if let Some(from) = filter.from_step {
                    query.push(" AND step >= ").push_bind(i64_of(from, "from_step")?);
                }
                if let Some(to) = filter.to_step {
                    query.push(" AND step <= ").push_bind(i64_of(to, "to_step")?);
                }
                if let Some(after) = filter.after {
                    query.push(" AND id > ").push_bind(after);
                }
                query.push(" ORDER BY id LIMIT ").push_bind(i64::from(filter.limit));
                let rows = query.build().fetch_all(&self.pool).await?;
                rows.iter().map(sample_from_row).collect()
            }

            async fn metrics_after(
                &self,
                cursors: &[(JobId, i64)],
                names: &[String],
                limit: u32,
            ) -> StoreResult<Vec<(JobId, MetricSample)>> {
                if cursors.is_empty() {
                    return Ok(Vec::new());
                }
                // Each job joined with its own cursor: the (job_id, id) index is walked from there.
                // Postgres is told so (a lateral subquery a job): left to choose, it scanned the
                // whole table once it held millions of samples (1.5 s a query in the fleet
                // benchmark, growing with the table). SQLite's planner loops over the cursors.
                let lateral = <$db as sqlx::Database>::NAME == "PostgreSQL";
                let mut query = sqlx::QueryBuilder::<$db>::new("WITH c (job_id, after_id) AS (VALUES ");
                let mut values = query.separated(", ");
                for (job, after) in cursors {
                    values.push("(");
                    values.push_bind_unseparated(job.0);
                    values.push_unseparated(", ");
                    values.push_bind_unseparated(*after);
                    values.push_unseparated(")");
                }
                query.push(
                    ") SELECT s.job_id, s.id, s.generation, s.role, s.idx, s.num_ps, s.num_workers, s.worker_nodes, \
                     s.gpu_model, s.step, s.name, s.value, s.recorded_at FROM ",
                );
                query.push(if lateral {
                    "c CROSS JOIN LATERAL (SELECT * FROM metric_samples m WHERE m.job_id = c.job_id AND m.id > c.after_id"
                } else {
                    "metric_samples s JOIN c ON s.job_id = c.job_id AND s.id > c.after_id WHERE 1 = 1"
                });
                let column = if lateral { "m.name" } else { "s.name" };
                if !names.is_empty() {
                    query.push(format_args!(" AND {column} IN ("));
                    let mut listed = query.separated(", ");
                    for name in names {
                        listed.push_bind(name.clone());
                    }
                    query.push(")");
                }
                if lateral {
                    query.push(" ORDER BY m.id LIMIT ").push_bind(i64::from(limit)).push(") s");
                }
                query.push(" ORDER BY s.id LIMIT ").push_bind(i64::from(limit));
                let rows = query.build().fetch_all(&self.pool).await?;
                rows.iter()
                    .map(|row| Ok((JobId(row.try_get("job_id")?), sample_from_row(row)?)))
                    .collect()
            }

            async fn list_checkpoints(&self, scope: Scope, job: JobId) -> StoreResult<Vec<CheckpointRecord>> {
                self.check_job_visible(scope, job).await?;
                let rows = sqlx::query(
                    "SELECT id, job_id, generation, step, path, size_bytes, created_at FROM checkpoints \
                     WHERE job_id = $1 ORDER BY step, created_at",
                )
                .bind(job.0)
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(checkpoint_from_row).collect()
            }

            async fn delete_logs_before(&self, before: DateTime<Utc>, limit: u32) -> StoreResult<u64> {
                let deleted = sqlx::query(
                    "DELETE FROM task_logs WHERE id IN \
                     (SELECT id FROM task_logs WHERE logged_at < $1 LIMIT $2)",
                )
                .bind(before)
                .bind(i64::from(limit))
                .execute(&self.pool)
                .await?;
                Ok(deleted.rows_affected())
            }

            async fn ended_jobs_with_samples(
                &self,
                ended_before: DateTime<Utc>,
                limit: u32,
            ) -> StoreResult<Vec<JobId>> {
                let ids: Vec<Uuid> = sqlx::query_scalar(
                    "SELECT j.id FROM jobs j WHERE j.state IN ('succeeded', 'failed', 'cancelled') \
                     AND j.updated_at < $1 \
                     AND EXISTS (SELECT 1 FROM metric_samples m WHERE m.job_id = j.id) LIMIT $2",
                )
                .bind(ended_before)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                Ok(ids.into_iter().map(JobId).collect())
            }

            async fn delete_job_samples(&self, job: JobId, limit: u32) -> StoreResult<u64> {
                let deleted = sqlx::query(
                    "DELETE FROM metric_samples WHERE id IN \
                     (SELECT id FROM metric_samples WHERE job_id = $1 LIMIT $2)",
                )
                .bind(job.0)
                .bind(i64::from(limit))
                .execute(&self.pool)
                .await?;
                Ok(deleted.rows_affected())
            }

            async fn jobs_with_samples(
                &self,
                created_before: DateTime<Utc>,
                after: Option<JobId>,
                limit: u32,
            ) -> StoreResult<Vec<JobId>> {
                let mut query = sqlx::QueryBuilder::<$db>::new("SELECT j.id FROM jobs j WHERE j.created_at < ");
                query.push_bind(created_before);
                if let Some(after) = after {
                    query.push(" AND j.id > ").push_bind(after.0);
                }
                query.push(
                    " AND EXISTS (SELECT 1 FROM metric_samples m WHERE m.job_id = j.id) ORDER BY j.id LIMIT ",
                );
                query.push_bind(i64::from(limit));
                let ids: Vec<Uuid> = query.build_query_scalar().fetch_all(&self.pool).await?;
                Ok(ids.into_iter().map(JobId).collect())
            }

            async fn delete_samples(&self, job: JobId, ids: &[i64]) -> StoreResult<u64> {
                if ids.is_empty() {
                    return Ok(0);
                }
                let mut query = sqlx::QueryBuilder::<$db>::new("DELETE FROM metric_samples WHERE job_id = ");
                query.push_bind(job.0).push(" AND id IN (");
                let mut listed = query.separated(", ");
                for id in ids {
                    listed.push_bind(*id);
                }
                query.push(")");
                Ok(query.build().execute(&self.pool).await?.rows_affected())
            }

            async fn forget_checkpoints(&self, job: JobId, ids: &[uuid::Uuid]) -> StoreResult<u64> {
                if ids.is_empty() {
                    return Ok(0);
                }
                let mut query =
                    sqlx::QueryBuilder::<$db>::new("DELETE FROM checkpoints WHERE job_id = ");
                query.push_bind(job.0).push(" AND id IN (");
                let mut list = query.separated(", ");
                for id in ids {
                    list.push_bind(*id);
                }
                query.push(")");
                Ok(query.build().execute(&self.pool).await?.rows_affected())
            }

            async fn latest_checkpoint(&self, job: JobId) -> StoreResult<Option<CheckpointRecord>> {
                let row = sqlx::query(
                    "SELECT id, job_id, generation, step, path, size_bytes, created_at FROM checkpoints \
                     WHERE job_id = $1 ORDER BY step DESC, created_at DESC LIMIT 1",
                )
                .bind(job.0)
                .fetch_optional(&self.pool)
                .await?;
                row.as_ref().map(checkpoint_from_row).transpose()
            }

            async fn latest_checkpoint_times(
                &self,
                jobs: &[JobId],
            ) -> StoreResult<Vec<(JobId, DateTime<Utc>)>> {
                let mut times = Vec::new();
                for chunk in jobs.chunks(500) {
                    // The first of each job's records in `latest_checkpoint`'s order.
                    let mut query = sqlx::QueryBuilder::<$db>::new(
                        "SELECT job_id, created_at FROM (SELECT job_id, created_at, ROW_NUMBER() OVER \
                         (PARTITION BY job_id ORDER BY step DESC, created_at DESC) AS n FROM checkpoints \
                         WHERE job_id IN (",
                    );
                    let mut ids = query.separated(", ");
                    for job in chunk {
                        ids.push_bind(job.0);
                    }
                    query.push(")) latest WHERE n = 1 ORDER BY job_id");
                    for row in query.build().fetch_all(&self.pool).await? {
                        times.push((JobId(row.try_get("job_id")?), row.try_get("created_at")?));
                    }
                }
                Ok(times)
            }

            async fn metric_series(
                &self,
                scope: Scope,
                job: JobId,
                name: &str,
                steps: StepRange,
                buckets: u32,
            ) -> StoreResult<MetricSeries> {
                self.check_job_visible(scope, job).await?;
                let from = match steps.from {
                    Some(step) => i64_of(step, "from_step")?,
                    None => 0,
                };
                let to = match steps.to {
                    Some(step) => i64_of(step, "to_step")?,
                    None => i64::MAX,
                };
                let (lo, hi, count): (Option<i64>, Option<i64>, i64) = sqlx::query_as(
                    "SELECT min(step), max(step), count(*) FROM metric_samples \
                     WHERE job_id = $1 AND name = $2 AND step >= $3 AND step <= $4",
                )
                .bind(job.0)
                .bind(name)
                .bind(from)
                .bind(to)
                .fetch_one(&self.pool)
                .await?;
                let (Some(lo), Some(hi)) = (lo, hi) else {
                    return Ok(MetricSeries::default());
                };
                let buckets = i64::from(buckets.max(1));
                let width = if count <= 2 * buckets { 1 } else { (hi - lo) / buckets + 1 };
                let rows = sqlx::query(
                    "SELECT min(step) AS first_step, max(step) AS last_step, min(value) AS lowest, \
                     max(value) AS highest, avg(value) AS mean, count(*) AS samples, max(recorded_at) AS last_at \
                     FROM metric_samples WHERE job_id = $1 AND name = $2 AND step >= $3 AND step <= $4 \
                     GROUP BY (step - $5) / $6 ORDER BY 1",
                )
                .bind(job.0)
                .bind(name)
                .bind(lo)
                .bind(hi)
                .bind(lo)
                .bind(width)
                .fetch_all(&self.pool)
                .await?;
                let step = |s: i64| u64::try_from(s).unwrap_or(0);
                Ok(MetricSeries {
                    origin: step(lo),
                    width: step(width),
                    buckets: rows
                        .iter()
                        .map(|row| {
                            Ok(MetricBucket {
                                first_step: step(row.try_get("first_step")?),
                                last_step: step(row.try_get("last_step")?),
                                min: row.try_get("lowest")?,
                                max: row.try_get("highest")?,
                                mean: row.try_get("mean")?,
                                samples: step(row.try_get("samples")?),
                                last_at: row.try_get("last_at")?,
                            })
                        })
                        .collect::<StoreResult<Vec<_>>>()?,
                })
            }

            async fn metric_points_after(
                &self,
                scope: Scope,
                job: JobId,
                name: &str,
                after: Option<u64>,
                limit: u32,
            ) -> StoreResult<Vec<MetricPoint>> {
                self.check_job_visible(scope, job).await?;
                let after = match after {
                    Some(step) => i64_of(step, "step")?,
                    None => -1,
                };
                let rows: Vec<(i64, f64, DateTime<Utc>)> = sqlx::query_as(
                    "SELECT step, value, recorded_at FROM metric_samples WHERE job_id = $1 AND name = $2 AND step > $3 \
                     ORDER BY step LIMIT $4",
                )
                .bind(job.0)
                .bind(name)
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(step, value, recorded_at)| MetricPoint {
                        step: u64::try_from(step).unwrap_or(0),
                        value,
                        recorded_at,
                    })
                    .collect())
            }

            async fn metric_names(&self, scope: Scope, job: JobId) -> StoreResult<Vec<String>> {
                self.check_job_visible(scope, job).await?;
                // A loose index scan: one seek per name, however many samples each has.
                let names: Vec<String> = sqlx::query_scalar(
                    "WITH RECURSIVE names (name) AS ( \
                         SELECT min(name) FROM metric_samples WHERE job_id = $1 \
                         UNION ALL \
                         SELECT (SELECT min(m.name) FROM metric_samples m WHERE m.job_id = $1 AND m.name > n.name) \
                         FROM names n WHERE n.name IS NOT NULL \
                     ) SELECT name FROM names WHERE name IS NOT NULL ORDER BY name",
                )
                .bind(job.0)
                .fetch_all(&self.pool)
                .await?;
                Ok(names)
            }

            async fn list_logs(
                &self,
                scope: Scope,
                job: JobId,
                filter: &LogFilter,
                window: LogWindow,
                limit: u32,
            ) -> StoreResult<Vec<LogLine>> {
                self.check_job_visible(scope, job).await?;
                let mut query = sqlx::QueryBuilder::<$db>::new(
                    "SELECT id, generation, role, idx, stream, line, logged_at, contract FROM task_logs WHERE job_id = ",
                );
                query.push_bind(job.0);
                if let Some(id) = window.after {
                    query.push(" AND id > ").push_bind(id);
                }
                if let Some(id) = window.before {
                    query.push(" AND id < ").push_bind(id);
                }
                if let Some((role, index)) = filter.task {
                    query
                        .push(" AND role = ")
                        .push_bind(role.as_str())
                        .push(" AND idx = ")
                        .push_bind(index as i32);
                }
                if let Some(generation) = filter.generation {
                    query
                        .push(" AND generation = ")
                        .push_bind(i64_of(generation, "generation")?);
                }
                if filter.hide_contract {
                    query.push(" AND NOT contract");
                }
                if let Some(needle) = filter.contains.as_deref() {
                    // ASCII case folded on both sides (SQLite's lower() folds ASCII only), the
                    // needle's LIKE wildcards escaped.
                    let mut pattern = String::with_capacity(needle.len() + 2);
                    pattern.push('%');
                    for c in needle.chars() {
                        if matches!(c, '%' | '_' | '\\') {
                            pattern.push('\\');
                        }
                        pattern.push(c.to_ascii_lowercase());
                    }
                    pattern.push('%');
                    query
                        .push(" AND lower(line) LIKE ")
                        .push_bind(pattern)
                        .push(" ESCAPE '\\'");
                }
                let newest_first = window.last;
                query.push(if newest_first {
                    " ORDER BY id DESC LIMIT "
                } else {
                    " ORDER BY id LIMIT "
                });
                query.push_bind(i64::from(limit));
                let rows = query.build().fetch_all(&self.pool).await?;
                let mut lines = rows
                    .iter()
                    .map(|row| {
                        Ok(LogLine {
                            id: row.try_get("id")?,
                            generation: u64_column(row.try_get("generation")?, "generation")?,
                            role: parse_column::<TaskRole>(row.try_get("role")?)?,
                            index: u32_column(row.try_get::<i32, _>("idx")?.into(), "idx")?,
                            stream: row.try_get("stream")?,
                            line: row.try_get("line")?,
                            logged_at: row.try_get("logged_at")?,
                            contract: row.try_get("contract")?,
                        })
                    })
                    .collect::<StoreResult<Vec<LogLine>>>()?;
                if newest_first {
                    lines.reverse();
                }
                Ok(lines)
            }

            async fn log_edge(
                &self,
                scope: Scope,
                job: JobId,
                window: LogWindow,
                span: u32,
            ) -> StoreResult<Option<i64>> {
                self.check_job_visible(scope, job).await?;
                if span == 0 {
                    return Ok(None);
                }
                // Read from the (job_id, id) index alone.
                let mut query = sqlx::QueryBuilder::<$db>::new("SELECT id FROM task_logs WHERE job_id = ");
                query.push_bind(job.0);
                if let Some(id) = window.after {
                    query.push(" AND id > ").push_bind(id);
                }
                if let Some(id) = window.before {
                    query.push(" AND id < ").push_bind(id);
                }
                query
                    .push(if window.last { " ORDER BY id DESC" } else { " ORDER BY id" })
                    .push(" LIMIT 1 OFFSET ")
                    .push_bind(i64::from(span - 1));
                Ok(query.build_query_scalar().fetch_optional(&self.pool).await?)
            }
        }
    };
}

pub(super) use impl_exec_store;
