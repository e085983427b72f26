//! Checking a drained load run against its plan, through the store alone
//! (plus what the workers reported).

use std::collections::{BTreeMap, BTreeSet};

use a2_store_api::{ReadOptions, Store};

use super::plan::{LoadPlan, AGENT, AUDIT, AUDIT_LANE, DONE, JOB, MAX_FAILURES, NOTIFIER};
use super::worker::WorkerReport;

/// Checks that no head and attempt was handed out twice, that each
/// worker's lane completions went up, that every targeted consumer
/// completed each event exactly once
/// (one `done` marker per head, none for dead-lettered ones), that lanes and
/// the log consumer completed in log order, that attempts match the
/// injected failures and stalls, that the dead letters are exactly the
/// poisoned heads, that nothing is left pending, and that the workers'
/// counts match the plan. Returns the first problem found.
pub async fn verify(
    store: &dyn Store,
    plan: &LoadPlan,
    report: &WorkerReport,
) -> Result<(), String> {
    let expected = plan.expected();
    if !report.unexpected.is_empty() {
        return Err(format!(
            "{} unexpected outcomes, first: {:?}",
            report.unexpected.len(),
            report.unexpected.first()
        ));
    }
    let counts = [
        ("completed", report.completed, expected.completions),
        ("failed", report.failed, expected.failed),
        (
            "dead-lettered",
            report.dead_lettered,
            expected.dead_lettered,
        ),
        (
            "stalled",
            report.stalls_completed + report.stalls_superseded.len() as u64,
            expected.stalls,
        ),
    ];
    for (what, got, want) in counts {
        if got != want {
            return Err(format!(
                "workers report {got} {what}, the plan injects {want}"
            ));
        }
    }
    let mut claims = BTreeSet::new();
    for claim in &report.claims {
        if !claims.insert(claim) {
            return Err(format!(
                "{claim:?} was handed out twice: two holders had the same head and attempt"
            ));
        }
    }
    let outcomes = report.completed
        + report.failed
        + report.dead_lettered
        + report.stalls_superseded.len() as u64;
    if claims.len() as u64 != outcomes {
        return Err(format!(
            "{} claims handed out but {outcomes} outcomes reported",
            claims.len()
        ));
    }
    for order in &report.lane_orders {
        let mut last: BTreeMap<(&str, &str, &str), u64> = BTreeMap::new();
        for (session, consumer, lane, index) in order {
            let previous = last.insert((session, consumer, lane), *index);
            if previous.is_some_and(|previous| previous >= *index) {
                return Err(format!(
                    "a worker completed {session} ({consumer}, {lane}) {index} after {previous:?}: lane order violated"
                ));
            }
        }
    }
    let superseded: BTreeSet<(String, u64)> = report.stalls_superseded.iter().cloned().collect();
    let mut markers = 0u64;
    let mut dead = 0u64;
    for k in 0..plan.sessions {
        let session = plan.session_id(k);
        let rows = store
            .read(&session, ReadOptions::default())
            .await
            .map_err(|e| format!("{session}: read: {e}"))?;
        let mut jobs: BTreeMap<u64, u64> = BTreeMap::new();
        let mut done: BTreeMap<(String, Option<String>, u64), Vec<u32>> = BTreeMap::new();
        let mut last_in_lane: BTreeMap<(String, Option<String>), u64> = BTreeMap::new();
        for row in &rows {
            if row.event_type == JOB {
                let n = row
                    .payload
                    .get("n")
                    .and_then(serde_json::Value::as_u64)
                    .ok_or_else(|| format!("{session}: job without n at {}", row.index))?;
                jobs.insert(row.index, n);
                continue;
            }
            if row.event_type != DONE {
                return Err(format!("{session}: unexpected row {row:?}"));
            }
            let cause = row
                .cause
                .as_ref()
                .ok_or_else(|| format!("{session}: marker without cause at {}", row.index))?;
            markers += 1;
            if cause.lane.is_some() {
                let key = (cause.consumer.clone(), cause.lane.clone());
                let last = last_in_lane.insert(key.clone(), cause.index);
                if last.is_some_and(|last| last >= cause.index) {
                    return Err(format!(
                        "{session}: lane {key:?} completed {} after {:?}: lane order violated",
                        cause.index, last
                    ));
                }
            }
            done.entry((cause.consumer.clone(), cause.lane.clone(), cause.index))
                .or_default()
                .push(cause.attempt);
        }
        let mut poisoned = BTreeSet::new();
        for (index, n) in &jobs {
            for consumer in LoadPlan::targeted(*n) {
                let lane = match consumer {
                    AGENT => Some(LoadPlan::lane_of(*n)),
                    AUDIT => Some(AUDIT_LANE.to_owned()),
                    _ => None,
                };
                let key = (consumer.to_owned(), lane, *index);
                let attempts = done.remove(&key).unwrap_or_default();
                if LoadPlan::poisoned(consumer, *n) {
                    poisoned.insert(*index);
                    if !attempts.is_empty() {
                        return Err(format!("{session}: poisoned {key:?} was completed"));
                    }
                    continue;
                }
                let mut attempt = 1;
                if n % 10 == 3 {
                    attempt += 1;
                }
                if consumer == AGENT
                    && LoadPlan::stalls(*n)
                    && superseded.contains(&(session.clone(), *index))
                {
                    attempt += 1;
                }
                if attempts != [attempt] {
                    return Err(format!(
                        "{session}: {key:?} (event {n}) completed by attempts {attempts:?}, expected exactly once by attempt {attempt}"
                    ));
                }
            }
        }
        if let Some((key, attempts)) = done.iter().next() {
            return Err(format!(
                "{session}: completion of {key:?} (attempts {attempts:?}) that no event asked for"
            ));
        }
        let letters = store
            .dead_letters(&session)
            .await
            .map_err(|e| format!("{session}: dead_letters: {e}"))?;
        let lettered: BTreeSet<u64> = letters.iter().map(|h| h.event.index).collect();
        if lettered != poisoned
            || letters.iter().any(|h| {
                h.consumer != NOTIFIER
                    || h.dispatch.failure_count != MAX_FAILURES
                    || h.dispatch.attempt_count != MAX_FAILURES
            })
        {
            return Err(format!(
                "{session}: dead letters {letters:?}, expected the notifier at {poisoned:?} after {MAX_FAILURES} failures"
            ));
        }
        dead += letters.len() as u64;
        let cursors = store
            .cursors(&session)
            .await
            .map_err(|e| format!("{session}: cursors: {e}"))?;
        if let Some(busy) = cursors
            .iter()
            .find(|c| c.head.is_some() && c.dispatch.failed_at.is_none())
        {
            return Err(format!("{session}: work left pending: {busy:?}"));
        }
    }
    if markers != expected.completions || dead != expected.dead_lettered {
        return Err(format!(
            "the log holds {markers} completions and {dead} dead letters, the plan expects {} and {}",
            expected.completions, expected.dead_lettered
        ));
    }
    Ok(())
}
