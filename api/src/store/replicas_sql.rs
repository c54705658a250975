//! The one implementation of [`super::ReplicaStore`] over SQL both databases accept.

macro_rules! impl_replica_store {
    ($store:ty) => {
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
        }
    };
}
pub(super) use impl_replica_store;
