//! Renders calls as ready-to-paste Rust, so a shrunk failing sequence can be
//! dropped into a test of the failing backend as it is.

use std::fmt::Write;

use a2_store_api::{
    Cause, ConsumerDeclaration, CursorRef, NewEvent, NotBefore, RedriveAction, ScheduleChange,
    StateWrite,
};
use serde_json::Value;

use crate::call::Call;

fn text(value: &str) -> String {
    format!("{value:?}")
}

fn owned(value: &str) -> String {
    format!("{value:?}.into()")
}

fn opt_owned(value: &Option<String>) -> String {
    match value {
        Some(value) => format!("Some({})", owned(value)),
        None => "None".to_owned(),
    }
}

fn strings(value: &Option<Vec<String>>) -> String {
    match value {
        Some(list) => format!(
            "Some(vec![{}])",
            list.iter().map(|s| owned(s)).collect::<Vec<_>>().join(", ")
        ),
        None => "None".to_owned(),
    }
}

fn opt<T: std::fmt::Debug>(value: &Option<T>) -> String {
    match value {
        Some(value) => format!("Some({value:?})"),
        None => "None".to_owned(),
    }
}

fn json(value: &Value) -> String {
    format!("json!({value})")
}

fn cause(cause: &Cause) -> String {
    format!(
        "Cause {{ consumer: {}, lane: {}, index: {}, attempt: {} }}",
        owned(&cause.consumer),
        opt_owned(&cause.lane),
        cause.index,
        cause.attempt
    )
}

fn cursor_ref(cursor: &CursorRef) -> String {
    format!(
        "CursorRef::new({}, {}, {})",
        text(&cursor.consumer),
        match &cursor.lane {
            Some(lane) => format!("Some({})", text(lane)),
            None => "None".to_owned(),
        },
        cursor.index
    )
}

fn event(event: &NewEvent) -> String {
    let mut out = format!(
        "NewEvent::new({}, {})",
        text(&event.event_type),
        json(&event.payload)
    );
    if let Some(id) = &event.id {
        let _ = write!(out, ".with_id({})", text(id));
    }
    for target in &event.targets {
        let base = match &target.lane {
            Some(lane) => format!("Target::lane({}, {})", text(&target.consumer), text(lane)),
            None => format!("Target::event({})", text(&target.consumer)),
        };
        let _ = match target.not_before {
            Some(at) => write!(
                out,
                ".with_target(Target {{ not_before: Some({}), ..{base} }})",
                not_before(at)
            ),
            None => write!(out, ".with_target({base})"),
        };
    }
    if let Some(c) = &event.cause {
        let _ = write!(out, ".with_cause({})", cause(c));
    }
    out
}

fn not_before(at: NotBefore) -> String {
    match at {
        NotBefore::AtMs(ms) => format!("NotBefore::AtMs({ms})"),
        NotBefore::AfterMs(ms) => format!("NotBefore::AfterMs({ms})"),
    }
}

fn action(action: RedriveAction) -> &'static str {
    match action {
        RedriveAction::Retry => "RedriveAction::Retry",
        RedriveAction::Skip => "RedriveAction::Skip",
    }
}

fn opt_cause(value: &Option<Cause>) -> String {
    match value {
        Some(c) => format!("Some({})", cause(c)),
        None => "None".to_owned(),
    }
}

fn events(list: &[NewEvent]) -> String {
    let items: Vec<String> = list.iter().map(event).collect();
    format!("vec![{}]", items.join(", "))
}

