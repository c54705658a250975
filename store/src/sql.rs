//! The SQL both stores run, and the one implementation of [`super::Store`] over it.
//!
//! Postgres and SQLite accept the same statements here (`$n` parameters, `RETURNING`, partial unique
//! indexes), so the implementation is written once, as a macro instantiated for each database's concrete
//! sqlx types; what differs (how a write transaction begins, how labels are matched) comes from the
//! [`Dialect`] each store implements.

use super::{StoreError, StoreResult};
use drover_core::JobState;
use std::str::FromStr;

/// The statements one job submission stored on its own runs, in order, besides the token lookup
/// ([`FIND_TOKEN`]); concurrent submissions are stored together (`create_jobs`). The submission
/// benchmark replays exactly these through `pgbench`.
pub const INSERT_JOB: &str = "INSERT INTO jobs (id, tenant_id, name, job_type, state, reason, message, \
     priority, max_gpus, labels, document, schema_version, submitted_by, idempotency_key, request_hash, \
     created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $16)";
pub const INSERT_EVENT: &str = "INSERT INTO job_events (job_id, from_state, to_state, reason, message, actor, \
     created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)";
/// Appends to the audit log: at, actor id, actor, tenant id, action, target, detail.
pub const INSERT_AUDIT: &str = "INSERT INTO audit_events (at, actor_id, actor, tenant_id, action, target, detail) \
     VALUES ($1, $2, $3, $4, $5, $6, $7)";
/// Looks a bearer token up by its hash, with its user and tenant.
pub const FIND_TOKEN: &str = "SELECT k.id, k.user_id, k.name, k.prefix, k.created_at, k.expires_at, \
     k.revoked_at, u.tenant_id, t.name AS tenant_name, u.name AS user_name, u.role, u.cluster_admin, \
     u.created_at AS user_created_at, t.guaranteed_gpus, t.max_gpus, t.quota_flavours FROM api_tokens k \
     JOIN users u ON u.id = k.user_id JOIN tenants t ON t.id = u.tenant_id WHERE k.token_hash = $1";

// Column lists as macros, so every statement is one `concat!`ed static string.
macro_rules! tenant_columns {
    () => {
        "id, name, guaranteed_gpus, max_gpus, created_at, quota_flavours"
    };
}
macro_rules! user_columns {
    () => {
        "u.id, u.tenant_id, t.name AS tenant_name, u.name, u.role, u.cluster_admin, u.created_at"
    };
}
macro_rules! token_columns {
    () => {
        "id, user_id, name, prefix, created_at, expires_at, revoked_at"
    };
}
macro_rules! job_columns {
    () => {
        "j.id, j.tenant_id, t.name AS tenant_name, j.name, j.job_type, j.state, j.reason, j.message, \
         j.priority, j.max_gpus, j.labels, j.submitted_by, j.created_at, j.updated_at, j.generation, j.restarts, \
         j.document_version"
    };
}
macro_rules! event_columns {
    () => {
        "id, job_id, from_state, to_state, reason, message, actor, created_at"
    };
}
macro_rules! node_columns {
    () => {
        "id, name, labels, gpus, cpus, memory_gb, health, cordoned, last_heartbeat_at, created_at, draining, gpu_source, isolation, runs_images, taints"
    };
}
pub(super) use {
    event_columns, job_columns, node_columns, tenant_columns, token_columns, user_columns,
};

/// What differs between the databases.
pub(super) trait Dialect {
    /// Starts a transaction that will write. SQLite must take the write lock up front, or two readers
    /// that both decide to write deadlock into `SQLITE_BUSY`.
    const BEGIN_WRITE: &'static str;
    /// Appended to a `SELECT` of one job row to hold it against writers until the transaction ends
    /// (Postgres); SQLite's write transaction already excludes every other writer.
    const LOCK_ROW: &'static str;
    /// The same, for a row the transaction will update.
    const LOCK_ROW_UPDATE: &'static str;
    /// Starts a read-only transaction whose statements all see one snapshot.
    const BEGIN_SNAPSHOT: &'static str;
    /// Selects, as the first statement of such a transaction, where its snapshot's changes end
    /// (see [`super::changes`]).
    const CHANGE_CURSOR: &'static str;
    /// What goes before and after a cursor bound in a query, to compare it with `changed`.
    const CURSOR_VALUE: (&'static str, &'static str);
    /// Makes the rest of the transaction use indexes where it can, where that is a setting.
    const PREFER_INDEXES: Option<&'static str>;
    /// Where marks of writes the snapshot sees end, where a mark may lie beyond it (see
    /// [`super::changes`]).
    const CHANGED_BELOW: Option<&'static str>;
}

