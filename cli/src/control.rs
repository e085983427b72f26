//! The operator's controls: `pause`, `resume`, `fork` and `reschedule`,
//! each one store call saying what it changed.

use a2_store::{
    Clock, ForkRequest, NotBefore, Pause, PauseRequest, RescheduleRequest, RescheduleResult,
    ResumeRequest, ScheduleChange, SystemClock,
};
use serde_json::json;

use crate::args::{ForkArgs, PauseArgs, RescheduleArgs, ResumeArgs};
use crate::failure::Failure;
use crate::output::{escape, print, print_json, timestamp};
use crate::target;

/// `duration` from now on the system clock, ms (saturating).
fn from_now(duration: std::time::Duration) -> i64 {
    SystemClock
        .now_ms()
        .saturating_add(a2_store::duration_ms(duration))
}

/// Where a pause holds, in words.
fn scope(session: Option<&str>) -> String {
    match session {
        Some(session) => format!("in session '{}'", escape(session)),
        None => "in every session".to_owned(),
    }
}

/// Until when a pause holds, in words.
pub fn until(pause: &Pause) -> String {
    match pause.until_ms {
        Some(at) => format!("until {}", timestamp(at)),
        None => "until resumed".to_owned(),
    }
}

/// Runs `pause`.
pub async fn pause(args: &PauseArgs) -> Result<(), Failure> {
    let url = args.url.as_str();
    let until_ms = args.until_ms.or(args.for_.map(from_now));
    let store = target::open_existing(url).await?;
    let request = PauseRequest {
        consumer: args.consumer.clone(),
        session_id: args.session.clone(),
        until_ms,
    };
    let consumer = escape(&args.consumer);
    let where_ = scope(args.session.as_deref());
    let pause = store
        .pause(request)
        .await
        .map_err(|e| Failure::store(url, &format!("pausing '{consumer}' {where_}"), &e))?;
    if args.json {
        return print_json(&pause);
    }
    print(&format!(
        "paused '{consumer}' {where_} {}: its heads there are not claimed (leases already held run out); lift it with `a2-store resume {url} {consumer}{}`\n",
        until(&pause),
        args.session
            .as_deref()
            .map_or_else(String::new, |s| format!(" --session {}", escape(s)))
    ))
}

/// Runs `resume`.
pub async fn resume(args: &ResumeArgs) -> Result<(), Failure> {
    let url = args.url.as_str();
    let store = target::open_existing(url).await?;
    let consumer = escape(&args.consumer);
    let where_ = scope(args.session.as_deref());
    let result = store
        .resume(ResumeRequest {
            consumer: args.consumer.clone(),
            session_id: args.session.clone(),
        })
        .await
        .map_err(|e| Failure::store(url, &format!("resuming '{consumer}' {where_}"), &e))?;
    if args.json {
        return print_json(&json!({
            "consumer": args.consumer,
            "session_id": args.session,
            "resumed": result.resumed,
        }));
    }
    if result.resumed {
        print(&format!(
            "resumed '{consumer}' {where_}: its heads there are claimable again unless another pause holds them (see `a2-store inspect {url} paused`)\n"
        ))
    } else {
        print(&format!(
            "nothing to resume: '{consumer}' had no pause in force {where_} (a pause in one session and a store-wide pause are lifted separately; see `a2-store inspect {url} paused`)\n"
        ))
    }
}

/// Runs `fork`.
pub async fn fork(args: &ForkArgs) -> Result<(), Failure> {
    let url = args.url.as_str();
    let store = target::open_existing(url).await?;
    let (from, into) = (escape(&args.session), escape(&args.into));
    let result = store
        .fork(ForkRequest {
            session_id: args.session.clone(),
            into: args.into.clone(),
            through: args.through,
        })
        .await
        .map_err(|e| Failure::store(url, &format!("forking session '{from}' into '{into}'"), &e))?;
    if args.json {
        return print_json(&result);
    }
    let through = result
        .session
        .forked_from
        .as_ref()
        .map_or(result.session.head, |origin| origin.index);
    print(&format!(
        "forked session '{from}' through index {through} into '{into}': {} row(s) copied, no cursors; new events there continue at index {}\n",
        result.copied,
        result.session.head + 1
    ))
}

/// The change `reschedule` asks for.
fn change(args: &RescheduleArgs) -> ScheduleChange {
    match (args.at_ms, args.in_) {
        (Some(at), _) => ScheduleChange::To(NotBefore::AtMs(at)),
        (None, Some(delay)) => ScheduleChange::To(NotBefore::AfterMs(a2_store::duration_ms(delay))),
        (None, None) => ScheduleChange::Cancel,
    }
}

