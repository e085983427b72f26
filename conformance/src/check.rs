//! Assertion macros of the cases: each returns a [`Failure`](crate::support::Failure)
//! naming the file, line and values instead of panicking, so a report shows
//! exactly which expectation a backend missed.

/// Fails the case with a message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err($crate::support::Failure::Fail(format!(
                "{}:{}: {}",
                file!(),
                line!(),
                format!($($msg)+)
            )));
        }
    };
}

/// Fails the case unless `left == right`, showing both values.
macro_rules! ensure_eq {
    ($left:expr, $right:expr $(,)?) => {
        match (&$left, &$right) {
            (left, right) => {
                if !(*left == *right) {
                    return Err($crate::support::Failure::Fail(format!(
                        "{}:{}: expected {} == {}\n  left: {:?}\n right: {:?}",
                        file!(),
                        line!(),
                        stringify!($left),
                        stringify!($right),
                        left,
                        right
                    )));
                }
            }
        }
    };
    ($left:expr, $right:expr, $($msg:tt)+) => {
        match (&$left, &$right) {
            (left, right) => {
                if !(*left == *right) {
                    return Err($crate::support::Failure::Fail(format!(
                        "{}:{}: {}: expected {} == {}\n  left: {:?}\n right: {:?}",
                        file!(),
                        line!(),
                        format!($($msg)+),
                        stringify!($left),
                        stringify!($right),
                        left,
                        right
                    )));
                }
            }
        }
    };
}

/// Fails the case unless `result` is an error with `code`.
macro_rules! ensure_code {
    ($result:expr, $code:expr) => {
        match $result {
            Ok(value) => {
                return Err($crate::support::Failure::Fail(format!(
                    "{}:{}: expected error {} from {}, but it succeeded with {:?}",
                    file!(),
                    line!(),
                    $code,
                    stringify!($result),
                    value
                )));
            }
            Err(error) => {
                if error.code() != $code {
                    return Err($crate::support::Failure::Fail(format!(
                        "{}:{}: expected error {} from {}, got {}: {}",
                        file!(),
                        line!(),
                        $code,
                        stringify!($result),
                        error.code(),
                        error
                    )));
                }
            }
        }
    };
}

/// Fails the case unless the calls in each step leave the session's
/// observable state (rows, cursors with bookkeeping, dead letters) as it was
/// before the first step: a failed or no-op call changed nothing.
///
/// `ensure_unchanged!(cx, &s, { calls })` reads the state, runs the block,
/// and compares; `ensure_unchanged!(cx, &s, { a }, { b })` compares after
/// each step with the one state read before `a`. The blocks are the case's
/// own code, so `?`, the other `ensure*!` macros and `continue` act as if
/// written there. A failure names the file and line of the invocation, the
/// step when there are several, and both states.
///
/// `ensure_unchanged!(cx, &s, when refused, { call })` is for calls the store
/// may either take or refuse: it returns the block's value and compares only
/// when `refused(&value)` holds.
macro_rules! ensure_unchanged {
    (@compare $cx:expr, $session:expr, $before:expr, $what:expr, $step:expr) => {
        let after = $cx.state($session).await?;
        if after != $before {
            return Err($crate::support::Failure::Fail(format!(
                "{}:{}: {} changed the session{}\n before: {:?}\n  after: {:?}",
                file!(),
                line!(),
                $what,
                $step,
                $before,
                after
            )));
        }
    };
    ($cx:expr, $session:expr, when $refused:expr, $body:block) => {{
        let before = $cx.state($session).await?;
        let value = $body;
        if $refused(&value) {
            ensure_unchanged!(@compare $cx, $session, before, "a refused call", "");
        }
        value
    }};
    ($cx:expr, $session:expr, $body:block $(,)?) => {{
        let before = $cx.state($session).await?;
        $body
        ensure_unchanged!(@compare $cx, $session, before, "a failed or no-op call", "");
    }};
    ($cx:expr, $session:expr, $($step:block),+ $(,)?) => {{
        let before = $cx.state($session).await?;
        let steps = [$(stringify!($step)),+].len();
        let mut step = 0;
        $(
            $step
            step += 1;
            ensure_unchanged!(
                @compare $cx,
                $session,
                before,
                "a failed or no-op call",
                format!(" (after step {step} of {steps})")
            );
        )+
    }};
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use a2_store_api::{CounterIds, ManualClock};
    use a2_store_memory::{MemoryOptions, MemoryStore};

    use crate::factory::Capabilities;
    use crate::support::{msg, CaseResult, Cx, Failure, GENERATED, T0};

    fn cx() -> Cx {
        let clock = ManualClock::new(T0);
        let store = MemoryStore::with_options(MemoryOptions {
            clock: Arc::new(clock.clone()),
            ids: Arc::new(CounterIds::new(GENERATED)),
        });
        Cx {
            store: Arc::new(store),
            clock,
            caps: Capabilities::NONE,
            pair: None,
            prefix: "check".to_owned(),
        }
    }

    fn reason(result: CaseResult) -> String {
        match result {
            Err(Failure::Fail(reason)) => reason,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    async fn one_step(cx: &Cx, write: bool) -> CaseResult {
        let s = cx.session_id("s");
        ensure_unchanged!(cx, &s, {
            if write {
                cx.append(&s, vec![msg("a")]).await?;
            }
        });
        Ok(())
    }

    async fn second_step_writes(cx: &Cx) -> CaseResult {
        let s = cx.session_id("s");
        ensure_unchanged!(
            cx,
            &s,
            {
                cx.read_all(&s).await?;
            },
            {
                cx.append(&s, vec![msg("a")]).await?;
            }
        );
        Ok(())
    }

    async fn taken_or_refused(cx: &Cx, refused: bool) -> CaseResult {
        let s = cx.session_id("s");
        let value = ensure_unchanged!(cx, &s, when Option::is_none, {
            cx.append(&s, vec![msg("a")]).await?;
            if refused {
                None
            } else {
                Some(7)
            }
        });
        ensure_eq!(value, (!refused).then_some(7));
        Ok(())
    }

    #[tokio::test]
    async fn a_step_that_changes_nothing_passes() {
        assert_eq!(one_step(&cx(), false).await, Ok(()));
    }

    #[tokio::test]
    async fn a_change_names_the_line_and_both_states() {
        let reason = reason(one_step(&cx(), true).await);
        assert!(reason.contains("check.rs:"), "{reason}");
        assert!(
            reason.contains("a failed or no-op call changed the session\n before: "),
            "{reason}"
        );
        assert!(reason.contains("  after: "), "{reason}");
        assert!(!reason.contains("step"), "{reason}");
    }

    #[tokio::test]
    async fn a_change_in_a_later_step_names_the_step() {
        let reason = reason(second_step_writes(&cx()).await);
        assert!(
            reason.contains("changed the session (after step 2 of 2)"),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn a_taken_call_may_change_the_session_a_refused_one_not() {
        assert_eq!(taken_or_refused(&cx(), false).await, Ok(()));
        let reason = reason(taken_or_refused(&cx(), true).await);
        assert!(
            reason.contains("a refused call changed the session"),
            "{reason}"
        );
    }
}
