//! Single sign-on's rows: a sign-in's state spent once, identities linked to one user per tenant
//! (never over an existing user's name), unlinking revokes the user's tokens, and sessions due for a
//! refresh taken by one replica only.

use super::*;

fn sealed(byte: u8) -> secrets::Sealed {
    secrets::Sealed {
        key_id: "k1".to_owned(),
        nonce: vec![byte; 12],
        ciphertext: vec![byte; 30],
    }
}

async fn token_for(store: &dyn Store, user: UserId, byte: u8) -> TokenInfo {
    store
        .create_token(&NewToken {
            user_id: user,
            name: "session".to_owned(),
            token_hash: [byte; 32],
            prefix: "drv_x".to_owned(),
            expires_at: Some(Utc::now() + Duration::hours(1)),
            parent: None,
        })
        .await
        .unwrap()
}

pub(crate) async fn single_sign_on_spends_states_and_links_identities(db: &TestDb) {
    let store = db.store.as_ref();
    // A sign-in's state is found once.
    let login = NewSsoLogin {
        state_hash: [9; 32],
        nonce: "n".to_owned(),
        pkce_verifier: "v".to_owned(),
        next: "/jobs".to_owned(),
        expires_at: Utc::now() + Duration::minutes(10),
    };
    store.begin_sso_login(&login).await.unwrap();
    let taken = store.take_sso_login(&[9; 32]).await.unwrap().unwrap();
    assert_eq!((taken.nonce.as_str(), taken.next.as_str()), ("n", "/jobs"));
    assert_eq!(store.take_sso_login(&[9; 32]).await.unwrap(), None);
    // Expired sign-ins are forgotten when the next one starts.
    store
        .begin_sso_login(&NewSsoLogin {
            state_hash: [1; 32],
            expires_at: Utc::now() - Duration::minutes(1),
            ..login.clone()
        })
        .await
        .unwrap();
    store
        .begin_sso_login(&NewSsoLogin {
            state_hash: [2; 32],
            ..login.clone()
        })
        .await
        .unwrap();
    assert_eq!(store.take_sso_login(&[1; 32]).await.unwrap(), None);

    // One user per tenant, linked in the same transaction that creates it.
    let vision = tenant(store, "vision").await;
    let speech = tenant(store, "speech").await;
    let existing = user(store, vision.id, "alice", Role::Admin).await;
    let new = |tenant: TenantId, name: &str| NewUser {
        tenant_id: tenant,
        name: name.to_owned(),
        role: Role::Member,
        cluster_admin: false,
    };
    // Never over a user made otherwise.
    assert!(matches!(
        store
            .link_sso_user("https://idp", "sub-1", &new(vision.id, "alice"))
            .await,
        Err(StoreError::Conflict { field: "name", .. })
    ));
    assert!(
        store
            .sso_links("https://idp", "sub-1")
            .await
            .unwrap()
            .is_empty()
    );
    let linked = store
        .link_sso_user("https://idp", "sub-1", &new(vision.id, "alice-1"))
        .await
        .unwrap();
    assert_eq!(linked.role, Role::Member);
    assert_ne!(linked.id, existing.id);
    assert!(matches!(
        store
            .link_sso_user("https://idp", "sub-1", &new(vision.id, "alice-2"))
            .await,
        Err(StoreError::Conflict {
            field: "subject",
            ..
        })
    ));
    let in_speech = store
        .link_sso_user("https://idp", "sub-1", &new(speech.id, "alice"))
        .await
        .unwrap();
    let links = store.sso_links("https://idp", "sub-1").await.unwrap();
    assert_eq!(
        links,
        vec![
            SsoLink {
                tenant_id: vision.id,
                user_id: linked.id
            },
            SsoLink {
                tenant_id: speech.id,
                user_id: in_speech.id
            },
        ]
    );
    let promoted = store
        .set_user_role(linked.id, Role::Admin, true)
        .await
        .unwrap();
    assert!(promoted.cluster_admin && promoted.role == Role::Admin);

    // Sessions: due ones are listed, claimed by one replica only, and end with their tokens.
    let session_token = token_for(store, linked.id, 5).await;
    let due = Utc::now() - Duration::seconds(1);
    store
        .keep_sso_session(&SsoSession {
            token_id: session_token.id,
            user_id: linked.id,
            issuer: "https://idp".to_owned(),
            subject: "sub-1".to_owned(),
            refresh: Some(sealed(3)),
            refresh_due: due,
        })
        .await
        .unwrap();
    let listed = store.due_sso_sessions(Utc::now(), 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].refresh, Some(sealed(3)));
    let next = Utc::now() + Duration::minutes(5);
    assert!(
        store
            .claim_sso_session(session_token.id, listed[0].refresh_due, next)
            .await
            .unwrap()
    );
    assert!(
        !store
            .claim_sso_session(session_token.id, listed[0].refresh_due, next)
            .await
            .unwrap()
    );
    assert!(
        store
            .due_sso_sessions(Utc::now(), 10)
            .await
            .unwrap()
            .is_empty()
    );
    store
        .set_sso_refresh(session_token.id, Some(&sealed(4)))
        .await
        .unwrap();

    // Unlinking revokes every token of the user and forgets its sessions.
    let other_token = token_for(store, linked.id, 6).await;
    assert_eq!(
        store
            .unlink_sso_user("https://idp", "sub-1", vision.id)
            .await
            .unwrap(),
        Some(linked.id)
    );
    assert_eq!(
        store
            .unlink_sso_user("https://idp", "sub-1", vision.id)
            .await
            .unwrap(),
        None
    );
    for token in [session_token.id, other_token.id] {
        assert!(store.get_token(token).await.unwrap().revoked_at.is_some());
    }
    assert_eq!(
        store.sso_links("https://idp", "sub-1").await.unwrap().len(),
        1
    );

    // A session whose token was revoked is forgotten when the due ones are read.
    let speech_token = token_for(store, in_speech.id, 7).await;
    store
        .keep_sso_session(&SsoSession {
            token_id: speech_token.id,
            user_id: in_speech.id,
            issuer: "https://idp".to_owned(),
            subject: "sub-1".to_owned(),
            refresh: None,
            refresh_due: due,
        })
        .await
        .unwrap();
    store.end_sso_session(speech_token.id).await.unwrap();
    assert!(
        store
            .get_token(speech_token.id)
            .await
            .unwrap()
            .revoked_at
            .is_some()
    );
    assert!(
        store
            .due_sso_sessions(Utc::now(), 10)
            .await
            .unwrap()
            .is_empty()
    );
}
