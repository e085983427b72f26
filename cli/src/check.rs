//! `a2-store check`: the conformance suite against scratch stores of the URL's backend.

use std::sync::Arc;

use a2_conformance::StoreFactory;
use a2_store::{CounterIds, ManualClock};

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
    let report = a2_conformance::run_matching(&factory, |name| name.contains(&only)).await;
    std::panic::set_hook(hook);
    let leftovers = factory.finish().await;
    drop(factory);
    if args.json {
        print_json(&report)?;
    } else {
        print(&format!("{report}\n"))?;
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
