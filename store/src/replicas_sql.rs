//! The one implementation of [`super::ReplicaStore`] over SQL both databases accept.

/// Rows written per statement when saving the policy's state (3 parameters each).
pub(super) const POLICY_ROWS_AT_ONCE: usize = 1000;

macro_rules! impl_replica_store {
    ($store:ty, $db:ty) => {
        #[async_trait]
        impl ReplicaStore for $store {
            async fn record_leader(&self, leader: &LeaderRecord) -> StoreResult<()> {
                sqlx::query(
                    "INSERT INTO cluster_leader (id, holder, gateway, since) VALUES (1, $1, $2, $3) \
                     ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, gateway = excluded.gateway, \
                     since = excluded.since",
                )
                .bind(&leader.holder)
                .bind(&leader.gateway)
                .bind(leader.since)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn leader(&self) -> StoreResult<Option<LeaderRecord>> {
                let row: Option<(String, String, DateTime<Utc>)> =
                    sqlx::query_as("SELECT holder, gateway, since FROM cluster_leader WHERE id = 1")
                        .fetch_optional(&self.pool)
                        .await?;
                Ok(row.map(|(holder, gateway, since)| LeaderRecord { holder, gateway, since }))
            }

            async fn clear_leader(&self, holder: &str) -> StoreResult<()> {
                sqlx::query("DELETE FROM cluster_leader WHERE id = 1 AND holder = $1")
                    .bind(holder)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn request_checkpoint(&self, job: JobId, at: DateTime<Utc>) -> StoreResult<()> {
                sqlx::query("UPDATE jobs SET checkpoint_requested_at = $2 WHERE id = $1")
                    .bind(job.0)
                    .bind(at)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn checkpoint_requests(&self) -> StoreResult<Vec<(JobId, DateTime<Utc>)>> {
                let rows: Vec<(Uuid, DateTime<Utc>)> = sqlx::query_as(
                    "SELECT id, checkpoint_requested_at FROM jobs WHERE checkpoint_requested_at IS NOT NULL",
                )
                .fetch_all(&self.pool)
                .await?;
                Ok(rows.into_iter().map(|(id, at)| (JobId(id), at)).collect())
            }

            async fn clear_checkpoint_request(&self, job: JobId, at: DateTime<Utc>) -> StoreResult<()> {
                sqlx::query(
                    "UPDATE jobs SET checkpoint_requested_at = NULL WHERE id = $1 AND checkpoint_requested_at = $2",
                )
                .bind(job.0)
                .bind(at)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn record_round(&self, round: &RoundRecord) -> StoreResult<()> {
                let waiting: Vec<serde_json::Value> = round
                    .waiting
                    .iter()
                    .map(|w| match w.needs {
                        Some(needs) => serde_json::json!({
                            "job": w.job.0, "reason": w.reason,
                            "gpus": needs.gpus, "cpus": needs.cpus, "memory_gb": needs.memory_gb,
                        }),
                        None => serde_json::json!({"job": w.job.0, "reason": w.reason}),
                    })
                    .collect();
                let free = match &round.free {
                    Some(free) => serde_json::to_string(free)
                        .map_err(|err| StoreError::Corrupt(format!("scheduler_rounds.free: {err}")))?,
                    None => "{}".to_owned(),
                };
                sqlx::query(
                    "INSERT INTO scheduler_rounds (id, policy, finished_at, duration_us, waiting, free) \
                     VALUES (1, $1, $2, $3, $4, $5) ON CONFLICT (id) DO UPDATE SET policy = excluded.policy, \
                     finished_at = excluded.finished_at, duration_us = excluded.duration_us, \
                     waiting = excluded.waiting, free = excluded.free",
                )
                .bind(&round.policy)
                .bind(round.finished_at)
                .bind(round.duration_us)
                .bind(serde_json::Value::Array(waiting).to_string())
                .bind(free)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn last_round(&self) -> StoreResult<Option<RoundRecord>> {
                let row: Option<(String, DateTime<Utc>, i64, String, String)> = sqlx::query_as(
                    "SELECT policy, finished_at, duration_us, waiting, free FROM scheduler_rounds WHERE id = 1",
                )
                .fetch_optional(&self.pool)
                .await?;
                let Some((policy, finished_at, duration_us, waiting, free)) = row else {
                    return Ok(None);
                };
                let entries: Vec<serde_json::Value> = serde_json::from_str(&waiting)
                    .map_err(|err| StoreError::Corrupt(format!("scheduler_rounds.waiting: {err}")))?;
                let count = |entry: &serde_json::Value, key: &str| -> Option<u32> {
                    entry.get(key)?.as_u64().and_then(|n| u32::try_from(n).ok())
                };
                let waiting = entries
                    .iter()
                    .filter_map(|entry| {
                        let job = entry["job"].as_str()?.parse::<Uuid>().ok()?;
                        let needs = count(entry, "gpus").map(|gpus| Needs {
                            gpus,
                            cpus: count(entry, "cpus").unwrap_or(0),
                            memory_gb: count(entry, "memory_gb").unwrap_or(0),
                        });
                        Some(WaitingJob { job: JobId(job), reason: entry["reason"].as_str()?.to_owned(), needs })
                    })
                    .collect();
                // `{}` in records from before rounds said what they left free.
                let free = serde_json::from_str::<RoundFree>(&free).ok();
                Ok(Some(RoundRecord { policy, finished_at, duration_us, waiting, free }))
            }

            async fn record_gpu_usage(
                &self,
                usage: &GpuUsage,
                keep_after: DateTime<Utc>,
            ) -> StoreResult<()> {
                let mut tx = self.pool.begin().await?;
                sqlx::query(
                    "INSERT INTO gpu_usage (at, total, allocated, running, by_tenant) VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (at) DO NOTHING",
                )
                .bind(usage.at)
                .bind(i64::from(usage.total))
                .bind(i64::from(usage.allocated))
                .bind(i64::from(usage.running))
                .bind(serde_json::to_string(&usage.by_tenant).unwrap_or_else(|_| "{}".to_owned()))
                .execute(&mut *tx)
                .await?;
                sqlx::query("DELETE FROM gpu_usage WHERE at < $1")
                    .bind(keep_after)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn gpu_usage_since(&self, since: DateTime<Utc>) -> StoreResult<Vec<GpuUsage>> {
                let rows: Vec<(DateTime<Utc>, i64, i64, i64, String)> = sqlx::query_as(
                    "SELECT at, CAST(total AS BIGINT), CAST(allocated AS BIGINT), CAST(running AS BIGINT), by_tenant \
                     FROM gpu_usage WHERE at >= $1 ORDER BY at",
                )
                .bind(since)
                .fetch_all(&self.pool)
                .await?;
                let count = |n: i64| u32::try_from(n).unwrap_or(0);
                Ok(rows
                    .into_iter()
                    .map(|(at, total, allocated, running, by_tenant)| GpuUsage {
                        at,
                        total: count(total),
                        allocated: count(allocated),
                        running: count(running),
                        // A sample is a convenience for charts: one that does not parse counts nothing.
                        by_tenant: serde_json::from_str(&by_tenant).unwrap_or_default(),
                    })
                    .collect())
            }

            async fn policy_state(&self, policy: &str) -> StoreResult<PolicyState> {
                let jobs: Vec<(Uuid, String)> =
                    sqlx::query_as("SELECT job_id, state FROM policy_job_state WHERE policy = $1")
                        .bind(policy)
                        .fetch_all(&self.pool)
                        .await?;
                let shared: Option<String> =
                    sqlx::query_scalar("SELECT state FROM policy_shared_state WHERE policy = $1")
                        .bind(policy)
                        .fetch_optional(&self.pool)
                        .await?;
                Ok(PolicyState {
                    jobs: jobs.into_iter().map(|(id, state)| (JobId(id), state)).collect(),
                    shared,
                })
            }

            async fn save_policy_state(
                &self,
                policy: &str,
                changes: PolicyStateChanges<'_>,
                at: DateTime<Utc>,
            ) -> StoreResult<()> {
                if changes.is_empty() {
                    return Ok(());
                }
                let mut tx = self.pool.begin().await?;
                if changes.forget_other_policies {
                    for table in ["policy_job_state", "policy_shared_state"] {
                        let sql = format!("DELETE FROM {table} WHERE policy <> $1");
                        sqlx::query(sqlx::AssertSqlSafe(sql)).bind(policy).execute(&mut *tx).await?;
                    }
                }
                for chunk in changes.removed.chunks(super::replicas_sql::POLICY_ROWS_AT_ONCE) {
                    let mut query = sqlx::QueryBuilder::<$db>::new(
                        "DELETE FROM policy_job_state WHERE policy = ",
                    );
                    query.push_bind(policy).push(" AND job_id IN (");
                    let mut ids = query.separated(", ");
                    for job in chunk {
                        ids.push_bind(job.0);
                    }
                    ids.push_unseparated(")");
                    query.build().execute(&mut *tx).await?;
                }
                for chunk in changes.changed.chunks(super::replicas_sql::POLICY_ROWS_AT_ONCE) {
                    let mut query = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO policy_job_state (policy, job_id, state) ",
                    );
                    query.push_values(chunk, |mut row, (job, state)| {
                        row.push_bind(policy).push_bind(job.0).push_bind(*state);
                    });
                    query.push(" ON CONFLICT (policy, job_id) DO UPDATE SET state = excluded.state");
                    query.build().execute(&mut *tx).await?;
                }
                if let Some(shared) = changes.shared {
                    sqlx::query(
                        "INSERT INTO policy_shared_state (policy, state, updated_at) VALUES ($1, $2, $3) \
                         ON CONFLICT (policy) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at",
                    )
                    .bind(policy)
                    .bind(shared)
                    .bind(at)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(())
            }
        }
    };
}
pub(super) use impl_replica_store;
