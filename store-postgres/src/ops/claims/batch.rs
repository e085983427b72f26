//! `claim_work`'s claim of the next ready sessions, one or several, in one
//! transaction (`WorkSource::claim_next` and `claim_next_many`): each
//! statement runs once for every picked session instead of once per
//! session, and every decision is still made in Rust, session by session,
//! by the functions a claim of one session uses ([`take`]:
//! `Dispatch::take` on each walked head).

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use a2_store_api::order::compare_heads;
use a2_store_api::work::NextClaim;
use a2_store_api::{ClaimRequest, ClaimResult, ClaimWorkRequest, MAX_WORK_LIMIT};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::served::{decide_again, ProbeArgs, Probed};
use super::{sql, take, walk_sql, wanted, Candidates, Claimed, Taken};
use crate::cursor_table::{ManyCursorWrites, PUT_MANY, RELEASE_PINS};
use crate::db::{decode_state, SessionState, Stmt, Tx, STATE_WIDTH};
use crate::error::TxResult;
use crate::ops::work::pairs::Rows;
use crate::ops::work::PICK_MANY;
use crate::rows::{clear_of, index_of};

/// What a batch claim is asked for, beside its request and times.
pub(crate) struct Wanted<'a> {
    /// Sessions not to pick (visited by the call already).
    pub skip: &'a [String],
    /// How many sessions to pick at most.
    pub sessions: usize,
    /// How many heads to claim in all at most.
    pub heads: usize,
}

