//! The observability layer: spans checked with a capturing subscriber,
//! counters and histograms with a debugging recorder, for one
//! claim / busy / complete / fail / dead-letter sequence on the memory backend.
#![cfg(all(feature = "memory", any(feature = "tracing", feature = "metrics")))]

use a2_store::{
    BulkRedrive, ClaimRequest, ClaimResult, CompleteRequest, CompleteResult, DeleteSessionRequest,
    DeleteSessionResult, ErrorCode, FailOutcome, FailRequest, ForkRequest, ManualClock, NewEvent,
    OpenOptions, PauseRequest, PruneRequest, RedriveAction, RescheduleRequest, RescheduleResult,
    ResumeRequest, ScheduleChange, Store, Target,
};
use serde_json::json;

/// A payload no span or metric may carry.
const SECRET: &str = "do-not-record";

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    // Current thread: the thread-local subscriber and recorder see every call.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

fn claim(holder: &str) -> ClaimRequest {
    ClaimRequest {
        session_id: "s1".into(),
        holder: holder.into(),
        ttl_ms: Some(1_000),
        ..ClaimRequest::default()
    }
}

fn complete(index: u64, attempt: u32) -> CompleteRequest {
    CompleteRequest {
        session_id: "s1".into(),
        consumer: "agent".into(),
        lane: Some("main".into()),
        index,
        attempt,
        events: vec![NewEvent::new("reply", json!({ "text": SECRET }))],
        ..CompleteRequest::default()
    }
}

/// Append two lane events; claim the first (`claimed`), claim again while it
/// is held (`busy`), complete it; claim the second and fail it at
/// `max_failures = 1` (`dead_lettered`); complete the dead attempt
/// (`superseded`); claim once more (`settled`); claim without a lease
/// (error `INVALID_INPUT`).
async fn scenario(store: &dyn Store) {
    let target = Target::lane("agent", "main");
    let events = (0..2)
        .map(|_| NewEvent::new("msg", json!({ "secret": SECRET })).with_target(target.clone()))
        .collect();
    store
        .append("s1", events, Default::default())
        .await
        .unwrap();
    let ClaimResult::Claimed { heads, .. } = store.claim_available(claim("w1")).await.unwrap()
    else {
        panic!("first head not claimed");
    };
    assert_eq!(heads.len(), 1);
    assert_eq!(heads[0].dispatch.attempt_count, 1);
    assert!(matches!(
        store.claim_available(claim("w2")).await.unwrap(),
        ClaimResult::Busy { .. }
    ));
    assert!(matches!(
        store.complete_attempt(complete(1, 1)).await.unwrap(),
        CompleteResult::Completed { .. }
    ));
    assert!(matches!(
        store.claim_available(claim("w1")).await.unwrap(),
        ClaimResult::Claimed { .. }
    ));
    let failed = store
        .fail_attempt(FailRequest {
            incarnation: None,
            session_id: "s1".into(),
            consumer: "agent".into(),
            lane: Some("main".into()),
            index: 2,
            attempt: 1,
            error: SECRET.into(),
            max_failures: Some(1),
            retry_after_ms: None,
        })
        .await
        .unwrap();
    assert_eq!(failed.outcome, FailOutcome::DeadLettered);
    assert!(matches!(
        store.complete_attempt(complete(2, 1)).await.unwrap(),
        CompleteResult::Superseded
    ));
    assert!(matches!(
        store.claim_available(claim("w1")).await.unwrap(),
        ClaimResult::Settled
    ));
    let no_lease = ClaimRequest {
        ttl_ms: None,
        ..claim("w3")
    };
    let error = store.claim_available(no_lease).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::InvalidInput);
}

