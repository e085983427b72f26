//! `a2-store`: benchmark, check, inspect and repair a2 session stores.
//!
//! See `a2-store --help`. Every error prints one line on stderr saying what
//! went wrong and what to do, and exits with status 2; `check` exits with 1
//! when a conformance case fails.

#![forbid(unsafe_code)]

mod across;
mod args;
mod bench;
mod bulk;
mod check;
mod console;
mod control;
mod failure;
mod health;
mod inspect;
mod output;
mod reencrypt;
mod repair;
mod retention;
mod scratch;
mod table;
mod target;

use std::process::ExitCode;

use std::ffi::OsString;

use clap::error::ErrorKind;
use clap::Parser;

use args::{Cli, Command};
use failure::{Failure, EXIT_ERROR};

fn main() -> ExitCode {
    // Any panic is a bug: show one line, never a backtrace dump.
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        output::eprint_line(&format!(
            "error: internal error{location}: {} — please report this bug",
            message.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }));
    let cli = match parse(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            return fail(&Failure::new(format!(
                "starting the async runtime: {error}"
            )))
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(status) => ExitCode::from(status),
        Err(failure) => fail(&failure),
    }
}

/// The variable whose value is the store URL when a command's URL is omitted.
pub const URL_VAR: &str = "A2_STORE_URL";

/// The subcommands whose first positional argument is a store URL that
/// [`URL_VAR`] may supply.
const TAKES_URL: &[&str] = &[
    "check",
    "inspect",
    "redrive",
    "clear",
    "reclaim",
    "pause",
    "resume",
    "fork",
    "reschedule",
    "delete",
    "prune",
    "console",
    "reencrypt",
];

/// Parses the command line. Help and version go to stdout (exit 0); any
/// argument error is one line on stderr (exit 2). When parsing fails and
/// [`URL_VAR`] is set, the line is parsed again with its URL inserted
/// after the subcommand: the URL was omitted.
fn parse(args: Vec<OsString>) -> Result<Cli, ExitCode> {
    let error = match Cli::try_parse_from(&args) {
        Ok(cli) => return Ok(cli),
        Err(error) => error,
    };
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = error.print();
        return Err(ExitCode::SUCCESS);
    }
    let Some(retry) = with_env_url(&args) else {
        return Err(usage_error(&error));
    };
    match Cli::try_parse_from(&retry) {
        Ok(cli) => Ok(cli),
        Err(second) => {
            // A first argument that is a URL was not omitted: its own error
            // is the one to show.
            let given = args
                .get(2)
                .and_then(|a| a.to_str())
                .map(target::parse_layered);
            let shown = if matches!(given, Some(Ok(_))) {
                &error
            } else {
                &second
            };
            Err(usage_error(shown))
        }
    }
}

/// `args` with the value of [`URL_VAR`] inserted after the subcommand, when
/// the variable is set and the subcommand takes a URL.
fn with_env_url(args: &[OsString]) -> Option<Vec<OsString>> {
    let url = std::env::var_os(URL_VAR).filter(|url| !url.is_empty())?;
    let command = args.get(1)?.to_str()?;
    if !TAKES_URL.contains(&command) {
        return None;
    }
    let mut retry = args.to_vec();
    retry.insert(2, url);
    Some(retry)
}

/// An argument error as one line: clap's message (its first paragraph,
/// e.g. the missing arguments), its tip if any, and the usage line.
fn usage_error(error: &clap::Error) -> ExitCode {
    let rendered = error.render().to_string();
    let find = |prefix: &str| {
        rendered
            .lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix).map(str::to_owned))
    };
    let message = match error.kind() {
        // clap shows the whole help for a bare subcommand: say what is missing.
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            "arguments are missing".to_owned()
        }
        _ => {
            let first: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .take_while(|l| !l.is_empty())
                .collect();
            let first = first.join(" ");
            let first = first.trim_start_matches("error: ").to_owned();
            match find("tip: ") {
                Some(tip) => format!("{first} ({tip})"),
                None => first,
            }
        }
    };
    let usage = find("Usage: ").map_or_else(
        || "see --help".to_owned(),
        |usage| format!("usage: {usage} (see --help)"),
    );
    fail(&Failure::new(format!("{message}; {usage}")))
}

fn fail(failure: &Failure) -> ExitCode {
    output::eprint_line(&format!("error: {failure}"));
    ExitCode::from(EXIT_ERROR)
}

async fn run(command: Command) -> Result<u8, Failure> {
    match command {
        Command::Bench(args) => bench::run(&args).await.map(|()| 0),
        Command::BenchWorker(args) => bench::run_worker(&args).await.map(|()| 0),
        Command::Check(args) => check::run(&args).await,
        Command::Inspect(args) => inspect::run(&args).await.map(|()| 0),
        Command::Redrive(args) => repair::redrive(&args).await.map(|()| 0),
        Command::Clear(args) => repair::clear(&args).await.map(|()| 0),
        Command::Reclaim(args) => repair::reclaim(&args).await.map(|()| 0),
        Command::Pause(args) => control::pause(&args).await.map(|()| 0),
        Command::Resume(args) => control::resume(&args).await.map(|()| 0),
        Command::Fork(args) => control::fork(&args).await.map(|()| 0),
        Command::Reschedule(args) => control::reschedule(&args).await.map(|()| 0),
        Command::Delete(args) => retention::delete(&args).await.map(|()| 0),
        Command::Prune(args) => retention::prune(&args).await.map(|()| 0),
        Command::Console(args) => console::run(&args).await.map(|()| 0),
        Command::Reencrypt(args) => reencrypt::run(&args).await.map(|()| 0),
    }
}
