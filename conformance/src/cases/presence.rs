//! Presence: last writer wins per field by `at`, equal `at` lets the newer
//! call win, expiry from the store clock, tombstones.

use std::collections::BTreeMap;

use a2_store_api::{ErrorCode, PresenceMeta, PresenceResult, PresenceRow};
use serde_json::{json, Value};

use crate::support::*;

fn values(fields: &[(&str, Value)]) -> BTreeMap<String, Value> {
    fields
        .iter()
        .map(|(field, value)| ((*field).to_owned(), value.clone()))
        .collect()
}

fn meta(at: i64, ttl_ms: i64) -> PresenceMeta {
    PresenceMeta {
        at,
        seen: None,
        ttl_ms,
    }
}

async fn set(
    cx: &Cx,
    s: &str,
    who: &str,
    fields: &[(&str, Value)],
    at: i64,
) -> std::result::Result<PresenceResult, Failure> {
    Ok(cx
        .store
        .set_presence(s, who, values(fields), meta(at, TTL))
        .await?)
}

/// `(participant, field, value)` of every live row.
async fn live(cx: &Cx, s: &str) -> std::result::Result<Vec<(String, String, Value)>, Failure> {
    Ok(cx
        .store
        .read_presence(s)
        .await?
        .into_iter()
        .map(|row| (row.participant, row.field, row.value))
        .collect())
}

fn row(who: &str, field: &str, value: Value) -> (String, String, Value) {
    (who.to_owned(), field.to_owned(), value)
}

/// A write is read back with its value, seen index, writer time and expiry
/// (store clock + ttl), and reported as applied.
pub(crate) async fn presence_write_is_read_back(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.advance(50);
    let result = cx
        .store
        .set_presence(
            &s,
            "ann",
            values(&[("typing", json!(true)), ("cursor", json!({"line": 3}))]),
            PresenceMeta {
                at: 7,
                seen: Some(4),
                ttl_ms: 2_000,
            },
        )
        .await?;
    ensure_eq!(
        result,
        PresenceResult::new(
            values(&[("cursor", json!({"line": 3})), ("typing", json!(true))]),
            2
        )
    );
    let rows = cx.store.read_presence(&s).await?;
    let expected = |field: &str, value: Value| {
        PresenceRow::new("ann", field, value, Some(4), 7, T0 + 50 + 2_000)
    };
    ensure_eq!(
        rows,
        vec![
            expected("cursor", json!({"line": 3})),
            expected("typing", json!(true)),
        ]
    );
    Ok(())
}

/// Rows are sorted by participant, then field.
pub(crate) async fn presence_rows_sorted_by_participant_then_field(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    set(&cx, &s, "zoe", &[("b", json!(1)), ("a", json!(2))], 1).await?;
    set(&cx, &s, "ann", &[("z", json!(3))], 1).await?;
    ensure_eq!(
        live(&cx, &s).await?,
        vec![
            row("ann", "z", json!(3)),
            row("zoe", "a", json!(2)),
            row("zoe", "b", json!(1)),
        ]
    );
    Ok(())
}

/// A later `at` overwrites a field.
pub(crate) async fn presence_later_at_wins(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    set(&cx, &s, "ann", &[("status", json!("away"))], 10).await?;
    let result = set(&cx, &s, "ann", &[("status", json!("here"))], 11).await?;
    ensure_eq!(result.applied_count, 1);
    ensure_eq!(
        live(&cx, &s).await?,
        vec![row("ann", "status", json!("here"))]
    );
    Ok(())
}

/// An older `at` is skipped for that field only, and not reported as applied.
pub(crate) async fn presence_older_at_is_skipped(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    set(&cx, &s, "ann", &[("status", json!("here"))], 10).await?;
    let result = set(
        &cx,
        &s,
        "ann",
        &[("status", json!("stale")), ("mood", json!("ok"))],
        9,
    )
    .await?;
    ensure_eq!(
        result,
        PresenceResult::new(values(&[("mood", json!("ok"))]), 1)
    );
    ensure_eq!(
        live(&cx, &s).await?,
        vec![
            row("ann", "mood", json!("ok")),
            row("ann", "status", json!("here"))
        ]
    );
    Ok(())
}

/// With an equal `at` the newer call wins.
pub(crate) async fn presence_equal_at_newer_call_wins(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    set(&cx, &s, "ann", &[("status", json!("first"))], 10).await?;
    let result = set(&cx, &s, "ann", &[("status", json!("second"))], 10).await?;
    ensure_eq!(result.applied_count, 1);
    ensure_eq!(
        live(&cx, &s).await?,
        vec![row("ann", "status", json!("second"))]
    );
    Ok(())
}