/// Claims up to `wanted.sessions` free ready sessions of a `one_step`
/// request in fairness order, up to `wanted.heads` heads in all, in one
/// transaction: the answer of `WorkSource::claim_next_many`.
///
/// Two round trips whatever the number of sessions, like a claim of one:
/// `BEGIN`, the pick ([`PICK_MANY`]: the sessions' work rows locked `FOR
/// UPDATE SKIP LOCKED`, the sessions set for the transaction), the due
/// heads' selection and the walk of every picked session (each a `LATERAL`
/// over them, [`sql::over_sessions`]) and the probe of the heads that
/// decide the sessions' work rows ([`sql::SERVED_PROBE`]) in the first; the
/// dead letters' pin releases, every cursor write ([`PUT_MANY`]), the work
/// rows that change (decided in Rust, `super::served`: one update, one
/// delete, each when needed), the session rows ([`sql::READ_SESSIONS`];
/// the `Busy` answer of a session that took nothing) and `COMMIT` in the
/// second. Due heads cost one more (their promotion and the walk of their
/// sessions again, together), as dead letters that use up a session's
/// walked rows do in a claim of one (and then, when the probe read too few
/// heads to decide a session's row, the writer's probe of its pair).
///
/// In between, each session in pick order is decided as a claim of one
/// with up to what the sessions before it left of the heads
/// ([`ClaimWorkRequest::session_request`]): its walked rows cut to that
/// share, each head's step by [`take`]. A pick of none ends the
/// transaction (awaited) and answers `Contended` or `Earliest`; one of
/// fewer sessions than wanted ends its answer with `Exhausted`.
pub(crate) async fn claim_next_many(
    tx: &Tx<'_>,
    request: &ClaimWorkRequest,
    now: i64,
    expires_at: i64,
    wanted_now: &Wanted<'_>,
    claimed: &Claimed,
) -> TxResult<Vec<NextClaim>> {
    let consumers = request.consumer_names();
    let most = i64::try_from(wanted_now.sessions.clamp(1, MAX_WORK_LIMIT)).unwrap_or(1);
    let pick_params: [&(dyn ToSql + Sync); 4] = [&consumers, &now, &wanted_now.skip, &most];
    let picked: Option<Vec<String>> = None;
    let due_params: [&(dyn ToSql + Sync); 2] = [&picked, &now];
    // Every session's walk: its candidates without the session, as a
    // claim of one with the most any session may take.
    let unknown = request.session_request("", wanted_now.heads);
    let first = Candidates::new(&unknown, now);
    let walk_limit = wanted(&unknown, 0);
    let mut walk_params = first.params(Some(&walk_limit));
    walk_params[0] = &picked;
    let Some(consumer) = consumers.first() else {
        return Err(
            a2_store_api::StoreError::corrupt_value("consumer of claim_work's pick").into(),
        );
    };
    let probe_args = ProbeArgs::new(consumer, now, walk_limit);
    let probe_params = probe_args.params();
    let statements = [
        Stmt::new(PICK_MANY, &pick_params),
        Stmt::new(due_many_sql(), &due_params),
        Stmt::new(walk_many_sql(), &walk_params),
        Stmt::new(sql::SERVED_PROBE, &probe_params),
    ];
    let mut answers = tx.pipeline(&statements).await?;
    let probed = answers.pop().unwrap_or_default();
    let walked = answers.pop().unwrap_or_default();
    let due = answers.pop().unwrap_or_default();
    let pick = answers.pop().unwrap_or_default();
    let Some(row) = pick.first() else {
        return Err(a2_store_api::StoreError::corrupt_value("answer of claim_work's pick").into());
    };
    let ids: Vec<String> = row.try_get(0)?;
    if ids.is_empty() {
        tx.end().await?;
        let contended = row.try_get::<_, Option<bool>>(2)?.unwrap_or(false);
        return Ok(vec![if contended {
            NextClaim::Contended { retry_at: now }
        } else {
            NextClaim::Earliest(row.try_get(3)?)
        }]);
    }
    let probed = Probed::read(&probed, &probe_args)?;
    let mut walked = by_session(walked)?;
    if !due.is_empty() {
        walked.extend(promote_and_walk(tx, &due, &walk_params[1..]).await?);
    }
    // Each session in pick order, as a claim of one with what is left
    // (each request made once its share is known, then only borrowed).
    let requests: Vec<OnceLock<ClaimRequest>> = ids.iter().map(|_| OnceLock::new()).collect();
    let mut left = wanted_now.heads;
    let mut takens: Vec<Taken<'_>> = Vec::with_capacity(requests.len());
    for (id, slot) in ids.iter().zip(&requests) {
        if left == 0 {
            break;
        }
        let session = slot.get_or_init(|| request.session_request(id, left));
        let share = usize::try_from(wanted(session, 0).unwrap_or(i64::MAX)).unwrap_or(usize::MAX);
        let mut rows = walked.remove(&session.session_id).unwrap_or_default();
        rows.truncate(share);
        let candidates = Candidates::new(session, now);
        let taken = take(tx, session, candidates, rows, now, expires_at).await?;
        left = left.saturating_sub(taken.heads.len());
        takens.push(taken);
    }
    let served: Vec<&ClaimRequest> = requests.iter().filter_map(OnceLock::get).collect();
    let mut answer = finish_many(tx, &served, takens, &probed, now, claimed).await?;
    if ids.len() < wanted_now.sessions {
        answer.push(NextClaim::Exhausted);
    }
    Ok(answer)
}

/// A walked row's place in claim order: `(head, consumer, lane)`.
type ClaimOrder = (i64, String, String);

/// The walked rows by session, each session's in claim order
/// (`(head, consumer, lane)`, the walk's order), so a cut keeps the first.
fn by_session(rows: Vec<Row>) -> TxResult<HashMap<String, Vec<Row>>> {
    let mut keyed: HashMap<String, Vec<(ClaimOrder, Row)>> = HashMap::new();
    for row in rows {
        // `CURSOR_COLUMNS` (consumer, lane, …, head at 5), …, the session last.
        let session_id: String = row.try_get(row.len().saturating_sub(1))?;
        let key: ClaimOrder = (row.try_get(5)?, row.try_get(0)?, row.try_get(1)?);
        keyed.entry(session_id).or_default().push((key, row));
    }
    Ok(keyed
        .into_iter()
        .map(|(session_id, mut rows)| {
            rows.sort_by(|(a, _), (b, _)| a.cmp(b));
            (session_id, rows.into_iter().map(|(_, row)| row).collect())
        })
        .collect())
}