/// The time-and-control calls, each once, in this order: append a
/// reminder scheduled a minute later; reschedule it (cancel); pause
/// `agent` store-wide; list the pauses; resume; bulk-redrive (nothing
/// dead); fork `s2` into `s2b`; fork into itself (error `INVALID_INPUT`).
async fn control_scenario(store: &dyn Store) {
    let reminder = NewEvent::new("remind", json!({ "secret": SECRET }))
        .with_target(Target::lane("agent", "main").delayed(std::time::Duration::from_secs(60)));
    store
        .append("s2", vec![reminder], Default::default())
        .await
        .unwrap();
    let cancel = RescheduleRequest::new("s2", "agent", Some("main"), 1, ScheduleChange::Cancel);
    assert_eq!(
        store.reschedule(cancel).await.unwrap(),
        RescheduleResult::Cancelled
    );
    store
        .pause(PauseRequest::everywhere("agent"))
        .await
        .unwrap();
    assert_eq!(store.pauses(None).await.unwrap().len(), 1);
    assert!(
        store
            .resume(ResumeRequest::everywhere("agent"))
            .await
            .unwrap()
            .resumed
    );
    let bulk = BulkRedrive::new(RedriveAction::Retry);
    assert!(store.redrive_all(bulk).await.unwrap().redriven.is_empty());
    assert_eq!(
        store
            .fork(ForkRequest::new("s2", "s2b"))
            .await
            .unwrap()
            .copied,
        1
    );
    let error = store.fork(ForkRequest::new("s2", "s2")).await.unwrap_err();
    assert_eq!(error.code(), ErrorCode::InvalidInput);
}

/// `(span or label name, session field)` of each call of [`control_scenario`].
#[cfg(feature = "tracing")]
const CONTROL_CALLS: [(&str, Option<&str>); 8] = [
    ("append", Some("s2")),
    ("reschedule", Some("s2")),
    ("pause", None),
    ("pauses", None),
    ("resume", None),
    ("redrive_all", None),
    ("fork", Some("s2")),
    ("fork", Some("s2")),
];

fn options() -> OpenOptions {
    OpenOptions::default().with_clock(ManualClock::new(1_000))
}

/// The retention calls, in this order: append a note to `s3`, a message
/// for `agent` to `s4` and a note to `s5`; delete `s3` (`deleted`);
/// delete it again (`not_found`); delete `s5` at a head it does not have
/// (`not_deleted`); delete `s4`, whose message waits (error
/// `SESSION_IN_USE`); an hour later, prune as a dry run (`s5` listed, `s4`
/// examined and kept), then for real (`s5` deleted).
async fn retention_scenario(store: &dyn Store, clock: &ManualClock) {
    let message = NewEvent::new("msg", json!({ "secret": SECRET }))
        .with_target(Target::lane("agent", "main"));
    for (session, event) in [
        ("s3", NewEvent::new("note", json!({ "secret": SECRET }))),
        ("s4", message),
        ("s5", NewEvent::new("note", json!({ "secret": SECRET }))),
    ] {
        store
            .append(session, vec![event], Default::default())
            .await
            .unwrap();
    }
    let deleted = store
        .delete_session(DeleteSessionRequest::new("s3"))
        .await
        .unwrap();
    assert!(matches!(deleted, DeleteSessionResult::Deleted { .. }));
    assert_eq!(
        store
            .delete_session(DeleteSessionRequest::new("s3"))
            .await
            .unwrap(),
        DeleteSessionResult::NotFound
    );
    let wrong_head = DeleteSessionRequest::new("s5").with_if_last_index(7);
    assert_eq!(
        store.delete_session(wrong_head).await.unwrap(),
        DeleteSessionResult::NotDeleted { head: 1 }
    );
    let in_use = store
        .delete_session(DeleteSessionRequest::new("s4"))
        .await
        .unwrap_err();
    assert_eq!(in_use.code(), ErrorCode::SessionInUse);
    clock.advance(3_600_000);
    let idle = PruneRequest::idle_for(std::time::Duration::from_secs(60));
    let preview = store.prune(idle.clone().dry_run()).await.unwrap();
    assert_eq!(
        (preview.sessions, preview.examined),
        (vec!["s5".to_owned()], 2)
    );
    assert_eq!(store.prune(idle).await.unwrap().sessions, ["s5"]);
}

/// Runs [`retention_scenario`] on a memory store opened with `options`
/// (plus a manual clock).
async fn run_retention(options: OpenOptions) {
    let clock = ManualClock::new(1_000);
    let store = a2_store::open("memory:", options.with_clock(clock.clone()))
        .await
        .unwrap();
    retention_scenario(store.as_ref(), &clock).await;
}

#[cfg(feature = "tracing")]
mod spans {
    use std::collections::BTreeMap;
    use std::fmt;
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::Subscriber;
    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::registry::LookupSpan;
    use tracing_subscriber::Layer;

    use super::*;

    /// A closed span: its name, level, target and every recorded field.
    #[derive(Debug, Clone)]
    pub struct Closed {
        pub name: &'static str,
        pub level: tracing::Level,
        pub target: &'static str,
        pub fields: BTreeMap<String, String>,
    }

