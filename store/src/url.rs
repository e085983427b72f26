//! Store URLs: which backend to open and how, parsed without opening anything.
//!
//! Parsing does not depend on which backend features are compiled in, so a
//! URL for a disabled backend still parses and [`open`](crate::open) can say
//! which feature to enable.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use a2_store_api::StoreError;

use crate::redact;

/// The URL forms [`open`](crate::open) accepts, for error messages.
pub const URL_FORMS: &str =
    "memory:, sqlite:PATH[?OPTIONS], sqlite::memory: or postgres://USER@HOST/DATABASE[?OPTIONS]";

/// A parsed store URL.
///
/// | URL | backend |
/// |---|---|
/// | `memory:` | the in-memory reference backend (feature `memory`) |
/// | `sqlite:PATH`, `sqlite://PATH` | a SQLite database file, created when missing (feature `sqlite`) |
/// | `sqlite::memory:` | a private in-memory SQLite database (feature `sqlite`) |
/// | `postgres://USER@HOST:PORT/DB`, `postgresql://...` | PostgreSQL (feature `postgres`) |
///
/// SQLite URLs take query options after `?`, joined by `&`:
/// `durability=full|normal`, `busy_timeout_ms=N`, `pool_size=N` (at least 1)
/// and `poll_interval_ms=N` (at least 1). Unknown or repeated options are an
/// error. The path is taken verbatim (no percent-decoding), so it cannot
/// contain `?`.
///
/// PostgreSQL URLs take the store's options `schema=NAME` (default `a2`),
/// `pool_size=N` (at least 1), `min_idle=N` (connections opened at
/// connect and kept open, warmed; at most `pool_size`; default 0),
/// `statement_timeout_ms=N` (at least 1), `pool_timeout_ms=N` (how long a call waits for a free pooled connection
/// before failing with `Busy`; default the statement timeout),
/// `idle_timeout_ms=N` and `max_lifetime_ms=N` (pooled connections unused
/// or open longer are closed; default never), and the rotation of the state
/// tables (`a2_store_postgres::Rotation`): `rotate_interval_ms=N` (how often
/// the store checks; 0 never; default 1000), `rotate_min_growth=BYTES`
/// (default 256 KiB), `rotate_max_live=ROWS` (default 20000) and
/// `rotate_lock_timeout_ms=N` (at least 1; default 50), and
/// `network_timeout_ms=N` (at least 1; default 10 s: how long the store
/// waits on the network before it takes a connection for dead, see
/// `a2_store_postgres::PostgresOptions::network_timeout`); every other query
/// parameter is left in the connection URL for the driver: `sslmode`,
/// `sslrootcert` (TLS, see `a2_store_postgres::tls`), `connect_timeout`
/// (seconds), `target_session_attrs=any|read-write|read-only`,
/// `load_balance_hosts=disable|random`, `keepalives`, `keepalives_idle`,
/// `keepalives_interval`, `keepalives_retries`, `tcp_user_timeout`,
/// `application_name`, `password`, ... — it rejects the ones it does not know.
///
/// A URL may name several servers, `postgres://USER@HOST1:PORT1,HOST2:PORT2/DB`:
/// each connection tries them in order (or shuffled, with
/// `load_balance_hosts=random`) and keeps the first that answers and, with
/// `target_session_attrs=read-write`, accepts writes — after a failover the
/// store's new connections find the new primary.
///
/// The `Display` and `Debug` forms, and every error message, hide the
/// password, whether in the user part (which runs to the last `@` before
/// the host, spaces and all) or a `password=` parameter
/// (`postgres://app:***@host/db`); [`StoreUrl::redact`] does the same to
/// any text. An input that is not a URL at all is never repeated in an
/// error: it may be a secret.
///
/// ```
/// use a2_store::{SqliteDurability, SqliteLocation, StoreUrl};
///
/// let url: StoreUrl = "sqlite:data/app.db?durability=full&pool_size=4".parse()?;
/// let StoreUrl::Sqlite { location, options } = &url else { unreachable!() };
/// assert_eq!(location, &SqliteLocation::File("data/app.db".into()));
/// assert_eq!(options.durability, Some(SqliteDurability::Full));
/// assert_eq!(options.pool_size, Some(4));
/// assert_eq!(url.to_string(), "sqlite:data/app.db?durability=full&pool_size=4");
/// assert_eq!(url.feature(), "sqlite");
///
/// assert!("sqlite:app.db?cache=big".parse::<StoreUrl>().is_err());
///
/// let secret: StoreUrl = "postgres://app:s3cret@db.internal/prod".parse()?;
/// assert_eq!(secret.to_string(), "postgres://app:***@db.internal/prod");
/// assert!(!format!("{secret:?}").contains("s3cret"));
///
/// let failover: StoreUrl =
///     "postgres://app:pw@db1:5432,db2:5432/prod?target_session_attrs=read-write&network_timeout_ms=3000"
///         .parse()?;
/// assert_eq!(
///     failover.to_string(),
///     "postgres://app:***@db1:5432,db2:5432/prod?target_session_attrs=read-write&network_timeout_ms=3000"
/// );
/// # Ok::<(), a2_store::StoreError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `memory:` — the in-memory reference backend; nothing outlives the store.
    Memory,
    /// `sqlite:PATH` or `sqlite::memory:`.
    Sqlite {
        /// The database file, or a private in-memory database.
        location: SqliteLocation,
        /// Options given in the query string; `None` keeps the backend default.
        options: SqliteUrlOptions,
    },
    /// `postgres://...` or `postgresql://...`.
    Postgres {
        /// The connection URL for the driver: the URL as given without the
        /// store's own options. It holds the password, if any: print it
        /// only through [`StoreUrl::redact`].
        url: String,
        /// The store's options from the query string; `None` keeps the default.
        options: PostgresUrlOptions,
    },
}

/// The store's own query options of a PostgreSQL URL; each `None` keeps the
/// backend's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresUrlOptions {
    /// `schema=NAME`: the PostgreSQL schema holding the tables (created when
    /// missing).
    pub schema: Option<String>,
    /// `pool_size=N`: most connections open at once (at least 1).
    pub pool_size: Option<usize>,
    /// `min_idle=N`: connections opened at connect and kept open, each
    /// warmed before its first call (at most `pool_size`; default 0).
    pub min_idle: Option<usize>,
    /// `statement_timeout_ms=N`: a statement running or waiting longer fails
    /// with `Busy` (at least 1).
    pub statement_timeout_ms: Option<u64>,
    /// `pool_timeout_ms=N`: a call waiting longer for a free pooled
    /// connection fails with `Busy` saying the pool is exhausted (at least 1;
    /// default the statement timeout).
    pub pool_timeout_ms: Option<u64>,
    /// `idle_timeout_ms=N`: pooled connections unused for longer are closed
    /// (at least 1; default never).
    pub idle_timeout_ms: Option<u64>,
    /// `max_lifetime_ms=N`: pooled connections open for longer are closed and
    /// replaced (at least 1; default never).
    pub max_lifetime_ms: Option<u64>,
    /// `rotate_interval_ms=N`: how often the store checks whether a state
    /// table is due for rotation; 0 never (default 1000).
    pub rotate_interval_ms: Option<u64>,
    /// `rotate_min_growth=BYTES`: the growth since its last rotation below
    /// which a table is not rotated (default 256 KiB).
    pub rotate_min_growth: Option<u64>,
    /// `rotate_max_live=ROWS`: the most rows a rotation copies; larger
    /// tables are left to vacuum (default 20000).
    pub rotate_max_live: Option<u64>,
    /// `rotate_lock_timeout_ms=N`: how long a rotation waits for a table's
    /// lock (at least 1; default 50).
    pub rotate_lock_timeout_ms: Option<u64>,
    /// `network_timeout_ms=N`: how long the store waits on the network
    /// before it takes a connection for dead (at least 1; default 10 s; see
    /// `a2_store_postgres::PostgresOptions::network_timeout`).
    pub network_timeout_ms: Option<u64>,
}

