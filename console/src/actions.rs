//! The actions: POSTs only, each checked in this order before anything
//! else happens: the request comes from this site (`Sec-Fetch-Site`) and
//! carries the operator's CSRF token; writes are allowed. Each is logged
//! as a `tracing` event naming the action, the session and the operator.

use a2_store_api::{
    BulkRedrive, ClearRequest, ClearResult, DeleteSessionRequest, DeleteSessionResult, ForkRequest,
    NotBefore, PauseRequest, RedriveAction, RedriveRequest, RescheduleRequest, RescheduleResult,
    ResumeRequest, ScheduleChange, MAX_WORK_LIMIT,
};
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use subtle::ConstantTimeEq;

use crate::auth::see_other;
use crate::context::{Ctx, Failure, SessionId};
use crate::pages::parse_action;
use crate::params::{now_ms, parse_time, Params};
use crate::render::{session_path, url};

/// Pages of `redrive_all` one bulk action runs at most.
const BULK_PAGES: usize = 10;

/// Checks where the request comes from and its CSRF token; the form.
pub(crate) fn check_csrf(ctx: &Ctx, body: &[u8]) -> Result<Params, Failure> {
    let forbidden = |message: &str| {
        ctx.fail(StatusCode::FORBIDDEN, "Forbidden", message)
            .with_testid("csrf")
    };
    if let Some(site) = &ctx.sec_fetch_site {
        if site != "same-origin" {
            return Err(forbidden(
                "This action came from another site (Sec-Fetch-Site): refused.",
            ));
        }
    }
    let form = Params::parse_body(body).map_err(|e| ctx.bad(e))?;
    let given = form.get("csrf").unwrap_or("");
    if !bool::from(given.as_bytes().ct_eq(ctx.csrf.as_bytes())) {
        return Err(forbidden(
            "The form's CSRF token is missing or wrong: reload the page and try again.",
        ));
    }
    Ok(form)
}

/// The checks every action makes first: CSRF, then the read-only flag.
fn guard(ctx: &Ctx, body: &[u8]) -> Result<Params, Failure> {
    let form = check_csrf(ctx, body)?;
    if !ctx.options().allow_writes {
        return Err(ctx
            .fail(
                StatusCode::FORBIDDEN,
                "Refused",
                "read-only: start the console with --allow-writes",
            )
            .with_testid("refused"));
    }
    Ok(form)
}

fn log(ctx: &Ctx, action: &str, session: &str) {
    tracing::info!(action, session, operator = %ctx.operator, "a2-store console action");
}

/// Back to a session's page with a flash message.
fn back_to_session(ctx: &Ctx, id: &str, flash: &str) -> Response {
    let path = session_path("", id);
    see_other(&url(&ctx.base, &path, &[("flash", flash)]), None)
}

fn optional_lane(form: &Params) -> Option<String> {
    form.get("lane").map(str::to_owned)
}

/// `POST /sessions/{id}/redrive`: retry or skip one dead-lettered head, lane-exact.
pub(crate) async fn redrive(
    ctx: Ctx,
    SessionId(id): SessionId,
    body: Bytes,
) -> Result<Response, Failure> {
    let form = guard(&ctx, &body)?;
    let bad = |e: String| ctx.bad(e);
    let consumer = form.required("consumer").map_err(bad)?.to_owned();
    let index = form
        .u64("index")
        .map_err(bad)?
        .ok_or_else(|| ctx.bad("the field 'index' is required"))?;
    let action = parse_action(form.get("action")).map_err(bad)?;
    let incarnation = form.u64("incarnation").map_err(bad)?;
    let lane = optional_lane(&form);
    let mut request = RedriveRequest::new(id.clone(), consumer.clone(), index, action)
        .with_incarnation(incarnation);
    if let Some(lane) = &lane {
        request = request.on_lane(lane.clone());
    }
    log(&ctx, "redrive", &id);
    let result = ctx
        .store()
        .redrive(request)
        .await
        .map_err(|e| ctx.store_error(e))?;
    let what = format!(
        "{} #{index} of {}",
        if action == RedriveAction::Retry {
            "retried"
        } else {
            "skipped"
        },
        crate::render::cursor_name(&consumer, lane.as_deref())
    );
    let flash = if result.redriven {
        what
    } else {
        format!("nothing redriven: no dead letter at #{index} of {consumer}")
    };
    if form.get("back") == Some("dead-letters") {
        let target = url(
            &ctx.base,
            "/dead-letters",
            &[("consumer", &consumer), ("flash", &flash)],
        );
        return Ok(see_other(&target, None));
    }
    Ok(back_to_session(&ctx, &id, &flash))
}