/// Promotes the `due` heads ([`sql::PROMOTE_MANY`]) and walks their
/// sessions again (`walk`: the walk's parameters after the sessions), in
/// one round trip; the new walks by session, which replace the first ones
/// (whose rows stay locked and are candidates again).
async fn promote_and_walk(
    tx: &Tx<'_>,
    due: &[Row],
    walk: &[&(dyn ToSql + Sync)],
) -> TxResult<HashMap<String, Vec<Row>>> {
    let mut sessions = Vec::with_capacity(due.len());
    let mut consumers = Vec::with_capacity(due.len());
    let mut lanes = Vec::with_capacity(due.len());
    let mut slots = Vec::with_capacity(due.len());
    for row in due {
        consumers.push(row.try_get::<_, String>(0)?);
        lanes.push(row.try_get::<_, String>(1)?);
        slots.push(row.try_get::<_, i64>(2)?);
        sessions.push(row.try_get::<_, String>(3)?);
    }
    let mut again: Vec<String> = sessions.clone();
    again.sort();
    again.dedup();
    let again = Some(again);
    let promote_params: [&(dyn ToSql + Sync); 4] = [&sessions, &consumers, &lanes, &slots];
    let mut walk_params: Vec<&(dyn ToSql + Sync)> = vec![&again];
    walk_params.extend_from_slice(walk);
    let statements = [
        Stmt::new(sql::PROMOTE_MANY, &promote_params),
        Stmt::new(walk_many_sql(), &walk_params),
    ];
    let mut answers = tx.pipeline(&statements).await?;
    let walked = answers.pop().unwrap_or_default();
    let mut found = by_session(walked)?;
    // A session walked again that found nothing now has no rows at all.
    for session_id in again.iter().flatten() {
        found.entry(session_id.clone()).or_default();
    }
    Ok(found)
}

