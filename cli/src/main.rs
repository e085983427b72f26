//! `a2-store`: benchmark, check, inspect and repair a2 session stores.
//!
//! See `a2-store --help`. Every error prints one line on stderr saying what
//! went wrong and what to do, and exits with status 2; `check` exits with 1
//! when a conformance case fails.

#![forbid(unsafe_code)]

mod args;
mod bench;
mod check;
mod failure;
mod inspect;
mod output;
mod repair;
mod scratch;
mod table;
mod target;

use std::process::ExitCode;

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
    let cli = Cli::parse();
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

fn fail(failure: &Failure) -> ExitCode {
    output::eprint_line(&format!("error: {failure}"));
    ExitCode::from(EXIT_ERROR)
}

async fn run(command: Command) -> Result<u8, Failure> {
    match command {
        Command::Bench(args) => bench::run(&args).await.map(|()| 0),
        Command::Check(args) => check::run(&args).await,
        Command::Inspect(args) => inspect::run(&args).await.map(|()| 0),
        Command::Redrive(args) => repair::redrive(&args).await.map(|()| 0),
        Command::Clear(args) => repair::clear(&args).await.map(|()| 0),
        Command::Reclaim(args) => repair::reclaim(&args).await.map(|()| 0),
    }
}
