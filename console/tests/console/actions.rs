//! The actions: CSRF and Sec-Fetch-Site first, then the read-only flag,
//! then what each does.

use a2_store::prelude::*;
use axum::body::Body;
use axum::http::{Request, StatusCode};

use crate::common::*;

/// A form's fields.
type Form = Vec<(&'static str, &'static str)>;

/// Every action route with a form that would be valid with writes allowed.
fn every_action() -> Vec<(&'static str, Form)> {
    vec![
        (
            "/sessions/chat-1/redrive",
            vec![
                ("consumer", "agent"),
                ("lane", "main"),
                ("index", "1"),
                ("action", "retry"),
            ],
        ),
        (
            "/redrive-all",
            vec![("consumer", "agent"), ("action", "retry")],
        ),
        ("/sessions/chat-1/pause", vec![("consumer", "agent")]),
        ("/sessions/chat-1/resume", vec![("consumer", "agent")]),
        (
            "/sessions/chat-2/reschedule",
            vec![
                ("consumer", "agent"),
                ("lane", "main"),
                ("index", "1"),
                ("cancel", "1"),
            ],
        ),
        ("/sessions/chat-1/fork", vec![("into", "chat-1-b")]),
        ("/sessions/chat-1/clear", vec![]),
        ("/sessions/chat-1/delete", vec![("force", "1")]),
        ("/logout", vec![]),
    ]
}

#[tokio::test]
async fn read_only_refuses_every_action_after_the_csrf_check() {
    let store = populated().await;
    let app = app(&store, options());
    for (route, form) in every_action() {
        if route == "/logout" {
            continue; // logging out writes nothing to the store
        }
        let reply = post_from(&app, "/sessions/chat-1", route, &form).await;
        assert_eq!(
            reply.status,
            StatusCode::FORBIDDEN,
            "{route}: {}",
            reply.body
        );
        assert!(reply.body.contains("data-testid=\"refused\""), "{route}");
        assert!(reply
            .body
            .contains("read-only: start the console with --allow-writes"));
        reply.assert_safe();
    }
    // Nothing changed.
    assert_eq!(store.dead_letters("chat-1").await.unwrap().len(), 1);
    assert!(store.pauses(None).await.unwrap().is_empty());
    assert_eq!(
        store.sessions(ListSessions::default()).await.unwrap().len(),
        2
    );
}

#[tokio::test]
async fn csrf_is_checked_before_anything() {
    let store = populated().await;
    for options in [options(), writable()] {
        let app = app(&store, options);
        let token = get(&app, "/sessions/chat-1").await.csrf();
        for (route, form) in every_action() {
            // Missing token.
            let reply = post(&app, route, &form).await;
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "{route}");
            assert!(
                reply.body.contains("data-testid=\"csrf\""),
                "{route}: {}",
                reply.body
            );
            // Wrong token.
            let mut wrong = form.clone();
            wrong.push(("csrf", "00ff"));
            let reply = post(&app, route, &wrong).await;
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "{route}");
            assert!(reply.body.contains("data-testid=\"csrf\""));
            // Right token, from another site.
            let mut right = form.clone();
            right.push(("csrf", &token));
            let request = form_request(route)
                .header("sec-fetch-site", "cross-site")
                .body(Body::from(encode(&right)))
                .unwrap();
            let reply = send(&app, request).await;
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "{route}");
            assert!(reply.body.contains("another site"));
        }
    }
    assert_eq!(store.dead_letters("chat-1").await.unwrap().len(), 1);
    assert_eq!(
        store.sessions(ListSessions::default()).await.unwrap().len(),
        2
    );
}

#[tokio::test]
async fn actions_answer_get_with_405() {
    let store = populated().await;
    let app = app(&store, writable());
    for route in [
        "/sessions/chat-1/redrive",
        "/sessions/chat-1/pause",
        "/sessions/chat-1/clear",
        "/sessions/chat-1/fork",
    ] {
        let reply = get(&app, route).await;
        assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED, "{route}");
    }
}