/// Writes what the sessions' claims took and commits, in one round trip,
/// then answers each session as `claim_available` would (the second half of
/// `Taken::finish`, for every session at once) and remembers the rows
/// claimed (see [`Claimed`]). `served` are the sessions decided, in pick
/// order, `takens` what each took, `probed` the heads that decide their
/// work rows.
async fn finish_many(
    tx: &Tx<'_>,
    served: &[&ClaimRequest],
    mut takens: Vec<Taken<'_>>,
    probed: &Probed,
    now: i64,
    claimed: &Claimed,
) -> TxResult<Vec<NextClaim>> {
    // Each served session's work row, as `WorkSummary::served_row` gives it.
    let mut work_rows = Rows::default();
    let undecided = probed.decide(
        served
            .iter()
            .zip(&takens)
            .map(|(request, taken)| (request.session_id.as_str(), taken.changed.as_slice())),
        &mut work_rows,
    );
    decide_again(tx, &undecided, now, &mut work_rows).await?;
    let pins: Vec<[&(dyn ToSql + Sync); 4]> = served
        .iter()
        .zip(&takens)
        .flat_map(|(request, taken)| {
            taken.released.iter().map(move |(consumer, lane, slot)| {
                let params: [&(dyn ToSql + Sync); 4] = [&request.session_id, consumer, lane, slot];
                params
            })
        })
        .collect();
    let mut statements: Vec<Stmt<'_>> = pins
        .iter()
        .map(|params| Stmt::new(RELEASE_PINS, params))
        .collect();
    let writes = ManyCursorWrites::new(served.iter().zip(&takens).flat_map(|(request, taken)| {
        taken
            .changed
            .iter()
            .map(move |cursor| (request.session_id.as_str(), cursor))
    }));
    let write_params = writes.as_ref().map(ManyCursorWrites::params);
    if let Some(params) = &write_params {
        statements.push(Stmt::new(PUT_MANY, params));
    }
    // A claim makes no row ready sooner (`served_row`: now at the latest),
    // so nobody is woken.
    let work_params = work_rows.params();
    Rows::push(&work_params, &mut statements);
    let took = |taken: &Taken<'_>| !taken.heads.is_empty() || !taken.dead_lettered.is_empty();
    let read: Vec<&str> = served
        .iter()
        .zip(&takens)
        .filter(|(_, taken)| took(taken))
        .map(|(request, _)| request.session_id.as_str())
        .collect();
    let read_params: [&(dyn ToSql + Sync); 1] = [&read];
    statements.push(Stmt::new(sql::READ_SESSIONS, &read_params));
    // A session that took nothing: its `Busy` answer, as in a claim of one.
    let retry_sql = sql::retry_at();
    let retry_params: Vec<Vec<&(dyn ToSql + Sync)>> = takens
        .iter()
        .filter(|taken| !took(taken))
        .map(|taken| taken.candidates.params(None))
        .collect();
    for params in &retry_params {
        statements.push(Stmt::new(&retry_sql, params));
    }
    let mut answers = tx.commit_with(&statements).await?;
    let mut retries: Vec<Option<i64>> = Vec::with_capacity(retry_params.len());
    for _ in 0..retry_params.len() {
        let rows = answers.pop().unwrap_or_default();
        retries.push(match rows.first() {
            Some(row) => row.try_get(0)?,
            None => None,
        });
    }
    let mut states: BTreeMap<String, SessionState> = BTreeMap::new();
    for row in &answers.pop().unwrap_or_default() {
        states.insert(row.try_get(STATE_WIDTH)?, decode_state(row)?);
    }
    let mut answer = Vec::with_capacity(takens.len());
    for (request, taken) in served.iter().zip(takens.iter_mut()) {
        let session_id = request.session_id.clone();
        if !took(taken) {
            let result = match retries.pop().flatten() {
                Some(retry_at) => ClaimResult::Busy { retry_at },
                None => ClaimResult::Settled,
            };
            answer.push(NextClaim::Session { session_id, result });
            continue;
        }
        let state = states.get(&session_id).copied().unwrap_or_default();
        let clear_index = clear_of(state.clear)?;
        let mut heads = std::mem::take(&mut taken.heads);
        let mut dead_lettered = std::mem::take(&mut taken.dead_lettered);
        for head in heads.iter_mut().chain(dead_lettered.iter_mut()) {
            head.clear_index = clear_index;
            head.incarnation = state.incarnation();
        }
        heads.sort_by(compare_heads);
        dead_lettered.sort_by(compare_heads);
        for cursor in &taken.changed {
            claimed.remember(&session_id, cursor, &state);
        }
        let result = ClaimResult::Claimed {
            heads,
            dead_lettered,
            head: index_of(state.head)?,
        };
        answer.push(NextClaim::Session { session_id, result });
    }
    Ok(answer)
}

/// [`sql::DUE`] over the picked sessions, formatted once.
fn due_many_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| sql::over_sessions(sql::DUE))
}

/// [`walk_sql`] over the picked sessions, formatted once.
fn walk_many_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| sql::over_sessions(walk_sql()))
}

/// The batch claim's statements a new connection prepares (see `crate::warm`).
pub(crate) fn hot_statements() -> [&'static str; 5] {
    [
        due_many_sql(),
        walk_many_sql(),
        sql::SERVED_PROBE,
        sql::PROMOTE_MANY,
        sql::READ_SESSIONS,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statements over the picked sessions read the session only
    /// from the `LATERAL` over [`sql::PICKED_SESSIONS`]: `$1` is only there.
    #[test]
    fn the_statements_over_sessions_read_each_session_from_the_lateral() {
        for many in [due_many_sql(), walk_many_sql()] {
            assert_eq!(many.matches("$1").count(), 1, "{many}");
            assert_eq!(many.matches(sql::PICKED_SESSIONS).count(), 1, "{many}");
            assert!(many.contains("c.session_id = s.session_id "), "{many}");
        }
        assert!(walk_many_sql().contains("p.session_id IN (s.session_id, '')"));
    }
}