/// `POST /redrive-all`: `redrive_all` a page at a time, up to [`BULK_PAGES`] pages.
pub(crate) async fn redrive_all(ctx: Ctx, body: Bytes) -> Result<Response, Failure> {
    let form = guard(&ctx, &body)?;
    let bad = |e: String| ctx.bad(e);
    let consumer = form.required("consumer").map_err(bad)?.to_owned();
    let action = parse_action(form.get("action")).map_err(bad)?;
    let lane = optional_lane(&form);
    let since = match form.get("since") {
        Some(text) => Some(parse_time(text, now_ms()).map_err(bad)?),
        None => None,
    };
    log(&ctx, "redrive_all", "*");
    let mut request = BulkRedrive::new(action);
    request.consumer = Some(consumer.clone());
    request.lane = lane.clone();
    request.dead_since_ms = since;
    request.limit = Some(MAX_WORK_LIMIT);
    let mut heads = 0usize;
    let mut sessions: Vec<String> = Vec::new();
    let mut more = false;
    for _ in 0..BULK_PAGES {
        let done = ctx
            .store()
            .redrive_all(request.clone())
            .await
            .map_err(|e| ctx.store_error(e))?;
        heads += done.redriven.len();
        for head in &done.redriven {
            if sessions.last() != Some(&head.session_id) && !sessions.contains(&head.session_id) {
                sessions.push(head.session_id.clone());
            }
        }
        more = done.more;
        if !more || done.redriven.is_empty() {
            break;
        }
    }
    let verb = if action == RedriveAction::Retry {
        "retried"
    } else {
        "skipped"
    };
    let mut flash = format!("{verb} {heads} heads in {} sessions", sessions.len());
    if more {
        flash.push_str("; more match: run it again");
    }
    let target = url(
        &ctx.base,
        "/dead-letters",
        &[
            ("consumer", &consumer),
            ("lane", lane.as_deref().unwrap_or("")),
            ("flash", &flash),
        ],
    );
    Ok(see_other(&target, None))
}

/// `POST /sessions/{id}/pause`: pause a consumer in this session.
pub(crate) async fn pause(
    ctx: Ctx,
    SessionId(id): SessionId,
    body: Bytes,
) -> Result<Response, Failure> {
    let form = guard(&ctx, &body)?;
    let bad = |e: String| ctx.bad(e);
    let consumer = form.required("consumer").map_err(bad)?.to_owned();
    let mut request = PauseRequest::in_session(consumer.clone(), id.clone());
    if let Some(until) = form.get("until") {
        request = request.with_until_ms(parse_time(until, now_ms()).map_err(bad)?);
    }
    log(&ctx, "pause", &id);
    ctx.store()
        .pause(request)
        .await
        .map_err(|e| ctx.store_error(e))?;
    Ok(back_to_session(
        &ctx,
        &id,
        &format!("paused {consumer} in this session"),
    ))
}

/// `POST /sessions/{id}/resume`: lift a consumer's pause in this session.
pub(crate) async fn resume(
    ctx: Ctx,
    SessionId(id): SessionId,
    body: Bytes,
) -> Result<Response, Failure> {
    let form = guard(&ctx, &body)?;
    let consumer = form
        .required("consumer")
        .map_err(|e| ctx.bad(e))?
        .to_owned();
    log(&ctx, "resume", &id);
    let result = ctx
        .store()
        .resume(ResumeRequest::in_session(consumer.clone(), id.clone()))
        .await
        .map_err(|e| ctx.store_error(e))?;
    let flash = if result.resumed {
        format!("resumed {consumer} in this session")
    } else {
        format!("{consumer} was not paused in this session")
    };
    Ok(back_to_session(&ctx, &id, &flash))
}

