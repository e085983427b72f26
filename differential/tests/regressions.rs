//! One test per divergence the differential test found, as the shrunk
//! reproduction, run on every backend. Each failed, saying what is
//! expected, until the backend was fixed; they stay as regression tests.

mod support;

use std::sync::Arc;

use a2_conformance::StoreFactory;
use a2_store_api::*;
use serde_json::json;

async fn open(factory: &dyn StoreFactory) -> Arc<dyn Store> {
    factory
        .create(
            Arc::new(ManualClock::new(1_000_000)),
            Arc::new(CounterIds::new("id-")),
        )
        .await
        .unwrap()
}

/// Divergence 1 (fixed in SQLite and PostgreSQL): declarations passed with an empty batch (or a replay, or a
/// redrive that finds nothing) must refresh log cursor types (CONTRACT,
/// Cursors: "Declarations passed to any call refresh the cursor's types").
async fn empty_append_refreshes_log_types(factory: &dyn StoreFactory) {
    let store = open(factory).await;
    let declare = |types: Option<Vec<String>>| AppendOptions {
        consumers: Some(vec![ConsumerDeclaration::log("audit", "log", types, false)]),
        origin_index: None,
    };
    store
        .append("s0", vec![NewEvent::new("msg", json!(0))], declare(None))
        .await
        .unwrap();
    store
        .append("s0", vec![], declare(Some(vec!["msg".into()])))
        .await
        .unwrap();
    let cursors = store.cursors("s0").await.unwrap();
    assert_eq!(
        cursors[0].types,
        Some(vec!["msg".to_owned()]),
        "{}: an empty append declaring (audit, log) with types [msg] must refresh the cursor's types, as the memory reference does",
        factory.name()
    );
    store
        .redrive(RedriveRequest {
            incarnation: None,
            lane: None,
            session_id: "s0".into(),
            consumer: "agent".into(),
            index: 1,
            action: RedriveAction::Retry,
            consumers: Some(vec![ConsumerDeclaration::log("audit", "log", None, false)]),
        })
        .await
        .unwrap();
    let cursors = store.cursors("s0").await.unwrap();
    assert_eq!(
        cursors[0].types,
        None,
        "{}: a redrive that finds nothing but declares (audit, log) with all types must refresh the cursor's types, as the memory reference does",
        factory.name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_empty_append_refreshes_log_types() {
    empty_append_refreshes_log_types(&support::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_empty_append_refreshes_log_types() {
    empty_append_refreshes_log_types(&support::SqliteMemory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_empty_append_refreshes_log_types() {
    let Some(factory) = support::Postgres::from_env("postgres_empty_append_refreshes_log_types")
    else {
        return;
    };
    empty_append_refreshes_log_types(&factory).await;
}

/// Divergence 3 (fixed in SQLite): a completion at or below the clear is
/// superseded, but its declarations must still refresh log cursor types,
/// as on every other path.
async fn completion_below_the_clear_refreshes_log_types(factory: &dyn StoreFactory) {
    let store = open(factory).await;
    store
        .append(
            "s0",
            vec![NewEvent::new("msg", json!(0))],
            AppendOptions {
                consumers: Some(vec![ConsumerDeclaration::log(
                    "audit",
                    "L1",
                    Some(vec!["msg".into()]),
                    false,
                )]),
                origin_index: None,
            },
        )
        .await
        .unwrap();
    store
        .clear(ClearRequest {
            incarnation: None,
            session_id: "s0".into(),
            if_last_index: None,
            cause: None,
        })
        .await
        .unwrap();
    let result = store
        .complete_attempt(CompleteRequest {
            incarnation: None,
            session_id: "s0".into(),
            consumer: "agent".into(),
            lane: None,
            index: 0,
            attempt: 1,
            events: vec![],
            consumers: Some(vec![ConsumerDeclaration::log("audit", "L1", None, false)]),
        })
        .await
        .unwrap();
    assert_eq!(result, CompleteResult::Superseded);
    let cursors = store.cursors("s0").await.unwrap();
    assert_eq!(
        cursors[0].types,
        None,
        "{}: a superseded completion below the clear declaring (audit, L1) with all types must refresh the cursor's types, as the memory reference does",
        factory.name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_completion_below_the_clear_refreshes_log_types() {
    completion_below_the_clear_refreshes_log_types(&support::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_completion_below_the_clear_refreshes_log_types() {
    completion_below_the_clear_refreshes_log_types(&support::SqliteMemory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_completion_below_the_clear_refreshes_log_types() {
    let Some(factory) =
        support::Postgres::from_env("postgres_completion_below_the_clear_refreshes_log_types")
    else {
        return;
    };
    completion_below_the_clear_refreshes_log_types(&factory).await;
}

/// Divergence 4 (fixed in SQLite): one consumer has a dead-lettered lane
/// head and a dead-lettered event head at the same index; `redrive` names
/// only the consumer and index, and must pick the first of them in
/// `dead_letters` order, `(index, consumer, lane)` with no lane first, as
/// the reference does (SQLite picked the cursor created first).
async fn redrive_picks_the_first_dead_letter_in_order(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(1_000_000);
    let store = factory
        .create(Arc::new(clock.clone()), Arc::new(CounterIds::new("id-")))
        .await
        .unwrap();
    let event = NewEvent::new("msg", json!(0))
        .with_target(Target::lane("worker", "L2"))
        .with_target(Target::event("worker"));
    store
        .append("s0", vec![event], AppendOptions::default())
        .await
        .unwrap();
    let claim = |max_failures| ClaimRequest {
        session_id: "s0".into(),
        holder: "w0".into(),
        ttl_ms: Some(500),
        max_failures,
        ..ClaimRequest::default()
    };
    store.claim_available(claim(None)).await.unwrap();
    clock.advance(1000);
    store.claim_available(claim(Some(1))).await.unwrap();
    assert_eq!(store.dead_letters("s0").await.unwrap().len(), 2);
    let redriven = store
        .redrive(RedriveRequest {
            incarnation: None,
            lane: None,
            session_id: "s0".into(),
            consumer: "worker".into(),
            index: 1,
            action: RedriveAction::Retry,
            consumers: None,
        })
        .await
        .unwrap();
    assert!(redriven.redriven);
    let left: Vec<Option<String>> = store
        .dead_letters("s0")
        .await
        .unwrap()
        .into_iter()
        .map(|head| head.lane)
        .collect();
    assert_eq!(
        left,
        vec![Some("L2".to_owned())],
        "{}: redrive(worker, 1) must retry the event cursor (no lane sorts first) and leave the lane's dead letter",
        factory.name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_redrive_picks_the_first_dead_letter_in_order() {
    redrive_picks_the_first_dead_letter_in_order(&support::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_redrive_picks_the_first_dead_letter_in_order() {
    redrive_picks_the_first_dead_letter_in_order(&support::SqliteMemory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_redrive_picks_the_first_dead_letter_in_order() {
    let Some(factory) =
        support::Postgres::from_env("postgres_redrive_picks_the_first_dead_letter_in_order")
    else {
        return;
    };
    redrive_picks_the_first_dead_letter_in_order(&factory).await;
}

/// Divergence 2 (fixed in SQLite): a batch refused for a target-lane conflict must not draw
/// ids from the generator ("a failed call changes nothing"; stores on equal
/// generators must agree).
async fn refused_batch_draws_no_ids(factory: &dyn StoreFactory) {
    let store = open(factory).await;
    let declared = AppendOptions {
        consumers: Some(vec![ConsumerDeclaration::log("audit", "log", None, false)]),
        origin_index: None,
    };
    store
        .append("s0", vec![NewEvent::new("msg", json!(0))], declared)
        .await
        .unwrap();
    let conflict = store
        .append(
            "s0",
            vec![
                NewEvent::new("msg", json!(0)).with_target(Target::lane("audit", "log")),
                NewEvent::new("msg", json!(0)),
            ],
            AppendOptions::default(),
        )
        .await;
    assert_eq!(conflict.unwrap_err().code(), ErrorCode::InvalidInput);
    let next = store
        .append(
            "s0",
            vec![NewEvent::new("msg", json!(0))],
            AppendOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        next.events[0].id,
        "id-2",
        "{}: the refused batch drew ids from the generator (memory gives id-2 here)",
        factory.name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_refused_batch_draws_no_ids() {
    refused_batch_draws_no_ids(&support::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_refused_batch_draws_no_ids() {
    refused_batch_draws_no_ids(&support::SqliteMemory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_refused_batch_draws_no_ids() {
    let Some(factory) = support::Postgres::from_env("postgres_refused_batch_draws_no_ids") else {
        return;
    };
    refused_batch_draws_no_ids(&factory).await;
}

/// Divergence 5 (fixed in the store-api rules every backend shares, the
/// reference included): a renewal that shortened a lease left the work
/// row at the old expiry, so once the new lease ended `claim_work` answered
/// `Busy` with the old expiry while the head was claimable, and `list_work`
/// reported `ready_since` in the future. Renewals now rewrite their
/// consumers' rows.
async fn shortened_renewal_makes_work_claimable_at_the_new_expiry(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(1_000_000);
    let store = factory
        .create(Arc::new(clock.clone()), Arc::new(CounterIds::new("id-")))
        .await
        .unwrap();
    let agent = || vec![ConsumerDeclaration::targeted("agent")];
    store
        .append(
            "s0",
            vec![NewEvent::new("msg", json!(0)).with_target(Target::event("agent"))],
            AppendOptions::default(),
        )
        .await
        .unwrap();
    let claimed = store
        .claim_work(ClaimWorkRequest::new("w0", agent(), 3_000))
        .await
        .unwrap();
    assert_eq!(claimed.heads().count(), 1, "{claimed:?}");
    let renewed = store
        .renew_claims(RenewRequest {
            incarnation: None,
            session_id: "s0".into(),
            holder: "w0".into(),
            claims: vec![HeldClaim {
                cursor: CursorRef::new("agent", None, 1),
                attempt: 1,
            }],
            ttl_ms: Some(500),
            expires_at_ms: None,
        })
        .await
        .unwrap();
    assert_eq!(renewed.renewed.len(), 1, "{renewed:?}");
    let busy = store
        .claim_work(ClaimWorkRequest::new("w1", agent(), 3_000))
        .await
        .unwrap();
    assert!(
        matches!(busy, ClaimWorkResult::Busy { retry_at } if retry_at <= 1_000_500),
        "{}: after renewing the lease to end at 1000500, claim_work must answer Busy no later than then, got {busy:?}",
        factory.name()
    );
    clock.advance(600);
    let again = store
        .claim_work(ClaimWorkRequest::new("w1", agent(), 3_000))
        .await
        .unwrap();
    assert_eq!(
        again.heads().count(),
        1,
        "{}: the renewed lease ended at 1000500; at 1000600 claim_work must claim the head again, got {again:?}",
        factory.name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_shortened_renewal_makes_work_claimable_at_the_new_expiry() {
    shortened_renewal_makes_work_claimable_at_the_new_expiry(&support::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_shortened_renewal_makes_work_claimable_at_the_new_expiry() {
    shortened_renewal_makes_work_claimable_at_the_new_expiry(&support::SqliteMemory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_shortened_renewal_makes_work_claimable_at_the_new_expiry() {
    let Some(factory) = support::Postgres::from_env(
        "postgres_shortened_renewal_makes_work_claimable_at_the_new_expiry",
    ) else {
        return;
    };
    shortened_renewal_makes_work_claimable_at_the_new_expiry(&factory).await;
}

/// Divergence 6 (fixed with divergence 5): after a renewal extended a
/// lease the work row was early, and since the reference rewrites every
/// row of a session on a failure while SQLite and PostgreSQL rewrite only
/// the failed consumer's, `list_work` then reported `ready_since` 1000500
/// (the old lease end) there and 1001000 (when the work became claimable)
/// in the reference. Renewals rewriting their consumers' rows make every
/// backend exact.
async fn renewal_then_other_work_keeps_ready_since(factory: &dyn StoreFactory) {
    let clock = ManualClock::new(1_000_000);
    let store = factory
        .create(Arc::new(clock.clone()), Arc::new(CounterIds::new("id-")))
        .await
        .unwrap();
    store
        .append(
            "s0",
            vec![
                NewEvent::new("msg", json!(0)).with_target(Target::event("agent")),
                NewEvent::new("msg", json!(0)).with_target(Target::event("worker")),
            ],
            AppendOptions::default(),
        )
        .await
        .unwrap();
    store
        .claim_available(ClaimRequest {
            session_id: "s0".into(),
            holder: "w0".into(),
            ttl_ms: Some(500),
            ..ClaimRequest::default()
        })
        .await
        .unwrap();
    store
        .renew_claims(RenewRequest {
            incarnation: None,
            session_id: "s0".into(),
            holder: "w0".into(),
            claims: vec![HeldClaim {
                cursor: CursorRef::new("agent", None, 1),
                attempt: 1,
            }],
            ttl_ms: Some(1000),
            expires_at_ms: None,
        })
        .await
        .unwrap();
    store
        .fail_attempt(FailRequest {
            incarnation: None,
            session_id: "s0".into(),
            consumer: "worker".into(),
            lane: None,
            index: 2,
            attempt: 1,
            error: "handler failed".into(),
            max_failures: Some(1),
            retry_after_ms: None,
        })
        .await
        .unwrap();
    clock.advance(1000);
    let listed = store
        .list_work(ListWork {
            consumers: vec!["agent".into()],
            ..ListWork::default()
        })
        .await
        .unwrap();
    assert_eq!(
        listed.first().and_then(|work| work.ready_since),
        Some(1_001_000),
        "{}: agent's renewed lease ended at 1001000, when its work became claimable; the reference lists ready_since 1001000, got {listed:?}",
        factory.name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_renewal_then_other_work_keeps_ready_since() {
    renewal_then_other_work_keeps_ready_since(&support::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_renewal_then_other_work_keeps_ready_since() {
    renewal_then_other_work_keeps_ready_since(&support::SqliteMemory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_renewal_then_other_work_keeps_ready_since() {
    let Some(factory) =
        support::Postgres::from_env("postgres_renewal_then_other_work_keeps_ready_since")
    else {
        return;
    };
    renewal_then_other_work_keeps_ready_since(&factory).await;
}
