//! The one implementation of [`super::SsoStore`] over SQL both databases accept, instantiated per
//! database like [`super::sql`]'s.

macro_rules! impl_sso_store {
    ($store:ty) => {
        use $crate::sso::{NewSsoLogin, SsoLink, SsoLogin, SsoSession, SsoStore};

        fn sso_session_from_row(row: &DbRow) -> StoreResult<SsoSession> {
            let key_id: Option<String> = row.try_get("key_id")?;
            let nonce: Option<Vec<u8>> = row.try_get("nonce")?;
            let ciphertext: Option<Vec<u8>> = row.try_get("ciphertext")?;
            Ok(SsoSession {
                token_id: TokenId(row.try_get("token_id")?),
                user_id: UserId(row.try_get("user_id")?),
                issuer: row.try_get("issuer")?,
                subject: row.try_get("subject")?,
                refresh: match (key_id, nonce, ciphertext) {
                    (Some(key_id), Some(nonce), Some(ciphertext)) => {
                        Some(Sealed { key_id, nonce, ciphertext })
                    }
                    _ => None,
                },
                refresh_due: row.try_get("refresh_due")?,
            })
        }

        #[async_trait]
        impl SsoStore for $store {
            async fn begin_sso_login(&self, login: &NewSsoLogin) -> StoreResult<()> {
                let now = Utc::now();
                sqlx::query("DELETE FROM sso_logins WHERE expires_at < $1")
                    .bind(now)
                    .execute(&self.pool)
                    .await?;
                sqlx::query(
                    "INSERT INTO sso_logins (state_hash, nonce, pkce_verifier, next, expires_at) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(login.state_hash.as_slice())
                .bind(&login.nonce)
                .bind(&login.pkce_verifier)
                .bind(&login.next)
                .bind(login.expires_at)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn take_sso_login(&self, state_hash: &[u8; 32]) -> StoreResult<Option<SsoLogin>> {
                let row = sqlx::query(
                    "DELETE FROM sso_logins WHERE state_hash = $1 \
                     RETURNING nonce, pkce_verifier, next, expires_at",
                )
                .bind(state_hash.as_slice())
                .fetch_optional(&self.pool)
                .await?;
                row.map(|row| {
                    Ok(SsoLogin {
                        nonce: row.try_get("nonce")?,
                        pkce_verifier: row.try_get("pkce_verifier")?,
                        next: row.try_get("next")?,
                        expires_at: row.try_get("expires_at")?,
                    })
                })
                .transpose()
            }

            async fn sso_links(&self, issuer: &str, subject: &str) -> StoreResult<Vec<SsoLink>> {
                let rows = sqlx::query(
                    "SELECT tenant_id, user_id FROM sso_identities \
                     WHERE issuer = $1 AND subject = $2 ORDER BY linked_at",
                )
                .bind(issuer)
                .bind(subject)
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|row| {
                        Ok(SsoLink {
                            tenant_id: TenantId(row.try_get("tenant_id")?),
                            user_id: UserId(row.try_get("user_id")?),
                        })
                    })
                    .collect()
            }

            async fn link_sso_user(
                &self,
                issuer: &str,
                subject: &str,
                user: &NewUser,
            ) -> StoreResult<User> {
                let mut tx = self.pool.begin_with(Self::BEGIN_WRITE).await?;
                let id = insert_user(&mut *tx, user).await?;
                sqlx::query(
                    "INSERT INTO sso_identities (issuer, subject, tenant_id, user_id, linked_at) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(issuer)
                .bind(subject)
                .bind(user.tenant_id.0)
                .bind(id.0)
                .bind(Utc::now())
                .execute(&mut *tx)
                .await
                .map_err(|err| {
                    unique_violation(
                        err,
                        "subject",
                        "this identity is already a user in the tenant".to_owned(),
                    )
                })?;
                tx.commit().await?;
                self.get_user(Scope::Cluster, id).await
            }

            async fn unlink_sso_user(
                &self,
                issuer: &str,
                subject: &str,
                tenant: TenantId,
            ) -> StoreResult<Option<UserId>> {
                let mut tx = self.pool.begin_with(Self::BEGIN_WRITE).await?;
                let user: Option<Uuid> = sqlx::query_scalar(
                    "DELETE FROM sso_identities WHERE issuer = $1 AND subject = $2 AND tenant_id = $3 \
                     RETURNING user_id",
                )
                .bind(issuer)
                .bind(subject)
                .bind(tenant.0)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some(user) = user {
                    sqlx::query("DELETE FROM sso_sessions WHERE user_id = $1")
                        .bind(user)
                        .execute(&mut *tx)
                        .await?;
                    sqlx::query(
                        "UPDATE api_tokens SET revoked_at = $2 WHERE user_id = $1 AND revoked_at IS NULL",
                    )
                    .bind(user)
                    .bind(Utc::now())
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(user.map(UserId))
            }

            async fn set_user_role(
                &self,
                user: UserId,
                role: Role,
                cluster_admin: bool,
            ) -> StoreResult<User> {
                let changed = sqlx::query("UPDATE users SET role = $2, cluster_admin = $3 WHERE id = $1")
                    .bind(user.0)
                    .bind(role.as_str())
                    .bind(cluster_admin)
                    .execute(&self.pool)
                    .await?;
                if changed.rows_affected() == 0 {
                    return Err(StoreError::NotFound);
                }
                self.get_user(Scope::Cluster, user).await
            }

            async fn keep_sso_session(&self, session: &SsoSession) -> StoreResult<()> {
                let refresh = session.refresh.as_ref();
                sqlx::query(
                    "INSERT INTO sso_sessions (token_id, user_id, issuer, subject, key_id, nonce, \
                     ciphertext, refresh_due) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .bind(session.token_id.0)
                .bind(session.user_id.0)
                .bind(&session.issuer)
                .bind(&session.subject)
                .bind(refresh.map(|s| s.key_id.as_str()))
                .bind(refresh.map(|s| s.nonce.as_slice()))
                .bind(refresh.map(|s| s.ciphertext.as_slice()))
                .bind(session.refresh_due)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn due_sso_sessions(
                &self,
                now: DateTime<Utc>,
                limit: u32,
            ) -> StoreResult<Vec<SsoSession>> {
                sqlx::query(
                    "DELETE FROM sso_sessions WHERE token_id IN (SELECT id FROM api_tokens k \
                     WHERE k.revoked_at IS NOT NULL OR (k.expires_at IS NOT NULL AND k.expires_at < $1))",
                )
                .bind(now)
                .execute(&self.pool)
                .await?;
                let rows = sqlx::query(
                    "SELECT token_id, user_id, issuer, subject, key_id, nonce, ciphertext, refresh_due \
                     FROM sso_sessions WHERE refresh_due <= $1 ORDER BY refresh_due LIMIT $2",
                )
                .bind(now)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(sso_session_from_row).collect()
            }

            async fn claim_sso_session(
                &self,
                token: TokenId,
                due: DateTime<Utc>,
                next: DateTime<Utc>,
            ) -> StoreResult<bool> {
                let claimed = sqlx::query(
                    "UPDATE sso_sessions SET refresh_due = $3 WHERE token_id = $1 AND refresh_due = $2",
                )
                .bind(token.0)
                .bind(due)
                .bind(next)
                .execute(&self.pool)
                .await?;
                Ok(claimed.rows_affected() == 1)
            }

            async fn set_sso_refresh(
                &self,
                token: TokenId,
                refresh: Option<&Sealed>,
            ) -> StoreResult<()> {
                sqlx::query(
                    "UPDATE sso_sessions SET key_id = $2, nonce = $3, ciphertext = $4 WHERE token_id = $1",
                )
                .bind(token.0)
                .bind(refresh.map(|s| s.key_id.as_str()))
                .bind(refresh.map(|s| s.nonce.as_slice()))
                .bind(refresh.map(|s| s.ciphertext.as_slice()))
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn end_sso_session(&self, token: TokenId) -> StoreResult<()> {
                sqlx::query("DELETE FROM sso_sessions WHERE token_id = $1")
                    .bind(token.0)
                    .execute(&self.pool)
                    .await?;
                match self.revoke_token(token).await {
                    Ok(_) | Err(StoreError::NotFound) => Ok(()),
                    Err(err) => Err(err),
                }
            }
        }
    };
}
pub(super) use impl_sso_store;