/// Where a SQLite store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqliteLocation {
    /// A database file (relative paths are relative to the working directory).
    File(PathBuf),
    /// A private in-memory database (`sqlite::memory:`), gone when the store drops.
    Memory,
}

/// How hard SQLite works to keep a commit across a power loss (`durability=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SqliteDurability {
    /// `full`: every commit is synced to disk before it returns.
    Full,
    /// `normal`: commits survive a crash of the process, and a power loss may
    /// lose the last few.
    Normal,
}

impl SqliteDurability {
    /// The option value: `full` or `normal`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Normal => "normal",
        }
    }
}

/// Query options of a SQLite URL; each `None` keeps the backend's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteUrlOptions {
    /// `durability=full|normal`.
    pub durability: Option<SqliteDurability>,
    /// `busy_timeout_ms=N`: how long a call waits for another writer's lock.
    pub busy_timeout_ms: Option<u64>,
    /// `pool_size=N`: connections kept open (at least 1).
    pub pool_size: Option<usize>,
    /// `poll_interval_ms=N`: how often the file's one watcher checks for
    /// commits of other processes while a subscriber or `claim_work` waits
    /// (at least 1; one check per file, never per session).
    pub poll_interval_ms: Option<u64>,
}

impl StoreUrl {
    /// Parses a store URL; see [`StoreUrl`] for the forms. Every failure is
    /// an [`InvalidInput`](a2_store_api::ErrorCode::InvalidInput) error that
    /// says what is wrong and what a valid URL looks like.
    pub fn parse(url: &str) -> Result<Self, StoreError> {
        // Messages show the URL with its password hidden.
        let shown = redact::redact_whole(url);
        let Some((scheme, rest)) = split_scheme(url) else {
            return Err(not_a_url(url, &shown));
        };
        match scheme {
            "memory" => parse_memory(&shown, rest),
            "sqlite" => parse_sqlite(&shown, rest),
            "postgres" | "postgresql" => parse_postgres(url, &shown),
            // Only the scheme: the rest of an unknown URL may hold a secret
            // this parser cannot place.
            other if other.eq_ignore_ascii_case("postgres")
                || other.eq_ignore_ascii_case("postgresql") =>
            {
                Err(StoreError::invalid_input(format!(
                    "unknown store URL scheme '{other}': URL schemes are lowercase here, write postgres://"
                )))
            }
            other => Err(StoreError::invalid_input(format!(
                "unknown store URL scheme '{other}' (the rest of the URL is not repeated: it may hold a password): use {URL_FORMS}"
            ))),
        }
    }

    /// `text` with every secret in it replaced by `***`: the password in
    /// the user part of each URL (`postgres:`, `postgresql:` and any other
    /// `scheme://` but `sqlite://`), which runs to the last `@` before the
    /// host even across spaces and tabs; the value of every key ending in
    /// `password` (`password=`, `sslpassword=`, `PGPASSWORD=`, any case,
    /// percent-encoded keys of a URL query too) and of `scram_client_key`
    /// and `scram_server_key`, in a URL's query (up to the next `&`) and in
    /// `key=value` connection strings as libpq reads them (`password=pw`,
    /// `password = 'a \' b'`). In a query, what follows such a value up to
    /// the next key libpq or the store knows is hidden with it (it may be
    /// the rest of a password whose `&` was not percent-encoded). A URL ends
    /// with its line, and a quoted URL at its closing quote. When in doubt
    /// more is hidden, never less: a `password=` value that ends a URL that
    /// is not quoted hides the rest of the line.
    ///
    /// ```
    /// use a2_store::StoreUrl;
    ///
    /// assert_eq!(
    ///     StoreUrl::redact("opening 'postgres://app:pw@db/prod?password=pw&sslmode=require' failed"),
    ///     "opening 'postgres://app:***@db/prod?password=***&sslmode=require' failed"
    /// );
    /// assert_eq!(
    ///     StoreUrl::redact("in 'postgres://app:my secret@db1,db2/prod': refused"),
    ///     "in 'postgres://app:***@db1,db2/prod': refused"
    /// );
    /// assert_eq!(
    ///     StoreUrl::redact("host=db user=app password='my secret' dbname=prod"),
    ///     "host=db user=app password='***' dbname=prod"
    /// );
    /// assert_eq!(StoreUrl::redact("sqlite:a.db"), "sqlite:a.db");
    /// ```
    pub fn redact(text: &str) -> String {
        redact::redact_text(text)
    }

    /// The backend's name: `memory`, `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Sqlite { .. } => "sqlite",
            Self::Postgres { .. } => "postgres",
        }
    }

    /// The Cargo feature of `a2-store` that compiles this URL's backend in.
    pub fn feature(&self) -> &'static str {
        self.backend()
    }

    /// Whether this build of `a2-store` has the backend this URL needs.
    pub fn is_enabled(&self) -> bool {
        match self {
            Self::Memory => cfg!(feature = "memory"),
            Self::Sqlite { .. } => cfg!(feature = "sqlite"),
            Self::Postgres { .. } => cfg!(feature = "postgres"),
        }
    }
}

impl FromStr for StoreUrl {
    type Err = StoreError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        Self::parse(url)
    }
}

