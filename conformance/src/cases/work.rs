//! `claim_work` and `list_work`: work found, claimed fairly and waited for
//! across sessions.
//!
//! Stores may be shared by cases running at once, and these operations
//! look at every session, so each case serves consumers of its own
//! ([`Cx::consumer`]): no other case's work is ever seen.

use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store_api::{
    ClaimRequest, ClaimWorkRequest, ClaimWorkResult, ClearRequest, ConsumerDeclaration, ErrorCode,
    FailRequest, Head, ListWork, NewEvent, RedriveAction, RedriveRequest, SessionWork, Store,
    Target, MAX_WAIT_MS, MAX_WORK_LIMIT,
};
use serde_json::json;

use crate::support::*;

/// How long a waiting claim may take to wake before a case calls it lost:
/// far above any wake-up delay, far below the wait itself.
const WAKE_BOUND: Duration = Duration::from_secs(5);

/// A wait longer than [`WAKE_BOUND`], so a claim that answers in time was woken.
pub(crate) const LONG_WAIT_MS: i64 = 20_000;

impl Cx {
    /// A consumer name unique to this case.
    pub fn consumer(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    /// A cross-session claim by `holder` for the case's `consumers` (targeted
    /// declarations), with the suite's TTL, claiming up to `limit` heads.
    pub fn work(&self, holder: &str, consumers: &[&str], limit: usize) -> ClaimWorkRequest {
        ClaimWorkRequest::new(
            holder,
            consumers
                .iter()
                .map(|name| ConsumerDeclaration::targeted(self.consumer(name)))
                .collect(),
            TTL,
        )
        .with_limit(limit)
    }

    /// Lists the work of the case's `consumers`.
    pub fn list(&self, consumers: &[&str]) -> ListWork {
        ListWork {
            consumers: consumers.iter().map(|name| self.consumer(name)).collect(),
            ..ListWork::default()
        }
    }

    /// `text` with the case's prefix taken out of session and consumer names.
    fn local(&self, text: &str) -> String {
        text.replace(&format!("{}-", self.prefix), "")
    }

    /// The claimed heads as `"session index consumer/lane #attempt"`, in
    /// the order served; any outcome but `Claimed` fails the case.
    fn served(&self, result: &ClaimWorkResult) -> std::result::Result<Vec<String>, Failure> {
        let ClaimWorkResult::Claimed { sessions } = result else {
            return Err(Failure::Fail(format!("expected Claimed, got {result:?}")));
        };
        Ok(sessions
            .iter()
            .flat_map(|session| {
                head_summaries(&session.heads)
                    .into_iter()
                    .map(|head| self.local(&format!("{} {head}", session.session_id)))
            })
            .collect())
    }

    /// The listing as `"session claimable/busy/dead ready_since next_expiry"`
    /// with times relative to [`T0`] (`-` when absent).
    fn listed(&self, work: &[SessionWork]) -> Vec<String> {
        let time = |at: Option<i64>| at.map_or("-".to_owned(), |at| format!("+{}", at - T0));
        work.iter()
            .map(|session| {
                format!(
                    "{} {}/{}/{} {} {}",
                    self.local(&session.session_id),
                    session.claimable,
                    session.busy,
                    session.dead_lettered,
                    time(session.ready_since),
                    time(session.next_expiry)
                )
            })
            .collect()
    }
}

/// The one claimed head of a `Claimed` result with one session and one head.
fn single(result: &ClaimWorkResult) -> std::result::Result<(String, Head), Failure> {
    let mut heads = result.heads();
    match (heads.next(), heads.next()) {
        (Some((session, head)), None) => Ok((session.to_owned(), head.clone())),
        _ => Err(Failure::Fail(format!(
            "expected exactly one claimed head, got {result:?}"
        ))),
    }
}

/// The `retry_at` of a `Busy` result; any other outcome fails the case.
pub(crate) fn work_busy(result: &ClaimWorkResult) -> std::result::Result<i64, Failure> {
    match result {
        ClaimWorkResult::Busy { retry_at } => Ok(*retry_at),
        other => Err(Failure::Fail(format!("expected Busy, got {other:?}"))),
    }
}

/// Fails the case unless the result is `Settled`.
fn work_settled(result: &ClaimWorkResult) -> CaseResult {
    match result {
        ClaimWorkResult::Settled => Ok(()),
        other => Err(Failure::Fail(format!("expected Settled, got {other:?}"))),
    }
}

/// `n` events with ids `{prefix}0..` each targeted at `consumer`'s event cursor.
fn events_for(prefix: &str, consumer: &str, n: usize) -> Vec<NewEvent> {
    (0..n)
        .map(|k| to_event(&format!("{prefix}{k}"), consumer))
        .collect()
}

/// Bad input is `InvalidInput` and changes nothing: no consumers, a lease
/// not given exactly once, an empty or oversized session list, limits of 0
/// or above the maximum, and a wait of 0, negative or above the maximum.
pub(crate) async fn work_claim_with_bad_input_is_invalid(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(&s, vec![to_event("a", &agent)]).await?;
    let good = cx.work("w", &["agent"], 1);
    let too_many: Vec<String> = (0..=MAX_WORK_LIMIT).map(|n| format!("s{n}")).collect();
    let bad: Vec<(&str, ClaimWorkRequest)> = vec![
        (
            "empty holder",
            ClaimWorkRequest {
                holder: String::new(),
                ..good.clone()
            },
        ),
        (
            "no consumers",
            ClaimWorkRequest {
                consumers: vec![],
                ..good.clone()
            },
        ),
        (
            "empty consumer name",
            ClaimWorkRequest {
                consumers: vec![ConsumerDeclaration::targeted("")],
                ..good.clone()
            },
        ),
        (
            "no lease",
            ClaimWorkRequest {
                ttl_ms: None,
                ..good.clone()
            },
        ),
        (
            "two leases",
            ClaimWorkRequest {
                expires_at_ms: Some(T0 + 1),
                ..good.clone()
            },
        ),
        (
            "zero ttl",
            ClaimWorkRequest {
                ttl_ms: Some(0),
                ..good.clone()
            },
        ),
        (
            "empty session list",
            ClaimWorkRequest {
                sessions: Some(vec![]),
                ..good.clone()
            },
        ),
        (
            "empty session id",
            ClaimWorkRequest {
                sessions: Some(vec![s.clone(), String::new()]),
                ..good.clone()
            },
        ),
        (
            "oversized session list",
            ClaimWorkRequest {
                sessions: Some(too_many),
                ..good.clone()
            },
        ),
        (
            "zero limit",
            ClaimWorkRequest {
                limit: Some(0),
                ..good.clone()
            },
        ),
        (
            "oversized limit",
            ClaimWorkRequest {
                limit: Some(MAX_WORK_LIMIT + 1),
                ..good.clone()
            },
        ),
        (
            "zero session limit",
            ClaimWorkRequest {
                session_limit: Some(0),
                ..good.clone()
            },
        ),
        (
            "zero per-session limit",
            ClaimWorkRequest {
                per_session_limit: Some(0),
                ..good.clone()
            },
        ),
        ("zero wait", good.clone().with_wait_ms(0)),
        ("negative wait", good.clone().with_wait_ms(-5)),
        ("oversized wait", good.clone().with_wait_ms(MAX_WAIT_MS + 1)),
    ];
    for (what, request) in bad {
        ensure_unchanged!(cx, &s, {
            let result = cx.store.claim_work(request).await;
            ensure!(
                matches!(&result, Err(error) if error.code() == ErrorCode::InvalidInput),
                "{what}: expected InvalidInput, got {result:?}"
            );
        });
    }
    ensure_eq!(
        cx.served(&cx.store.claim_work(good).await?)?,
        strs(&["s 1 agent/- #1"])
    );
    Ok(())
}

/// `list_work` with no consumers, an empty name or a page size of 0 or
/// above the maximum is `InvalidInput`.
pub(crate) async fn list_work_with_bad_input_is_invalid(cx: Cx) -> CaseResult {
    let good = cx.list(&["agent"]);
    let bad = vec![
        ListWork {
            consumers: vec![],
            ..good.clone()
        },
        ListWork {
            consumers: vec![String::new()],
            ..good.clone()
        },
        ListWork {
            limit: Some(0),
            ..good.clone()
        },
        ListWork {
            limit: Some(MAX_WORK_LIMIT + 1),
            ..good.clone()
        },
    ];
    for request in bad {
        ensure_code!(cx.store.list_work(request).await, ErrorCode::InvalidInput);
    }
    ensure_eq!(cx.store.list_work(good).await?, vec![]);
    Ok(())
}

/// Sessions are served by how long their work has waited, not by id: the
/// session whose work became claimable first comes first.
pub(crate) async fn work_claim_serves_longest_waiting_session_first(cx: Cx) -> CaseResult {
    let agent = cx.consumer("agent");
    for name in ["b", "c", "a"] {
        cx.append(&cx.session_id(name), vec![to_lane(name, &agent, "L")])
            .await?;
        cx.advance(10);
    }
    let result = cx.store.claim_work(cx.work("w", &["agent"], 3)).await?;
    ensure_eq!(
        cx.served(&result)?,
        strs(&["b 1 agent/L #1", "c 1 agent/L #1", "a 1 agent/L #1"])
    );
    let ClaimWorkResult::Claimed { sessions } = &result else {
        return Err(Failure::Fail("expected Claimed".to_owned()));
    };
    for session in sessions {
        ensure_eq!(session.head, 1);
        ensure_eq!(session.dead_lettered, vec![]);
    }
    Ok(())
}

/// A served session still claimable goes behind every session waiting, so
/// a backlog is served once per round beside the others, one head per
/// session by default.
pub(crate) async fn work_claim_rotates_a_backlog_behind_the_others(cx: Cx) -> CaseResult {
    let agent = cx.consumer("agent");
    cx.append(&cx.session_id("big"), events_for("big", &agent, 5))
        .await?;
    cx.advance(1);
    cx.append(&cx.session_id("x"), vec![to_event("x", &agent)])
        .await?;
    cx.append(&cx.session_id("y"), vec![to_event("y", &agent)])
        .await?;
    cx.advance(1);
    let round = cx.store.claim_work(cx.work("w", &["agent"], 10)).await?;
    ensure_eq!(
        cx.served(&round)?,
        strs(&["big 1 agent/- #1", "x 1 agent/- #1", "y 1 agent/- #1"])
    );
    let next = cx.store.claim_work(cx.work("w", &["agent"], 10)).await?;
    ensure_eq!(cx.served(&next)?, strs(&["big 2 agent/- #1"]));
    cx.advance(1);
    cx.append(&cx.session_id("z"), vec![to_event("z", &agent)])
        .await?;
    cx.advance(1);
    let one = cx.store.claim_work(cx.work("w", &["agent"], 1)).await?;
    ensure_eq!(
        cx.served(&one)?,
        strs(&["big 3 agent/- #1"]),
        "big waited since +2"
    );
    let one = cx.store.claim_work(cx.work("w", &["agent"], 1)).await?;
    ensure_eq!(
        cx.served(&one)?,
        strs(&["z 1 agent/- #1"]),
        "z waited since +3"
    );
    Ok(())
}

/// At most `per_session_limit` heads from one session, `limit` heads in
/// all and `session_limit` sessions.
pub(crate) async fn work_claim_respects_its_limits(cx: Cx) -> CaseResult {
    let agent = cx.consumer("agent");
    for name in ["a", "b", "c"] {
        cx.append(&cx.session_id(name), events_for(name, &agent, 3))
            .await?;
        cx.advance(1);
    }
    let two_each = ClaimWorkRequest {
        per_session_limit: Some(2),
        ..cx.work("w", &["agent"], 4)
    };
    ensure_eq!(
        cx.served(&cx.store.claim_work(two_each).await?)?,
        strs(&[
            "a 1 agent/- #1",
            "a 2 agent/- #1",
            "b 1 agent/- #1",
            "b 2 agent/- #1"
        ])
    );
    let one_session = ClaimWorkRequest {
        per_session_limit: Some(5),
        session_limit: Some(1),
        ..cx.work("w", &["agent"], 5)
    };
    ensure_eq!(
        cx.served(&cx.store.claim_work(one_session).await?)?,
        strs(&["c 1 agent/- #1", "c 2 agent/- #1", "c 3 agent/- #1"])
    );
    let rest = ClaimWorkRequest {
        per_session_limit: Some(5),
        ..cx.work("w", &["agent"], 5)
    };
    ensure_eq!(
        cx.served(&cx.store.claim_work(rest).await?)?,
        strs(&["a 3 agent/- #1", "b 3 agent/- #1"])
    );
    Ok(())
}

/// One claim of several sessions serves each as a claim of one would, in
/// fairness order, within its limits: a lane gives only its head, an
/// expired lease is claimed again (counting a failure), a head at
/// `max_failures` is dead-lettered without counting against `limit`, and a
/// session with a backlog gives up to `per_session_limit` heads.
pub(crate) async fn work_claim_serves_a_batch_of_sessions_as_claims_of_one(cx: Cx) -> CaseResult {
    let agent = cx.consumer("agent");
    let (a, b, c, d, e) = (
        cx.session_id("a"),
        cx.session_id("b"),
        cx.session_id("c"),
        cx.session_id("d"),
        cx.session_id("e"),
    );
    let request = ClaimWorkRequest {
        max_failures: Some(2),
        per_session_limit: Some(2),
        ..cx.work("w", &["agent"], 6)
    };
    let only = |session: &str| ClaimWorkRequest {
        sessions: Some(vec![session.to_owned()]),
        ..cx.work("w0", &["agent"], 1)
    };
    // c: claimed twice, its lease run out each time; b: claimed once.
    cx.append(&c, vec![to_event("c", &agent)]).await?;
    single(&cx.store.claim_work(only(&c)).await?)?;
    cx.advance(TTL);
    single(&cx.store.claim_work(only(&c)).await?)?;
    cx.append(&b, vec![to_event("b", &agent)]).await?;
    single(&cx.store.claim_work(only(&b)).await?)?;
    cx.append(
        &a,
        vec![to_lane("a1", &agent, "L"), to_lane("a2", &agent, "L")],
    )
    .await?;
    cx.advance(TTL);
    cx.append(&d, events_for("d", &agent, 3)).await?;
    cx.advance(1);
    cx.append(&e, vec![to_event("e", &agent)]).await?;
    let result = cx.store.claim_work(request.clone()).await?;
    ensure_eq!(
        cx.served(&result)?,
        strs(&[
            "a 1 agent/L #1",
            "b 1 agent/- #2",
            "d 1 agent/- #1",
            "d 2 agent/- #1",
            "e 1 agent/- #1"
        ])
    );
    let ClaimWorkResult::Claimed { sessions } = &result else {
        return Err(Failure::Fail(format!("expected Claimed, got {result:?}")));
    };
    let order: Vec<String> = sessions.iter().map(|s| cx.local(&s.session_id)).collect();
    ensure_eq!(order, strs(&["a", "b", "c", "d", "e"]));
    ensure_eq!(
        head_summaries(&sessions[2].dead_lettered),
        strs(&[&format!("1 {agent}/- #3")])
    );
    ensure_eq!(
        cx.served(&cx.store.claim_work(request.clone()).await?)?,
        strs(&["d 3 agent/- #1"])
    );
    // Everything left is held: busy until the first lease taken ends.
    let now = T0 + 2 * TTL + 1;
    ensure_eq!(work_busy(&cx.store.claim_work(request).await?)?, now + TTL);
    Ok(())
}

/// Only the given consumers are served; a log declaration serves its log
/// cursor with its types.
pub(crate) async fn work_claim_serves_only_given_consumers(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let (agent, other) = (cx.consumer("agent"), cx.consumer("other"));
    cx.append(
        &s,
        vec![NewEvent::new("msg", json!(1))
            .with_id("m")
            .with_target(Target::event(&agent))
            .with_target(Target::lane(&other, "L"))],
    )
    .await?;
    let mine = cx.store.claim_work(cx.work("w", &["agent"], 10)).await?;
    ensure_eq!(cx.served(&mine)?, strs(&["s 1 agent/- #1"]));
    let theirs = cx.store.claim_work(cx.work("w", &["other"], 10)).await?;
    ensure_eq!(cx.served(&theirs)?, strs(&["s 1 other/L #1"]));
    work_settled(&cx.store.claim_work(cx.work("w", &["nobody"], 10)).await?)?;
    Ok(())
}

/// A session list restricts the claim to those sessions (unknown ones are
/// simply without work).
pub(crate) async fn work_claim_serves_only_listed_sessions(cx: Cx) -> CaseResult {
    let agent = cx.consumer("agent");
    let (a, b) = (cx.session_id("a"), cx.session_id("b"));
    cx.append(&a, vec![to_event("a", &agent)]).await?;
    cx.append(&b, vec![to_event("b", &agent)]).await?;
    let only_b = ClaimWorkRequest {
        sessions: Some(vec![b.clone()]),
        ..cx.work("w", &["agent"], 10)
    };
    ensure_eq!(
        cx.served(&cx.store.claim_work(only_b.clone()).await?)?,
        strs(&["b 1 agent/- #1"])
    );
    ensure_eq!(work_busy(&cx.store.claim_work(only_b).await?)?, T0 + TTL);
    let with_unknown = ClaimWorkRequest {
        sessions: Some(vec![cx.session_id("unknown"), a]),
        ..cx.work("w", &["agent"], 10)
    };
    ensure_eq!(
        cx.served(&cx.store.claim_work(with_unknown).await?)?,
        strs(&["a 1 agent/- #1"])
    );
    Ok(())
}

/// Without work for the served consumers the answer is `Settled`.
pub(crate) async fn work_claim_without_work_is_settled(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    work_settled(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?;
    cx.append(
        &s,
        vec![msg("untargeted"), to_event("o", &cx.consumer("other"))],
    )
    .await?;
    work_settled(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?;
    cx.append(&s, vec![to_event("a", &cx.consumer("agent"))])
        .await?;
    let result = cx.store.claim_work(cx.work("w", &["agent"], 1)).await?;
    let (_, head) = single(&result)?;
    cx.complete(&s, &head, vec![]).await?;
    work_settled(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?;
    Ok(())
}

/// With only busy heads the answer is `Busy` at the earliest lease or
/// retry-delay end across sessions.
pub(crate) async fn work_claim_on_busy_heads_is_busy_until_the_earliest_expiry(
    cx: Cx,
) -> CaseResult {
    let agent = cx.consumer("agent");
    let (a, b) = (cx.session_id("a"), cx.session_id("b"));
    cx.append(&a, vec![to_event("a", &agent)]).await?;
    single(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?;
    cx.advance(100);
    cx.append(&b, vec![to_event("b", &agent)]).await?;
    let (_, head) = single(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?;
    ensure_eq!(
        work_busy(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?,
        T0 + TTL
    );
    let mut failure = cx.fail_req(&b, &head, "later");
    failure.retry_after_ms = Some(50);
    cx.store.fail_attempt(failure).await?;
    ensure_eq!(
        work_busy(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?,
        T0 + 150,
        "the retry delay ends before the lease"
    );
    Ok(())
}

/// Each session is claimed as `claim_available` claims it: an expired
/// lease counts a failure and is claimed again, and at `max_failures` it
/// is dead-lettered and reported, then no longer served.
pub(crate) async fn work_claim_counts_expired_leases_and_dead_letters(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(&s, vec![to_lane("a", &agent, "L")]).await?;
    let request = ClaimWorkRequest {
        max_failures: Some(2),
        ..cx.work("w", &["agent"], 1)
    };
    ensure_eq!(
        cx.served(&cx.store.claim_work(request.clone()).await?)?,
        strs(&["s 1 agent/L #1"])
    );
    cx.advance(TTL);
    let again = cx.store.claim_work(request.clone()).await?;
    let (_, head) = single(&again)?;
    ensure_eq!(
        (head.dispatch.attempt_count, head.dispatch.failure_count),
        (2, 1)
    );
    ensure_eq!(head.dispatch.claim_expires_at, Some(T0 + 2 * TTL));
    cx.advance(TTL);
    let dead = cx.store.claim_work(request.clone()).await?;
    let ClaimWorkResult::Claimed { sessions } = &dead else {
        return Err(Failure::Fail(format!("expected Claimed, got {dead:?}")));
    };
    ensure_eq!(sessions.len(), 1);
    let session = &sessions[0];
    ensure_eq!(session.heads, vec![]);
    ensure_eq!(
        head_summaries(&session.dead_lettered),
        strs(&[&format!("1 {agent}/L #3")])
    );
    ensure_eq!(cx.store.dead_letters(&s).await?, session.dead_lettered);
    work_settled(&cx.store.claim_work(request).await?)?;
    Ok(())
}

/// Work is found after every change that makes it claimable: appends with
/// targets, the next lane head after a completion, events a completion
/// returns, failures at once and after their delay, redrives, declared log
/// consumers and `wake_log`.
pub(crate) async fn work_claim_finds_work_after_every_change(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let (agent, other) = (cx.consumer("agent"), cx.consumer("other"));
    let claim = |consumer: &'static str| cx.store.claim_work(cx.work("w", &[consumer], 1));

    cx.append(
        &s,
        vec![to_lane("a", &agent, "L"), to_lane("b", &agent, "L")],
    )
    .await?;
    let (_, first) = single(&claim("agent").await?)?;
    ensure_eq!(first.event.index, 1);
    cx.complete(&s, &first, vec![to_event("r", &other)]).await?;
    let (_, next) = single(&claim("agent").await?)?;
    ensure_eq!(next.event.index, 2, "the lane's next head");
    let (_, returned) = single(&claim("other").await?)?;
    ensure_eq!(returned.event.index, 3, "the event the completion returned");

    cx.fail(&s, &returned, None).await?;
    let (_, retried) = single(&claim("other").await?)?;
    ensure_eq!(retried.dispatch.attempt_count, 2, "failed without delay");
    let mut later = cx.fail_req(&s, &retried, "later");
    later.retry_after_ms = Some(500);
    cx.store.fail_attempt(later).await?;
    ensure_eq!(work_busy(&claim("other").await?)?, T0 + 500);
    cx.advance(500);
    let (_, delayed) = single(&claim("other").await?)?;
    ensure_eq!(delayed.dispatch.attempt_count, 3, "after its retry delay");

    cx.fail(&s, &delayed, Some(1)).await?;
    work_settled(&claim("other").await?)?;
    cx.store
        .redrive(RedriveRequest {
            incarnation: None,
            lane: None,
            session_id: s.clone(),
            consumer: other.clone(),
            index: 3,
            action: RedriveAction::Retry,
            consumers: None,
        })
        .await?;
    let (_, redriven) = single(&claim("other").await?)?;
    ensure_eq!(redriven.event.index, 3, "redriven");

    let audit = cx.consumer("audit");
    let declaration = log_consumer(&audit, "log", Some(&["note"]), false);
    let log_claim = ClaimWorkRequest {
        consumers: vec![declaration.clone()],
        ..cx.work("w", &[], 1)
    };
    cx.append_for(&s, vec![ev("note", "n1")], vec![declaration.clone()])
        .await?;
    let (_, noted) = single(&cx.store.claim_work(log_claim.clone()).await?)?;
    ensure_eq!((noted.event.index, noted.lane.as_deref()), (4, Some("log")));

    let w = cx.session_id("woken");
    cx.append(&w, vec![ev("note", "n2")]).await?;
    let in_w = ClaimWorkRequest {
        sessions: Some(vec![w.clone()]),
        ..log_claim.clone()
    };
    work_settled(&cx.store.claim_work(in_w).await?)?;
    let backfill = log_consumer(&audit, "log", Some(&["note"]), true);
    cx.store.wake_log(&w, &backfill).await?;
    let woken = ClaimWorkRequest {
        sessions: Some(vec![w.clone()]),
        consumers: vec![backfill],
        ..log_claim
    };
    let (session, head) = single(&cx.store.claim_work(woken).await?)?;
    ensure_eq!((session, head.event.index), (w, 1), "woken by wake_log");
    Ok(())
}

/// A clear removes the session's work: nothing is claimed or listed.
pub(crate) async fn work_claim_finds_nothing_after_clear(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(&s, vec![to_lane("a", &agent, "L"), to_event("b", &agent)])
        .await?;
    single(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?;
    cx.store
        .clear(ClearRequest {
            session_id: s.clone(),
            ..ClearRequest::default()
        })
        .await?;
    work_settled(&cx.store.claim_work(cx.work("w", &["agent"], 10)).await?)?;
    ensure_eq!(cx.store.list_work(cx.list(&["agent"])).await?, vec![]);
    cx.append(&s, vec![to_event("c", &agent)]).await?;
    ensure_eq!(
        cx.served(&cx.store.claim_work(cx.work("w", &["agent"], 10)).await?)?,
        strs(&["s 4 agent/- #1"])
    );
    Ok(())
}

/// `claim_available` and `claim_work` see the same heads: what one claims
/// the other finds busy, and what one completes the other finds finished.
pub(crate) async fn per_session_claims_update_the_work_index(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(&s, vec![to_event("a", &agent), to_event("b", &agent)])
        .await?;
    let heads = cx.claim_heads(&s, "w1").await?;
    ensure_eq!(heads.len(), 2);
    ensure_eq!(
        work_busy(&cx.store.claim_work(cx.work("w2", &["agent"], 5)).await?)?,
        T0 + TTL
    );
    ensure_eq!(
        cx.listed(&cx.store.list_work(cx.list(&["agent"])).await?),
        strs(&[&format!("s 0/2/0 - +{TTL}")])
    );
    for head in &heads {
        cx.complete(&s, head, vec![]).await?;
    }
    work_settled(&cx.store.claim_work(cx.work("w2", &["agent"], 5)).await?)?;
    ensure_eq!(cx.store.list_work(cx.list(&["agent"])).await?, vec![]);
    cx.append(&s, vec![to_event("c", &agent)]).await?;
    let (_, head) = single(&cx.store.claim_work(cx.work("w2", &["agent"], 5)).await?)?;
    busy(
        cx.store
            .claim_available(ClaimRequest {
                consumers: Some(vec![ConsumerDeclaration::targeted(&agent)]),
                ..cx.req(&s, "w1")
            })
            .await?,
    )?;
    ensure_eq!(head.event.index, 3);
    Ok(())
}

/// Claimers racing across sessions never get the same head, and together
/// they claim every head.
pub(crate) async fn concurrent_work_claims_never_share_a_head(cx: Cx) -> CaseResult {
    let agent = cx.consumer("agent");
    for n in 0..12 {
        cx.append(&cx.session_id(&format!("s{n}")), events_for("e", &agent, 3))
            .await?;
    }
    let claimers = (0..6).map(|worker| {
        let store = Arc::clone(&cx.store);
        let request = cx.work(&format!("w{worker}"), &["agent"], 2);
        tokio::spawn(async move { claim_until_busy(store, request).await })
    });
    let mut all = Vec::new();
    for claimer in claimers {
        let heads = claimer
            .await
            .map_err(|error| Failure::Fail(format!("a claimer panicked: {error}")))??;
        all.extend(heads);
    }
    all.sort();
    let total = all.len();
    all.dedup();
    ensure_eq!(all.len(), total, "a head was handed out twice");
    ensure_eq!(total, 36);
    Ok(())
}

/// Claims with `request` until nothing is left to claim; the heads as
/// `"session index"`.
pub(crate) async fn claim_until_busy(
    store: Arc<dyn Store>,
    request: ClaimWorkRequest,
) -> std::result::Result<Vec<String>, Failure> {
    let mut heads = Vec::new();
    loop {
        let result = store.claim_work(request.clone()).await?;
        if !matches!(result, ClaimWorkResult::Claimed { .. }) {
            return Ok(heads);
        }
        heads.extend(
            result
                .heads()
                .map(|(session, head)| format!("{session} {}", head.event.index)),
        );
    }
}

/// A waiting claim wakes when a session that did not exist when it began
/// waiting gets work.
pub(crate) async fn work_wait_wakes_on_append_to_a_new_session(cx: Cx) -> CaseResult {
    let agent = cx.consumer("agent");
    let waiter = spawn_wait(
        &cx.store,
        cx.work("w", &["agent"], 1).with_wait_ms(LONG_WAIT_MS),
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    cx.append(&cx.session_id("new"), vec![to_event("a", &agent)])
        .await?;
    let result = woken(waiter).await?;
    ensure_eq!(cx.served(&result)?, strs(&["new 1 agent/- #1"]));
    Ok(())
}

/// A waiting claim wakes when a lease ends on the store's clock (a manual
/// clock wakes it when set, with no real sleeping), and claims again.
pub(crate) async fn work_wait_wakes_when_a_lease_expires(cx: Cx) -> CaseResult {
    let agent = cx.consumer("agent");
    cx.append(&cx.session_id("s"), vec![to_lane("a", &agent, "L")])
        .await?;
    single(&cx.store.claim_work(cx.work("w1", &["agent"], 1)).await?)?;
    let waiter = spawn_wait(
        &cx.store,
        cx.work("w2", &["agent"], 1).with_wait_ms(LONG_WAIT_MS),
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    cx.advance(TTL);
    let result = woken(waiter).await?;
    let (_, head) = single(&result)?;
    ensure_eq!(head.dispatch.claim_holder.as_deref(), Some("w2"));
    ensure_eq!(
        (head.dispatch.attempt_count, head.dispatch.failure_count),
        (2, 1)
    );
    Ok(())
}

/// A wait that finds nothing answers, when it ends, as a claim without a
/// wait would: `Settled`, or `Busy` while a head is held.
pub(crate) async fn work_wait_ends_with_busy_or_settled(cx: Cx) -> CaseResult {
    let started = Instant::now();
    let result = cx
        .store
        .claim_work(cx.work("w", &["agent"], 1).with_wait_ms(100))
        .await?;
    work_settled(&result)?;
    ensure!(
        started.elapsed() >= Duration::from_millis(90),
        "answered after {:?}, before the 100 ms wait ended",
        started.elapsed()
    );
    cx.append(
        &cx.session_id("s"),
        vec![to_event("a", &cx.consumer("agent"))],
    )
    .await?;
    single(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?;
    let result = cx
        .store
        .claim_work(cx.work("w", &["agent"], 1).with_wait_ms(100))
        .await?;
    ensure_eq!(work_busy(&result)?, T0 + TTL);
    Ok(())
}

/// Dropping a waiting claim ends it: work appended afterwards is not taken
/// by it, and the next claim gets it as a first attempt.
pub(crate) async fn dropped_work_wait_leaves_nothing_behind(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let wait = cx
        .store
        .claim_work(cx.work("gone", &["agent"], 1).with_wait_ms(LONG_WAIT_MS));
    ensure!(
        tokio::time::timeout(Duration::from_millis(50), wait)
            .await
            .is_err(),
        "the wait answered before anything was appended"
    );
    cx.append(&s, vec![to_event("a", &cx.consumer("agent"))])
        .await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (_, head) = single(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?;
    ensure_eq!(head.dispatch.claim_holder.as_deref(), Some("w"));
    ensure_eq!(head.dispatch.attempt_count, 1);
    Ok(())
}

/// The listing counts claimable, busy and dead-lettered heads per session
/// and says since when its work has waited.
pub(crate) async fn list_work_reports_counts_and_waiting_time(cx: Cx) -> CaseResult {
    let agent = cx.consumer("agent");
    let a = cx.session_id("a");
    cx.append(&a, events_for("a", &agent, 4)).await?;
    cx.advance(10);
    single(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?;
    let (_, failing) = single(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?;
    cx.fail(&a, &failing, Some(1)).await?;
    cx.append(&cx.session_id("b"), vec![to_event("b", &agent)])
        .await?;
    cx.advance(5);
    ensure_eq!(
        cx.listed(&cx.store.list_work(cx.list(&["agent"])).await?),
        strs(&[&format!("a 2/1/1 +10 +{}", 10 + TTL), "b 1/0/0 +10 -"])
    );
    ensure_eq!(
        cx.store.list_work(cx.list(&["other"])).await?,
        vec![],
        "another consumer has no work"
    );
    Ok(())
}

/// The listing pages by session id: `after` exclusive, at most `limit`.
pub(crate) async fn list_work_pages_by_session_id(cx: Cx) -> CaseResult {
    let agent = cx.consumer("agent");
    for name in ["s3", "s1", "s5", "s2", "s4"] {
        cx.append(&cx.session_id(name), vec![to_event(name, &agent)])
            .await?;
    }
    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = cx
            .store
            .list_work(ListWork {
                after: after.clone(),
                limit: Some(2),
                ..cx.list(&["agent"])
            })
            .await?;
        let Some(last) = page.last() else { break };
        after = Some(last.session_id.clone());
        pages.push(
            page.iter()
                .map(|s| cx.local(&s.session_id))
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    ensure_eq!(pages, strs(&["s1,s2", "s3,s4", "s5"]));
    Ok(())
}

/// Sessions holding only dead letters are listed (nothing claimable, no
/// waiting time) until the dead letters are redriven away.
pub(crate) async fn list_work_lists_dead_letter_holders(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    let agent = cx.consumer("agent");
    cx.append(&s, vec![to_lane("a", &agent, "L")]).await?;
    let (_, head) = single(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?;
    cx.store
        .fail_attempt(FailRequest {
            max_failures: Some(1),
            ..cx.fail_req(&s, &head, "fatal")
        })
        .await?;
    work_settled(&cx.store.claim_work(cx.work("w", &["agent"], 1)).await?)?;
    ensure_eq!(
        cx.listed(&cx.store.list_work(cx.list(&["agent"])).await?),
        strs(&["s 0/0/1 - -"])
    );
    cx.store
        .redrive(RedriveRequest {
            incarnation: None,
            lane: None,
            session_id: s.clone(),
            consumer: agent.clone(),
            index: 1,
            action: RedriveAction::Skip,
            consumers: None,
        })
        .await?;
    ensure_eq!(cx.store.list_work(cx.list(&["agent"])).await?, vec![]);
    Ok(())
}

/// Starts a waiting claim on its own task.
pub(crate) fn spawn_wait(
    store: &Arc<dyn Store>,
    request: ClaimWorkRequest,
) -> tokio::task::JoinHandle<a2_store_api::Result<ClaimWorkResult>> {
    let store = Arc::clone(store);
    tokio::spawn(async move { store.claim_work(request).await })
}

/// The answer of a waiting claim, which must come within [`WAKE_BOUND`].
pub(crate) async fn woken(
    waiter: tokio::task::JoinHandle<a2_store_api::Result<ClaimWorkResult>>,
) -> std::result::Result<ClaimWorkResult, Failure> {
    match tokio::time::timeout(WAKE_BOUND, waiter).await {
        Err(_) => Err(Failure::Fail(format!(
            "the waiting claim was not woken within {WAKE_BOUND:?}"
        ))),
        Ok(Err(error)) => Err(Failure::Fail(format!(
            "the waiting claim panicked: {error}"
        ))),
        Ok(Ok(result)) => Ok(result?),
    }
}

/// A renewal moves the work with the lease: a lengthened lease answers
/// `Busy` until its new end, a shortened one is claimed again when it ends.
pub(crate) async fn work_claim_follows_renewed_leases(cx: Cx) -> CaseResult {
    let s = cx.session_id("s");
    cx.append(&s, vec![to_lane("a", &cx.consumer("agent"), "L")])
        .await?;
    let (_, head) = single(&cx.store.claim_work(cx.work("w1", &["agent"], 1)).await?)?;
    let renew = |expires_at: i64| a2_store_api::RenewRequest {
        incarnation: None,
        session_id: s.clone(),
        holder: "w1".into(),
        claims: vec![a2_store_api::HeldClaim {
            cursor: head.cursor_ref(),
            attempt: head.dispatch.attempt_count,
        }],
        ttl_ms: None,
        expires_at_ms: Some(expires_at),
    };
    cx.store.renew_claims(renew(T0 + 5 * TTL)).await?;
    ensure_eq!(
        work_busy(&cx.store.claim_work(cx.work("w2", &["agent"], 1)).await?)?,
        T0 + 5 * TTL,
        "lengthened"
    );
    cx.store.renew_claims(renew(T0 + 10)).await?;
    ensure_eq!(
        work_busy(&cx.store.claim_work(cx.work("w2", &["agent"], 1)).await?)?,
        T0 + 10,
        "shortened"
    );
    cx.advance(10);
    ensure_eq!(
        cx.listed(
            &cx.store
                .list_work(ListWork {
                    consumers: vec![cx.consumer("agent"), cx.consumer("agent")],
                    ..ListWork::default()
                })
                .await?
        ),
        strs(&["s 1/0/0 +10 -"]),
        "claimable from the shortened end, a consumer named twice counted once"
    );
    let (_, again) = single(&cx.store.claim_work(cx.work("w2", &["agent"], 1)).await?)?;
    ensure_eq!(
        (again.dispatch.attempt_count, again.dispatch.failure_count),
        (2, 1)
    );
    Ok(())
}
