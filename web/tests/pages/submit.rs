//! The submit page: a job's or an experiment's field errors beside the editor, the text kept.

use super::*;

#[tokio::test]
async fn the_submit_form_shows_the_field_error_and_keeps_the_text() {
    let (site, [ada, _, _]) = Site::new().await;
    let session = site.sign_in(&ada).await;
    let bad = JOB
        .replace("NAME", "bad")
        .replace("min: 1, max: 1", "min: 3, max: 1");
    let answer = site.submit(&session, &bad).await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        answer.body.contains("spec.resources.workers"),
        "{}",
        answer.body
    );
    assert!(answer.body.contains("min: 3, max: 1"), "the text is kept");
    let broken = site.submit(&session, "spec: [unclosed").await;
    assert!(broken.status.is_client_error(), "{}", broken.body);
    assert!(broken.body.contains("submit-error"));
    let forged = site
        .form(
            "/submit",
            Some(&session),
            &[("_csrf", "x"), ("document", JOB)],
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    // Clone: the spec under a new name, ready to submit.
    let created = site
        .submit(&session, &JOB.replace("NAME", "original"))
        .await;
    let id = created.location.trim_start_matches("/jobs/");
    let clone = site.get(&format!("/submit?from={id}"), &session).await;
    assert!(
        clone.body.contains("generateName: original-"),
        "{}",
        clone.body
    );
    // The form's text as it stands (the default example, a clone) submits, and again: the server
    // names each job (a fixed name failed the second time, and the default one always, as the demo
    // took it).
    let form_text = |body: &str| {
        let start = body.find("<textarea").unwrap();
        let start = start + body[start..].find('>').unwrap() + 1;
        let end = body.find("</textarea>").unwrap();
        body[start..end]
            .replace("&quot;", "\"")
            .replace("&#x27;", "'")
            .replace("&#39;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&")
    };
    let default = form_text(&site.get("/submit", &session).await.body);
    for document in [form_text(&clone.body), default] {
        for _ in 0..2 {
            let answer = site.submit(&session, &document).await;
            assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
        }
    }
    // A field's path is said once, not twice ("spec.type: spec.type: …").
    let wrong = site
        .submit(
            &session,
            &JOB.replace("NAME", "typo")
                .replace("type: command", "type: nonsense"),
        )
        .await;
    assert_eq!(
        wrong.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        wrong.body
    );
    assert!(wrong.body.contains("spec.type"), "{}", wrong.body);
    assert!(
        !wrong.body.contains("spec.type: spec.type"),
        "{}",
        wrong.body
    );
    // An experiment submits from the same form and leads to its page (it was refused as "not a
    // DroverJob"); one with a mistake keeps its text and names the field.
    let experiment = include_str!("../../../examples/experiments/digits-asha.yaml");
    let answer = site.submit(&session, experiment).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    assert!(
        answer.location.starts_with("/experiments/"),
        "{}",
        answer.location
    );
    let page = site.get(&answer.location, &session).await;
    assert!(page.body.contains("digits-asha"), "{}", page.body);
    let bad_search = experiment
        .replacen("digits-asha", "digits-asha-2", 1)
        .replacen("searcher:", "searcher_typo:", 1);
    let refused = site.submit(&session, &bad_search).await;
    assert!(refused.status.is_client_error(), "{}", refused.body);
    assert!(refused.body.contains("searcher_typo"), "{}", refused.body);
}