impl fmt::Display for StoreUrl {
    /// The canonical form with the password hidden: parsing it gives back
    /// an equal `StoreUrl` when the URL holds no password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory => f.write_str("memory:"),
            Self::Postgres { url, options } => {
                f.write_str(&redact::redact_whole(url))?;
                let mut pairs = Vec::new();
                if let Some(schema) = &options.schema {
                    pairs.push(format!("schema={schema}"));
                }
                if let Some(size) = options.pool_size {
                    pairs.push(format!("pool_size={size}"));
                }
                if let Some(count) = options.min_idle {
                    pairs.push(format!("min_idle={count}"));
                }
                if let Some(ms) = options.statement_timeout_ms {
                    pairs.push(format!("statement_timeout_ms={ms}"));
                }
                if let Some(ms) = options.pool_timeout_ms {
                    pairs.push(format!("pool_timeout_ms={ms}"));
                }
                if let Some(ms) = options.idle_timeout_ms {
                    pairs.push(format!("idle_timeout_ms={ms}"));
                }
                if let Some(ms) = options.max_lifetime_ms {
                    pairs.push(format!("max_lifetime_ms={ms}"));
                }
                if let Some(ms) = options.rotate_interval_ms {
                    pairs.push(format!("rotate_interval_ms={ms}"));
                }
                if let Some(bytes) = options.rotate_min_growth {
                    pairs.push(format!("rotate_min_growth={bytes}"));
                }
                if let Some(rows) = options.rotate_max_live {
                    pairs.push(format!("rotate_max_live={rows}"));
                }
                if let Some(ms) = options.rotate_lock_timeout_ms {
                    pairs.push(format!("rotate_lock_timeout_ms={ms}"));
                }
                if let Some(ms) = options.network_timeout_ms {
                    pairs.push(format!("network_timeout_ms={ms}"));
                }
                if !pairs.is_empty() {
                    let join = if url.contains('?') { "&" } else { "?" };
                    write!(f, "{join}{}", pairs.join("&"))?;
                }
                Ok(())
            }
            Self::Sqlite { location, options } => {
                match location {
                    SqliteLocation::Memory => f.write_str("sqlite::memory:")?,
                    SqliteLocation::File(path) => {
                        let path = path.display().to_string();
                        // `//` would be read as the optional authority marker and
                        // `:memory:` as the in-memory database: keep both literal.
                        if path.starts_with("//") || path == ":memory:" {
                            write!(f, "sqlite://{path}")?;
                        } else {
                            write!(f, "sqlite:{path}")?;
                        }
                    }
                }
                let mut pairs = Vec::new();
                if let Some(durability) = options.durability {
                    pairs.push(format!("durability={}", durability.as_str()));
                }
                if let Some(ms) = options.busy_timeout_ms {
                    pairs.push(format!("busy_timeout_ms={ms}"));
                }
                if let Some(size) = options.pool_size {
                    pairs.push(format!("pool_size={size}"));
                }
                if let Some(ms) = options.poll_interval_ms {
                    pairs.push(format!("poll_interval_ms={ms}"));
                }
                if !pairs.is_empty() {
                    write!(f, "?{}", pairs.join("&"))?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Debug for StoreUrl {
    /// As the derived form, with the password of a PostgreSQL URL hidden.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory => f.write_str("Memory"),
            Self::Sqlite { location, options } => f
                .debug_struct("Sqlite")
                .field("location", location)
                .field("options", options)
                .finish(),
            Self::Postgres { url, options } => f
                .debug_struct("Postgres")
                .field("url", &redact::redact_whole(url))
                .field("options", options)
                .finish(),
        }
    }
}

/// The scheme of `url` and what follows its `:`, when it has a scheme: a
/// letter, then letters, digits, `+`, `-` or `.`.
fn split_scheme(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_once(':')?;
    let mut bytes = scheme.bytes();
    let valid = bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    valid.then_some((scheme, rest))
}

/// The error for an input with no URL scheme. It repeats the input only
/// when it looks like a SQLite file name (redacted as `shown`): anything
/// else may be a secret pasted in the wrong place or a `key=value`
/// connection string with its password.
fn not_a_url(input: &str, shown: &str) -> StoreError {
    let looks_like_file = [".db", ".sqlite", ".sqlite3"]
        .iter()
        .any(|ext| input.ends_with(ext))
        && !input.contains(['=', '@']);
    if input.trim().is_empty() {
        StoreError::invalid_input(format!(
            "an empty string is not a store URL: use {URL_FORMS}"
        ))
    } else if looks_like_file {
        StoreError::invalid_input(format!(
            "'{shown}' is not a store URL: write sqlite:{shown} to open it as a SQLite database"
        ))
    } else if input == ":memory:" {
        StoreError::invalid_input(
            "':memory:' is not a store URL: write sqlite::memory: for a private in-memory SQLite database, or memory:",
        )
    } else if input.contains('=') {
        StoreError::invalid_input(
            "a key=value connection string (host=... user=...) is not a store URL (it is not repeated here: it may hold a password): write it as postgres://USER@HOST:PORT/DATABASE?KEY=VALUE&... (a password goes in as USER:PASSWORD@HOST)",
        )
    } else {
        StoreError::invalid_input(format!(
            "the argument is not a store URL: it has no scheme such as memory:, sqlite: or postgres:// (it is not repeated here: it may hold a secret); use {URL_FORMS}"
        ))
    }
}

fn parse_memory(url: &str, rest: &str) -> Result<StoreUrl, StoreError> {
    let (path, query) = split_query(rest);
    if !(path.is_empty() || path == "//") {
        return Err(StoreError::invalid_input(format!(
            "'{url}': memory: takes no path; write memory:"
        )));
    }
    if let Some(query) = query {
        if let Some((key, _)) = pairs(url, query)?.first() {
            layer_key_here(key)?;
            return Err(StoreError::invalid_input(format!(
                "unknown option '{key}' in '{url}': memory: takes no options"
            )));
        }
    }
    Ok(StoreUrl::Memory)
}

fn parse_sqlite(url: &str, rest: &str) -> Result<StoreUrl, StoreError> {
    let (path, query) = split_query(rest);
    let location = if path == ":memory:" {
        SqliteLocation::Memory
    } else {
        let path = path.strip_prefix("//").unwrap_or(path);
        if path.is_empty() {
            return Err(StoreError::invalid_input(format!(
                "'{url}' names no database: write sqlite:PATH for a file or sqlite::memory:"
            )));
        }
        SqliteLocation::File(PathBuf::from(path))
    };
    let mut options = SqliteUrlOptions::default();
    for (key, value) in pairs(url, query.unwrap_or(""))? {
        match key {
            "durability" => {
                let durability = match value {
                    "full" => SqliteDurability::Full,
                    "normal" => SqliteDurability::Normal,
                    other => {
                        return Err(StoreError::invalid_input(format!(
                        "durability '{other}' in '{url}': use durability=full or durability=normal"
                    )))
                    }
                };
                set_once(url, key, &mut options.durability, durability)?;
            }
            "busy_timeout_ms" => {
                let ms = number(url, key, value, 0)?;
                set_once(url, key, &mut options.busy_timeout_ms, ms)?;
            }
            "pool_size" => {
                let size = number(url, key, value, 1)?;
                let size = usize::try_from(size).map_err(|_| {
                    StoreError::invalid_input(format!("pool_size={value} in '{url}' is too large"))
                })?;
                set_once(url, key, &mut options.pool_size, size)?;
            }
            "poll_interval_ms" => {
                let ms = number(url, key, value, 1)?;
                set_once(url, key, &mut options.poll_interval_ms, ms)?;
            }
            other => {
                layer_key_here(other)?;
                return Err(StoreError::invalid_input(format!(
                    "unknown option '{other}' in '{url}': sqlite URLs take durability, busy_timeout_ms, pool_size and poll_interval_ms"
                )));
            }
        }
    }
    Ok(StoreUrl::Sqlite { location, options })
}

/// Parses `url`; messages show `shown`, the URL with its password hidden.
fn parse_postgres(url: &str, shown: &str) -> Result<StoreUrl, StoreError> {
    let (base, query) = split_query(url);
    if !base.contains("://") {
        return Err(StoreError::invalid_input(format!(
            "'{shown}' is not a PostgreSQL URL: write postgres://USER@HOST:PORT/DATABASE"
        )));
    }
    let mut options = PostgresUrlOptions::default();
    let mut passed_on = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "schema" => {
                if value.is_empty() {
                    return Err(StoreError::invalid_input(format!(
                        "empty schema in '{shown}': write schema=NAME or leave it out for the default"
                    )));
                }
                set_once(shown, key, &mut options.schema, value.to_owned())?;
            }
            "pool_size" => {
                let size = number(shown, key, value, 1)?;
                let size = usize::try_from(size).map_err(|_| {
                    StoreError::invalid_input(format!(
                        "pool_size={value} in '{shown}' is too large"
                    ))
                })?;
                set_once(shown, key, &mut options.pool_size, size)?;
            }
            "min_idle" => {
                let count = number(shown, key, value, 0)?;
                let count = usize::try_from(count).map_err(|_| {
                    StoreError::invalid_input(format!("min_idle={value} in '{shown}' is too large"))
                })?;
                set_once(shown, key, &mut options.min_idle, count)?;
            }
            "statement_timeout_ms" => {
                let ms = number(shown, key, value, 1)?;
                set_once(shown, key, &mut options.statement_timeout_ms, ms)?;
            }
            "pool_timeout_ms" => {
                let ms = number(shown, key, value, 1)?;
                set_once(shown, key, &mut options.pool_timeout_ms, ms)?;
            }
            "idle_timeout_ms" => {
                let ms = number(shown, key, value, 1)?;
                set_once(shown, key, &mut options.idle_timeout_ms, ms)?;
            }
            "max_lifetime_ms" => {
                let ms = number(shown, key, value, 1)?;
                set_once(shown, key, &mut options.max_lifetime_ms, ms)?;
            }
            "rotate_interval_ms" => {
                let ms = number(shown, key, value, 0)?;
                set_once(shown, key, &mut options.rotate_interval_ms, ms)?;
            }
            "rotate_min_growth" => {
                let bytes = number(shown, key, value, 0)?;
                set_once(shown, key, &mut options.rotate_min_growth, bytes)?;
            }
            "rotate_max_live" => {
                let rows = number(shown, key, value, 0)?;
                set_once(shown, key, &mut options.rotate_max_live, rows)?;
            }
            "rotate_lock_timeout_ms" => {
                let ms = number(shown, key, value, 1)?;
                set_once(shown, key, &mut options.rotate_lock_timeout_ms, ms)?;
            }
            "network_timeout_ms" => {
                let ms = number(shown, key, value, 1)?;
                set_once(shown, key, &mut options.network_timeout_ms, ms)?;
            }
            key if LAYER_KEYS.contains(&key) => layer_key_here(key)?,
            _ => passed_on.push(pair),
        }
    }
    let url = if passed_on.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", passed_on.join("&"))
    };
    Ok(StoreUrl::Postgres { url, options })
}