/// Parses an enum column written by this code; anything else means a corrupt or newer row.
pub(super) fn parse_column<T: FromStr<Err = String>>(value: &str) -> StoreResult<T> {
    value.parse().map_err(StoreError::Corrupt)
}

pub(super) fn parse_state(value: &str) -> StoreResult<JobState> {
    parse_column(value)
}

/// Maps a unique-constraint violation to a conflict naming the field; other errors pass through.
pub(super) fn unique_violation(
    err: sqlx::Error,
    field: &'static str,
    message: String,
) -> StoreError {
    match &err {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict { field, message }
        }
        _ => StoreError::Database(err),
    }
}

pub(super) fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.is_unique_violation())
}

pub(super) fn u64_column(value: i64, column: &str) -> StoreResult<u64> {
    u64::try_from(value)
        .map_err(|_| StoreError::Corrupt(format!("{column} = {value} is out of range")))
}

pub(super) fn u32_column(value: i64, column: &str) -> StoreResult<u32> {
    u32::try_from(value)
        .map_err(|_| StoreError::Corrupt(format!("{column} = {value} is out of range")))
}

/// The conditions of a [`super::JobFilter`] but its window (`before`, `after`, order and limit),
/// pushed onto a query over `jobs j` that ends in a `WHERE` clause.
macro_rules! push_job_filter {
    ($query:ident, $scope:expr, $filter:expr) => {
        if let Some(tenant) = $scope.tenant() {
            $query.push(" AND j.tenant_id = ").push_bind(tenant.0);
        }
        if !$filter.states.is_empty() {
            $query.push(" AND j.state IN (");
            let mut states = $query.separated(", ");
            for state in &$filter.states {
                states.push_bind(state.as_str());
            }
            $query.push(")");
        }
        if !$filter.labels.is_empty() {
            Self::push_label_filter(&mut $query, &$filter.labels);
        }
        if let Some(text) = &$filter.name_contains {
            let escaped = text
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_");
            $query
                .push(" AND j.name LIKE ")
                .push_bind(format!("%{escaped}%"))
                .push(" ESCAPE '\\'");
        }
    };
}
pub(super) use push_job_filter;