    impl Closed {
        fn field(&self, name: &str) -> Option<&str> {
            self.fields.get(name).map(String::as_str)
        }
    }

    #[derive(Default)]
    struct Fields(BTreeMap<String, String>);

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            self.0.insert(field.name().into(), format!("{value:?}"));
        }

        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().into(), value.into());
        }
    }

    /// Keeps every span's fields and hands them over when it closes.
    #[derive(Clone, Default)]
    pub struct Capture(pub Arc<Mutex<Vec<Closed>>>);

    impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
        fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
            let mut fields = Fields::default();
            attrs.record(&mut fields);
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(fields);
            }
        }

        fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
            if let Some(span) = ctx.span(id) {
                if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
                    values.record(fields);
                }
            }
        }

        fn on_close(&self, id: Id, ctx: Context<'_, S>) {
            if let Some(span) = ctx.span(&id) {
                let fields = span
                    .extensions_mut()
                    .remove::<Fields>()
                    .unwrap_or_default()
                    .0;
                let meta = span.metadata();
                self.0.lock().unwrap().push(Closed {
                    name: meta.name(),
                    level: *meta.level(),
                    target: meta.target(),
                    fields,
                });
            }
        }
    }

    /// Runs `work` under a capturing subscriber and returns the closed spans.
    pub fn captured(work: impl FnOnce()) -> Vec<Closed> {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::registry().with(capture.clone());
        tracing::subscriber::with_default(subscriber, work);
        let spans = capture.0.lock().unwrap().clone();
        spans
    }

    fn traced() -> OpenOptions {
        options().with_tracing(true)
    }

    #[test]
    fn every_call_gets_a_span_with_its_ids_and_outcome() {
        let spans = captured(|| {
            block_on(async {
                let store = a2_store::open("memory:", traced()).await.unwrap();
                scenario(store.as_ref()).await;
            })
        });
        let summary: Vec<(&str, Option<&str>)> =
            spans.iter().map(|s| (s.name, s.field("outcome"))).collect();
        assert_eq!(
            summary,
            [
                ("a2_store.append", Some("ok")),
                ("a2_store.claim_available", Some("claimed")),
                ("a2_store.claim_available", Some("busy")),
                ("a2_store.complete_attempt", Some("completed")),
                ("a2_store.claim_available", Some("claimed")),
                ("a2_store.fail_attempt", Some("dead_lettered")),
                ("a2_store.complete_attempt", Some("superseded")),
                ("a2_store.claim_available", Some("settled")),
                ("a2_store.claim_available", Some("error")),
            ]
        );
        for span in &spans {
            assert_eq!(span.level, tracing::Level::INFO, "{span:?}");
            assert_eq!(span.target, "a2_store", "{span:?}");
            assert_eq!(span.field("backend"), Some("memory"), "{span:?}");
            assert_eq!(span.field("session"), Some("s1"), "{span:?}");
            assert_eq!(
                Some(span.name.trim_start_matches("a2_store.")),
                span.field("operation"),
                "{span:?}"
            );
            let ms: f64 = span.field("duration_ms").unwrap().parse().unwrap();
            assert!(ms >= 0.0, "{span:?}");
            for value in span.fields.values() {
                assert!(!value.contains(SECRET), "payload recorded: {span:?}");
            }
        }
        let first_claim = &spans[1];
        assert_eq!(first_claim.field("holder"), Some("w1"));
        assert_eq!(first_claim.field("claimed"), Some("1"));
        assert_eq!(first_claim.field("dead_lettered"), Some("0"));
        assert_eq!(spans[2].field("holder"), Some("w2"));
        assert_eq!(spans[2].field("claimed"), Some("0"));
        let completion = &spans[3];
        assert_eq!(completion.field("consumer"), Some("agent"));
        assert_eq!(completion.field("lane"), Some("main"));
        assert_eq!(completion.field("index"), Some("1"));
        assert_eq!(completion.field("attempt"), Some("1"));
        assert_eq!(completion.field("error"), None);
        let failure = &spans[5];
        assert_eq!(failure.field("index"), Some("2"));
        assert_eq!(failure.field("attempt"), Some("1"));
        assert_eq!(spans[6].field("superseded"), Some("1"));
        let error = &spans[8];
        assert_eq!(error.field("holder"), Some("w3"));
        assert_eq!(error.field("error"), Some("INVALID_INPUT"));
    }

    #[test]
    fn time_and_control_calls_get_spans() {
        let spans = captured(|| {
            block_on(async {
                let store = a2_store::open("memory:", traced()).await.unwrap();
                control_scenario(store.as_ref()).await;
            })
        });
        let names: Vec<(&str, Option<&str>)> = spans
            .iter()
            .map(|s| (s.name.trim_start_matches("a2_store."), s.field("session")))
            .collect();
        assert_eq!(names, CONTROL_CALLS);
        let outcomes: Vec<Option<&str>> = spans.iter().map(|s| s.field("outcome")).collect();
        assert_eq!(outcomes[..7], [Some("ok"); 7]);
        assert_eq!(outcomes[7], Some("error"));
        assert_eq!(spans[7].field("error"), Some("INVALID_INPUT"));
        let reschedule = &spans[1];
        assert_eq!(reschedule.field("consumer"), Some("agent"));
        assert_eq!(reschedule.field("lane"), Some("main"));
        assert_eq!(reschedule.field("index"), Some("1"));
        assert_eq!(spans[2].field("consumer"), Some("agent"));
        for span in &spans {
            for value in span.fields.values() {
                assert!(!value.contains(SECRET), "payload recorded: {span:?}");
            }
        }
    }

    #[test]
    fn retention_calls_get_spans_with_what_they_deleted() {
        let spans = captured(|| block_on(run_retention(OpenOptions::default().with_tracing(true))));
        let summary: Vec<(&str, Option<&str>, Option<&str>)> = spans
            .iter()
            .map(|s| {
                let name = s.name.trim_start_matches("a2_store.");
                (name, s.field("outcome"), s.field("deleted"))
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("append", Some("ok"), None),
                ("append", Some("ok"), None),
                ("append", Some("ok"), None),
                ("delete_session", Some("deleted"), Some("1")),
                ("delete_session", Some("not_found"), Some("0")),
                ("delete_session", Some("not_deleted"), Some("0")),
                ("delete_session", Some("error"), None),
                ("prune", Some("ok"), Some("1")),
                ("prune", Some("ok"), Some("1")),
            ]
        );
        assert_eq!(spans[3].field("session"), Some("s3"));
        assert_eq!(spans[5].field("index"), Some("7"));
        assert_eq!(spans[6].field("error"), Some("SESSION_IN_USE"));
        let (preview, pruned) = (&spans[7], &spans[8]);
        assert_eq!(preview.field("session"), None);
        assert_eq!(preview.field("dry_run"), Some("true"));
        assert_eq!(preview.field("examined"), Some("2"));
        assert_eq!(pruned.field("dry_run"), Some("false"));
        for span in &spans {
            for value in span.fields.values() {
                assert!(!value.contains(SECRET), "payload recorded: {span:?}");
            }
        }
    }

    #[test]
    fn subscribe_spans_the_call_that_opens_the_stream() {
        let spans = captured(|| {
            block_on(async {
                let store = a2_store::open("memory:", traced()).await.unwrap();
                let stream = store.subscribe("s1", 0).await.unwrap();
                store
                    .append(
                        "s1",
                        vec![NewEvent::new("msg", json!({}))],
                        Default::default(),
                    )
                    .await
                    .unwrap();
                drop(stream);
            })
        });
        let names: Vec<_> = spans.iter().map(|s| s.name).collect();
        assert_eq!(names, ["a2_store.subscribe", "a2_store.append"]);
        assert_eq!(spans[0].field("index"), Some("0"));
    }

    #[test]
    fn spans_are_off_unless_asked_for() {
        let spans = captured(|| {
            block_on(async {
                let store = a2_store::open("memory:", options()).await.unwrap();
                scenario(store.as_ref()).await;
                let untraced = options().with_tracing(false);
                let store = a2_store::open("memory:", untraced).await.unwrap();
                scenario(store.as_ref()).await;
            })
        });
        assert!(spans.is_empty(), "{spans:?}");
    }

    #[test]
    fn a_hand_built_layer_carries_its_label() {
        let spans = captured(|| {
            block_on(async {
                let inner = a2_store::open("memory:", options()).await.unwrap();
                let store = a2_store::ObservedStore::new(inner, "primary").with_tracing(true);
                assert_eq!(store.backend(), "primary");
                store.sessions(Default::default()).await.unwrap();
            })
        });
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].name, "a2_store.sessions");
        assert_eq!(spans[0].field("backend"), Some("primary"));
        assert_eq!(spans[0].field("session"), None);
    }
}

