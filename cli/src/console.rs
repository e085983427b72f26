//! `a2-store console URL`: serves the web console (`a2-store-console`)
//! over one store until Ctrl-C or SIGTERM.
//!
//! Safe by default: read-only (and the store opened read-only) unless
//! `--allow-writes`; loopback only unless a token is given; tokens are
//! never printed, only their ids.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use a2_store::postgres::{self, PostgresStore};
use a2_store::{LayeredUrl, OpenOptions, StoreUrl};
use a2_store_console::ConsoleOptions;

use crate::args::ConsoleArgs;
use crate::failure::Failure;
use crate::output::print;
use crate::target;

/// How long open requests (a live timeline is one that never ends by
/// itself) may run on after Ctrl-C or SIGTERM before the server stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Runs `console`.
pub async fn run(args: &ConsoleArgs) -> Result<(), Failure> {
    let url = args.url.as_str();
    let tokens = tokens(args)?;
    if tokens.is_empty() && !args.listen.ip().is_loopback() {
        return Err(Failure::new(format!(
            "refusing to listen on {} without a token: anyone who reaches that address could read every session; give tokens with --token-file FILE (one per line) or --token-env VAR, or listen on loopback (--listen 127.0.0.1:{})",
            args.listen,
            args.listen.port()
        )));
    }
    let layered = target::parse_layered(url)?;
    let parsed = layered.store.clone();
    let mut options = ConsoleOptions::default()
        .with_writes(args.allow_writes)
        .with_hidden_payloads(args.hide_payloads)
        .with_consumers(args.consumers.clone());
    for token in &tokens {
        options = options.with_token(token.clone());
    }
    let store = match &parsed {
        StoreUrl::Postgres {
            url: connection,
            options: url_options,
        } => {
            let store = open_postgres(url, &parsed, connection, url_options, args).await?;
            let layered_store = target::wrap_payload_layers(
                store.clone(),
                &layered.layers,
                &args.payloads,
                !args.allow_writes,
            )?;
            let source = store.clone();
            options = options.with_health(move || {
                let store = source.clone();
                async move {
                    match store.health().await {
                        Ok(health) => Ok(crate::health::as_json(&health)),
                        Err(error) => Err(crate::failure::chain(&error)),
                    }
                }
            });
            layered_store
        }
        _ if args.allow_writes => target::open_existing_with(url, &args.payloads).await?,
        StoreUrl::Sqlite { .. } => target::open_read_only_with(url, &args.payloads).await?,
        // A memory store starts empty: there is nothing to keep from writes.
        _ => target::open_existing_with(url, &args.payloads).await?,
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|error| {
            Failure::new(format!(
                "cannot listen on {}: {error} (is another console or server on that port? pick another with --listen)",
                args.listen
            ))
        })?;
    let local = listener
        .local_addr()
        .map_err(|error| Failure::new(format!("reading the address listened on: {error}")))?;
    print(&banner(&layered, local, args, &tokens))?;
    let app = a2_store_console::router(store, options);
    serve(listener, app).await
}

/// The lines printed at start: where, over what, and in which mode.
fn banner(parsed: &LayeredUrl, local: SocketAddr, args: &ConsoleArgs, tokens: &[String]) -> String {
    let host = match local {
        SocketAddr::V4(v4) if v4.ip().is_unspecified() => format!("127.0.0.1:{}", v4.port()),
        SocketAddr::V6(v6) if v6.ip().is_unspecified() => format!("[::1]:{}", v6.port()),
        other => other.to_string(),
    };
    let mode = if args.allow_writes {
        "writes allowed"
    } else {
        "read-only (--allow-writes enables the repair actions)"
    };
    let access = if tokens.is_empty() {
        "no token: loopback only".to_owned()
    } else {
        let ids: Vec<String> = tokens
            .iter()
            .map(|token| a2_store_console::token_id(token))
            .collect();
        format!(
            "{} token{} (ids {}); log in at /login",
            tokens.len(),
            if tokens.len() == 1 { "" } else { "s" },
            ids.join(", ")
        )
    };
    let consumers = if args.consumers.is_empty() {
        "no --consumer given: the overview lists no consumer (pages take ?consumer=NAME)".to_owned()
    } else {
        format!("consumers {}", args.consumers.join(", "))
    };
    // `StoreUrl`'s Display hides a password; `print` redacts the rest.
    format!(
        "a2-store console: serving {parsed} at http://{host}/\n{mode}; {access}; payloads {}; {consumers}\nCtrl-C stops it\n",
        if args.hide_payloads { "hidden" } else { "shown" },
    )
}