/// Splits `rest` at its first `?` into the path and the query.
fn split_query(rest: &str) -> (&str, Option<&str>) {
    match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    }
}

/// The `key=value` pairs of a query; an empty query has none.
fn pairs<'a>(url: &str, query: &'a str) -> Result<Vec<(&'a str, &'a str)>, StoreError> {
    if query.is_empty() {
        return Ok(Vec::new());
    }
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) if !key.is_empty() && !value.is_empty() => Ok((key, value)),
            _ => Err(StoreError::invalid_input(format!(
                "malformed option '{pair}' in '{url}': write key=value pairs joined by &"
            ))),
        })
        .collect()
}

fn set_once<T>(url: &str, key: &str, slot: &mut Option<T>, value: T) -> Result<(), StoreError> {
    if slot.is_some() {
        return Err(StoreError::invalid_input(format!(
            "option '{key}' is given twice in '{url}': keep one"
        )));
    }
    *slot = Some(value);
    Ok(())
}

fn number(url: &str, key: &str, value: &str, min: u64) -> Result<u64, StoreError> {
    match value.parse::<u64>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(StoreError::invalid_input(format!(
            "{key}={value} in '{url}': expected a whole number of at least {min}"
        ))),
    }
}

/// The query keys of the payload layers, which [`LayeredUrl::parse`] takes
/// out of any store URL before the backend's own options are read.
const LAYER_KEYS: [&str; 3] = ["keys", "offload", "offload_threshold"];

/// The error of [`StoreUrl::parse`] for a payload layer's key: the
/// backend's part of a URL does not take them, [`LayeredUrl`] does.
fn layer_key_here(key: &str) -> Result<(), StoreError> {
    if LAYER_KEYS.contains(&key) {
        return Err(StoreError::invalid_input(format!(
            "'{key}=' asks for a payload layer, which StoreUrl (the backend's part of a URL) does not hold: open the URL with a2_store::open, or parse it with LayeredUrl::parse"
        )));
    }
    Ok(())
}

/// A store URL with the payload layers its query asks for: what
/// [`open`](crate::open) parses.
///
/// Any store URL takes, besides its backend's options:
///
/// | key | what it does | feature |
/// |---|---|---|
/// | `keys=env:VAR` | encrypt payloads with the keys in environment variable `VAR` (`kid:<base64>,...`, the last current; see `Keyring::parse`) | `encryption` |
/// | `keys=file:PATH` | the same, with the keys in the file `PATH` (one `kid:<base64>` per line) | `encryption` |
/// | `offload=DIR`, `offload=file:///DIR` | keep payloads above the threshold as files under the local directory `DIR` (created when missing) | `offload` |
/// | `offload_threshold=BYTES` | offload payloads whose JSON is longer than `BYTES` (default 64 KiB; needs `offload=`) | `offload` |
///
/// A key itself never goes in a URL: `keys=` takes only where to read the
/// keys from, and any other value is refused without being repeated (and
/// hidden by [`StoreUrl::redact`]). Object stores other than a local
/// directory (S3, GCS, Azure) are configured in code
/// (`OpenOptions::with_offload`), where their credentials stay out of URLs.
/// Values are taken verbatim (no percent-decoding), so a path cannot hold
/// `&`.
///
/// Parsing does not depend on the features compiled in: a URL asking for a
/// layer this build lacks parses, and [`open`](crate::open) refuses it with
/// an error naming the feature to enable.
///
/// ```
/// use a2_store::{KeySource, LayeredUrl, StoreUrl};
///
/// let url: LayeredUrl = "sqlite:app.db?durability=full&keys=env:A2_STORE_KEYS&offload=/var/a2/payloads&offload_threshold=100000".parse()?;
/// assert!(matches!(url.store, StoreUrl::Sqlite { .. }));
/// assert_eq!(url.layers.keys, Some(KeySource::Env("A2_STORE_KEYS".into())));
/// assert_eq!(url.layers.offload.as_deref(), Some(std::path::Path::new("/var/a2/payloads")));
/// assert_eq!(url.layers.offload_threshold, Some(100_000));
/// assert_eq!(
///     url.to_string(),
///     "sqlite:app.db?durability=full&keys=env:A2_STORE_KEYS&offload=/var/a2/payloads&offload_threshold=100000"
/// );
///
/// // A key pasted into a URL is refused, and never repeated.
/// let error = LayeredUrl::parse("memory:?keys=k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=").unwrap_err();
/// assert!(!error.to_string().contains("AQEB"));
/// # Ok::<(), a2_store::StoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayeredUrl {
    /// The backend and its options.
    pub store: StoreUrl,
    /// The payload layers asked for.
    pub layers: LayerUrlOptions,
}

