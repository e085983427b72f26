//! `a2-store check`: the conformance suite against scratch stores of the URL's backend.

use std::sync::Arc;

use a2_conformance::{CaseReport, Report, StoreFactory};
use a2_store::{CounterIds, ManualClock};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};

use crate::args::CheckArgs;
use crate::failure::{Failure, EXIT_CHECK_FAILED};
use crate::output::{eprint_line, print, print_json};
use crate::scratch::ScratchFactory;
use crate::target;

/// Runs `check`; returns the exit status (0, or 1 when a case failed).
pub async fn run(args: &CheckArgs) -> Result<u8, Failure> {
    let parsed = target::parse(&args.url)?;
    if !parsed.is_enabled() {
        // Opening gives the message naming the feature to enable.
        target::open(&args.url, &parsed).await?;
    }
    let only = args.only.clone().unwrap_or_default();
    if !a2_conformance::case_names().any(|name| name.contains(&only)) {
        return Err(Failure::new(format!(
            "no conformance case name contains '{only}': run without --only to see them all"
        )));
    }
    let factory = ScratchFactory::new(&args.url, &parsed)?;
    // One scratch store first: an unreachable server is one error line, not
    // a failed row for every case.
    let probe = factory
        .create(
            Arc::new(ManualClock::new(0)),
            Arc::new(CounterIds::new("probe-")),
        )
        .await;
    if let Err(error) = probe {
        factory.finish().await;
        return Err(Failure::store(
            &args.url,
            "creating a scratch store for the check",
            &error,
        ));
    }
    drop(probe);
    // A case that panics is reported as failed; keep its panic off the terminal.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let report = run_streaming(&factory, &only, args.json).await;
    std::panic::set_hook(hook);
    let leftovers = factory.finish().await;
    drop(factory);
    let report = report?;
    if args.json {
        print_json(&report_json(&report))?;
    } else {
        // The case lines were printed as they finished; the counts close it.
        let text = report.to_string();
        print(&format!("{}\n", text.lines().last().unwrap_or_default()))?;
    }
    for problem in leftovers {
        eprint_line(&format!("warning: {problem}"));
    }
    Ok(if report.is_success() {
        0
    } else {
        EXIT_CHECK_FAILED
    })
}

/// Runs the matching cases one at a time, printing each case's line (text
/// mode) as soon as it finishes; a progress bar counts them on stderr when
/// stderr is a terminal (indicatif hides it otherwise).
async fn run_streaming(
    factory: &ScratchFactory,
    only: &str,
    json: bool,
) -> Result<Report, Failure> {
    let names: Vec<&str> = a2_conformance::case_names()
        .filter(|name| name.contains(only))
        .collect();
    let bar = ProgressBar::with_draw_target(
        Some(u64::try_from(names.len()).unwrap_or(u64::MAX)),
        ProgressDrawTarget::stderr(),
    );
    let style = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {wide_msg}")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(factory.name().to_owned());
    let mut report = Report {
        backend: factory.name().to_owned(),
        cases: Vec::with_capacity(names.len()),
    };
    for name in names {
        bar.set_message(name.to_owned());
        let Some(case) = a2_conformance::run_case(factory, name).await else {
            continue;
        };
        if !json {
            let line = case_lines(&report.backend, &case);
            bar.suspend(|| print(&line))?;
        }
        report.cases.push(case);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(report)
}

/// The lines the suite's report shows for one case (`ok`, `FAILED` with its
/// reason, `skipped`), each ending in a newline.
fn case_lines(backend: &str, case: &CaseReport) -> String {
    let one = Report {
        backend: backend.to_owned(),
        cases: vec![case.clone()],
    };
    let text = one.to_string();
    // The last line is the one-case summary.
    let mut lines: Vec<&str> = text.lines().collect();
    lines.pop();
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

/// The report as JSON with each duration in milliseconds (`duration_ms`).
fn report_json(report: &Report) -> Value {
    let cases: Vec<Value> = report
        .cases
        .iter()
        .map(|case| {
            json!({
                "name": case.name,
                "area": case.area,
                "outcome": case.outcome,
                "duration_ms": case.duration.as_secs_f64() * 1000.0,
            })
        })
        .collect();
    json!({
        "backend": report.backend,
        "passed": report.passed(),
        "failed": report.failed(),
        "skipped": report.skipped(),
        "cases": cases,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use a2_conformance::Outcome;

    use super::*;

    fn case(outcome: Outcome) -> CaseReport {
        CaseReport {
            name: "append::one".into(),
            area: "append".into(),
            outcome,
            duration: Duration::from_micros(1_500),
        }
    }

    #[test]
    fn a_case_prints_as_the_report_shows_it() {
        assert_eq!(
            case_lines("memory", &case(Outcome::Passed)),
            "memory::append::one ... ok (1.5 ms)\n"
        );
        let failed = case_lines(
            "memory",
            &case(Outcome::Failed {
                reason: "a\nb".into(),
            }),
        );
        assert_eq!(
            failed,
            "memory::append::one ... FAILED (1.5 ms)\n    a\n    b\n"
        );
    }

    #[test]
    fn json_durations_are_milliseconds() {
        let report = Report {
            backend: "memory".into(),
            cases: vec![case(Outcome::Passed)],
        };
        let value = report_json(&report);
        assert_eq!(value["cases"][0]["duration_ms"], 1.5);
        assert_eq!(value["cases"][0]["outcome"]["outcome"], "passed");
        assert_eq!(value["passed"], 1);
    }
}
