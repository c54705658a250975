//! The one implementation of [`super::LedgerStore`] over SQL both databases accept.

macro_rules! impl_ledger_store {
    ($store:ty) => {
        fn allocation_from_row(row: &DbRow) -> StoreResult<Allocation> {
            let gpus: i64 = row.try_get("gpus")?;
            Ok(Allocation {
                job_id: JobId(row.try_get("job_id")?),
                generation: u64_column(row.try_get("generation")?, "generation")?,
                tenant_id: TenantId(row.try_get("tenant_id")?),
                user_id: UserId(row.try_get("user_id")?),
                gpus: u32::try_from(gpus).map_err(|_| StoreError::Corrupt(format!("allocations.gpus: {gpus}")))?,
                started_at: row.try_get("started_at")?,
                start_cause: row.try_get("start_cause")?,
                ended_at: row.try_get("ended_at")?,
                end_cause: row.try_get("end_cause")?,
                first_step_at: row.try_get("first_step_at")?,
                kept_until: row.try_get("kept_until")?,
                idle_gpu_s: row.try_get("idle_gpu_s")?,
                gpu_models: {
                    let Json(models): Json<BTreeMap<String, u32>> = row.try_get("gpu_models")?;
                    models
                },
            })
        }

        const ALLOCATION_COLUMNS: &str = "job_id, generation, tenant_id, user_id, CAST(gpus AS BIGINT) AS gpus, \
             started_at, start_cause, ended_at, end_cause, first_step_at, kept_until, idle_gpu_s, gpu_models";

        const LEDGER_COLUMNS: &str = "a.job_id, a.generation, a.tenant_id, a.user_id, CAST(a.gpus AS BIGINT) AS gpus, \
             a.started_at, a.start_cause, a.ended_at, a.end_cause, a.first_step_at, a.kept_until, a.idle_gpu_s, \
             a.gpu_models";

        #[async_trait]
        impl LedgerStore for $store {
            async fn record_forecast(&self, forecast: &QueueForecast) -> StoreResult<()> {
                let entries = serde_json::to_string(&forecast.entries)
                    .map_err(|err| StoreError::Corrupt(format!("queue forecast: {err}")))?;
                let finishing = serde_json::to_string(&forecast.finishing)
                    .map_err(|err| StoreError::Corrupt(format!("queue forecast: {err}")))?;
                sqlx::query(
                    "INSERT INTO queue_forecast (id, policy, computed_at, entries, finishing) VALUES (1, $1, $2, $3, $4) \
                     ON CONFLICT (id) DO UPDATE SET policy = excluded.policy, computed_at = excluded.computed_at, \
                     entries = excluded.entries, finishing = excluded.finishing",
                )
                .bind(&forecast.policy)
                .bind(forecast.computed_at)
                .bind(entries)
                .bind(finishing)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn queue_forecast(&self) -> StoreResult<Option<QueueForecast>> {
                let row: Option<(String, DateTime<Utc>, String, String)> = sqlx::query_as(
                    "SELECT policy, computed_at, entries, finishing FROM queue_forecast WHERE id = 1",
                )
                .fetch_optional(&self.pool)
                .await?;
                let Some((policy, computed_at, entries, finishing)) = row else {
                    return Ok(None);
                };
                let corrupt = |err: serde_json::Error| StoreError::Corrupt(format!("queue_forecast: {err}"));
                Ok(Some(QueueForecast {
                    policy,
                    computed_at,
                    entries: serde_json::from_str(&entries).map_err(corrupt)?,
                    finishing: serde_json::from_str(&finishing).map_err(corrupt)?,
                }))
            }

            async fn open_allocations(&self) -> StoreResult<Vec<Allocation>> {
                let sql = format!("SELECT {ALLOCATION_COLUMNS} FROM allocations WHERE ended_at IS NULL");
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(&self.pool).await?;
                rows.iter().map(allocation_from_row).collect()
            }

            async fn ended_allocations(&self) -> StoreResult<Vec<Allocation>> {
                let sql = format!(
                    "SELECT {ALLOCATION_COLUMNS} FROM allocations a WHERE ended_at IS NULL AND NOT EXISTS \
                     (SELECT 1 FROM tasks t WHERE t.job_id = a.job_id AND t.generation = a.generation \
                     AND t.state NOT IN ('exited', 'lost'))"
                );
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(&self.pool).await?;
                rows.iter().map(allocation_from_row).collect()
            }

            async fn close_allocation(
                &self,
                job: JobId,
                generation: u64,
                end: &AllocationEnd,
            ) -> StoreResult<()> {
                sqlx::query(
                    "UPDATE allocations SET ended_at = $3, end_cause = $4, first_step_at = $5, kept_until = $6, \
                     idle_gpu_s = $7 WHERE job_id = $1 AND generation = $2 AND ended_at IS NULL",
                )
                .bind(job.0)
                .bind(i64::try_from(generation).unwrap_or(i64::MAX))
                .bind(end.ended_at)
                .bind(&end.end_cause)
                .bind(end.first_step_at)
                .bind(end.kept_until)
                .bind(end.idle_gpu_s)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn first_step_at(
                &self,
                job: JobId,
                generation: u64,
            ) -> StoreResult<Option<DateTime<Utc>>> {
                Ok(sqlx::query_scalar(
                    "SELECT recorded_at FROM metric_samples WHERE job_id = $1 AND generation = $2 \
                     ORDER BY step, recorded_at LIMIT 1",
                )
                .bind(job.0)
                .bind(i64::try_from(generation).unwrap_or(i64::MAX))
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn last_checkpoint_at(
                &self,
                job: JobId,
                generation: u64,
            ) -> StoreResult<Option<DateTime<Utc>>> {
                Ok(sqlx::query_scalar(
                    "SELECT created_at FROM checkpoints WHERE job_id = $1 AND generation = $2 \
                     ORDER BY step DESC, created_at DESC LIMIT 1",
                )
                .bind(job.0)
                .bind(i64::try_from(generation).unwrap_or(i64::MAX))
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn allocations_between(
                &self,
                scope: Scope,
                from: DateTime<Utc>,
                to: DateTime<Utc>,
                limit: u32,
            ) -> StoreResult<Vec<LedgerRow>> {
                let sql = format!(
                    "SELECT {LEDGER_COLUMNS}, t.name AS tenant_name, u.name AS user_name, j.name AS job_name \
                     FROM allocations a JOIN tenants t ON t.id = a.tenant_id JOIN users u ON u.id = a.user_id \
                     JOIN jobs j ON j.id = a.job_id WHERE a.started_at < $2 \
                     AND (a.ended_at IS NULL OR a.ended_at > $1) AND ($3 IS NULL OR a.tenant_id = $3) \
                     ORDER BY a.started_at LIMIT $4"
                );
                let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(from)
                    .bind(to)
                    .bind(scope_tenant(scope))
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter()
                    .map(|row| {
                        Ok(LedgerRow {
                            allocation: allocation_from_row(row)?,
                            tenant: row.try_get("tenant_name")?,
                            user: row.try_get("user_name")?,
                            job: row.try_get("job_name")?,
                        })
                    })
                    .collect()
            }

            async fn finished_jobs_since(
                &self,
                since: DateTime<Utc>,
                limit: u32,
            ) -> StoreResult<Vec<FinishedJob>> {
                type Row = (Uuid, Uuid, i64, DateTime<Utc>, DateTime<Utc>, i64, DateTime<Utc>);
                let rows: Vec<Row> = sqlx::query_as(
                    "SELECT a.job_id, a.tenant_id, CAST(a.gpus AS BIGINT), a.started_at, a.ended_at, j.max_gpus, \
                     j.created_at \
                     FROM allocations a JOIN jobs j ON j.id = a.job_id \
                     WHERE j.state = 'succeeded' AND a.ended_at IS NOT NULL AND a.job_id IN \
                     (SELECT job_id FROM allocations WHERE ended_at >= $1 ORDER BY ended_at DESC LIMIT $2)",
                )
                .bind(since)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                let mut jobs: std::collections::HashMap<Uuid, FinishedJob> =
                    std::collections::HashMap::new();
                for (job, tenant, gpus, started, ended, max_gpus, created) in rows {
                    let held = (ended - started).num_milliseconds().max(0) as f64 / 1000.0 * gpus as f64;
                    jobs.entry(job)
                        .or_insert(FinishedJob {
                            job: JobId(job),
                            tenant: TenantId(tenant),
                            gpu_s: 0.0,
                            gpus: u32::try_from(max_gpus).unwrap_or(1).max(1),
                            submitted_at: created,
                        })
                        .gpu_s += held;
                }
                Ok(jobs.into_values().collect())
            }
        }
    };
}
pub(super) use impl_ledger_store;