/// The payload layers a URL asks for (see [`LayeredUrl`]); `None` asks for
/// nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerUrlOptions {
    /// `keys=env:VAR` or `keys=file:PATH`: encrypt payloads with those keys.
    pub keys: Option<KeySource>,
    /// `offload=DIR` or `offload=file:///DIR`: offload large payloads to
    /// files under `DIR`.
    pub offload: Option<PathBuf>,
    /// `offload_threshold=BYTES`: the size above which payloads are offloaded.
    pub offload_threshold: Option<u64>,
}

impl LayerUrlOptions {
    /// Whether the URL asks for no layer.
    pub fn is_empty(&self) -> bool {
        self.keys.is_none() && self.offload.is_none() && self.offload_threshold.is_none()
    }
}

/// Where encryption keys are read from: never the keys themselves, so a
/// `KeySource` may be shown, logged and put in a URL.
///
/// ```
/// use a2_store::KeySource;
///
/// assert_eq!(KeySource::parse("env:A2_STORE_KEYS")?, KeySource::Env("A2_STORE_KEYS".into()));
/// assert_eq!(KeySource::parse("file:/etc/a2/keys")?.to_string(), "file:/etc/a2/keys");
/// assert!(KeySource::parse("k1:AQEBAQEB").is_err());
/// # Ok::<(), a2_store::StoreError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeySource {
    /// `env:VAR`: the environment variable `VAR` holds `kid:<base64>,...`.
    Env(String),
    /// `file:PATH`: the file holds one `kid:<base64>` per line.
    File(PathBuf),
}

impl KeySource {
    /// Parses `env:VAR` (a variable name of ASCII letters, digits and `_`)
    /// or `file:PATH`. Anything else is an
    /// [`InvalidInput`](a2_store_api::ErrorCode::InvalidInput) error that
    /// does not repeat it (it may be a key).
    pub fn parse(text: &str) -> Result<Self, StoreError> {
        if let Some(var) = text.strip_prefix("env:") {
            if is_env_name(var) {
                return Ok(Self::Env(var.to_owned()));
            }
        } else if let Some(path) = text.strip_prefix("file:") {
            if !path.is_empty() {
                return Ok(Self::File(PathBuf::from(path)));
            }
        }
        Err(StoreError::invalid_input(
            "where to read the keys from is not env:VAR or file:PATH (the value is not repeated here: it may be a key): write env:A2_STORE_KEYS (a variable holding kid:<base64>,...) or file:/path/to/keys (one kid:<base64> per line); a key itself never goes in a URL or an argument",
        ))
    }

    /// The keys this source holds (feature `encryption`): the variable or
    /// file read now, as `Keyring::from_env` or `Keyring::from_file` does.
    /// Errors name the variable or file, never a key.
    #[cfg(feature = "encryption")]
    pub fn load(&self) -> Result<crate::layer::codec::Keyring, StoreError> {
        use crate::layer::codec::Keyring;
        match self {
            Self::Env(var) => Keyring::from_env(var),
            Self::File(path) => Keyring::from_file(path),
        }
    }
}

/// Whether `name` can name an environment variable here: ASCII letters,
/// digits and `_`, not empty.
pub(crate) fn is_env_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Env(var) => write!(f, "env:{var}"),
            Self::File(path) => write!(f, "file:{}", path.display()),
        }
    }
}

impl FromStr for KeySource {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl LayeredUrl {
    /// Parses a store URL and the payload layer keys of its query (see
    /// [`LayeredUrl`]); the rest goes to [`StoreUrl::parse`]. Every failure
    /// is an [`InvalidInput`](a2_store_api::ErrorCode::InvalidInput) error
    /// saying what to change.
    pub fn parse(url: &str) -> Result<Self, StoreError> {
        let Some((base, query)) = url.split_once('?') else {
            return Ok(Self {
                store: StoreUrl::parse(url)?,
                layers: LayerUrlOptions::default(),
            });
        };
        let mut layers = LayerUrlOptions::default();
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "keys" => {
                    let source = KeySource::parse(value).map_err(|_| {
                        StoreError::invalid_input(
                            "keys= in the store URL is not env:VAR or file:PATH (the value is not repeated here: it may be a key): write keys=env:A2_STORE_KEYS (a variable holding kid:<base64>,...) or keys=file:/path/to/keys (one kid:<base64> per line); a key itself never goes in a URL",
                        )
                    })?;
                    layer_once(key, &mut layers.keys, source)?;
                }
                "offload" => {
                    let dir = offload_dir(value)?;
                    layer_once(key, &mut layers.offload, dir)?;
                }
                "offload_threshold" => {
                    let bytes = value.parse::<u64>().map_err(|_| {
                        StoreError::invalid_input(format!(
                            "offload_threshold={value} in the store URL: expected a whole number of bytes (0 offloads every payload)"
                        ))
                    })?;
                    layer_once(key, &mut layers.offload_threshold, bytes)?;
                }
                _ => kept.push(pair),
            }
        }
        if layers.offload_threshold.is_some() && layers.offload.is_none() {
            return Err(StoreError::invalid_input(
                "offload_threshold= in the store URL needs offload=DIR beside it (where the payloads go)",
            ));
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        Ok(Self {
            store: StoreUrl::parse(&rest)?,
            layers,
        })
    }
}

impl FromStr for LayeredUrl {
    type Err = StoreError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        Self::parse(url)
    }
}

impl From<StoreUrl> for LayeredUrl {
    /// The backend with no payload layer.
    fn from(store: StoreUrl) -> Self {
        Self {
            store,
            layers: LayerUrlOptions::default(),
        }
    }
}