/// Implements [`super::Store`] for a store type with a `pool` field of the given database.
macro_rules! impl_store {
    ($store:ty, $db:ty, $backend:expr) => {
        use $crate::sql::*;
        use $crate::*;
        use async_trait::async_trait;
        use chrono::{DateTime, Utc};
        use drover_core::spec::JobType;
        use drover_core::{JobId, JobState, ReasonCode, Role, TenantId, TokenId, UserId};
        use sqlx::Row;
        use sqlx::types::Json;
        use std::collections::BTreeMap;
        use uuid::Uuid;

        type DbRow = <$db as sqlx::Database>::Row;

        /// Inserts `user` through `executor` (the pool, or a transaction that links it too): a
        /// name taken in the tenant is a `Conflict` on `name`, a tenant that does not exist `NotFound`.
        async fn insert_user<'e, E>(executor: E, user: &NewUser) -> StoreResult<UserId>
        where
            E: sqlx::Executor<'e, Database = $db>,
        {
            let id = UserId::new();
            sqlx::query(
                "INSERT INTO users (id, tenant_id, name, role, cluster_admin, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(id.0)
            .bind(user.tenant_id.0)
            .bind(&user.name)
            .bind(user.role.as_str())
            .bind(user.cluster_admin)
            .bind(Utc::now())
            .execute(executor)
            .await
            .map_err(|err| match &err {
                sqlx::Error::Database(db) if db.is_foreign_key_violation() => StoreError::NotFound,
                _ => unique_violation(
                    err,
                    "name",
                    format!("user `{}` already exists in this tenant", user.name),
                ),
            })?;
            Ok(id)
        }

        /// Appends `event` to the audit log through `executor`: the pool, or a transaction that
        /// records it with the change it describes.
        async fn insert_audit<'e, E>(executor: E, event: &NewAuditEvent) -> StoreResult<()>
        where
            E: sqlx::Executor<'e, Database = $db>,
        {
            sqlx::query($crate::sql::INSERT_AUDIT)
                .bind(Utc::now())
                .bind(event.actor_id.map(|u| u.0))
                .bind(&event.actor)
                .bind(event.tenant_id.map(|t| t.0))
                .bind(event.action)
                .bind(&event.target)
                .bind(&event.detail)
                .execute(executor)
                .await?;
            Ok(())
        }

        fn tenant_from_row(row: &DbRow) -> StoreResult<Tenant> {
            Ok(Tenant {
                id: TenantId(row.try_get("id")?),
                name: row.try_get("name")?,
                quota: quota_from_row(row)?,
                created_at: row.try_get("created_at")?,
            })
        }

        fn quota_from_row(row: &DbRow) -> StoreResult<Quota> {
            let guaranteed: i32 = row.try_get("guaranteed_gpus")?;
            let max: Option<i32> = row.try_get("max_gpus")?;
            let Json(flavours): Json<Vec<FlavourQuota>> = row.try_get("quota_flavours")?;
            Ok(Quota {
                guaranteed_gpus: u32_column(guaranteed.into(), "guaranteed_gpus")?,
                max_gpus: max.map(|m| u32_column(m.into(), "max_gpus")).transpose()?,
                flavours,
            })
        }

        fn user_from_row(row: &DbRow) -> StoreResult<User> {
            Ok(User {
                id: UserId(row.try_get("id")?),
                tenant_id: TenantId(row.try_get("tenant_id")?),
                tenant_name: row.try_get("tenant_name")?,
                name: row.try_get("name")?,
                role: parse_column::<Role>(row.try_get("role")?)?,
                cluster_admin: row.try_get("cluster_admin")?,
                created_at: row.try_get("created_at")?,
            })
        }

        fn token_from_row(row: &DbRow) -> StoreResult<TokenInfo> {
            Ok(TokenInfo {
                id: TokenId(row.try_get("id")?),
                user_id: UserId(row.try_get("user_id")?),
                name: row.try_get("name")?,
                prefix: row.try_get("prefix")?,
                created_at: row.try_get("created_at")?,
                expires_at: row.try_get("expires_at")?,
                revoked_at: row.try_get("revoked_at")?,
            })
        }

        fn job_from_row(row: &DbRow, with_document: bool) -> StoreResult<Job> {
            let job_type = match row.try_get::<&str, _>("job_type")? {
                "train" => JobType::Train,
                "command" => JobType::Command,
                other => return Err(StoreError::Corrupt(format!("job_type `{other}`"))),
            };
            let Json(labels): Json<BTreeMap<String, String>> = row.try_get("labels")?;
            let document = if with_document {
                let Json(document): Json<serde_json::Value> = row.try_get("document")?;
                Some(std::sync::Arc::new(document))
            } else {
                None
            };
            Ok(Job {
                id: JobId(row.try_get("id")?),
                tenant_id: TenantId(row.try_get("tenant_id")?),
                tenant_name: row.try_get("tenant_name")?,
                name: row.try_get("name")?,
                job_type,
                state: parse_state(row.try_get("state")?)?,
                reason: parse_column::<ReasonCode>(row.try_get("reason")?)?,
                message: row.try_get("message")?,
                priority: row.try_get("priority")?,
                max_gpus: row.try_get("max_gpus")?,
                labels,
                document,
                submitted_by: UserId(row.try_get("submitted_by")?),
                created_at: row.try_get("created_at")?,
                updated_at: row.try_get("updated_at")?,
                generation: u64_column(row.try_get("generation")?, "generation")?,
                restarts: u32_column(row.try_get::<i32, _>("restarts")?.into(), "restarts")?,
                document_version: u64_column(row.try_get("document_version")?, "document_version")?,
            })
        }

        fn event_from_row(row: &DbRow) -> StoreResult<JobEvent> {
            let from_state: Option<&str> = row.try_get("from_state")?;
            Ok(JobEvent {
                id: row.try_get("id")?,
                job_id: JobId(row.try_get("job_id")?),
                from_state: from_state.map(parse_state).transpose()?,
                to_state: parse_state(row.try_get("to_state")?)?,
                reason: parse_column::<ReasonCode>(row.try_get("reason")?)?,
                message: row.try_get("message")?,
                actor: row.try_get::<Option<Uuid>, _>("actor")?.map(UserId),
                created_at: row.try_get("created_at")?,
            })
        }

        fn node_from_row(row: &DbRow) -> StoreResult<Node> {
            let Json(labels): Json<BTreeMap<String, String>> = row.try_get("labels")?;
            let Json(gpus): Json<Vec<Gpu>> = row.try_get("gpus")?;
            let cpus: i32 = row.try_get("cpus")?;
            let memory_gb: i32 = row.try_get("memory_gb")?;
            Ok(Node {
                id: row.try_get("id")?,
                name: row.try_get("name")?,
                labels,
                gpus,
                cpus: u32_column(cpus.into(), "cpus")?,
                memory_gb: u32_column(memory_gb.into(), "memory_gb")?,
                health: row.try_get("health")?,
                cordoned: row.try_get("cordoned")?,
                draining: row.try_get("draining")?,
                gpu_source: row.try_get("gpu_source")?,
                isolation: row.try_get("isolation")?,
                runs_images: row.try_get("runs_images")?,
                taints: {
                    let Json(taints): Json<Vec<Taint>> = row.try_get("taints")?;
                    taints
                },
                last_heartbeat_at: row.try_get("last_heartbeat_at")?,
                created_at: row.try_get("created_at")?,
            })
        }

        /// Records a state change of a job as an event, in the caller's transaction.
        async fn insert_change(
            conn: &mut <$db as sqlx::Database>::Connection,
            job: JobId,
            from: JobState,
            change: &StateChange,
            at: DateTime<Utc>,
        ) -> StoreResult<()> {
            sqlx::query(INSERT_EVENT)
                .bind(job.0)
                .bind(Some(from.as_str()))
                .bind(change.to.as_str())
                .bind(change.reason.as_str())
                .bind(&change.message)
                .bind(change.actor.map(|a| a.0))
                .bind(at)
                .execute(&mut *conn)
                .await?;
            Ok(())
        }

        fn scope_tenant(scope: Scope) -> Option<Uuid> {
            scope.tenant().map(|id| id.0)
        }

        impl $store {
            async fn select_job(&self, scope: Scope, id: JobId) -> StoreResult<Job> {
                let sql = concat!("SELECT ", job_columns!(), ", j.document FROM jobs j JOIN tenants t ON t.id = j.tenant_id \
                     WHERE j.id = $1 AND ($2 IS NULL OR j.tenant_id = $2)");
                let row = sqlx::query(sql)
                    .bind(id.0)
                    .bind(scope_tenant(scope))
                    .fetch_optional(&self.pool)
                    .await?
                    .ok_or(StoreError::NotFound)?;
                job_from_row(&row, true)
            }

            async fn job_by_idempotency_key(
                &self,
                tenant: TenantId,
                key: &str,
            ) -> StoreResult<Option<(Job, Option<Vec<u8>>)>> {
                let sql = concat!("SELECT ", job_columns!(), ", j.document, j.request_hash FROM jobs j \
                     JOIN tenants t ON t.id = j.tenant_id WHERE j.tenant_id = $1 AND j.idempotency_key = $2");
                let row = sqlx::query(sql).bind(tenant.0).bind(key).fetch_optional(&self.pool).await?;
                row.map(|row| Ok((job_from_row(&row, true)?, row.try_get("request_hash")?))).transpose()
            }

            /// The job an earlier request with this key created, if the request was the same.
            async fn idempotent_replay(&self, job: &NewJob) -> StoreResult<Option<Job>> {
                let Some(key) = &job.idempotency_key else { return Ok(None) };
                match self.job_by_idempotency_key(job.tenant_id, key).await? {
                    None => Ok(None),
                    Some((first, hash)) => {
                        if hash.as_deref() == job.request_hash.as_ref().map(|h| h.as_slice()) {
                            Ok(Some(first))
                        } else {
                            Err(StoreError::IdempotencyMismatch)
                        }
                    }
                }
            }
        }

        #[async_trait]
        impl Store for $store {
            fn backend(&self) -> Backend {
                $backend
            }

            async fn migrate(&self) -> StoreResult<()> {
                Self::MIGRATOR.run(&self.pool).await?;
                Ok(())
            }

            async fn ping(&self) -> StoreResult<()> {
                sqlx::query("SELECT 1").execute(&self.pool).await?;
                Ok(())
            }

            async fn create_tenant(&self, tenant: &NewTenant) -> StoreResult<Tenant> {
                let sql = concat!("INSERT INTO tenants (", tenant_columns!(), ") VALUES ($1, $2, $3, $4, $5, $6) RETURNING ", tenant_columns!());
                let max_gpus = tenant.quota.max_gpus.map(|m| m as i32);
                let row = sqlx::query(sql)
                    .bind(TenantId::new().0)
                    .bind(&tenant.name)
                    .bind(tenant.quota.guaranteed_gpus as i32)
                    .bind(max_gpus)
                    .bind(Utc::now())
                    .bind(Json(&tenant.quota.flavours))
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|err| {
                        unique_violation(err, "name", format!("tenant `{}` already exists", tenant.name))
                    })?;
                tenant_from_row(&row)
            }

            async fn get_tenant(&self, id: TenantId) -> StoreResult<Tenant> {
                let sql = concat!("SELECT ", tenant_columns!(), " FROM tenants WHERE id = $1");
                let row = sqlx::query(sql).bind(id.0).fetch_optional(&self.pool).await?;
                tenant_from_row(&row.ok_or(StoreError::NotFound)?)
            }

            async fn get_tenant_by_name(&self, name: &str) -> StoreResult<Tenant> {
                let sql = concat!("SELECT ", tenant_columns!(), " FROM tenants WHERE name = $1");
                let row = sqlx::query(sql).bind(name).fetch_optional(&self.pool).await?;
                tenant_from_row(&row.ok_or(StoreError::NotFound)?)
            }

            async fn list_tenants(&self) -> StoreResult<Vec<Tenant>> {
                let sql = concat!("SELECT ", tenant_columns!(), " FROM tenants ORDER BY name");
                let rows = sqlx::query(sql).fetch_all(&self.pool).await?;
                rows.iter().map(tenant_from_row).collect()
            }

            async fn set_tenant_quota(&self, id: TenantId, quota: Quota) -> StoreResult<Tenant> {
                let sql = concat!("UPDATE tenants SET guaranteed_gpus = $2, max_gpus = $3, quota_flavours = $4 WHERE id = $1 RETURNING ", tenant_columns!());
                let row = sqlx::query(sql)
                    .bind(id.0)
                    .bind(quota.guaranteed_gpus as i32)
                    .bind(quota.max_gpus.map(|m| m as i32))
                    .bind(Json(&quota.flavours))
                    .fetch_optional(&self.pool)
                    .await?;
                tenant_from_row(&row.ok_or(StoreError::NotFound)?)
            }

            async fn create_user(&self, user: &NewUser) -> StoreResult<User> {
                let id = insert_user(&self.pool, user).await?;
                self.get_user(Scope::Cluster, id).await
            }

            async fn get_user(&self, scope: Scope, id: UserId) -> StoreResult<User> {
                let sql = concat!("SELECT ", user_columns!(), " FROM users u JOIN tenants t ON t.id = u.tenant_id \
                     WHERE u.id = $1 AND ($2 IS NULL OR u.tenant_id = $2)");
                let row = sqlx::query(sql)
                    .bind(id.0)
                    .bind(scope_tenant(scope))
                    .fetch_optional(&self.pool)
                    .await?;
                user_from_row(&row.ok_or(StoreError::NotFound)?)
            }

            async fn list_users(&self, scope: Scope) -> StoreResult<Vec<User>> {
                let sql = concat!("SELECT ", user_columns!(), " FROM users u JOIN tenants t ON t.id = u.tenant_id \
                     WHERE ($1 IS NULL OR u.tenant_id = $1) ORDER BY t.name, u.name");
                let rows = sqlx::query(sql).bind(scope_tenant(scope)).fetch_all(&self.pool).await?;
                rows.iter().map(user_from_row).collect()
            }

            async fn first_cluster_admin(&self) -> StoreResult<Option<User>> {
                let sql = concat!("SELECT ", user_columns!(), " FROM users u JOIN tenants t ON t.id = u.tenant_id \
                     WHERE u.cluster_admin ORDER BY u.created_at, u.id LIMIT 1");
                let row = sqlx::query(sql).fetch_optional(&self.pool).await?;
                row.as_ref().map(user_from_row).transpose()
            }

            async fn create_token(&self, token: &NewToken) -> StoreResult<TokenInfo> {
                let sql = concat!("INSERT INTO api_tokens (id, user_id, name, token_hash, prefix, created_at, expires_at, parent_id) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING ", token_columns!());
                let row = sqlx::query(sql)
                    .bind(TokenId::new().0)
                    .bind(token.user_id.0)
                    .bind(&token.name)
                    .bind(token.token_hash.as_slice())
                    .bind(&token.prefix)
                    .bind(Utc::now())
                    .bind(token.expires_at)
                    .bind(token.parent.map(|p| p.0))
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|err| match &err {
                        sqlx::Error::Database(db) if db.is_foreign_key_violation() => StoreError::NotFound,
                        _ => unique_violation(err, "token", "this token already exists".to_owned()),
                    })?;
                token_from_row(&row)
            }

            async fn find_token(&self, token_hash: &[u8; 32]) -> StoreResult<Option<AuthRecord>> {
                let Some(row) = sqlx::query(FIND_TOKEN)
                    .bind(token_hash.as_slice())
                    .fetch_optional(&self.pool)
                    .await?
                else {
                    return Ok(None);
                };
                let token = token_from_row(&row)?;
                let user = User {
                    id: token.user_id,
                    tenant_id: TenantId(row.try_get("tenant_id")?),
                    tenant_name: row.try_get("tenant_name")?,
                    name: row.try_get("user_name")?,
                    role: parse_column::<Role>(row.try_get("role")?)?,
                    cluster_admin: row.try_get("cluster_admin")?,
                    created_at: row.try_get("user_created_at")?,
                };
                Ok(Some(AuthRecord { token, user, tenant_quota: quota_from_row(&row)? }))
            }

            async fn list_tokens(&self, user: UserId) -> StoreResult<Vec<TokenInfo>> {
                let sql =
                    concat!("SELECT ", token_columns!(), " FROM api_tokens WHERE user_id = $1 ORDER BY created_at, id");
                let rows = sqlx::query(sql).bind(user.0).fetch_all(&self.pool).await?;
                rows.iter().map(token_from_row).collect()
            }

            async fn get_token(&self, id: TokenId) -> StoreResult<TokenInfo> {
                let sql = concat!("SELECT ", token_columns!(), " FROM api_tokens WHERE id = $1");
                let row = sqlx::query(sql).bind(id.0).fetch_optional(&self.pool).await?;
                token_from_row(&row.ok_or(StoreError::NotFound)?)
            }

            async fn revoke_token(&self, id: TokenId) -> StoreResult<TokenInfo> {
                // The token and every token minted from it, however deep, in one statement.
                let sql = "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, $2) WHERE id IN ( \
                     WITH RECURSIVE minted(id) AS ( \
                         SELECT id FROM api_tokens WHERE id = $1 \
                         UNION SELECT k.id FROM api_tokens k JOIN minted m ON k.parent_id = m.id) \
                     SELECT id FROM minted)";
                sqlx::query(sql).bind(id.0).bind(Utc::now()).execute(&self.pool).await?;
                self.get_token(id).await
            }

            async fn create_job(&self, job: &NewJob) -> StoreResult<Created<Job>> {
                if let Some(first) = self.idempotent_replay(job).await? {
                    return Ok(Created { value: first, created: false });
                }
                let mut tx = self.pool.begin_with(Self::BEGIN_WRITE).await?;
                let inserted = sqlx::query(INSERT_JOB)
                    .bind(job.id.0)
                    .bind(job.tenant_id.0)
                    .bind(&job.name)
                    .bind(job.job_type.as_str())
                    .bind(JobState::Queued.as_str())
                    .bind(ReasonCode::Submitted.as_str())
                    .bind("submitted")
                    .bind(job.priority)
                    .bind(job.max_gpus)
                    .bind(Json(&job.labels))
                    .bind(Json(&job.document))
                    .bind(drover_core::spec::SPEC_SCHEMA_VERSION)
                    .bind(job.submitted_by.0)
                    .bind(job.idempotency_key.as_deref())
                    .bind(job.request_hash.as_ref().map(|h| h.as_slice()))
                    .bind(job.created_at)
                    .execute(&mut *tx)
                    .await;
                if let Err(err) = inserted {
                    drop(tx);
                    // A concurrent retry with the same key may have won the race; the database may
                    // report either the key's or the name's index, so look for the twin on both.
                    if is_unique_violation(&err) {
                        if let Some(first) = self.idempotent_replay(job).await? {
                            return Ok(Created { value: first, created: false });
                        }
                    }
                    return Err(unique_violation(
                        err,
                        "metadata.name",
                        format!("a job named `{}` already exists in this tenant", job.name),
                    ));
                }
                sqlx::query(INSERT_EVENT)
                    .bind(job.id.0)
                    .bind(None::<&str>)
                    .bind(JobState::Queued.as_str())
                    .bind(ReasonCode::Submitted.as_str())
                    .bind("submitted")
                    .bind(Some(job.submitted_by.0))
                    .bind(job.created_at)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(Created { value: job.queued(), created: true })
            }

            async fn create_jobs(&self, jobs: &[NewJob]) -> StoreResult<Vec<bool>> {
                if jobs.is_empty() {
                    return Ok(Vec::new());
                }
                let mut tx = self.pool.begin_with(Self::BEGIN_WRITE).await?;
                let mut insert = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO jobs (id, tenant_id, name, job_type, state, reason, message, priority, max_gpus, \
                     labels, document, schema_version, submitted_by, idempotency_key, request_hash, created_at, \
                     updated_at) ",
                );
                insert.push_values(jobs, |mut row, job| {
                    row.push_bind(job.id.0)
                        .push_bind(job.tenant_id.0)
                        .push_bind(job.name.as_str())
                        .push_bind(job.job_type.as_str())
                        .push_bind(JobState::Queued.as_str())
                        .push_bind(ReasonCode::Submitted.as_str())
                        .push_bind("submitted")
                        .push_bind(job.priority)
                        .push_bind(job.max_gpus)
                        .push_bind(Json(&job.labels))
                        .push_bind(Json(&job.document))
                        .push_bind(drover_core::spec::SPEC_SCHEMA_VERSION)
                        .push_bind(job.submitted_by.0)
                        .push_bind(job.idempotency_key.as_deref())
                        .push_bind(job.request_hash.as_ref().map(|h| h.as_slice()))
                        .push_bind(job.created_at)
                        .push_bind(job.created_at);
                });
                // A row that breaks a uniqueness rule (a taken name, a reused idempotency key) is left
                // out; the caller submits it alone, which tells a retry from a conflict.
                insert.push(" ON CONFLICT DO NOTHING RETURNING id");
                let ids: Vec<(uuid::Uuid,)> = insert.build_query_as().fetch_all(&mut *tx).await?;
                let ids: std::collections::HashSet<uuid::Uuid> = ids.into_iter().map(|(id,)| id).collect();
                let inserted: Vec<bool> = jobs.iter().map(|job| ids.contains(&job.id.0)).collect();
                if !ids.is_empty() {
                    let mut events = sqlx::QueryBuilder::<$db>::new(
                        "INSERT INTO job_events (job_id, from_state, to_state, reason, message, actor, created_at) ",
                    );
                    events.push_values(jobs.iter().filter(|job| ids.contains(&job.id.0)), |mut row, job| {
                        row.push_bind(job.id.0)
                            .push_bind(None::<&str>)
                            .push_bind(JobState::Queued.as_str())
                            .push_bind(ReasonCode::Submitted.as_str())
                            .push_bind("submitted")
                            .push_bind(Some(job.submitted_by.0))
                            .push_bind(job.created_at);
                    });
                    events.build().execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(inserted)
            }

            async fn job_by_key(&self, tenant: TenantId, key: &str) -> StoreResult<Option<Job>> {
                Ok(self.job_by_idempotency_key(tenant, key).await?.map(|(job, _)| job))
            }

            async fn get_job(&self, scope: Scope, id: JobId) -> StoreResult<Job> {
                self.select_job(scope, id).await
            }

            async fn list_jobs(&self, scope: Scope, filter: &JobFilter) -> StoreResult<Vec<Job>> {
                let mut query = sqlx::QueryBuilder::<$db>::new(concat!("SELECT ", job_columns!(), " FROM jobs j JOIN tenants t ON t.id = j.tenant_id WHERE 1 = 1"));
                push_job_filter!(query, scope, filter);
                if let Some(before) = filter.before {
                    query.push(" AND j.id < ").push_bind(before.0);
                }
                if let Some(after) = filter.after {
                    query.push(" AND j.id > ").push_bind(after.0);
                }
                // Newer than a job, newest first: the ones nearest it, read upwards and turned round.
                let ascending = filter.oldest_first || filter.after.is_some();
                query
                    .push(if ascending { " ORDER BY j.id ASC LIMIT " } else { " ORDER BY j.id DESC LIMIT " })
                    .push_bind(i64::from(filter.limit));
                let rows = query.build().fetch_all(&self.pool).await?;
                let mut jobs = rows.iter().map(|row| job_from_row(row, false)).collect::<StoreResult<Vec<Job>>>()?;
                if ascending && !filter.oldest_first {
                    jobs.reverse();
                }
                Ok(jobs)
            }

            async fn queued_jobs(&self, scope: Scope, limit: u32) -> StoreResult<Vec<QueuedRow>> {
                let rows: Vec<(Uuid, String, String, i32, i64, DateTime<Utc>)> = sqlx::query_as(
                    "SELECT j.id, j.name, t.name, j.priority, j.max_gpus, j.created_at \
                     FROM jobs j JOIN tenants t ON t.id = j.tenant_id \
                     WHERE j.state = 'queued' AND ($1 IS NULL OR j.tenant_id = $1) ORDER BY j.id LIMIT $2",
                )
                .bind(scope_tenant(scope))
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(id, name, tenant_name, priority, max_gpus, created_at)| QueuedRow {
                        id: JobId(id),
                        name,
                        tenant_name,
                        priority,
                        max_gpus,
                        created_at,
                    })
                    .collect())
            }

            async fn count_jobs(&self, scope: Scope, filter: &JobFilter, at_most: u32) -> StoreResult<u64> {
                let mut query = sqlx::QueryBuilder::<$db>::new(
                    "SELECT count(*) FROM (SELECT 1 FROM jobs j WHERE 1 = 1",
                );
                push_job_filter!(query, scope, filter);
                query.push(" LIMIT ").push_bind(i64::from(at_most)).push(") counted");
                let count: i64 = query.build_query_scalar().fetch_one(&self.pool).await?;
                u64_column(count, "count")
            }

            async fn transition_job(&self, scope: Scope, id: JobId, change: &StateChange) -> StoreResult<Job> {
                loop {
                    let mut tx = self.pool.begin_with(Self::BEGIN_WRITE).await?;
                    let from: String =
                        sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2)")
                            .bind(id.0)
                            .bind(scope_tenant(scope))
                            .fetch_optional(&mut *tx)
                            .await?
                            .ok_or(StoreError::NotFound)?;
                    let from = parse_state(&from)?;
                    from.check_transition(change.to)?;
                    let now: DateTime<Utc> = Utc::now();
                    let updated = sqlx::query(
                        "UPDATE jobs SET state = $1, reason = $2, message = $3, updated_at = $4 \
                         WHERE id = $5 AND state = $6",
                    )
                    .bind(change.to.as_str())
                    .bind(change.reason.as_str())
                    .bind(&change.message)
                    .bind(now)
                    .bind(id.0)
                    .bind(from.as_str())
                    .execute(&mut *tx)
                    .await?;
                    if updated.rows_affected() == 0 {
                        // Another writer moved the job between our read and our write: decide again.
                        continue;
                    }
                    insert_change(&mut tx, id, from, change, now).await?;
                    tx.commit().await?;
                    return self.select_job(scope, id).await;
                }
            }

            async fn list_job_events(
                &self,
                scope: Scope,
                id: JobId,
                after: Option<i64>,
                limit: u32,
            ) -> StoreResult<Vec<JobEvent>> {
                let exists: Option<Uuid> =
                    sqlx::query_scalar("SELECT id FROM jobs WHERE id = $1 AND ($2 IS NULL OR tenant_id = $2)")
                        .bind(id.0)
                        .bind(scope_tenant(scope))
                        .fetch_optional(&self.pool)
                        .await?;
                if exists.is_none() {
                    return Err(StoreError::NotFound);
                }
                let sql = concat!("SELECT ", event_columns!(), " FROM job_events WHERE job_id = $1 AND id > $2 ORDER BY id LIMIT $3");
                let rows = sqlx::query(sql)
                    .bind(id.0)
                    .bind(after.unwrap_or(0))
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(event_from_row).collect()
            }

            async fn count_jobs_by_state(&self) -> StoreResult<Vec<(JobState, i64)>> {
                let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state ORDER BY state")
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter()
                    .map(|row| Ok((parse_state(row.try_get("state")?)?, row.try_get("n")?)))
                    .collect()
            }

            async fn upsert_node(&self, node: &Node) -> StoreResult<Node> {
                let sql = concat!("INSERT INTO nodes (", node_columns!(), ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
                     ON CONFLICT (name) DO UPDATE SET labels = excluded.labels, gpus = excluded.gpus, \
                     cpus = excluded.cpus, memory_gb = excluded.memory_gb, health = excluded.health, \
                     cordoned = excluded.cordoned, last_heartbeat_at = excluded.last_heartbeat_at, \
                     draining = excluded.draining, gpu_source = excluded.gpu_source, \
                     isolation = excluded.isolation, runs_images = excluded.runs_images, \
                     taints = excluded.taints \
                     RETURNING ", node_columns!());
                let row = sqlx::query(sql)
                    .bind(node.id)
                    .bind(&node.name)
                    .bind(Json(&node.labels))
                    .bind(Json(&node.gpus))
                    .bind(node.cpus as i32)
                    .bind(node.memory_gb as i32)
                    .bind(&node.health)
                    .bind(node.cordoned)
                    .bind(node.last_heartbeat_at)
                    .bind(node.created_at)
                    .bind(node.draining)
                    .bind(&node.gpu_source)
                    .bind(&node.isolation)
                    .bind(node.runs_images)
                    .bind(Json(&node.taints))
                    .fetch_one(&self.pool)
                    .await?;
                node_from_row(&row)
            }

            async fn get_node(&self, name: &str) -> StoreResult<Node> {
                let sql = concat!("SELECT ", node_columns!(), " FROM nodes WHERE name = $1");
                let row = sqlx::query(sql).bind(name).fetch_optional(&self.pool).await?;
                node_from_row(&row.ok_or(StoreError::NotFound)?)
            }

            async fn list_nodes(&self) -> StoreResult<Vec<Node>> {
                let sql = concat!("SELECT ", node_columns!(), " FROM nodes ORDER BY name");
                let rows = sqlx::query(sql).fetch_all(&self.pool).await?;
                rows.iter().map(node_from_row).collect()
            }
        }
    };
}

pub(super) use impl_store;