#[tokio::test]
async fn redrive_one_head_lane_exact() {
    let store = populated().await;
    let app = app(&store, writable());
    let reply = post_from(
        &app,
        "/sessions/chat-1",
        "/sessions/chat-1/redrive",
        &[
            ("consumer", "agent"),
            ("lane", "main"),
            ("index", "1"),
            ("action", "retry"),
            ("incarnation", "1"),
        ],
    )
    .await;
    // The incarnation may differ from 1; a wrong one is refused as SESSION_DELETED.
    if reply.status == StatusCode::GONE {
        assert!(reply.body.contains("SESSION_DELETED"));
        let incarnation = store.dead_letters("chat-1").await.unwrap()[0]
            .incarnation
            .to_string();
        let reply = post_from(
            &app,
            "/sessions/chat-1",
            "/sessions/chat-1/redrive",
            &[
                ("consumer", "agent"),
                ("lane", "main"),
                ("index", "1"),
                ("action", "retry"),
                ("incarnation", &incarnation),
            ],
        )
        .await;
        let page = follow(&app, &reply).await;
        assert!(page.body.contains("data-testid=\"flash\""), "{}", page.body);
    } else {
        let page = follow(&app, &reply).await;
        assert!(page.body.contains("data-testid=\"flash\""));
        assert!(
            page.body.contains("retried #1 of agent/main"),
            "{}",
            page.body
        );
    }
    assert!(store.dead_letters("chat-1").await.unwrap().is_empty());
}

#[tokio::test]
async fn redrive_from_the_session_page_form() {
    let store = populated().await;
    let app = app(&store, writable());
    let page = get(&app, "/sessions/chat-1").await;
    // The dead letter's form carries its incarnation: submit what the page says.
    let incarnation = store.dead_letters("chat-1").await.unwrap()[0]
        .incarnation
        .to_string();
    assert!(page
        .body
        .contains(&format!("name=\"incarnation\" value=\"{incarnation}\"")));
    let reply = post(
        &app,
        "/sessions/chat-1/redrive",
        &[
            ("consumer", "agent"),
            ("lane", "main"),
            ("index", "1"),
            ("action", "skip"),
            ("incarnation", &incarnation),
            ("csrf", &page.csrf()),
        ],
    )
    .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
    assert!(reply.location().starts_with("/sessions/chat-1?flash="));
    assert!(store.dead_letters("chat-1").await.unwrap().is_empty());
    let cursors = store.cursors("chat-1").await.unwrap();
    assert_eq!(cursors[0].head, Some(2), "skipped past index 1");
}

#[tokio::test]
async fn bulk_redrive_preview_then_run() {
    let store = populated().await;
    messages(&store, "chat-3", 1).await;
    kill_head(&store, "chat-3", "boom").await;
    let app = app(&store, writable());
    let preview = get(&app, "/redrive-all?consumer=agent&action=retry").await;
    assert_eq!(preview.status, StatusCode::OK, "{}", preview.body);
    preview.assert_safe();
    assert!(preview.body.contains("data-testid=\"redrive-preview\""));
    assert!(
        preview.body.contains("2 heads in 2 sessions"),
        "{}",
        preview.body
    );
    assert!(preview.body.contains("data-testid=\"redrive-confirm\""));
    // The preview changed nothing.
    assert_eq!(store.dead_letters("chat-3").await.unwrap().len(), 1);
    let reply = post(
        &app,
        "/redrive-all",
        &[
            ("consumer", "agent"),
            ("action", "retry"),
            ("csrf", &preview.csrf()),
        ],
    )
    .await;
    let page = follow(&app, &reply).await;
    assert!(
        page.body.contains("retried 2 heads in 2 sessions"),
        "{}",
        page.body
    );
    assert!(store.dead_letters("chat-1").await.unwrap().is_empty());
    assert!(store.dead_letters("chat-3").await.unwrap().is_empty());
    // A lane that matches nothing.
    let preview = get(&app, "/redrive-all?consumer=agent&lane=other&action=skip").await;
    assert!(preview.body.contains("0 heads in 0 sessions"));
}