/// Expired entries are not read (expiry at `expires_at <= now`).
pub(crate) async fn presence_expired_entries_are_not_read(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    set(&cx, &s, "ann", &[("status", json!("here"))], 10).await?;
    cx.advance(TTL - 1);
    ensure_eq!(live(&cx, &s).await?.len(), 1);
    cx.advance(1);
    ensure_eq!(live(&cx, &s).await?, vec![]);
    Ok(())
}

/// An expired entry never blocks a write, whatever its `at`.
pub(crate) async fn presence_expired_entry_never_blocks(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    set(&cx, &s, "ann", &[("status", json!("future"))], 1_000).await?;
    cx.advance(TTL);
    let result = set(&cx, &s, "ann", &[("status", json!("now"))], 5).await?;
    ensure_eq!(result.applied_count, 1);
    ensure_eq!(
        live(&cx, &s).await?,
        vec![row("ann", "status", json!("now"))]
    );
    Ok(())
}

/// The TTL counts from the store clock, not from the writer's `at`.
pub(crate) async fn presence_ttl_counts_from_store_clock(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.store
        .set_presence(&s, "ann", values(&[("x", json!(1))]), meta(5, 300))
        .await?;
    let rows = cx.store.read_presence(&s).await?;
    ensure_eq!(
        rows.iter().map(|row| row.expires_at).collect::<Vec<_>>(),
        vec![T0 + 300]
    );
    Ok(())
}

/// A `null` deletes a field (a tombstone, not read) and is reported as applied `null`.
pub(crate) async fn presence_null_is_a_tombstone(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    set(
        &cx,
        &s,
        "ann",
        &[("status", json!("here")), ("x", json!(1))],
        10,
    )
    .await?;
    let result = set(&cx, &s, "ann", &[("status", Value::Null)], 11).await?;
    ensure_eq!(
        result,
        PresenceResult::new(values(&[("status", Value::Null)]), 1)
    );
    ensure_eq!(live(&cx, &s).await?, vec![row("ann", "x", json!(1))]);
    Ok(())
}

/// A tombstone blocks older writes from bringing the field back; newer writes do.
pub(crate) async fn presence_tombstone_blocks_older_writes(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    set(&cx, &s, "ann", &[("status", json!("here"))], 10).await?;
    set(&cx, &s, "ann", &[("status", Value::Null)], 20).await?;
    let older = set(&cx, &s, "ann", &[("status", json!("zombie"))], 15).await?;
    ensure_eq!(older.applied_count, 0);
    ensure_eq!(live(&cx, &s).await?, vec![]);
    let newer = set(&cx, &s, "ann", &[("status", json!("back"))], 21).await?;
    ensure_eq!(newer.applied_count, 1);
    ensure_eq!(
        live(&cx, &s).await?,
        vec![row("ann", "status", json!("back"))]
    );
    Ok(())
}

/// A tombstone expires like any entry; then older writes land again.
pub(crate) async fn presence_expired_tombstone_no_longer_blocks(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    set(&cx, &s, "ann", &[("status", Value::Null)], 20).await?;
    cx.advance(TTL);
    let result = set(&cx, &s, "ann", &[("status", json!("again"))], 1).await?;
    ensure_eq!(result.applied_count, 1);
    ensure_eq!(
        live(&cx, &s).await?,
        vec![row("ann", "status", json!("again"))]
    );
    Ok(())
}

/// Presence is per session and per participant.
pub(crate) async fn presence_is_per_session_and_participant(cx: Cx) -> CaseResult {
    let (s1, s2) = (cx.session_id("one"), cx.session_id("two"));
    set(&cx, &s1, "ann", &[("status", json!("a"))], 10).await?;
    let other = set(&cx, &s1, "bob", &[("status", json!("b"))], 1).await?;
    ensure_eq!(other.applied_count, 1);
    ensure_eq!(live(&cx, &s2).await?, vec![]);
    ensure_eq!(live(&cx, &s1).await?.len(), 2);
    Ok(())
}

/// A non-positive presence TTL or an empty participant is `InvalidInput`; nothing is written.
pub(crate) async fn presence_invalid_input_writes_nothing(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    for ttl in [0, -1] {
        ensure_code!(
            cx.store
                .set_presence(&s, "ann", values(&[("x", json!(1))]), meta(1, ttl))
                .await,
            ErrorCode::InvalidInput
        );
    }
    ensure_code!(
        cx.store
            .set_presence(&s, "", values(&[("x", json!(1))]), meta(1, TTL))
            .await,
        ErrorCode::InvalidInput
    );
    ensure_eq!(live(&cx, &s).await?, vec![]);
    Ok(())
}
