//! Long-lived streams are shared out (issue #50, item 6), against a real server: one tenant's users
//! together hold at most the tenant's 64 followed logs, however many users its admin makes (33
//! users used to take all 512 of the server's); another tenant still follows its own job's log; past
//! the server's 512 a follow is refused with `503`, and the server goes on answering.

use crate::rest::{Rest, command_job};
use reqwest::{Method, StatusCode};
use serde_json::json;

const ADMIN: &str = crate::ADMIN;

/// Opens a followed log of `job` as `token`; the response is kept open (the stream) while held.
async fn follow(rest: &Rest, token: &str, job: &str) -> reqwest::Response {
    rest.http
        .get(format!("{}/api/v1/jobs/{job}/logs?follow=true", rest.url))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

/// The users of tenant `tenant` (made with `users` of them) open 16 followed logs each of a job of
/// their tenant; the streams that opened, and the statuses of those refused.
async fn crowd(
    rest: &Rest,
    tenant: &str,
    users: usize,
) -> (Vec<reqwest::Response>, Vec<StatusCode>) {
    let mut tokens = Vec::new();
    for i in 0..users {
        tokens.push(
            rest.user_token(ADMIN, tenant, json!({}), &format!("{tenant}-{i}"), "member")
                .await,
        );
    }
    let job = rest
        .submit(
            &tokens[0],
            command_job(&format!("{tenant}-job"), &["true"], 0),
        )
        .await;
    let (mut open, mut refused) = (Vec::new(), Vec::new());
    for token in &tokens {
        for _ in 0..16 {
            let reply = follow(rest, token, &job).await;
            if reply.status() == StatusCode::OK {
                open.push(reply);
            } else {
                refused.push(reply.status());
            }
        }
    }
    (open, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_users_cannot_take_every_stream_and_the_server_holds_its_ceiling() {
    // Every stream comes from this one address: a limit of descriptors under which the server keeps
    // 513 connections from one address (it keeps a quarter of a third of them per address).
    crate::allow_descriptors(8192);
    let server = crate::server(8192);
    let rest = Rest::new(&server.url);
    let (crowded, refused) = crowd(&rest, "crowd", 5).await;
    assert_eq!(crowded.len(), 64, "the tenant's share");
    assert_eq!(refused.len(), 16);
    assert!(refused.iter().all(|s| *s == StatusCode::TOO_MANY_REQUESTS));

    let quiet = rest
        .user_token(ADMIN, "quiet", json!({}), "quinn", "member")
        .await;
    let own = rest
        .submit(&quiet, command_job("quiet-job", &["true"], 0))
        .await;
    let held = follow(&rest, &quiet, &own).await;
    assert_eq!(
        held.status(),
        StatusCode::OK,
        "another tenant still follows"
    );

    // Seven more tenants of 64 each: 64 + 1 + 448 is one past the server's 512.
    let mut streams = vec![held];
    streams.extend(crowded);
    let mut over = Vec::new();
    for t in 0..7 {
        let (open, refused) = crowd(&rest, &format!("tenant-{t}"), 4).await;
        streams.extend(open);
        over.extend(refused);
    }
    assert_eq!(streams.len(), 512, "the server's ceiling");
    assert_eq!(over, [StatusCode::SERVICE_UNAVAILABLE]);
    // The server answers all the same, and a closed stream frees its place.
    let listed = rest.ok(Method::GET, "/api/v1/jobs", &quiet, None).await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1);
    drop(streams.pop());
    let mut reopened = None;
    for _ in 0..50 {
        let reply = follow(&rest, &quiet, &own).await;
        if reply.status() == StatusCode::OK {
            reopened = Some(reply);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(reopened.is_some(), "a freed place was never reused");
}