#[cfg(feature = "metrics")]
mod counters {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use metrics_util::{CompositeKey, MetricKind};

    use super::*;

    /// Every metric the run recorded: (kind, name, sorted labels) -> value.
    type Recorded = Vec<(MetricKind, String, Vec<(String, String)>, DebugValue)>;

    fn recorded(work: impl FnOnce()) -> Recorded {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, work);
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(
                |(key, _unit, _description, value): (CompositeKey, _, _, _)| {
                    let (kind, key) = key.into_parts();
                    let mut labels: Vec<(String, String)> = key
                        .labels()
                        .map(|l| (l.key().to_owned(), l.value().to_owned()))
                        .collect();
                    labels.sort();
                    (kind, key.name().to_owned(), labels, value)
                },
            )
            .collect()
    }

    fn counter(recorded: &Recorded, name: &str, labels: &[(&str, &str)]) -> u64 {
        let mut wanted: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        wanted.sort();
        recorded
            .iter()
            .filter(|(kind, n, l, _)| *kind == MetricKind::Counter && n == name && *l == wanted)
            .map(|(_, _, _, value)| match value {
                DebugValue::Counter(count) => *count,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    }

    fn run_scenario() -> Recorded {
        recorded(|| {
            block_on(async {
                let store = a2_store::open("memory:", options().with_metrics(true))
                    .await
                    .unwrap();
                scenario(store.as_ref()).await;
            })
        })
    }

    #[test]
    fn calls_are_counted_by_operation_backend_and_outcome() {
        let recorded = run_scenario();
        let calls = |operation, outcome| {
            counter(
                &recorded,
                "a2_store_calls_total",
                &[
                    ("operation", operation),
                    ("backend", "memory"),
                    ("outcome", outcome),
                ],
            )
        };
        assert_eq!(calls("append", "ok"), 1);
        assert_eq!(calls("claim_available", "claimed"), 2);
        assert_eq!(calls("claim_available", "busy"), 1);
        assert_eq!(calls("claim_available", "settled"), 1);
        assert_eq!(calls("complete_attempt", "completed"), 1);
        assert_eq!(calls("complete_attempt", "superseded"), 1);
        assert_eq!(calls("claim_available", "error"), 1);
        assert_eq!(calls("fail_attempt", "dead_lettered"), 1);
        let total: u64 = recorded
            .iter()
            .filter(|(_, name, _, _)| name == "a2_store_calls_total")
            .map(|(_, _, _, value)| match value {
                DebugValue::Counter(count) => *count,
                _ => 0,
            })
            .sum();
        assert_eq!(total, 9);
        assert_eq!(
            counter(
                &recorded,
                "a2_store_errors_total",
                &[
                    ("operation", "claim_available"),
                    ("backend", "memory"),
                    ("code", "INVALID_INPUT"),
                ],
            ),
            1
        );
    }

    #[test]
    fn claims_completions_failures_dead_letters_busy_and_superseded_are_counted() {
        let recorded = run_scenario();
        let backend = [("backend", "memory")];
        assert_eq!(
            counter(&recorded, "a2_store_claimed_heads_total", &backend),
            2
        );
        assert_eq!(
            counter(&recorded, "a2_store_completions_total", &backend),
            1
        );
        assert_eq!(counter(&recorded, "a2_store_failures_total", &backend), 1);
        assert_eq!(
            counter(&recorded, "a2_store_dead_letters_total", &backend),
            1
        );
        assert_eq!(counter(&recorded, "a2_store_busy_total", &backend), 1);
        assert_eq!(
            counter(
                &recorded,
                "a2_store_superseded_total",
                &[("operation", "complete_attempt"), ("backend", "memory")],
            ),
            1
        );
        for (_, name, labels, _) in &recorded {
            assert!(
                labels
                    .iter()
                    .all(|(key, value)| key != "session" && !value.contains(SECRET)),
                "{name} {labels:?}"
            );
        }
    }

    #[test]
    fn latency_is_a_histogram_per_operation_and_backend() {
        let recorded = run_scenario();
        let samples = |operation: &str| -> usize {
            recorded
                .iter()
                .filter(|(kind, name, labels, _)| {
                    *kind == MetricKind::Histogram
                        && name == "a2_store_call_duration_seconds"
                        && *labels
                            == [
                                ("backend".to_owned(), "memory".to_owned()),
                                ("operation".to_owned(), operation.to_owned()),
                            ]
                })
                .map(|(_, _, _, value)| match value {
                    DebugValue::Histogram(samples) => {
                        assert!(samples.iter().all(|s| s.into_inner() >= 0.0));
                        samples.len()
                    }
                    other => panic!("not a histogram: {other:?}"),
                })
                .sum()
        };
        assert_eq!(samples("claim_available"), 5);
        assert_eq!(samples("complete_attempt"), 2);
        assert_eq!(samples("fail_attempt"), 1);
        assert_eq!(samples("append"), 1);
    }

    #[test]
    fn time_and_control_calls_are_counted_by_operation() {
        let recorded = recorded(|| {
            block_on(async {
                let store = a2_store::open("memory:", options().with_metrics(true))
                    .await
                    .unwrap();
                control_scenario(store.as_ref()).await;
            })
        });
        let calls = |operation, outcome| {
            counter(
                &recorded,
                "a2_store_calls_total",
                &[
                    ("operation", operation),
                    ("backend", "memory"),
                    ("outcome", outcome),
                ],
            )
        };
        for operation in [
            "append",
            "reschedule",
            "pause",
            "pauses",
            "resume",
            "redrive_all",
        ] {
            assert_eq!(calls(operation, "ok"), 1, "{operation}");
        }
        assert_eq!(calls("fork", "ok"), 1);
        assert_eq!(calls("fork", "error"), 1);
        assert_eq!(
            counter(
                &recorded,
                "a2_store_errors_total",
                &[
                    ("operation", "fork"),
                    ("backend", "memory"),
                    ("code", "INVALID_INPUT"),
                ],
            ),
            1
        );
    }

    #[test]
    fn deleted_sessions_and_prune_pages_are_counted() {
        let recorded =
            recorded(|| block_on(run_retention(OpenOptions::default().with_metrics(true))));
        let deleted = |operation| {
            counter(
                &recorded,
                "a2_store_sessions_deleted_total",
                &[("operation", operation), ("backend", "memory")],
            )
        };
        // The dry run deleted nothing.
        assert_eq!((deleted("delete_session"), deleted("prune")), (1, 1));
        let pages = |dry_run| {
            counter(
                &recorded,
                "a2_store_prune_pages_total",
                &[("backend", "memory"), ("dry_run", dry_run)],
            )
        };
        assert_eq!((pages("true"), pages("false")), (1, 1));
        let calls = |outcome| {
            counter(
                &recorded,
                "a2_store_calls_total",
                &[
                    ("operation", "delete_session"),
                    ("backend", "memory"),
                    ("outcome", outcome),
                ],
            )
        };
        for outcome in ["deleted", "not_found", "not_deleted", "error"] {
            assert_eq!(calls(outcome), 1, "{outcome}");
        }
        assert_eq!(
            counter(
                &recorded,
                "a2_store_errors_total",
                &[
                    ("operation", "delete_session"),
                    ("backend", "memory"),
                    ("code", "SESSION_IN_USE"),
                ],
            ),
            1
        );
    }

    #[test]
    fn metrics_are_off_unless_asked_for() {
        let recorded = recorded(|| {
            block_on(async {
                let store = a2_store::open("memory:", options()).await.unwrap();
                scenario(store.as_ref()).await;
            })
        });
        assert!(recorded.is_empty(), "{recorded:?}");
    }
}

#[cfg(all(feature = "tracing", feature = "metrics"))]
#[test]
fn both_halves_record_the_same_calls() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let spans = spans::captured(|| {
        metrics::with_local_recorder(&recorder, || {
            block_on(async {
                let options = options().with_tracing(true).with_metrics(true);
                let store: std::sync::Arc<dyn Store> =
                    a2_store::open("memory:", options).await.unwrap();
                scenario(store.as_ref()).await;
            })
        })
    });
    assert_eq!(spans.len(), 9);
    let calls: u64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == "a2_store_calls_total")
        .map(|(.., value)| match value {
            metrics_util::debugging::DebugValue::Counter(count) => count,
            _ => 0,
        })
        .sum();
    assert_eq!(calls, 9);
}