/// The tokens of `--token-file` and `--token-env`, in that order, without
/// duplicates. A file or variable given but holding no token is an error.
fn tokens(args: &ConsoleArgs) -> Result<Vec<String>, Failure> {
    let mut tokens = Vec::new();
    if let Some(path) = &args.token_file {
        tokens.extend(file_tokens(path)?);
    }
    if let Some(var) = &args.token_env {
        let value = std::env::var(var).map_err(|_| {
            Failure::new(format!(
                "--token-env {var}: the environment variable {var} is not set (or not UTF-8): export it with the token, or use --token-file FILE"
            ))
        })?;
        let token = value.trim();
        if token.is_empty() {
            return Err(Failure::new(format!(
                "--token-env {var}: the environment variable {var} is empty: set it to the token"
            )));
        }
        check_token(token, &format!("the environment variable {var}"))?;
        tokens.push(token.to_owned());
    }
    let mut seen = std::collections::HashSet::new();
    tokens.retain(|token| seen.insert(token.clone()));
    Ok(tokens)
}

/// The tokens of a token file: one per line, trimmed, blank lines skipped.
fn file_tokens(path: &Path) -> Result<Vec<String>, Failure> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|error| {
        Failure::new(format!(
            "--token-file {shown}: cannot read it: {error} (write one token per line)"
        ))
    })?;
    let tokens: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect();
    if tokens.is_empty() {
        return Err(Failure::new(format!(
            "--token-file {shown} holds no token: write one token per line (e.g. `openssl rand -hex 32 > {shown}`)"
        )));
    }
    for (line, token) in tokens.iter().enumerate() {
        check_token(token, &format!("token {} of {shown}", line + 1))?;
    }
    Ok(tokens)
}

/// Refuses a token that cannot travel in a header or cookie, without
/// showing it.
fn check_token(token: &str, what: &str) -> Result<(), Failure> {
    let usable = token
        .chars()
        .all(|c| c.is_ascii_graphic() && !matches!(c, ';' | ',' | '"' | '\\'));
    if !usable {
        return Err(Failure::new(format!(
            "{what} holds a space, a control or non-ASCII character, or one of ; , \" \\: use printable ASCII only (e.g. hex)"
        )));
    }
    Ok(())
}

/// Opens a PostgreSQL store as `a2_store::open` does (read-only unless
/// `--allow-writes`), keeping the concrete store for the health view.
async fn open_postgres(
    url: &str,
    parsed: &StoreUrl,
    connection: &str,
    url_options: &a2_store::PostgresUrlOptions,
    args: &ConsoleArgs,
) -> Result<Arc<PostgresStore>, Failure> {
    let open = OpenOptions::default().with_read_only(!args.allow_writes);
    let mut backend = postgres::options(url_options, open);
    backend.read_only = !args.allow_writes;
    let schema = backend.schema.clone();
    // `None` when the server cannot be asked: connecting then says why.
    let exists = postgres::schema_exists(connection, &schema).await.ok();
    if exists == Some(false) {
        return Err(Failure::new(format!(
            "no schema '{schema}' on the PostgreSQL server of {parsed}: check the URL's database and ?schema= (the console never creates one)"
        )));
    }
    PostgresStore::connect(connection, backend)
        .await
        .map(Arc::new)
        .map_err(|error| Failure::store(url, "opening the store", &error))
}

/// Serves `app` on `listener` until Ctrl-C or SIGTERM, then lets open
/// requests end for [`SHUTDOWN_GRACE`].
async fn serve(listener: tokio::net::TcpListener, app: axum::Router) -> Result<(), Failure> {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = stopped.await;
    });
    let mut server = tokio::spawn(server.into_future());
    tokio::select! {
        result = &mut server => return finished(result),
        signal = shutdown_signal() => signal?,
    }
    let _ = stop.send(());
    match tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await {
        Ok(result) => finished(result)?,
        Err(_) => {
            server.abort();
            crate::output::eprint_line(&format!(
                "a2-store console: closed the connections still open after {} s",
                SHUTDOWN_GRACE.as_secs()
            ));
        }
    }
    print("a2-store console: stopped\n")
}

/// The server task's end as a result.
fn finished(result: Result<std::io::Result<()>, tokio::task::JoinError>) -> Result<(), Failure> {
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(Failure::new(format!("serving the console: {error}"))),
        Err(error) => Err(Failure::new(format!("the console's server task: {error}"))),
    }
}

/// Waits for Ctrl-C or (on Unix) SIGTERM.
async fn shutdown_signal() -> Result<(), Failure> {
    let ctrl_c = async {
        tokio::signal::ctrl_c()
            .await
            .map_err(|error| Failure::new(format!("listening for Ctrl-C: {error}")))
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())
            .map_err(|error| Failure::new(format!("listening for SIGTERM: {error}")))?;
        tokio::select! {
            result = ctrl_c => result,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        ctrl_c.await
    }
}