impl fmt::Display for LayeredUrl {
    /// The store URL's form (password hidden) with the layer keys after it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let store = self.store.to_string();
        f.write_str(&store)?;
        let mut pairs = Vec::new();
        if let Some(keys) = &self.layers.keys {
            pairs.push(format!("keys={keys}"));
        }
        if let Some(dir) = &self.layers.offload {
            pairs.push(format!("offload={}", dir.display()));
        }
        if let Some(bytes) = self.layers.offload_threshold {
            pairs.push(format!("offload_threshold={bytes}"));
        }
        if !pairs.is_empty() {
            let join = if store.contains('?') { "&" } else { "?" };
            write!(f, "{join}{}", pairs.join("&"))?;
        }
        Ok(())
    }
}

/// Sets a layer key once; the second is an error.
fn layer_once<T>(key: &str, slot: &mut Option<T>, value: T) -> Result<(), StoreError> {
    if slot.is_some() {
        return Err(StoreError::invalid_input(format!(
            "option '{key}' is given twice in the store URL: keep one"
        )));
    }
    *slot = Some(value);
    Ok(())
}

/// The directory an `offload=` value names: `file:///DIR`, `file:DIR` or a
/// plain path.
fn offload_dir(value: &str) -> Result<PathBuf, StoreError> {
    let path = if let Some(rest) = value.strip_prefix("file://") {
        if !rest.starts_with('/') {
            return Err(StoreError::invalid_input(
                "offload=file://... in the store URL names a host: write offload=file:///absolute/dir (three slashes) or offload=DIR",
            ));
        }
        rest
    } else if let Some(rest) = value.strip_prefix("file:") {
        rest
    } else if let Some((scheme, _)) = value.split_once("://") {
        let scheme = if scheme.chars().all(|c| c.is_ascii_alphanumeric()) {
            scheme
        } else {
            "?"
        };
        return Err(StoreError::invalid_input(format!(
            "offload={scheme}://... in the store URL: a URL offloads to a local directory only (offload=DIR or offload=file:///DIR); build an S3, GCS or Azure store in code and give it with OpenOptions::with_offload(OffloadOptions::object_store(..)), so its credentials stay out of URLs"
        )));
    } else {
        value
    };
    if path.is_empty() {
        return Err(StoreError::invalid_input(
            "offload= in the store URL names no directory: write offload=DIR or offload=file:///DIR",
        ));
    }
    Ok(PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2_store_api::ErrorCode;

    fn parse(url: &str) -> StoreUrl {
        StoreUrl::parse(url).unwrap_or_else(|err| panic!("{url}: {err}"))
    }

    fn error(url: &str) -> String {
        let err = StoreUrl::parse(url).expect_err(url);
        assert_eq!(err.code(), ErrorCode::InvalidInput, "{url}");
        err.to_string()
    }

    fn file(path: &str, options: SqliteUrlOptions) -> StoreUrl {
        StoreUrl::Sqlite {
            location: SqliteLocation::File(PathBuf::from(path)),
            options,
        }
    }

    #[test]
    fn memory_urls() {
        assert_eq!(parse("memory:"), StoreUrl::Memory);
        assert_eq!(parse("memory://"), StoreUrl::Memory);
        assert_eq!(parse("memory:?"), StoreUrl::Memory);
        assert!(error("memory:foo").contains("takes no path"));
        assert!(error("memory:?durability=full").contains("unknown option 'durability'"));
    }

    #[test]
    fn sqlite_paths() {
        let none = SqliteUrlOptions::default();
        assert_eq!(parse("sqlite:app.db"), file("app.db", none));
        assert_eq!(parse("sqlite://app.db"), file("app.db", none));
        assert_eq!(
            parse("sqlite:///var/a2/app.db"),
            file("/var/a2/app.db", none)
        );
        assert_eq!(parse("sqlite:/var/a2/app.db"), file("/var/a2/app.db", none));
        assert_eq!(
            parse("sqlite:dir with space/a:b.db"),
            file("dir with space/a:b.db", none)
        );
        assert_eq!(
            parse("sqlite::memory:"),
            StoreUrl::Sqlite {
                location: SqliteLocation::Memory,
                options: none
            }
        );
        assert!(error("sqlite:").contains("names no database"));
        assert!(error("sqlite://").contains("names no database"));
        assert!(error("sqlite:?durability=full").contains("names no database"));
    }

    #[test]
    fn sqlite_options() {
        let url = parse(
            "sqlite:a.db?durability=normal&busy_timeout_ms=0&pool_size=3&poll_interval_ms=25",
        );
        let expected = SqliteUrlOptions {
            durability: Some(SqliteDurability::Normal),
            busy_timeout_ms: Some(0),
            pool_size: Some(3),
            poll_interval_ms: Some(25),
        };
        assert_eq!(url, file("a.db", expected));
        assert_eq!(
            parse("sqlite::memory:?durability=full"),
            StoreUrl::Sqlite {
                location: SqliteLocation::Memory,
                options: SqliteUrlOptions {
                    durability: Some(SqliteDurability::Full),
                    ..SqliteUrlOptions::default()
                }
            }
        );
    }

    #[test]
    fn bad_options_are_named() {
        assert!(error("sqlite:a.db?cache=big").contains("unknown option 'cache'"));
        assert!(
            error("sqlite:a.db?durability=extra").contains("durability=full or durability=normal")
        );
        assert!(error("sqlite:a.db?pool_size=0").contains("at least 1"));
        assert!(error("sqlite:a.db?pool_size=-2").contains("whole number"));
        assert!(error("sqlite:a.db?busy_timeout_ms=soon").contains("whole number"));
        assert!(error("sqlite:a.db?poll_interval_ms=0").contains("at least 1"));
        assert!(error("sqlite:a.db?durability").contains("malformed option 'durability'"));
        assert!(error("sqlite:a.db?durability=full&").contains("malformed option ''"));
        assert!(error("sqlite:a.db?=full").contains("malformed option"));
        assert!(error("sqlite:a.db?pool_size=1&pool_size=2").contains("given twice"));
    }

    #[test]
    fn not_urls() {
        assert!(error("app.db").contains("write sqlite:app.db"));
        assert!(error("dir with space/a:b.db").contains("write sqlite:dir with space/a:b.db"));
        assert!(error("nonsense").contains("is not a store URL"));
        assert!(error("nonsense").contains("no scheme"));
        assert!(error("").contains("is not a store URL"));
        assert!(error(":memory:").contains("write sqlite::memory:"));
        assert!(error("mysql://localhost/db").contains("unknown store URL scheme 'mysql'"));
        assert!(error("POSTGRES://h/db").contains("lowercase"));
    }

    #[test]
    fn inputs_that_are_no_url_are_never_repeated() {
        let secret = "S3cret";
        for (input, says) in [
            (
                "host=127.0.0.1 user=app password=S3cret",
                "key=value connection string",
            ),
            ("host=h password='a S3cret'", "key=value connection string"),
            ("S3cret", "no scheme"),
            ("S3cret word", "no scheme"),
            ("user=app S3cret.db", "key=value connection string"),
            (
                "mysql://root:S3cret@h/db",
                "unknown store URL scheme 'mysql'",
            ),
            ("app:S3cret@h/db", "unknown store URL scheme 'app'"),
            ("Postgres://app:S3cret@h/db", "lowercase"),
            ("postgres:app:S3cret@h/db", "not a PostgreSQL URL"),
            ("postgres:app:S3cret word@h/db", "not a PostgreSQL URL"),
        ] {
            let message = error(input);
            assert!(!message.contains(secret), "{input}: {message}");
            assert!(message.contains(says), "{input}: {message}");
        }
    }

    #[test]
    fn postgres_urls_keep_driver_options_and_take_the_stores() {
        let url = parse("postgres://user@localhost/db");
        assert_eq!(url.backend(), "postgres");
        assert_eq!(url.to_string(), "postgres://user@localhost/db");
        assert_eq!(url.is_enabled(), cfg!(feature = "postgres"));
        assert_eq!(parse("postgresql://h/db").feature(), "postgres");
        let url = parse(
            "postgres://u@h:5432/db?sslmode=disable&schema=app_1&pool_size=4&statement_timeout_ms=500&connect_timeout=3",
        );
        let StoreUrl::Postgres { url: conn, options } = &url else {
            panic!("{url:?}")
        };
        assert_eq!(
            conn,
            "postgres://u@h:5432/db?sslmode=disable&connect_timeout=3"
        );
        assert_eq!(options.schema.as_deref(), Some("app_1"));
        assert_eq!(options.pool_size, Some(4));
        assert_eq!(options.statement_timeout_ms, Some(500));
        assert_eq!(
            url.to_string(),
            "postgres://u@h:5432/db?sslmode=disable&connect_timeout=3&schema=app_1&pool_size=4&statement_timeout_ms=500"
        );
        assert_eq!(parse(&url.to_string()), url);
        assert!(error("postgres:localhost").contains("not a PostgreSQL URL"));
        assert!(error("postgres://h/db?pool_size=0").contains("at least 1"));
        assert!(error("postgres://h/db?schema=").contains("empty schema"));
        assert!(error("postgres://h/db?schema=a&schema=b").contains("given twice"));
    }

    #[test]
    fn postgres_pool_keys_parse_and_print() {
        let url = parse("postgres://h/db?pool_timeout_ms=5&idle_timeout_ms=6&max_lifetime_ms=7&application_name=x&min_idle=2");
        let StoreUrl::Postgres { url: conn, options } = &url else {
            panic!("{url:?}")
        };
        assert_eq!(conn, "postgres://h/db?application_name=x");
        assert_eq!(options.pool_timeout_ms, Some(5));
        assert_eq!(options.idle_timeout_ms, Some(6));
        assert_eq!(options.max_lifetime_ms, Some(7));
        assert_eq!(options.min_idle, Some(2));
        assert_eq!(parse(&url.to_string()), url);
        assert!(error("postgres://h/db?min_idle=-1").contains("whole number"));
        assert!(error("postgres://h/db?pool_timeout_ms=0").contains("at least 1"));
        assert!(error("postgres://h/db?idle_timeout_ms=soon").contains("whole number"));
        assert!(
            error("postgres://h/db?max_lifetime_ms=1&max_lifetime_ms=2").contains("given twice")
        );
    }

    #[test]
    fn passwords_never_show() {
        let secret = "s3cr3t-pw";
        for text in [
            "postgres://app:s3cr3t-pw@db.internal:5432/prod",
            "postgresql://app:s3cr3t-pw@db.internal/prod?sslmode=require&schema=x",
            "postgres://app@db.internal/prod?password=s3cr3t-pw&sslmode=require",
            "postgres://app@db.internal/prod?sslmode=require&PASSWORD=s3cr3t-pw",
            "postgres://app:s3cr3t-pw@db/prod?application_name=a@b",
            "postgres://app:s3cr3t-pw@weird@db/prod",
            "postgres://app:s3cr3t-pw?x@db/prod",
        ] {
            let url = parse(text);
            for shown in [url.to_string(), format!("{url:?}"), format!("{url:#?}")] {
                assert!(!shown.contains(secret), "{text} shows as {shown}");
            }
            assert!(!StoreUrl::redact(text).contains(secret), "{text}");
            assert!(!StoreUrl::redact(&format!("in '{text}': failed")).contains(secret));
        }
        assert_eq!(
            parse("postgres://app:pw@db/prod?schema=a").to_string(),
            "postgres://app:***@db/prod?schema=a"
        );
        assert_eq!(
            StoreUrl::redact("a postgres://u:p@h/d and 'postgresql://v:q@i/e?password=r' end"),
            "a postgres://u:***@h/d and 'postgresql://v:***@i/e?password=***' end"
        );
        // Unquoted, a password parameter may run on past a space: the rest
        // of the line is hidden with it.
        assert_eq!(
            StoreUrl::redact("a postgres://u:p@h/d and postgresql://v:q@i/e?password=r end\nnext"),
            "a postgres://u:***@h/d and postgresql://v:***@i/e?password=***\nnext"
        );
        assert_eq!(StoreUrl::redact("postgres://u@h/d"), "postgres://u@h/d");
        for text in [
            "postgres://app:s3cr3t-pw word@127.0.0.1:1/x",
            "postgres://app:s3cr3t-pw\tword@127.0.0.1:1/x",
            "postgres://app:x s3cr3t-pw@h/db?schema=a",
            "postgres://app:s3cr3t-pw@h1:5432,h2:5433/db?target_session_attrs=read-write",
            "postgres://app:s3cr3t%2Dpw%20x@h/db",
            "postgres://app@h1,h2/db?password=s3cr3t-pw word&connect_timeout=2",
            "postgres://app@h/db?pass%77ord=s3cr3t-pw&sslpassword=s3cr3t-pw",
            "postgres://app@h/db?password=s3cr3t-pw&x&schema=a",
        ] {
            let url = parse(text);
            for shown in [url.to_string(), format!("{url:?}"), format!("{url:#?}")] {
                assert!(!shown.contains("s3cr3t"), "{text} shows as {shown}");
            }
            for context in [
                text.to_owned(),
                format!("in '{text}': failed"),
                format!("`a2-store inspect {text} sessions`"),
            ] {
                let shown = StoreUrl::redact(&context);
                assert!(!shown.contains("s3cr3t"), "{context} shows as {shown}");
            }
        }
        for bad in [
            "postgres://app:s3cr3t-pw@h/db?pool_size=0",
            "postgres://app:s3cr3t-pw@h/db?schema=",
            "postgres://app:s3cr3t-pw@h/db?schema=a&schema=b",
            "postgres://app:s3cr3t-pw@h/db?statement_timeout_ms=x",
            "postgres:app:s3cr3t-pw@h",
            "postgres://app:s3cr3t-pw word@h/db?pool_size=0",
            "postgres://app:s3cr3t-pw\tword@h/db?network_timeout_ms=0",
            "postgres://app@h/db?password=s3cr3t-pw word&schema=",
            "postgres://app:s3cr3t-pw@h1,h2/db?min_idle=x",
        ] {
            assert!(!error(bad).contains(secret), "{bad}: {}", error(bad));
        }
    }

    #[test]
    fn multi_host_urls_keep_their_hosts_and_driver_keys() {
        let text = "postgres://postgres@127.0.0.1:5432,127.0.0.1:5433/test?target_session_attrs=read-write&connect_timeout=2\
                    &load_balance_hosts=random&keepalives=1&keepalives_idle=5&keepalives_interval=2\
                    &keepalives_retries=3&tcp_user_timeout=9&network_timeout_ms=2500&schema=app";
        let url = parse(text);
        let StoreUrl::Postgres { url: conn, options } = &url else {
            panic!("{url:?}")
        };
        assert_eq!(
            conn,
            "postgres://postgres@127.0.0.1:5432,127.0.0.1:5433/test?target_session_attrs=read-write&connect_timeout=2\
             &load_balance_hosts=random&keepalives=1&keepalives_idle=5&keepalives_interval=2\
             &keepalives_retries=3&tcp_user_timeout=9"
        );
        assert_eq!(options.network_timeout_ms, Some(2500));
        assert_eq!(options.schema.as_deref(), Some("app"));
        assert_eq!(parse(&url.to_string()), url);
        let secret = parse("postgres://app:pw@h1:1,[::1]:5433/db?target_session_attrs=read-write");
        assert_eq!(
            secret.to_string(),
            "postgres://app:***@h1:1,[::1]:5433/db?target_session_attrs=read-write"
        );
        assert!(error("postgres://h1,h2/db?network_timeout_ms=0").contains("at least 1"));
        assert!(error("postgres://h/db?network_timeout_ms=soon").contains("whole number"));
        assert!(
            error("postgres://h/db?network_timeout_ms=1&network_timeout_ms=2")
                .contains("given twice")
        );
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "memory:",
            "sqlite::memory:",
            "sqlite:a.db",
            "sqlite:/tmp/x/a.db?durability=full&busy_timeout_ms=5&pool_size=2&poll_interval_ms=9",
        ] {
            let url = parse(text);
            assert_eq!(url.to_string(), text);
            assert_eq!(parse(&url.to_string()), url);
        }
        assert_eq!(
            parse("sqlite://b.db?pool_size=2").to_string(),
            "sqlite:b.db?pool_size=2"
        );
        for tricky in ["sqlite:////net/share/a.db", "sqlite://:memory:"] {
            let url = parse(tricky);
            assert_eq!(url.to_string(), tricky);
            assert_eq!(parse(&url.to_string()), url);
        }
        assert_eq!(
            parse("sqlite://:memory:"),
            file(":memory:", SqliteUrlOptions::default())
        );
    }

    #[test]
    fn features_follow_the_build() {
        assert_eq!(StoreUrl::Memory.is_enabled(), cfg!(feature = "memory"));
        assert_eq!(
            parse("sqlite::memory:").is_enabled(),
            cfg!(feature = "sqlite")
        );
    }

    #[test]
    fn layer_keys_come_out_of_any_backend_url() {
        let url = LayeredUrl::parse("memory:?keys=env:K&offload=/tmp/a2").unwrap();
        assert_eq!(url.store, StoreUrl::Memory);
        assert_eq!(url.layers.keys, Some(KeySource::Env("K".into())));
        assert_eq!(url.layers.offload, Some(PathBuf::from("/tmp/a2")));
        assert_eq!(url.to_string(), "memory:?keys=env:K&offload=/tmp/a2");
        assert_eq!(LayeredUrl::parse(&url.to_string()).unwrap(), url);
        let url = LayeredUrl::parse(
            "sqlite:a.db?pool_size=2&keys=file:/etc/k&offload=file:///srv/p&offload_threshold=0",
        )
        .unwrap();
        assert_eq!(
            url.store,
            file(
                "a.db",
                SqliteUrlOptions {
                    pool_size: Some(2),
                    ..SqliteUrlOptions::default()
                }
            )
        );
        assert_eq!(url.layers.keys, Some(KeySource::File("/etc/k".into())));
        assert_eq!(url.layers.offload, Some(PathBuf::from("/srv/p")));
        assert_eq!(url.layers.offload_threshold, Some(0));
        assert_eq!(LayeredUrl::parse(&url.to_string()).unwrap(), url);
        let url = LayeredUrl::parse("postgres://app:pw@h/db?schema=a&keys=env:K&sslmode=disable")
            .unwrap();
        let StoreUrl::Postgres { url: conn, options } = &url.store else {
            panic!("{url:?}")
        };
        assert_eq!(conn, "postgres://app:pw@h/db?sslmode=disable");
        assert_eq!(options.schema.as_deref(), Some("a"));
        assert_eq!(
            url.to_string(),
            "postgres://app:***@h/db?sslmode=disable&schema=a&keys=env:K"
        );
        let plain = LayeredUrl::parse("sqlite:a.db").unwrap();
        assert!(plain.layers.is_empty());
    }

    #[test]
    fn layer_key_errors_say_what_to_write() {
        let layered = |url: &str| {
            let err = LayeredUrl::parse(url).expect_err(url);
            assert_eq!(err.code(), ErrorCode::InvalidInput, "{url}");
            err.to_string()
        };
        let secret = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE";
        for url in [
            format!("memory:?keys=k1:{secret}"),
            format!("sqlite:a.db?keys={secret}"),
            format!("postgres://h/db?keys=k1:{secret}"),
            format!("memory:?keys=env:{secret}="),
        ] {
            let message = layered(&url);
            assert!(!message.contains(secret), "{message}");
            assert!(message.contains("keys=env:A2_STORE_KEYS"), "{message}");
        }
        assert!(layered("memory:?keys=env:A&keys=env:B").contains("given twice"));
        assert!(layered("memory:?offload_threshold=5").contains("needs offload=DIR"));
        assert!(layered("memory:?offload=/d&offload_threshold=big").contains("whole number"));
        assert!(layered("memory:?offload=s3://key:secret@bucket/x").contains("offload=s3://"));
        assert!(!layered("memory:?offload=s3://key:secret@bucket/x").contains("secret"));
        assert!(layered("memory:?offload=file://host/x").contains("three slashes"));
        assert!(layered("memory:?offload=").contains("names no directory"));
        assert!(layered("sqlite:a.db?keys=env:K&colour=blue").contains("unknown option 'colour'"));
        // The backend's part alone refuses them, pointing at LayeredUrl.
        for url in [
            "memory:?keys=env:K",
            "sqlite:a.db?offload=/d",
            "postgres://h/db?keys=env:K",
        ] {
            assert!(error(url).contains("LayeredUrl::parse"), "{url}");
        }
    }
}
