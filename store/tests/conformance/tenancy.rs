//! Tenants, users and tokens: unique names, quotas, users scoped to their tenant, tokens found by
//! their hash and revoked.

use super::*;

pub async fn tenants_have_unique_names_and_quotas(db: &TestDb) {
    let store = db.store.as_ref();
    let vision = store
        .create_tenant(&NewTenant {
            name: "vision".into(),
            quota: Quota {
                guaranteed_gpus: 8,
                max_gpus: Some(16),
                flavours: Vec::new(),
            },
        })
        .await
        .unwrap();
    assert_eq!(
        vision.quota,
        Quota {
            guaranteed_gpus: 8,
            max_gpus: Some(16),
            flavours: Vec::new(),
        }
    );
    let duplicate = store
        .create_tenant(&NewTenant {
            name: "vision".into(),
            quota: Quota::default(),
        })
        .await;
    assert!(
        matches!(duplicate, Err(StoreError::Conflict { field: "name", .. })),
        "{duplicate:?}"
    );
    tenant(store, "nlp").await;
    let names: Vec<String> = store
        .list_tenants()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["nlp", "vision"]);
    let updated = store
        .set_tenant_quota(
            vision.id,
            Quota {
                guaranteed_gpus: 4,
                max_gpus: None,
                flavours: vec![FlavourQuota {
                    gpu_model: "v100".into(),
                    guaranteed_gpus: 2,
                    max_gpus: Some(6),
                    lending_limit: Some(1),
                }],
            },
        )
        .await
        .unwrap();
    assert_eq!(updated.quota.max_gpus, None);
    let read = store.get_tenant_by_name("vision").await.unwrap().quota;
    assert_eq!(read.guaranteed_gpus, 4);
    assert_eq!(read, updated.quota, "the quota per GPU model round-trips");
    assert_eq!(read.flavours[0].lending_limit, Some(1));
    assert!(matches!(
        store.get_tenant(TenantId::new()).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store
            .set_tenant_quota(TenantId::new(), Quota::default())
            .await,
        Err(StoreError::NotFound)
    ));
}

pub async fn users_are_unique_per_tenant_and_scoped(db: &TestDb) {
    let store = db.store.as_ref();
    let a = tenant(store, "a").await;
    let b = tenant(store, "b").await;
    let alice = user(store, a.id, "alice", Role::Admin).await;
    assert_eq!(alice.tenant_name, "a");
    assert_eq!(alice.role, Role::Admin);
    // The same name in another tenant is a different user; in the same tenant a conflict.
    user(store, b.id, "alice", Role::Viewer).await;
    let twin = store
        .create_user(&NewUser {
            tenant_id: a.id,
            name: "alice".into(),
            role: Role::Member,
            cluster_admin: false,
        })
        .await;
    assert!(matches!(twin, Err(StoreError::Conflict { .. })), "{twin:?}");
    let orphan = store
        .create_user(&NewUser {
            tenant_id: TenantId::new(),
            name: "x".into(),
            role: Role::Member,
            cluster_admin: false,
        })
        .await;
    assert!(matches!(orphan, Err(StoreError::NotFound)), "{orphan:?}");
    assert!(matches!(
        store.get_user(Scope::Tenant(b.id), alice.id).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        store.get_user(Scope::Tenant(a.id), alice.id).await.unwrap(),
        alice
    );
    assert_eq!(
        store.list_users(Scope::Tenant(a.id)).await.unwrap().len(),
        1
    );
    assert_eq!(store.list_users(Scope::Cluster).await.unwrap().len(), 2);
    assert_eq!(store.first_cluster_admin().await.unwrap(), None);
    let root = store
        .create_user(&NewUser {
            tenant_id: a.id,
            name: "root".into(),
            role: Role::Admin,
            cluster_admin: true,
        })
        .await
        .unwrap();
    assert_eq!(store.first_cluster_admin().await.unwrap(), Some(root));
}

pub async fn tokens_are_found_by_hash_and_revoked(db: &TestDb) {
    let store = db.store.as_ref();
    let (tenant, alice) = fixture(store, "t").await;
    let expiry = Utc::now() + Duration::days(1);
    let token = store
        .create_token(&NewToken {
            user_id: alice.id,
            name: "ci".into(),
            token_hash: [7; 32],
            prefix: "drv_abc".into(),
            expires_at: Some(expiry),
            parent: None,
        })
        .await
        .unwrap();
    let found = store
        .find_token(&[7; 32])
        .await
        .unwrap()
        .expect("token found by hash");
    assert_eq!(found.token.id, token.id);
    assert_eq!(found.user.id, alice.id);
    assert_eq!(found.user.tenant_name, tenant.name);
    assert_eq!(
        found.token.expires_at.map(|e| e.timestamp_millis()),
        Some(expiry.timestamp_millis())
    );
    assert!(store.find_token(&[8; 32]).await.unwrap().is_none());
    let revoked = store.revoke_token(token.id).await.unwrap();
    assert!(revoked.revoked_at.is_some());
    let again = store.revoke_token(token.id).await.unwrap();
    assert_eq!(
        again.revoked_at, revoked.revoked_at,
        "revoking twice keeps the first time"
    );
    assert!(
        store
            .find_token(&[7; 32])
            .await
            .unwrap()
            .unwrap()
            .token
            .revoked_at
            .is_some()
    );
    assert_eq!(store.list_tokens(alice.id).await.unwrap().len(), 1);
    let twin = store
        .create_token(&NewToken {
            user_id: alice.id,
            name: "x".into(),
            token_hash: [7; 32],
            prefix: "p".into(),
            expires_at: None,
            parent: None,
        })
        .await;
    assert!(matches!(twin, Err(StoreError::Conflict { .. })));
}

/// A token minted with another (a dashboard session, a token made through the API) is revoked with
/// it, and so is what it minted in turn; a token minted elsewhere is not.
pub async fn revoking_a_token_revokes_the_tokens_minted_from_it(db: &TestDb) {
    let store = db.store.as_ref();
    let (_, alice) = fixture(store, "t").await;
    let mint = |hash: u8, parent: Option<drover_core::TokenId>| NewToken {
        user_id: alice.id,
        name: format!("t{hash}"),
        token_hash: [hash; 32],
        prefix: format!("drv_{hash}"),
        expires_at: None,
        parent,
    };
    let root = store.create_token(&mint(1, None)).await.unwrap();
    let session = store.create_token(&mint(2, Some(root.id))).await.unwrap();
    let minted_by_session = store
        .create_token(&mint(3, Some(session.id)))
        .await
        .unwrap();
    let unrelated = store.create_token(&mint(4, None)).await.unwrap();
    let revoked = store.revoke_token(root.id).await.unwrap();
    assert!(revoked.revoked_at.is_some());
    for (token, hash) in [(&session, 2), (&minted_by_session, 3)] {
        let found = store.find_token(&[hash; 32]).await.unwrap().unwrap();
        assert_eq!(found.token.id, token.id);
        assert!(
            found.token.revoked_at.is_some(),
            "{} revoked with its parent",
            token.name
        );
    }
    let other = store.find_token(&[4; 32]).await.unwrap().unwrap();
    assert_eq!(other.token.id, unrelated.id);
    assert!(other.token.revoked_at.is_none());
    // Revoking a descendant leaves its ancestors alone.
    let fresh = store.create_token(&mint(5, None)).await.unwrap();
    let child = store.create_token(&mint(6, Some(fresh.id))).await.unwrap();
    store.revoke_token(child.id).await.unwrap();
    assert!(
        store
            .get_token(fresh.id)
            .await
            .unwrap()
            .revoked_at
            .is_none()
    );
}