#[tokio::test]
async fn pause_and_resume() {
    let store = populated().await;
    let app = app(&store, writable());
    let reply = post_from(
        &app,
        "/sessions/chat-2",
        "/sessions/chat-2/pause",
        &[("consumer", "agent"), ("until", "+1h")],
    )
    .await;
    let page = follow(&app, &reply).await;
    assert!(page.body.contains("paused agent in this session"));
    assert!(page.body.contains("data-testid=\"pause\""));
    let pauses = store.pauses(Some("chat-2")).await.unwrap();
    assert_eq!(pauses.len(), 1);
    assert!(pauses[0].until_ms.is_some());
    let reply = post_from(
        &app,
        "/sessions/chat-2",
        "/sessions/chat-2/resume",
        &[("consumer", "agent")],
    )
    .await;
    let page = follow(&app, &reply).await;
    assert!(page.body.contains("resumed agent in this session"));
    assert!(store.pauses(None).await.unwrap().is_empty());
    // A bad time is a 400 page.
    let reply = post_from(
        &app,
        "/sessions/chat-2",
        "/sessions/chat-2/pause",
        &[("consumer", "agent"), ("until", "tomorrow-ish")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("is not a time"));
}

#[tokio::test]
async fn reschedule_and_cancel() {
    let store = memory().await;
    let reminder = NewEvent::new("remind", json!("later"))
        .with_target(Target::event("agent").delayed(std::time::Duration::from_secs(600)));
    store
        .append("r", vec![reminder.clone()], AppendOptions::default())
        .await
        .unwrap();
    store
        .append("r", vec![reminder], AppendOptions::default())
        .await
        .unwrap();
    let app = app(&store, writable());
    let page = get(&app, "/sessions/r").await;
    assert!(page.body.contains("data-testid=\"reschedule\""));
    let reply = post_from(
        &app,
        "/sessions/r",
        "/sessions/r/reschedule",
        &[("consumer", "agent"), ("index", "1"), ("at", "now")],
    )
    .await;
    let page = follow(&app, &reply).await;
    assert!(
        page.body.contains("#1 of agent is claimable now"),
        "{}",
        page.body
    );
    let reply = post_from(
        &app,
        "/sessions/r",
        "/sessions/r/reschedule",
        &[("consumer", "agent"), ("index", "2"), ("cancel", "1")],
    )
    .await;
    let page = follow(&app, &reply).await;
    assert!(page.body.contains("#2 of agent cancelled"), "{}", page.body);
    // Neither 'at' nor 'cancel'.
    let reply = post_from(
        &app,
        "/sessions/r",
        "/sessions/r/reschedule",
        &[("consumer", "agent"), ("index", "1")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn fork_clear_and_delete() {
    let store = populated().await;
    let app = app(&store, writable());
    let reply = post_from(
        &app,
        "/sessions/chat-1",
        "/sessions/chat-1/fork",
        &[("into", "chat-1 b/2"), ("through", "2")],
    )
    .await;
    assert_eq!(
        reply.location(),
        "/sessions/chat-1%20b%2F2?flash=forked+from+chat-1%3A+2+events+copied"
    );
    let page = follow(&app, &reply).await;
    assert_eq!(
        page.body.matches("data-testid=\"event\"").count(),
        2,
        "{}",
        page.body
    );

    // Clear only if nothing was appended since index 1: refused, nothing changes.
    let reply = post_from(
        &app,
        "/sessions/chat-2",
        "/sessions/chat-2/clear",
        &[("if_last_index", "7")],
    )
    .await;
    let page = follow(&app, &reply).await;
    assert!(page.body.contains("not cleared"));
    let reply = post_from(
        &app,
        "/sessions/chat-2",
        "/sessions/chat-2/clear",
        &[("if_last_index", "1")],
    )
    .await;
    let page = follow(&app, &reply).await;
    assert!(page.body.contains("cleared at #2"), "{}", page.body);

    // Delete: the confirmation page says what goes, then the POST deletes.
    let confirm = get(&app, "/sessions/chat-1/delete").await;
    assert_eq!(confirm.status, StatusCode::OK);
    confirm.assert_safe();
    assert!(confirm.body.contains("data-testid=\"delete-summary\""));
    assert!(confirm.body.contains("3 events"));
    assert!(confirm.body.contains("1 dead letters"));
    let reply = post(
        &app,
        "/sessions/chat-1/delete",
        &[("if_last_index", "3"), ("csrf", &confirm.csrf())],
    )
    .await;
    let page = follow(&app, &reply).await;
    assert!(
        page.body.contains("deleted chat-1: 3 events"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("data-session=\"chat-1\""));
    // A session still in use: refused without force, with its code.
    messages(&store, "busy", 1).await;
    let reply = post_from(&app, "/sessions/busy/delete", "/sessions/busy/delete", &[]).await;
    assert_eq!(reply.status, StatusCode::CONFLICT);
    assert!(reply.body.contains("SESSION_IN_USE"));
    let reply = post_from(
        &app,
        "/sessions/busy/delete",
        "/sessions/busy/delete",
        &[("force", "1")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn bad_action_parameters_answer_400_pages() {
    let store = populated().await;
    let app = app(&store, writable());
    let cases: Vec<(&str, Form, &str)> = vec![
        (
            "/sessions/chat-1/redrive",
            vec![("consumer", "agent"), ("index", "one"), ("action", "retry")],
            "whole number",
        ),
        (
            "/sessions/chat-1/redrive",
            vec![("consumer", "agent"), ("index", "1"), ("action", "bounce")],
            "unknown action",
        ),
        (
            "/sessions/chat-1/redrive",
            vec![("index", "1"), ("action", "retry")],
            "'consumer' is required",
        ),
        (
            "/sessions/chat-1/redrive",
            vec![("consumer", "agent"), ("action", "retry")],
            "'index' is required",
        ),
        (
            "/redrive-all",
            vec![("action", "retry")],
            "'consumer' is required",
        ),
        ("/sessions/chat-1/fork", vec![], "'into' is required"),
        (
            "/sessions/chat-1/clear",
            vec![("if_last_index", "-1")],
            "whole number",
        ),
        ("/sessions/chat-1/pause", vec![], "'consumer' is required"),
    ];
    for (route, form, says) in cases {
        let reply = post_from(&app, "/sessions/chat-1", route, &form).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{route} {form:?}: {}",
            reply.body
        );
        assert!(reply.body.contains(says), "{route}: {}", reply.body);
        reply.assert_safe();
    }
    // A body that is not a form at all.
    let token = get(&app, "/sessions/chat-1").await.csrf();
    let request = Request::post("/sessions/chat-1/fork")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("csrf={token}&%%%=\u{1}")))
        .unwrap();
    let reply = send(&app, request).await;
    assert!(reply.status.is_client_error());
    // A store refusal is a page with the code: fork into an existing session.
    let reply = post_from(
        &app,
        "/sessions/chat-1",
        "/sessions/chat-1/fork",
        &[("into", "chat-2")],
    )
    .await;
    assert!(reply.status.is_client_error(), "{}", reply.body);
    assert!(
        reply.body.contains("INVALID_INPUT") || reply.body.contains("Code"),
        "{}",
        reply.body
    );
}

#[tokio::test]
async fn flash_and_errors_are_escaped() {
    let store = populated().await;
    let app = app(&store, writable());
    let page = get(
        &app,
        "/sessions/chat-1?flash=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
    )
    .await;
    assert!(page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(!page.body.contains("<script>alert"));
    page.assert_safe();
    let reply = post_from(
        &app,
        "/sessions/chat-1",
        "/sessions/chat-1/pause",
        &[("consumer", "agent"), ("until", "<b>soon</b>")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("&lt;b&gt;soon&lt;/b&gt;"));
    assert!(!reply.body.contains("<b>soon"));
    // A session id with markup in it.
    messages(&store, "<img src=x>", 1).await;
    let page = get(&app, "/sessions/%3Cimg%20src%3Dx%3E").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("&lt;img src=x&gt;"));
    assert!(!page.body.contains("<img src=x>"));
    page.assert_safe();
}
