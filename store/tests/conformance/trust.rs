//! Executor enrolment: tokens are spent once per enrolment, a name enrols once until revoked, and a
//! revoked credential is told apart from an unknown one.

use super::{tenant, user};
use chrono::{Duration, Utc};
use drover_core::Role;
use drover_store::testing::TestDb;
use drover_store::*;

fn credential(node: &str, secret: u8) -> NewNodeCredential {
    NewNodeCredential {
        node_name: node.to_owned(),
        credential_hash: [secret; 32],
        prefix: format!("drn_{secret}"),
    }
}

async fn mint(store: &dyn Store, by: &User, secret: u8, uses: u32, expired: bool) -> [u8; 32] {
    let hash = [secret; 32];
    store
        .create_enrollment_token(&NewEnrollmentToken {
            name: format!("token-{secret}"),
            token_hash: hash,
            prefix: format!("dre_{secret}"),
            uses,
            created_by: by.id,
            expires_at: Some(
                Utc::now()
                    + if expired {
                        -Duration::hours(1)
                    } else {
                        Duration::hours(1)
                    },
            ),
            node_name: None,
        })
        .await
        .unwrap();
    hash
}

pub(crate) async fn enrolment_spends_tokens_and_binds_node_names(db: &TestDb) {
    let store = db.store.as_ref();
    let ops = tenant(store, "ops").await;
    let root = user(store, ops.id, "root", Role::Admin).await;
    let once = mint(store, &root, 1, 1, false).await;

    let first = store
        .enroll_node(EnrolWith::Token(&once), &credential("gpu-01", 101))
        .await
        .unwrap();
    let Enrolment::Enrolled(record) = first else {
        panic!("not enrolled: {first:?}")
    };
    assert_eq!(
        (record.node_name.as_str(), record.enrolled_with.as_str()),
        ("gpu-01", "token-1")
    );
    // Spent: the one use is gone.
    assert_eq!(
        store
            .enroll_node(EnrolWith::Token(&once), &credential("gpu-02", 102))
            .await
            .unwrap(),
        Enrolment::TokenRefused
    );
    let listed = store.list_enrollment_tokens().await.unwrap();
    assert_eq!(listed[0].uses_left, 0);

    // A name with a live credential is refused, and the refusal spends nothing.
    let twice = mint(store, &root, 2, 2, false).await;
    assert_eq!(
        store
            .enroll_node(EnrolWith::Token(&twice), &credential("gpu-01", 103))
            .await
            .unwrap(),
        Enrolment::NameTaken
    );
    assert_eq!(
        store
            .enroll_node(EnrolWith::Server, &credential("gpu-01", 104))
            .await
            .unwrap(),
        Enrolment::NameTaken
    );
    let uses_left = |tokens: Vec<EnrollmentToken>| {
        tokens
            .into_iter()
            .find(|t| t.name == "token-2")
            .unwrap()
            .uses_left
    };
    assert_eq!(uses_left(store.list_enrollment_tokens().await.unwrap()), 2);

    // Expired, revoked and unknown tokens enrol nobody.
    let stale = mint(store, &root, 3, 5, true).await;
    assert_eq!(
        store
            .enroll_node(EnrolWith::Token(&stale), &credential("gpu-03", 105))
            .await
            .unwrap(),
        Enrolment::TokenRefused
    );
    let revoked_id = store
        .list_enrollment_tokens()
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == "token-2")
        .unwrap()
        .id;
    store.revoke_enrollment_token(revoked_id).await.unwrap();
    assert_eq!(
        store
            .enroll_node(EnrolWith::Token(&twice), &credential("gpu-03", 106))
            .await
            .unwrap(),
        Enrolment::TokenRefused
    );
    assert_eq!(
        store
            .enroll_node(EnrolWith::Token(&[9; 32]), &credential("gpu-03", 107))
            .await
            .unwrap(),
        Enrolment::TokenRefused
    );
    assert!(matches!(
        store.revoke_enrollment_token(uuid::Uuid::now_v7()).await,
        Err(StoreError::NotFound)
    ));

    // Revoking the node's credential frees its name; the old credential stays known, as revoked.
    assert_eq!(store.revoke_node_credentials("gpu-01").await.unwrap(), 1);
    assert_eq!(store.revoke_node_credentials("gpu-01").await.unwrap(), 0);
    let old = store
        .find_node_credential(&[101; 32])
        .await
        .unwrap()
        .unwrap();
    assert!(old.revoked_at.is_some());
    assert!(
        store
            .find_node_credential(&[200; 32])
            .await
            .unwrap()
            .is_none()
    );
    // A revoked name does not come back with the server's token or any token not minted for it.
    assert_eq!(
        store
            .enroll_node(EnrolWith::Server, &credential("gpu-01", 108))
            .await
            .unwrap(),
        Enrolment::NameRevoked
    );
    let any = mint(store, &root, 4, 5, false).await;
    assert_eq!(
        store
            .enroll_node(EnrolWith::Token(&any), &credential("gpu-01", 108))
            .await
            .unwrap(),
        Enrolment::NameRevoked
    );
    let bound_hash = [5; 32];
    store
        .create_enrollment_token(&NewEnrollmentToken {
            name: "for-gpu-01".to_owned(),
            token_hash: bound_hash,
            prefix: "dre_5".to_owned(),
            uses: 2,
            created_by: root.id,
            expires_at: None,
            node_name: Some("gpu-01".to_owned()),
        })
        .await
        .unwrap();
    assert_eq!(
        store
            .enroll_node(EnrolWith::Token(&bound_hash), &credential("gpu-09", 109))
            .await
            .unwrap(),
        Enrolment::TokenRefused,
        "a token minted for gpu-01 enrolled another node"
    );
    let again = store
        .enroll_node(EnrolWith::Token(&bound_hash), &credential("gpu-01", 108))
        .await
        .unwrap();
    assert!(
        matches!(again, Enrolment::Enrolled(ref r) if r.enrolled_with == "for-gpu-01"),
        "{again:?}"
    );
    let live = store.live_node_credentials().await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].prefix, "drn_108");
}

