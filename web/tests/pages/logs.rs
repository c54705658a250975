//! A job's whole log: pages from either end, filters, search (bounded per page), download.

use super::*;

/// A job's whole log: the newest page first, earlier pages and the first lines by link, a task
/// filter, a search with its matches marked, contract lines hidden unless asked (on the job page's
/// tail too), a download of the filtered text, and another tenant's job not found. (The page showed
/// the last 200 lines, metric lines and all, with no way further back.)
#[tokio::test]
async fn the_whole_log_pages_back_searches_and_hides_metric_lines() {
    use drover_store::NewLogLine;
    let (site, [ada, _, bob]) = Site::new().await;
    let session = site.sign_in(&ada).await;
    let created = site.submit(&session, &JOB.replace("NAME", "chatty")).await;
    let job = job_of(&created);
    let key = site.start_worker(job).await;
    // 1,200 lines, every tenth a metrics line, every hundredth on standard error.
    let lines: Vec<NewLogLine> = (0..1200)
        .map(|n| NewLogLine {
            stream: if n % 100 == 55 { "stderr" } else { "stdout" }.into(),
            line: if n % 10 == 3 {
                format!(r#"{{"drover": "metrics", "step": {n}, "values": {{"loss": 1.0}}}}"#)
            } else {
                format!("line {n:04} of the job")
            },
            logged_at: chrono::Utc::now(),
        })
        .collect();
    for chunk in lines.chunks(128) {
        site.store.append_logs(&key, chunk).await.unwrap();
    }
    // As the page escapes it.
    let contract = "&#34;drover&#34;: &#34;metrics&#34;";

    let page = site.get(&created.location, &session).await.body;
    assert!(page.contains("line 1199 of the job"), "{page}");
    assert!(!page.contains(contract), "the tail hides metric lines");
    let logs = format!("/jobs/{}/logs", job.0);
    assert!(page.contains(&format!("href=\"{logs}\"")), "{page}");

    // The newest 500 lines shown (contract lines left out), and a way back.
    let newest = site.get(&logs, &session).await;
    assert_eq!(newest.status, StatusCode::OK);
    let body = &newest.body;
    assert!(body.contains("line 1199 of the job") && !body.contains(contract));
    assert!(
        !body.contains("line 0000 of the job"),
        "only the newest page"
    );
    assert!(body.contains("The newest 500 lines."), "{body}");
    assert!(body.contains("class=\"log-stderr\""), "stderr marked");
    let earlier = site.get(&link_to(body, "← Earlier"), &session).await.body;
    assert!(earlier.contains("line 0644 of the job"), "{earlier}");
    assert!(!earlier.contains("line 1199 of the job"));
    assert!(earlier.contains("Later →"), "{earlier}");
    let first = site
        .get(&link_to(body, "⇤ First lines"), &session)
        .await
        .body;
    assert!(first.contains("line 0000 of the job") && first.contains("The first 500 lines."));

    // A search (ASCII case ignored), its matches marked; metric lines on request.
    let found = site.get(&format!("{logs}?q=LINE+077"), &session).await.body;
    assert!(
        found.contains("<mark>line 077</mark>0 of the job"),
        "{found}"
    );
    assert_eq!(found.matches("<mark>").count(), 9, "0770-0779 but 0773");
    let with_metrics = site
        .get(&format!("{logs}?metrics=true"), &session)
        .await
        .body;
    assert!(with_metrics.contains(contract), "{with_metrics}");
    // Another task's lines: none. A task that cannot be: said, the newest lines shown.
    let other = site
        .get(&format!("{logs}?task=worker-1"), &session)
        .await
        .body;
    assert!(other.contains("No line matches this filter."), "{other}");
    let bad = site.get(&format!("{logs}?task=gpu-1"), &session).await.body;
    assert!(bad.contains("task: `gpu-1` is not a task"), "{bad}");
    assert!(bad.contains("line 1199 of the job"));

    // The download: every shown line as text, filtered like the page.
    let text = site
        .get(
            &format!("/api/v1/jobs/{}/logs?format=text", job.0),
            &session,
        )
        .await;
    assert_eq!(text.status, StatusCode::OK);
    assert_eq!(
        text.body.lines().count(),
        1080,
        "1,200 less 120 metric lines"
    );
    assert!(
        text.body
            .lines()
            .next()
            .unwrap()
            .ends_with("[g1 worker-0] line 0000 of the job")
    );
    let searched = site
        .get(
            &format!("/api/v1/jobs/{}/logs?format=text&q=line+11", job.0),
            &session,
        )
        .await;
    assert_eq!(searched.body.lines().count(), 90, "{}", searched.body);

    // Another tenant's member: no such job.
    let bob = site.sign_in(&bob).await;
    assert_eq!(site.get(&logs, &bob).await.status, StatusCode::NOT_FOUND);
}

/// A search of a long log reads a span of lines a page, says so, and goes on from where it stopped
/// (it read the whole log for every page: 0.4 s at 100,000 lines).
#[tokio::test]
async fn a_search_of_a_long_log_reads_a_span_a_page_and_goes_on() {
    use drover_service::logs::SEARCH_SPAN;
    use drover_store::NewLogLine;
    let (site, [ada, _, _]) = Site::new().await;
    let session = site.sign_in(&ada).await;
    let created = site
        .submit(&session, &JOB.replace("NAME", "long-log"))
        .await;
    let job = job_of(&created);
    let key = site.start_worker(job).await;
    // The needle is among the first lines only, more than a span from the end.
    let total = SEARCH_SPAN as usize + 1_000;
    let lines: Vec<NewLogLine> = (0..total)
        .map(|n| NewLogLine {
            stream: "stdout".into(),
            line: if n == 7 {
                "a rare needle".to_owned()
            } else {
                format!("step {n}")
            },
            logged_at: chrono::Utc::now(),
        })
        .collect();
    for chunk in lines.chunks(1_000) {
        site.store.append_logs(&key, chunk).await.unwrap();
    }
    let logs = format!("/jobs/{}/logs", job.0);
    let newest = site.get(&format!("{logs}?q=NEEDLE"), &session).await.body;
    assert!(newest.contains("No line matches this filter."), "{newest}");
    assert!(
        newest.contains("A search reads 25,000 lines a page: earlier lines are not searched yet"),
        "{newest}"
    );
    let earlier = site
        .get(&link_to(&newest, "← Earlier"), &session)
        .await
        .body;
    assert!(earlier.contains("a rare <mark>needle</mark>"), "{earlier}");
    assert!(
        !earlier.contains("not searched yet"),
        "the rest is read to the first line"
    );
    assert!(earlier.contains("Later →"), "{earlier}");

    // Through the API, the same from the first line forwards: the cursor goes on past the span.
    let api = format!("/api/v1/jobs/{}/logs", job.0);
    let forward = site
        .get(&format!("{api}?q=step+2&cursor=100"), &session)
        .await;
    assert_eq!(forward.status, StatusCode::OK);
    let page: serde_json::Value = serde_json::from_str(&forward.body).unwrap();
    assert_eq!(page["logs"].as_array().unwrap().len(), 1000, "{page}");
    let none: serde_json::Value = serde_json::from_str(
        &site
            .get(&format!("{api}?q=needle&cursor=100"), &session)
            .await
            .body,
    )
    .unwrap();
    assert!(none["logs"].as_array().unwrap().is_empty(), "{none}");
    assert_eq!(
        none["meta"]["more"], true,
        "lines past the span are not searched yet"
    );
    let next: i64 = none["meta"]["next_cursor"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(next > 100 + i64::from(SEARCH_SPAN) - 10, "{none}");
    let rest: serde_json::Value = serde_json::from_str(
        &site
            .get(&format!("{api}?q=needle&cursor={next}"), &session)
            .await
            .body,
    )
    .unwrap();
    assert!(rest["logs"].as_array().unwrap().is_empty());
    assert_eq!(rest["meta"]["more"], false, "{rest}");
}