fn declaration(consumer: &ConsumerDeclaration) -> String {
    match &consumer.log {
        None => format!("ConsumerDeclaration::targeted({})", text(&consumer.name)),
        Some(log) => format!(
            "ConsumerDeclaration::log({}, {}, {}, {})",
            text(&consumer.name),
            text(&log.lane),
            match &log.types {
                Some(types) => format!(
                    "Some(vec![{}])",
                    types
                        .iter()
                        .map(|t| owned(t))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => "None".to_owned(),
            },
            log.backfill
        ),
    }
}

fn declarations(consumers: &Option<Vec<ConsumerDeclaration>>) -> String {
    match consumers {
        Some(list) => format!(
            "Some(vec![{}])",
            list.iter().map(declaration).collect::<Vec<_>>().join(", ")
        ),
        None => "None".to_owned(),
    }
}

fn refs(list: &[CursorRef]) -> String {
    format!(
        "vec![{}]",
        list.iter().map(cursor_ref).collect::<Vec<_>>().join(", ")
    )
}

fn state_write(write: &StateWrite) -> String {
    format!(
        "StateWrite {{ index: {}, state: {}, pins: {} }}",
        write.index,
        json(&write.state),
        refs(&write.pins)
    )
}

/// The call as a Rust expression on `store` (and `clock` for advances).
pub fn rust(call: &Call) -> String {
    match call {
        Call::Append {
            session,
            events: list,
            options,
        } => format!(
            "store.append({}, {}, AppendOptions {{ consumers: {}, origin_index: {} }}).await",
            text(session),
            events(list),
            declarations(&options.consumers),
            opt(&options.origin_index)
        ),
        Call::Claim(r) => format!(
            "store.claim_available(ClaimRequest {{ session_id: {}, holder: {}, ttl_ms: {}, expires_at_ms: {}, exclude: {}, consumers: {}, max_failures: {}, through: {}, limit: {} }}).await",
            owned(&r.session_id),
            owned(&r.holder),
            opt(&r.ttl_ms),
            opt(&r.expires_at_ms),
            refs(&r.exclude),
            declarations(&r.consumers),
            opt(&r.max_failures),
            opt(&r.through),
            opt(&r.limit)
        ),
        Call::Renew(r) => format!(
            "store.renew_claims(RenewRequest {{ incarnation: {}, session_id: {}, holder: {}, claims: vec![{}], ttl_ms: {}, expires_at_ms: {} }}).await",
            opt(&r.incarnation),
            owned(&r.session_id),
            owned(&r.holder),
            r.claims
                .iter()
                .map(|c| format!("HeldClaim {{ cursor: {}, attempt: {} }}", cursor_ref(&c.cursor), c.attempt))
                .collect::<Vec<_>>()
                .join(", "),
            opt(&r.ttl_ms),
            opt(&r.expires_at_ms)
        ),
        Call::Complete(r) => format!(
            "store.complete_attempt(CompleteRequest {{ incarnation: {}, session_id: {}, consumer: {}, lane: {}, index: {}, attempt: {}, events: {}, consumers: {} }}).await",
            opt(&r.incarnation),
            owned(&r.session_id),
            owned(&r.consumer),
            opt_owned(&r.lane),
            r.index,
            r.attempt,
            events(&r.events),
            declarations(&r.consumers)
        ),
        Call::Fail(r) => format!(
            "store.fail_attempt(FailRequest {{ incarnation: {}, session_id: {}, consumer: {}, lane: {}, index: {}, attempt: {}, error: {}, max_failures: {}, retry_after_ms: {} }}).await",
            opt(&r.incarnation),
            owned(&r.session_id),
            owned(&r.consumer),
            opt_owned(&r.lane),
            r.index,
            r.attempt,
            owned(&r.error),
            opt(&r.max_failures),
            opt(&r.retry_after_ms)
        ),
        Call::Redrive(r) => format!(
            "store.redrive(RedriveRequest {{ incarnation: {}, session_id: {}, consumer: {}, index: {}, action: {}, lane: {}, consumers: {} }}).await",
            opt(&r.incarnation),
            owned(&r.session_id),
            owned(&r.consumer),
            r.index,
            action(r.action),
            opt_owned(&r.lane),
            declarations(&r.consumers)
        ),
        Call::Clear(r) => format!(
            "store.clear(ClearRequest {{ incarnation: {}, session_id: {}, if_last_index: {}, cause: {} }}).await",
            opt(&r.incarnation),
            owned(&r.session_id),
            opt(&r.if_last_index),
            opt_cause(&r.cause)
        ),
        Call::Reschedule(r) => format!(
            "store.reschedule(RescheduleRequest {{ incarnation: {}, session_id: {}, consumer: {}, lane: {}, index: {}, change: {}, cause: {} }}).await",
            opt(&r.incarnation),
            owned(&r.session_id),
            owned(&r.consumer),
            opt_owned(&r.lane),
            r.index,
            match r.change {
                ScheduleChange::To(at) => format!("ScheduleChange::To({})", not_before(at)),
                ScheduleChange::Cancel => "ScheduleChange::Cancel".to_owned(),
            },
            opt_cause(&r.cause)
        ),
        Call::Pause(r) => format!(
            "store.pause(PauseRequest {{ consumer: {}, session_id: {}, until_ms: {} }}).await",
            owned(&r.consumer),
            opt_owned(&r.session_id),
            opt(&r.until_ms)
        ),
        Call::Resume(r) => format!(
            "store.resume(ResumeRequest {{ consumer: {}, session_id: {} }}).await",
            owned(&r.consumer),
            opt_owned(&r.session_id)
        ),
        Call::RedriveAll(r) => format!(
            "store.redrive_all(BulkRedrive {{ action: {}, consumer: {}, session_id: {}, lane: {}, dead_since_ms: {}, dead_before_ms: {}, limit: {} }}).await",
            action(r.action),
            opt_owned(&r.consumer),
            opt_owned(&r.session_id),
            opt_owned(&r.lane),
            opt(&r.dead_since_ms),
            opt(&r.dead_before_ms),
            opt(&r.limit)
        ),
        Call::Fork(r) => format!(
            "store.fork(ForkRequest {{ session_id: {}, into: {}, through: {} }}).await",
            owned(&r.session_id),
            owned(&r.into),
            opt(&r.through)
        ),
        Call::Reclaim(session) => format!("store.reclaim({}).await", text(session)),
        Call::Read(session, options) => format!(
            "store.read({}, ReadOptions {{ after: {}, through: {}, limit: {} }}).await",
            text(session),
            opt(&options.after),
            opt(&options.through),
            opt(&options.limit)
        ),
        Call::WakeLog(session, consumer) => format!(
            "store.wake_log({}, &{}).await",
            text(session),
            declaration(consumer)
        ),
        Call::WriteState(session, reducer, writes) => format!(
            "store.write_state({}, {}, vec![{}]).await",
            text(session),
            text(reducer),
            writes.iter().map(state_write).collect::<Vec<_>>().join(", ")
        ),
        Call::ReadState(session, reducer, options) => format!(
            "store.read_state({}, {}, ReadStateOptions {{ at: {} }}).await",
            text(session),
            text(reducer),
            opt(&options.at)
        ),
        Call::SetPresence(session, participant, values, meta) => format!(
            "store.set_presence({}, {}, BTreeMap::from([{}]), PresenceMeta {{ at: {}, seen: {}, ttl_ms: {} }}).await",
            text(session),
            text(participant),
            values
                .iter()
                .map(|(field, value)| format!("({}, {})", owned(field), json(value)))
                .collect::<Vec<_>>()
                .join(", "),
            meta.at,
            opt(&meta.seen),
            meta.ttl_ms
        ),
        Call::ClaimWork(r) => format!(
            "store.claim_work(ClaimWorkRequest {{ holder: {}, ttl_ms: {}, expires_at_ms: {}, consumers: vec![{}], sessions: {}, max_failures: {}, limit: {}, session_limit: {}, per_session_limit: {}, wait_ms: {} }}).await",
            owned(&r.holder),
            opt(&r.ttl_ms),
            opt(&r.expires_at_ms),
            r.consumers.iter().map(declaration).collect::<Vec<_>>().join(", "),
            strings(&r.sessions),
            opt(&r.max_failures),
            opt(&r.limit),
            opt(&r.session_limit),
            opt(&r.per_session_limit),
            opt(&r.wait_ms)
        ),
        Call::ListWork(r) => format!(
            "store.list_work(ListWork {{ consumers: vec![{}], after: {}, limit: {} }}).await",
            r.consumers.iter().map(|c| owned(c)).collect::<Vec<_>>().join(", "),
            opt_owned(&r.after),
            opt(&r.limit)
        ),
        Call::DeleteSession(r) => format!(
            "store.delete_session(DeleteSessionRequest {{ session_id: {}, force: {}, if_last_index: {} }}).await",
            owned(&r.session_id),
            r.force,
            opt(&r.if_last_index)
        ),
        Call::Prune(r) => format!(
            "store.prune(PruneRequest {{ idle_for_ms: {}, limit: {}, dry_run: {}, include_dead_letters: {}, after: None }}).await",
            r.idle_for_ms,
            opt(&r.limit),
            r.dry_run,
            r.include_dead_letters
        ),
        Call::Advance(ms) => format!("clock.advance({ms})"),
    }
}

/// A whole reproduction: setup, every call before the failing one, then the
/// failing call, and what went wrong as comments.
pub fn program(calls: &[Call], start_ms: i64, id_prefix: &str, failure: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "// Paste into an async test of the backend under test; `open_store` builds it\n\
         // on the given clock and id generator.\n\
         use std::collections::BTreeMap;\n\
         use std::sync::Arc;\n\
         use a2_store_api::*;\n\
         use serde_json::json;\n\
         // `incarnation: Some(n)`: the n-th incarnation the run saw (each\n\
         // store numbers its own; read the store's number from its results).\n\
         let clock = ManualClock::new({start_ms});\n\
         let store = open_store(Arc::new(clock.clone()), Arc::new(CounterIds::new({})));",
        text(id_prefix)
    );
    let Some((last, before)) = calls.split_last() else {
        let _ = writeln!(out, "// {failure}");
        return out;
    };
    for call in before {
        match call {
            Call::Advance(_) => {
                let _ = writeln!(out, "{};", rust(call));
            }
            _ => {
                let _ = writeln!(out, "let _ = {};", rust(call));
            }
        }
    }
    let _ = writeln!(out, "let result = {};", rust(last));
    for line in failure.lines() {
        let _ = writeln!(out, "// {line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use a2_store_api::{
        BulkRedrive, DeleteSessionRequest, ForkRequest, NewEvent, PauseRequest, PruneRequest,
        RescheduleRequest, ResumeRequest, Target,
    };
    use serde_json::json;

    use super::*;

    #[test]
    fn time_and_control_calls_render_as_struct_literals() {
        let scheduled = NewEvent::new("msg", json!(0))
            .with_target(Target::lane("agent", "L1").not_before_ms(5))
            .with_target(Target::event("worker"));
        let append = Call::Append {
            session: "s0".into(),
            events: vec![scheduled],
            options: Default::default(),
        };
        assert!(
            rust(&append).contains(
                ".with_target(Target { not_before: Some(NotBefore::AtMs(5)), ..Target::lane(\"agent\", \"L1\") }).with_target(Target::event(\"worker\"))"
            ),
            "{}",
            rust(&append)
        );
        let reschedule = Call::Reschedule(RescheduleRequest::new(
            "s0",
            "agent",
            Some("L1"),
            2,
            ScheduleChange::To(NotBefore::AfterMs(300)),
        ));
        assert_eq!(
            rust(&reschedule),
            "store.reschedule(RescheduleRequest { incarnation: None, session_id: \"s0\".into(), consumer: \"agent\".into(), lane: Some(\"L1\".into()), index: 2, change: ScheduleChange::To(NotBefore::AfterMs(300)), cause: None }).await"
        );
        let pause = Call::Pause(PauseRequest::everywhere("agent").with_until_ms(9));
        assert_eq!(
            rust(&pause),
            "store.pause(PauseRequest { consumer: \"agent\".into(), session_id: None, until_ms: Some(9) }).await"
        );
        let resume = Call::Resume(ResumeRequest::in_session("agent", "s1"));
        assert_eq!(
            rust(&resume),
            "store.resume(ResumeRequest { consumer: \"agent\".into(), session_id: Some(\"s1\".into()) }).await"
        );
        let mut bulk = BulkRedrive::new(RedriveAction::Skip);
        bulk.lane = Some("L2".into());
        bulk.limit = Some(1);
        assert_eq!(
            rust(&Call::RedriveAll(bulk)),
            "store.redrive_all(BulkRedrive { action: RedriveAction::Skip, consumer: None, session_id: None, lane: Some(\"L2\".into()), dead_since_ms: None, dead_before_ms: None, limit: Some(1) }).await"
        );
        let fork = Call::Fork(ForkRequest::new("s0", "sf").through(3));
        assert_eq!(
            rust(&fork),
            "store.fork(ForkRequest { session_id: \"s0\".into(), into: \"sf\".into(), through: Some(3) }).await"
        );
        let delete = Call::DeleteSession(
            DeleteSessionRequest::new("s1")
                .forced()
                .with_if_last_index(4),
        );
        assert_eq!(
            rust(&delete),
            "store.delete_session(DeleteSessionRequest { session_id: \"s1\".into(), force: true, if_last_index: Some(4) }).await"
        );
        let prune =
            Call::Prune(PruneRequest::idle_for(std::time::Duration::from_millis(500)).dry_run());
        assert_eq!(
            rust(&prune),
            "store.prune(PruneRequest { idle_for_ms: 500, limit: None, dry_run: true, include_dead_letters: false, after: None }).await"
        );
    }
}