/// A node's first registration pins what it advertises; the pin stays whatever it claims later (the
/// gateway refuses more), and a new credential pins again.
pub(crate) async fn a_credential_pins_the_capacity_of_its_first_registration(db: &TestDb) {
    let store = db.store.as_ref();
    let enrolled = store
        .enroll_node(EnrolWith::Server, &credential("gpu-09", 109))
        .await
        .unwrap();
    assert!(matches!(enrolled, Enrolment::Enrolled(_)), "{enrolled:?}");
    let first = NodeCapacity {
        gpus: 2,
        gpu_memory_gb: 16.0,
        cpus: 8,
        memory_gb: 64,
    };
    assert_eq!(
        store.pin_node_capacity(&[109; 32], &first).await.unwrap(),
        first
    );
    let inflated = NodeCapacity {
        gpus: 8,
        gpu_memory_gb: 1e6,
        ..first
    };
    let pinned = store
        .pin_node_capacity(&[109; 32], &inflated)
        .await
        .unwrap();
    assert_eq!(pinned, first, "the first registration's capacity stays");
    let beyond = inflated.beyond(&pinned).unwrap();
    assert!(beyond.contains("8 GPUs (enrolled with 2)"), "{beyond}");
    assert!(first.beyond(&pinned).is_none());
    let fewer = NodeCapacity { gpus: 1, ..first };
    assert!(fewer.beyond(&pinned).is_none(), "a node may advertise less");
    assert!(matches!(
        store.pin_node_capacity(&[7; 32], &first).await,
        Err(StoreError::NotFound)
    ));
}

/// Replicas starting together each make an authority and keep theirs unless one is kept: all of
/// them end up with the first.
pub(crate) async fn the_first_gateway_authority_kept_is_the_one_every_replica_gets(db: &TestDb) {
    let store = db.store.as_ref();
    assert_eq!(store.gateway_authority().await.unwrap(), None);
    let sealed = |byte: u8| secrets::Sealed {
        key_id: format!("key-{byte}"),
        nonce: vec![byte; 12],
        ciphertext: vec![byte; 40],
    };
    let first = store
        .keep_gateway_authority("CERT A", &sealed(1))
        .await
        .unwrap();
    assert_eq!(first, ("CERT A".to_owned(), sealed(1)));
    let second = store
        .keep_gateway_authority("CERT B", &sealed(2))
        .await
        .unwrap();
    assert_eq!(second, first);
    assert_eq!(store.gateway_authority().await.unwrap(), Some(first));
}