/// `POST /sessions/{id}/reschedule`: move (`at`) or cancel (`cancel`) a
/// head that has never been claimed.
pub(crate) async fn reschedule(
    ctx: Ctx,
    SessionId(id): SessionId,
    body: Bytes,
) -> Result<Response, Failure> {
    let form = guard(&ctx, &body)?;
    let bad = |e: String| ctx.bad(e);
    let consumer = form.required("consumer").map_err(bad)?.to_owned();
    let index = form
        .u64("index")
        .map_err(bad)?
        .ok_or_else(|| ctx.bad("the field 'index' is required"))?;
    let incarnation = form.u64("incarnation").map_err(bad)?;
    let change = if form.flag("cancel") {
        ScheduleChange::Cancel
    } else {
        let at = form
            .required("at")
            .map_err(|_| ctx.bad("the field 'at' is required (or 'cancel')"))?;
        ScheduleChange::To(NotBefore::AtMs(parse_time(at, now_ms()).map_err(bad)?))
    };
    let lane = optional_lane(&form);
    let request =
        RescheduleRequest::new(id.clone(), consumer.clone(), lane.as_deref(), index, change)
            .with_incarnation(incarnation);
    log(&ctx, "reschedule", &id);
    let result = ctx
        .store()
        .reschedule(request)
        .await
        .map_err(|e| ctx.store_error(e))?;
    let name = crate::render::cursor_name(&consumer, lane.as_deref());
    let flash = match result {
        RescheduleResult::Rescheduled {
            not_before: Some(at),
        } => {
            format!(
                "#{index} of {name} rescheduled to {}",
                crate::render::time(at)
            )
        }
        RescheduleResult::Rescheduled { not_before: None } => {
            format!("#{index} of {name} is claimable now")
        }
        RescheduleResult::Cancelled => format!("#{index} of {name} cancelled"),
        RescheduleResult::Started => {
            format!("#{index} of {name} has already been claimed: nothing changed")
        }
        _ => format!("#{index} of {name} is gone: nothing changed"),
    };
    Ok(back_to_session(&ctx, &id, &flash))
}

/// `POST /sessions/{id}/fork`: copy the log into a new session.
pub(crate) async fn fork(
    ctx: Ctx,
    SessionId(id): SessionId,
    body: Bytes,
) -> Result<Response, Failure> {
    let form = guard(&ctx, &body)?;
    let bad = |e: String| ctx.bad(e);
    let into = form.required("into").map_err(bad)?.to_owned();
    let mut request = ForkRequest::new(id.clone(), into.clone());
    if let Some(through) = form.u64("through").map_err(bad)? {
        request = request.through(through);
    }
    log(&ctx, "fork", &id);
    let result = ctx
        .store()
        .fork(request)
        .await
        .map_err(|e| ctx.store_error(e))?;
    let flash = format!("forked from {id}: {} events copied", result.copied);
    Ok(back_to_session(&ctx, &into, &flash))
}

/// `POST /sessions/{id}/clear`: append the clear marker (if the head is
/// still `if_last_index`).
pub(crate) async fn clear(
    ctx: Ctx,
    SessionId(id): SessionId,
    body: Bytes,
) -> Result<Response, Failure> {
    let form = guard(&ctx, &body)?;
    let bad = |e: String| ctx.bad(e);
    let mut request =
        ClearRequest::new(id.clone()).with_incarnation(form.u64("incarnation").map_err(bad)?);
    if let Some(index) = form.u64("if_last_index").map_err(bad)? {
        request = request.with_if_last_index(index);
    }
    log(&ctx, "clear", &id);
    let result = ctx
        .store()
        .clear(request)
        .await
        .map_err(|e| ctx.store_error(e))?;
    let flash = match result {
        ClearResult::Cleared { marker } => format!("cleared at #{}", marker.index),
        ClearResult::NotCleared { head } => {
            format!("not cleared: events were appended since (head is now #{head})")
        }
        _ => "not cleared".to_owned(),
    };
    Ok(back_to_session(&ctx, &id, &flash))
}

/// `POST /sessions/{id}/delete`: delete every row of the session.
pub(crate) async fn delete(
    ctx: Ctx,
    SessionId(id): SessionId,
    body: Bytes,
) -> Result<Response, Failure> {
    let form = guard(&ctx, &body)?;
    let bad = |e: String| ctx.bad(e);
    let mut request = DeleteSessionRequest::new(id.clone());
    if form.flag("force") {
        request = request.forced();
    }
    if let Some(index) = form.u64("if_last_index").map_err(bad)? {
        request = request.with_if_last_index(index);
    }
    log(&ctx, "delete", &id);
    let result = ctx
        .store()
        .delete_session(request)
        .await
        .map_err(|e| ctx.store_error(e))?;
    match result {
        DeleteSessionResult::Deleted { removed } => {
            let flash = format!(
                "deleted {id}: {} events, {} cursors, {} heads ended",
                removed.events, removed.cursors, removed.ended
            );
            Ok(see_other(
                &url(&ctx.base, "/sessions", &[("flash", &flash)]),
                None,
            ))
        }
        DeleteSessionResult::NotDeleted { head } => Ok(back_to_session(
            &ctx,
            &id,
            &format!("not deleted: events were appended since (head is now #{head})"),
        )),
        _ => Ok(back_to_session(&ctx, &id, "not deleted: no such session")),
    }
}