/// Runs `reschedule`.
pub async fn reschedule(args: &RescheduleArgs) -> Result<(), Failure> {
    let url = args.url.as_str();
    let store = target::open_existing(url).await?;
    let session = escape(&args.session);
    let head = format!(
        "{} {} at index {}",
        escape(&args.consumer),
        args.lane.as_deref().map_or_else(
            || "(event cursor)".to_owned(),
            |l| format!("lane {}", escape(l))
        ),
        args.index
    );
    let change = change(args);
    let result = store
        .reschedule(RescheduleRequest {
            incarnation: None,
            session_id: args.session.clone(),
            consumer: args.consumer.clone(),
            lane: args.lane.clone(),
            index: args.index,
            change,
            cause: None,
        })
        .await
        .map_err(|e| {
            Failure::store(
                url,
                &format!("rescheduling {head} in session '{session}'"),
                &e,
            )
        })?;
    let look = format!("look at its cursors with `a2-store inspect {url} cursors {session}`");
    let unchanged = match result {
        RescheduleResult::Started => Some(format!(
            "nothing changed: {head} in session '{session}' has already been claimed (it is running or ran), so it can no longer be moved; {look}"
        )),
        RescheduleResult::Gone => Some(format!(
            "nothing changed: the cursor of {head} in session '{session}' has moved past it (finished, skipped, cancelled or cleared), or no cursor waits on it; {look}"
        )),
        RescheduleResult::Rescheduled { .. } | RescheduleResult::Cancelled => None,
        other => Some(format!(
            "the store answered {other:?}, an outcome this build of a2-store does not know; {look}"
        )),
    };
    if args.json {
        print_json(&json!({
            "session_id": args.session,
            "consumer": args.consumer,
            "lane": args.lane,
            "index": args.index,
            "change": change,
            "result": result,
        }))?;
    } else {
        match result {
            RescheduleResult::Rescheduled {
                not_before: Some(at),
            } => print(&format!(
                "rescheduled {head} in session '{session}': claimable from {}\n",
                timestamp(at)
            ))?,
            RescheduleResult::Rescheduled { not_before: None } => print(&format!(
                "rescheduled {head} in session '{session}': the time has been reached, claimable now\n"
            ))?,
            RescheduleResult::Cancelled => print(&format!(
                "cancelled {head} in session '{session}': the cursor moved past it (no completion recorded)\n"
            ))?,
            _ => {}
        }
    }
    match unchanged {
        Some(message) => Err(Failure::new(message)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn reschedule_args(line: &[&str]) -> RescheduleArgs {
        use clap::Parser;
        match crate::args::Cli::try_parse_from(line) {
            Ok(crate::args::Cli {
                command: crate::args::Command::Reschedule(args),
            }) => args,
            other => panic!("not a reschedule: {other:?}"),
        }
    }

    #[test]
    fn reschedule_flags_name_one_change() {
        let base = ["a2-store", "reschedule", "memory:", "s", "c", "3"];
        let at = reschedule_args(&[&base[..], &["--at-ms", "5000"]].concat());
        assert_eq!(change(&at), ScheduleChange::To(NotBefore::AtMs(5000)));
        let delay = reschedule_args(&[&base[..], &["--in", "2m", "--lane", "L"]].concat());
        assert_eq!(
            change(&delay),
            ScheduleChange::To(NotBefore::AfterMs(120_000))
        );
        assert_eq!(delay.lane.as_deref(), Some("L"));
        let cancel = reschedule_args(&[&base[..], &["--cancel"]].concat());
        assert_eq!(change(&cancel), ScheduleChange::Cancel);
        use clap::Parser;
        assert!(
            crate::args::Cli::try_parse_from(base).is_err(),
            "a change is required"
        );
        let both = [&base[..], &["--cancel", "--at-ms", "1"]].concat();
        assert!(crate::args::Cli::try_parse_from(both).is_err());
    }

    #[test]
    fn a_pause_says_until_when() {
        let pause = Pause::new("c", None, None, 0);
        assert_eq!(until(&pause), "until resumed");
        let timed = Pause::new("c", None, Some(0), 0);
        assert_eq!(until(&timed), "until 1970-01-01T00:00:00.000Z");
        assert!(from_now(Duration::from_secs(60)) > SystemClock.now_ms());
    }
}
