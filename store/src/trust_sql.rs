//! The one implementation of [`super::TrustStore`] over SQL both databases accept, instantiated per
//! database like [`super::sql`]'s.

macro_rules! enrollment_columns {
    () => {
        "id, name, prefix, uses_left, node_name, created_by, created_at, expires_at, revoked_at"
    };
}
macro_rules! credential_columns {
    () => {
        "id, node_name, prefix, enrolled_with, created_at, revoked_at"
    };
}
macro_rules! secret_columns {
    () => {
        "tenant_id, name, created_by, created_at, updated_at"
    };
}
pub(super) use {credential_columns, enrollment_columns, secret_columns};

macro_rules! impl_trust_store {
    ($store:ty) => {
        use $crate::secrets::Sealed;
        use $crate::trust_sql::{credential_columns, enrollment_columns, secret_columns};

        fn enrollment_from_row(row: &DbRow) -> StoreResult<EnrollmentToken> {
            Ok(EnrollmentToken {
                id: row.try_get("id")?,
                name: row.try_get("name")?,
                prefix: row.try_get("prefix")?,
                uses_left: u32_column(row.try_get::<i32, _>("uses_left")?.into(), "uses_left")?,
                node_name: row.try_get("node_name")?,
                created_by: row.try_get::<Option<Uuid>, _>("created_by")?.map(UserId),
                created_at: row.try_get("created_at")?,
                expires_at: row.try_get("expires_at")?,
                revoked_at: row.try_get("revoked_at")?,
            })
        }

        fn credential_from_row(row: &DbRow) -> StoreResult<NodeCredential> {
            Ok(NodeCredential {
                id: row.try_get("id")?,
                node_name: row.try_get("node_name")?,
                prefix: row.try_get("prefix")?,
                enrolled_with: row.try_get("enrolled_with")?,
                created_at: row.try_get("created_at")?,
                revoked_at: row.try_get("revoked_at")?,
            })
        }

        fn secret_from_row(row: &DbRow) -> StoreResult<SecretInfo> {
            Ok(SecretInfo {
                tenant_id: TenantId(row.try_get("tenant_id")?),
                name: row.try_get("name")?,
                created_by: row.try_get::<Option<Uuid>, _>("created_by")?.map(UserId),
                created_at: row.try_get("created_at")?,
                updated_at: row.try_get("updated_at")?,
            })
        }

        #[async_trait]
        impl TrustStore for $store {
            async fn create_enrollment_token(
                &self,
                token: &NewEnrollmentToken,
            ) -> StoreResult<EnrollmentToken> {
                let sql = concat!(
                    "INSERT INTO enrollment_tokens (id, name, token_hash, prefix, uses_left, created_by, \
                     created_at, expires_at, node_name) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING ",
                    enrollment_columns!()
                );
                let row = sqlx::query(sql)
                    .bind(Uuid::now_v7())
                    .bind(&token.name)
                    .bind(token.token_hash.as_slice())
                    .bind(&token.prefix)
                    .bind(i32::try_from(token.uses).unwrap_or(i32::MAX))
                    .bind(token.created_by.0)
                    .bind(Utc::now())
                    .bind(token.expires_at)
                    .bind(&token.node_name)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|err| unique_violation(err, "token", "this token already exists".to_owned()))?;
                enrollment_from_row(&row)
            }

            async fn list_enrollment_tokens(&self) -> StoreResult<Vec<EnrollmentToken>> {
                let sql = concat!("SELECT ", enrollment_columns!(), " FROM enrollment_tokens ORDER BY created_at DESC, id DESC");
                let rows = sqlx::query(sql).fetch_all(&self.pool).await?;
                rows.iter().map(enrollment_from_row).collect()
            }

            async fn revoke_enrollment_token(&self, id: Uuid) -> StoreResult<EnrollmentToken> {
                let sql = concat!(
                    "UPDATE enrollment_tokens SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1 RETURNING ",
                    enrollment_columns!()
                );
                let row = sqlx::query(sql)
                    .bind(id)
                    .bind(Utc::now())
                    .fetch_optional(&self.pool)
                    .await?;
                enrollment_from_row(&row.ok_or(StoreError::NotFound)?)
            }

            async fn enroll_node(
                &self,
                with: EnrolWith<'_>,
                credential: &NewNodeCredential,
            ) -> StoreResult<Enrolment> {
                let mut tx = self.pool.begin_with(Self::BEGIN_WRITE).await?;
                let now = Utc::now();
                let revoked: Option<i32> = sqlx::query_scalar(
                    "SELECT 1 FROM node_credentials WHERE node_name = $1 AND revoked_at IS NOT NULL LIMIT 1",
                )
                .bind(&credential.node_name)
                .fetch_optional(&mut *tx)
                .await?;
                let enrolled_with = match with {
                    EnrolWith::Server if revoked.is_some() => return Ok(Enrolment::NameRevoked),
                    EnrolWith::Server => "server".to_owned(),
                    EnrolWith::Token(hash) => {
                        let sql = format!(
                            concat!("SELECT ", enrollment_columns!(), " FROM enrollment_tokens WHERE token_hash = $1{}"),
                            Self::LOCK_ROW_UPDATE
                        );
                        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                            .bind(hash.as_slice())
                            .fetch_optional(&mut *tx)
                            .await?;
                        let token = match row.as_ref().map(enrollment_from_row).transpose()? {
                            Some(token) if token.usable(now) => token,
                            _ => return Ok(Enrolment::TokenRefused),
                        };
                        match &token.node_name {
                            Some(bound) if *bound != credential.node_name => {
                                return Ok(Enrolment::TokenRefused);
                            }
                            None if revoked.is_some() => return Ok(Enrolment::NameRevoked),
                            _ => {}
                        }
                        sqlx::query("UPDATE enrollment_tokens SET uses_left = uses_left - 1 WHERE id = $1")
                            .bind(token.id)
                            .execute(&mut *tx)
                            .await?;
                        token.name
                    }
                };
                let sql = concat!(
                    "INSERT INTO node_credentials (id, node_name, credential_hash, prefix, enrolled_with, \
                     created_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING ",
                    credential_columns!()
                );
                let inserted = sqlx::query(sql)
                    .bind(Uuid::now_v7())
                    .bind(&credential.node_name)
                    .bind(credential.credential_hash.as_slice())
                    .bind(&credential.prefix)
                    .bind(&enrolled_with)
                    .bind(now)
                    .fetch_one(&mut *tx)
                    .await;
                match inserted {
                    Ok(row) => {
                        let record = credential_from_row(&row)?;
                        tx.commit().await?;
                        Ok(Enrolment::Enrolled(record))
                    }
                    Err(err) if is_unique_violation(&err) => Ok(Enrolment::NameTaken),
                    Err(err) => Err(err.into()),
                }
            }

            async fn find_node_credential(
                &self,
                hash: &[u8; 32],
            ) -> StoreResult<Option<NodeCredential>> {
                let sql = concat!("SELECT ", credential_columns!(), " FROM node_credentials WHERE credential_hash = $1");
                let row = sqlx::query(sql)
                    .bind(hash.as_slice())
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(credential_from_row).transpose()
            }

            async fn revoke_node_credentials(&self, node_name: &str) -> StoreResult<u64> {
                let done = sqlx::query(
                    "UPDATE node_credentials SET revoked_at = $2 WHERE node_name = $1 AND revoked_at IS NULL",
                )
                .bind(node_name)
                .bind(Utc::now())
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected())
            }

            async fn pin_node_capacity(
                &self,
                hash: &[u8; 32],
                claimed: &$crate::NodeCapacity,
            ) -> StoreResult<$crate::NodeCapacity> {
                let json = serde_json::to_string(claimed)
                    .map_err(|err| StoreError::Corrupt(format!("node capacity: {err}")))?;
                let row: Option<(Option<String>,)> = sqlx::query_as(
                    "UPDATE node_credentials SET capacity = COALESCE(capacity, $2) \
                     WHERE credential_hash = $1 RETURNING capacity",
                )
                .bind(hash.as_slice())
                .bind(json)
                .fetch_optional(&self.pool)
                .await?;
                let stored = row.and_then(|(capacity,)| capacity).ok_or(StoreError::NotFound)?;
                serde_json::from_str(&stored)
                    .map_err(|err| StoreError::Corrupt(format!("node capacity: {err}")))
            }

            async fn live_node_credentials(&self) -> StoreResult<Vec<NodeCredential>> {
                let sql = concat!("SELECT ", credential_columns!(), " FROM node_credentials WHERE revoked_at IS NULL ORDER BY node_name");
                let rows = sqlx::query(sql).fetch_all(&self.pool).await?;
                rows.iter().map(credential_from_row).collect()
            }

            async fn put_secret(&self, secret: &NewSecret) -> StoreResult<SecretInfo> {
                let sql = concat!(
                    "INSERT INTO secrets (tenant_id, name, key_id, nonce, ciphertext, created_by, created_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT (tenant_id, name) DO UPDATE SET \
                     key_id = excluded.key_id, nonce = excluded.nonce, ciphertext = excluded.ciphertext, \
                     updated_at = excluded.updated_at RETURNING ",
                    secret_columns!()
                );
                let row = sqlx::query(sql)
                    .bind(secret.tenant_id.0)
                    .bind(&secret.name)
                    .bind(&secret.sealed.key_id)
                    .bind(secret.sealed.nonce.as_slice())
                    .bind(secret.sealed.ciphertext.as_slice())
                    .bind(secret.created_by.0)
                    .bind(Utc::now())
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|err| match &err {
                        sqlx::Error::Database(db) if db.is_foreign_key_violation() => StoreError::NotFound,
                        _ => StoreError::Database(err),
                    })?;
                secret_from_row(&row)
            }

            async fn list_secrets(&self, tenant: TenantId) -> StoreResult<Vec<SecretInfo>> {
                let sql = concat!("SELECT ", secret_columns!(), " FROM secrets WHERE tenant_id = $1 ORDER BY name");
                let rows = sqlx::query(sql).bind(tenant.0).fetch_all(&self.pool).await?;
                rows.iter().map(secret_from_row).collect()
            }

            async fn delete_secret(&self, tenant: TenantId, name: &str) -> StoreResult<SecretInfo> {
                let sql = concat!("DELETE FROM secrets WHERE tenant_id = $1 AND name = $2 RETURNING ", secret_columns!());
                let row = sqlx::query(sql).bind(tenant.0).bind(name).fetch_optional(&self.pool).await?;
                secret_from_row(&row.ok_or(StoreError::NotFound)?)
            }

            async fn sealed_secret(&self, tenant: TenantId, name: &str) -> StoreResult<Option<Sealed>> {
                let row: Option<(String, Vec<u8>, Vec<u8>)> = sqlx::query_as(
                    "SELECT key_id, nonce, ciphertext FROM secrets WHERE tenant_id = $1 AND name = $2",
                )
                .bind(tenant.0)
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
                Ok(row.map(|(key_id, nonce, ciphertext)| Sealed { key_id, nonce, ciphertext }))
            }

            async fn gateway_authority(&self) -> StoreResult<Option<(String, Sealed)>> {
                let row: Option<(String, String, Vec<u8>, Vec<u8>)> = sqlx::query_as(
                    "SELECT certificate, key_id, nonce, ciphertext FROM gateway_authority WHERE id = 1",
                )
                .fetch_optional(&self.pool)
                .await?;
                Ok(row.map(|(certificate, key_id, nonce, ciphertext)| {
                    (certificate, Sealed { key_id, nonce, ciphertext })
                }))
            }

            async fn keep_gateway_authority(
                &self,
                certificate: &str,
                key: &Sealed,
            ) -> StoreResult<(String, Sealed)> {
                sqlx::query(
                    "INSERT INTO gateway_authority (id, certificate, key_id, nonce, ciphertext, created_at) \
                     VALUES (1, $1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
                )
                .bind(certificate)
                .bind(&key.key_id)
                .bind(key.nonce.as_slice())
                .bind(key.ciphertext.as_slice())
                .bind(Utc::now())
                .execute(&self.pool)
                .await?;
                self.gateway_authority().await?.ok_or(StoreError::NotFound)
            }

            async fn record_audit(&self, event: &NewAuditEvent) -> StoreResult<()> {
                insert_audit(&self.pool, event).await
            }

            async fn list_audit(&self, before: Option<i64>, limit: u32) -> StoreResult<Vec<AuditEvent>> {
                let rows = sqlx::query(
                    "SELECT id, at, actor_id, actor, tenant_id, action, target, detail FROM audit_events \
                     WHERE id < $1 ORDER BY id DESC LIMIT $2",
                )
                .bind(before.unwrap_or(i64::MAX))
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|row| {
                        Ok(AuditEvent {
                            id: row.try_get("id")?,
                            at: row.try_get("at")?,
                            actor_id: row.try_get::<Option<Uuid>, _>("actor_id")?.map(UserId),
                            actor: row.try_get("actor")?,
                            tenant_id: row.try_get::<Option<Uuid>, _>("tenant_id")?.map(TenantId),
                            action: row.try_get("action")?,
                            target: row.try_get("target")?,
                            detail: row.try_get("detail")?,
                        })
                    })
                    .collect()
            }

            async fn count_waiting_jobs(&self, tenant: TenantId) -> StoreResult<u64> {
                let count: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM jobs WHERE tenant_id = $1 AND state IN ('queued', 'paused')",
                )
                .bind(tenant.0)
                .fetch_one(&self.pool)
                .await?;
                u64_column(count, "count")
            }
        }
    };
}
pub(super) use impl_trust_store;
