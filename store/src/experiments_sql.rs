//! The one implementation of [`super::ExperimentStore`] over SQL both databases accept.

macro_rules! impl_experiment_store {
    ($store:ty, $db:ty) => {
        use drover_core::ExperimentId;

        macro_rules! experiment_columns {
            () => {
                "e.id, e.tenant_id, t.name AS tenant_name, e.name, e.state, e.message, e.document, \
                 e.submitted_by, CAST(e.best_trial AS BIGINT) AS best_trial, e.best_value, e.created_at, \
                 e.updated_at, e.ended_at"
            };
        }

        fn experiment_from_row(row: &DbRow) -> StoreResult<Experiment> {
            let document: String = row.try_get("document")?;
            let best_trial: Option<i64> = row.try_get("best_trial")?;
            Ok(Experiment {
                id: ExperimentId(row.try_get("id")?),
                tenant_id: TenantId(row.try_get("tenant_id")?),
                tenant_name: row.try_get("tenant_name")?,
                name: row.try_get("name")?,
                state: parse_column::<ExperimentState>(row.try_get("state")?)?,
                message: row.try_get("message")?,
                document: serde_json::from_str(&document)
                    .map_err(|err| StoreError::Corrupt(format!("experiments.document: {err}")))?,
                submitted_by: UserId(row.try_get("submitted_by")?),
                best_trial: best_trial.map(|t| u32_column(t, "best_trial")).transpose()?,
                best_value: row.try_get("best_value")?,
                created_at: row.try_get("created_at")?,
                updated_at: row.try_get("updated_at")?,
                ended_at: row.try_get("ended_at")?,
            })
        }

        fn small(value: Option<i64>, column: &str) -> StoreResult<Option<u32>> {
            value.map(|v| u32_column(v, column)).transpose()
        }

        #[async_trait]
        impl ExperimentStore for $store {
            async fn checkpoint_by_id(&self, id: Uuid) -> StoreResult<Option<CheckpointRecord>> {
                let row = sqlx::query(
                    "SELECT id, job_id, generation, step, path, size_bytes, created_at FROM checkpoints WHERE id = $1",
                )
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
                row.as_ref().map(checkpoint_from_row).transpose()
            }

            async fn create_experiment(&self, new: &NewExperiment) -> StoreResult<Experiment> {
                let document = serde_json::to_string(&new.document)
                    .map_err(|err| StoreError::Corrupt(format!("experiment document: {err}")))?;
                let inserted = sqlx::query(
                    "INSERT INTO experiments (id, tenant_id, name, state, message, document, submitted_by, \
                     created_at, updated_at) VALUES ($1, $2, $3, 'active', 'submitted', $4, $5, $6, $6) \
                     ON CONFLICT (tenant_id, name) DO NOTHING",
                )
                .bind(new.id.0)
                .bind(new.tenant_id.0)
                .bind(&new.name)
                .bind(document)
                .bind(new.submitted_by.0)
                .bind(new.created_at)
                .execute(&self.pool)
                .await?;
                if inserted.rows_affected() == 0 {
                    return Err(StoreError::Conflict {
                        field: "metadata.name",
                        message: format!("the tenant already has an experiment named `{}`", new.name),
                    });
                }
                self.get_experiment(Scope::Cluster, new.id).await
            }

            async fn get_experiment(&self, scope: Scope, id: ExperimentId) -> StoreResult<Experiment> {
                let mut query = sqlx::QueryBuilder::<$db>::new(concat!(
                    "SELECT ", experiment_columns!(), " FROM experiments e JOIN tenants t ON t.id = e.tenant_id WHERE e.id = "
                ));
                query.push_bind(id.0);
                if let Some(tenant) = scope.tenant() {
                    query.push(" AND e.tenant_id = ").push_bind(tenant.0);
                }
                let row = query.build().fetch_optional(&self.pool).await?;
                row.as_ref().map(experiment_from_row).transpose()?.ok_or(StoreError::NotFound)
            }

            async fn list_experiments(
                &self,
                scope: Scope,
                before: Option<ExperimentId>,
                limit: u32,
            ) -> StoreResult<Vec<Experiment>> {
                let mut query = sqlx::QueryBuilder::<$db>::new(concat!(
                    "SELECT ", experiment_columns!(), " FROM experiments e JOIN tenants t ON t.id = e.tenant_id WHERE 1 = 1"
                ));
                if let Some(tenant) = scope.tenant() {
                    query.push(" AND e.tenant_id = ").push_bind(tenant.0);
                }
                if let Some(before) = before {
                    query.push(" AND e.id < ").push_bind(before.0);
                }
                query.push(" ORDER BY e.id DESC LIMIT ").push_bind(i64::from(limit));
                let rows = query.build().fetch_all(&self.pool).await?;
                rows.iter().map(experiment_from_row).collect()
            }

            async fn experiment_by_name(
                &self,
                tenant: TenantId,
                name: &str,
            ) -> StoreResult<Option<Experiment>> {
                let row = sqlx::query(concat!(
                    "SELECT ", experiment_columns!(), " FROM experiments e JOIN tenants t ON t.id = e.tenant_id \
                     WHERE e.tenant_id = $1 AND e.name = $2"
                ))
                .bind(tenant.0)
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
                row.as_ref().map(experiment_from_row).transpose()
            }

            async fn open_experiments(&self) -> StoreResult<Vec<Experiment>> {
                let rows = sqlx::query(concat!(
                    "SELECT ", experiment_columns!(), " FROM experiments e JOIN tenants t ON t.id = e.tenant_id \
                     WHERE e.state IN ('active', 'paused') ORDER BY e.id"
                ))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(experiment_from_row).collect()
            }

            async fn set_experiment_state(
                &self,
                id: ExperimentId,
                state: ExperimentState,
                message: &str,
                at: DateTime<Utc>,
            ) -> StoreResult<()> {
                let ended = state.is_terminal().then_some(at);
                let updated = sqlx::query(
                    "UPDATE experiments SET state = $2, message = $3, updated_at = $4, ended_at = $5 WHERE id = $1",
                )
                .bind(id.0)
                .bind(state.as_str())
                .bind(message)
                .bind(at)
                .bind(ended)
                .execute(&self.pool)
                .await?;
                if updated.rows_affected() == 0 {
                    return Err(StoreError::NotFound);
                }
                Ok(())
            }

            async fn set_experiment_best(
                &self,
                id: ExperimentId,
                best: Option<(u32, f64)>,
                at: DateTime<Utc>,
            ) -> StoreResult<()> {
                sqlx::query("UPDATE experiments SET best_trial = $2, best_value = $3, updated_at = $4 WHERE id = $1")
                    .bind(id.0)
                    .bind(best.map(|b| i64::from(b.0)))
                    .bind(best.map(|b| b.1))
                    .bind(at)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn insert_trial(&self, trial: &TrialRow, first: &SegmentRow) -> StoreResult<bool> {
                let params = serde_json::to_string(&trial.params)
                    .map_err(|err| StoreError::Corrupt(format!("trial params: {err}")))?;
                let mut tx = self.pool.begin_with(Self::BEGIN_WRITE).await?;
                let inserted = sqlx::query(
                    "INSERT INTO experiment_trials (experiment_id, trial, params, source_trial, source_segment, \
                     replaces, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (experiment_id, trial) DO NOTHING",
                )
                .bind(trial.experiment_id.0)
                .bind(i64::from(trial.trial))
                .bind(params)
                .bind(trial.source.map(|s| i64::from(s.0)))
                .bind(trial.source.map(|s| i64::from(s.1)))
                .bind(trial.replaces.map(i64::from))
                .bind(trial.created_at)
                .execute(&mut *tx)
                .await?;
                if inserted.rows_affected() == 0 {
                    return Ok(false);
                }
                let max_steps = first.max_steps.map(|s| i64::try_from(s).unwrap_or(i64::MAX));
                sqlx::query(
                    "INSERT INTO experiment_segments (experiment_id, trial, segment, job_id, max_steps, created_at) \
                     VALUES ($1, $2, $3, NULL, $4, $5) ON CONFLICT (experiment_id, trial, segment) DO NOTHING",
                )
                .bind(first.experiment_id.0)
                .bind(i64::from(first.trial))
                .bind(i64::from(first.segment))
                .bind(max_steps)
                .bind(first.created_at)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn insert_segment(&self, segment: &SegmentRow) -> StoreResult<bool> {
                let max_steps = segment
                    .max_steps
                    .map(|s| i64::try_from(s).unwrap_or(i64::MAX));
                let inserted = sqlx::query(
                    "INSERT INTO experiment_segments (experiment_id, trial, segment, job_id, max_steps, created_at) \
                     VALUES ($1, $2, $3, NULL, $4, $5) ON CONFLICT (experiment_id, trial, segment) DO NOTHING",
                )
                .bind(segment.experiment_id.0)
                .bind(i64::from(segment.trial))
                .bind(i64::from(segment.segment))
                .bind(max_steps)
                .bind(segment.created_at)
                .execute(&self.pool)
                .await?;
                Ok(inserted.rows_affected() == 1)
            }

            async fn set_segment_job(
                &self,
                id: ExperimentId,
                trial: u32,
                segment: u32,
                job: JobId,
            ) -> StoreResult<()> {
                sqlx::query(
                    "UPDATE experiment_segments SET job_id = $4 \
                     WHERE experiment_id = $1 AND trial = $2 AND segment = $3",
                )
                .bind(id.0)
                .bind(i64::from(trial))
                .bind(i64::from(segment))
                .bind(job.0)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn set_segment_stop_reason(
                &self,
                id: ExperimentId,
                trial: u32,
                segment: u32,
                reason: &str,
            ) -> StoreResult<()> {
                sqlx::query(
                    "UPDATE experiment_segments SET stop_reason = $4 \
                     WHERE experiment_id = $1 AND trial = $2 AND segment = $3",
                )
                .bind(id.0)
                .bind(i64::from(trial))
                .bind(i64::from(segment))
                .bind(reason)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn experiment_trials(
                &self,
                id: ExperimentId,
            ) -> StoreResult<(Vec<TrialRow>, Vec<SegmentRow>)> {
                let rows = sqlx::query(
                    "SELECT CAST(trial AS BIGINT) AS trial, params, CAST(source_trial AS BIGINT) AS source_trial, \
                     CAST(source_segment AS BIGINT) AS source_segment, CAST(replaces AS BIGINT) AS replaces, created_at \
                     FROM experiment_trials WHERE experiment_id = $1 ORDER BY trial",
                )
                .bind(id.0)
                .fetch_all(&self.pool)
                .await?;
                let mut trials = Vec::with_capacity(rows.len());
                for row in &rows {
                    let params: String = row.try_get("params")?;
                    let source_trial = small(row.try_get("source_trial")?, "source_trial")?;
                    let source_segment = small(row.try_get("source_segment")?, "source_segment")?;
                    trials.push(TrialRow {
                        experiment_id: id,
                        trial: u32_column(row.try_get("trial")?, "trial")?,
                        params: serde_json::from_str(&params)
                            .map_err(|err| StoreError::Corrupt(format!("experiment_trials.params: {err}")))?,
                        source: source_trial.zip(source_segment),
                        replaces: small(row.try_get("replaces")?, "replaces")?,
                        created_at: row.try_get("created_at")?,
                    });
                }
                let rows = sqlx::query(
                    "SELECT CAST(s.trial AS BIGINT) AS trial, CAST(s.segment AS BIGINT) AS segment, s.job_id, \
                     s.max_steps, s.stop_reason, s.created_at, j.state AS job_state, j.name AS job_name \
                     FROM experiment_segments s LEFT JOIN jobs j ON j.id = s.job_id \
                     WHERE s.experiment_id = $1 ORDER BY s.trial, s.segment",
                )
                .bind(id.0)
                .fetch_all(&self.pool)
                .await?;
                let mut segments = Vec::with_capacity(rows.len());
                for row in &rows {
                    let job_id: Option<Uuid> = row.try_get("job_id")?;
                    let max_steps: Option<i64> = row.try_get("max_steps")?;
                    let job_state: Option<String> = row.try_get("job_state")?;
                    segments.push(SegmentRow {
                        experiment_id: id,
                        trial: u32_column(row.try_get("trial")?, "trial")?,
                        segment: u32_column(row.try_get("segment")?, "segment")?,
                        job_id: job_id.map(JobId),
                        max_steps: max_steps.map(|s| u64_column(s, "max_steps")).transpose()?,
                        stop_reason: row.try_get("stop_reason")?,
                        created_at: row.try_get("created_at")?,
                        job_state: job_state.as_deref().map(parse_column::<JobState>).transpose()?,
                        job_name: row.try_get("job_name")?,
                    });
                }
                Ok((trials, segments))
            }

            async fn experiment_samples(&self, id: ExperimentId, name: &str) -> StoreResult<Vec<TrialSample>> {
                let rows: Vec<(i64, i64, i64, f64)> = sqlx::query_as(
                    "SELECT CAST(s.trial AS BIGINT), CAST(s.segment AS BIGINT), m.step, m.value \
                     FROM experiment_segments s JOIN metric_samples m ON m.job_id = s.job_id \
                     WHERE s.experiment_id = $1 AND m.name = $2 AND m.role = 'worker' AND m.idx = 0 \
                     ORDER BY s.trial, m.step, m.id",
                )
                .bind(id.0)
                .bind(name)
                .fetch_all(&self.pool)
                .await?;
                rows.into_iter()
                    .map(|(trial, segment, step, value)| {
                        Ok(TrialSample {
                            trial: u32_column(trial, "trial")?,
                            segment: u32_column(segment, "segment")?,
                            step: u64_column(step, "step")?,
                            value,
                        })
                    })
                    .collect()
            }

            async fn experiment_watermark(
                &self,
                id: ExperimentId,
            ) -> StoreResult<(i64, Option<DateTime<Utc>>)> {
                let (count, latest): (i64, Option<DateTime<Utc>>) = sqlx::query_as(
                    "SELECT count(*), max(j.updated_at) FROM experiment_segments s \
                     LEFT JOIN jobs j ON j.id = s.job_id WHERE s.experiment_id = $1",
                )
                .bind(id.0)
                .fetch_one(&self.pool)
                .await?;
                Ok((count, latest))
            }

            async fn experiment_gpu_seconds(&self, id: ExperimentId, now: DateTime<Utc>) -> StoreResult<f64> {
                let rows: Vec<(i64, DateTime<Utc>, Option<DateTime<Utc>>)> = sqlx::query_as(
                    "SELECT CAST(a.gpus AS BIGINT), a.started_at, a.ended_at FROM allocations a \
                     JOIN experiment_segments s ON s.job_id = a.job_id WHERE s.experiment_id = $1",
                )
                .bind(id.0)
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(gpus, started, ended)| {
                        let held = (ended.unwrap_or(now) - started).num_milliseconds().max(0) as f64 / 1000.0;
                        held * gpus as f64
                    })
                    .sum())
            }

            async fn add_experiment_event(
                &self,
                id: ExperimentId,
                message: &str,
                at: DateTime<Utc>,
            ) -> StoreResult<()> {
                sqlx::query("INSERT INTO experiment_events (experiment_id, message, created_at) VALUES ($1, $2, $3)")
                    .bind(id.0)
                    .bind(message)
                    .bind(at)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn list_experiment_events(
                &self,
                id: ExperimentId,
                after: Option<i64>,
                limit: u32,
            ) -> StoreResult<Vec<ExperimentEvent>> {
                let rows: Vec<(i64, String, DateTime<Utc>)> = sqlx::query_as(
                    "SELECT id, message, created_at FROM experiment_events \
                     WHERE experiment_id = $1 AND id > $2 ORDER BY id LIMIT $3",
                )
                .bind(id.0)
                .bind(after.unwrap_or(0))
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(id, message, created_at)| ExperimentEvent { id, message, created_at })
                    .collect())
            }
        }
    };
}
pub(super) use impl_experiment_store;
