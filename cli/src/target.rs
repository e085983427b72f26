//! Turning a URL argument into an open store, with one-line errors.

use std::sync::Arc;

use a2_store::postgres;
use a2_store::{
    KeySource, LayerUrlOptions, LayeredUrl, OffloadOptions, OpenOptions, ReadOptions,
    SqliteLocation, Store, StoreUrl,
};

use crate::args::PayloadArgs;
use crate::failure::Failure;

/// Parses a URL argument for a command that runs on the backend alone
/// (`check`, `bench`, `inspect health`): the payload layers' keys are
/// refused, saying so.
pub fn parse(url: &str) -> Result<StoreUrl, Failure> {
    let parsed = parse_layered(url)?;
    if !parsed.layers.is_empty() {
        return Err(Failure::new(
            "this command runs on the backend alone: leave the payload layers' keys (keys=, offload=, offload_threshold=) out of the URL",
        ));
    }
    Ok(parsed.store)
}

/// Parses a URL argument with the payload layers it asks for.
pub fn parse_layered(url: &str) -> Result<LayeredUrl, Failure> {
    LayeredUrl::parse(url).map_err(|error| Failure::new(error.to_string()))
}

/// Opens `url` read-only for a command that only looks: nothing is created,
/// migrated or written (see [`OpenOptions::read_only`]).
pub async fn open_read_only(url: &str) -> Result<Arc<dyn Store>, Failure> {
    open_read_only_with(url, &PayloadArgs::default()).await
}

/// [`open_read_only`], reading payloads with the keys and offload
/// directory given: a payload whose key is not given stays sealed (shown
/// as `encrypted (key k2)`), never failing the listing.
pub async fn open_read_only_with(
    url: &str,
    payloads: &PayloadArgs,
) -> Result<Arc<dyn Store>, Failure> {
    let options = with_payloads(OpenOptions::default().with_read_only(true), payloads)?;
    open_checked(url, options.with_missing_keys_left_sealed(true)).await
}

/// [`open_existing`], reading payloads with the keys and offload directory
/// given (payloads of keys not given stay sealed).
pub async fn open_existing_with(
    url: &str,
    payloads: &PayloadArgs,
) -> Result<Arc<dyn Store>, Failure> {
    let options = with_payloads(OpenOptions::default(), payloads)?;
    open_checked(url, options.with_missing_keys_left_sealed(true)).await
}

/// `store`, a backend opened on its own, wrapped in the payload layers the
/// URL (`layers`) and the flags (`payloads`) ask for, stacked as
/// `a2_store::open` stacks them (offload below encryption); payloads whose
/// key is not given stay sealed. `read_only`: the offload directory must
/// exist (nothing is created).
pub fn wrap_payload_layers(
    store: Arc<dyn Store>,
    layers: &LayerUrlOptions,
    payloads: &PayloadArgs,
    read_only: bool,
) -> Result<Arc<dyn Store>, Failure> {
    use a2_store::EncryptedStore;

    let store = offload_layer(store, layers, payloads, read_only)?;
    let Some(keys) = load_keys(layers, payloads)? else {
        return Ok(store);
    };
    let layer = EncryptedStore::new(store, Arc::new(keys)).with_missing_keys_left_sealed(true);
    Ok(Arc::new(layer))
}

/// `store` under the offload layer when the URL (`layers`) or the flags
/// (`payloads`) name an offload directory; `store` itself otherwise.
pub fn offload_layer(
    store: Arc<dyn Store>,
    layers: &LayerUrlOptions,
    payloads: &PayloadArgs,
    read_only: bool,
) -> Result<Arc<dyn Store>, Failure> {
    use a2_store::layer::offload::{OffloadStore, DEFAULT_THRESHOLD};

    let offload = match (&payloads.offload, &layers.offload) {
        (Some(_), Some(_)) => return Err(twice("--offload", "offload=")),
        (Some(dir), None) | (None, Some(dir)) => Some(dir),
        (None, None) => None,
    };
    let Some(dir) = offload else {
        return Ok(store);
    };
    if read_only && !dir.is_dir() {
        return Err(Failure::new(format!(
            "no offload directory at {}: give the directory the store offloads to (a read-only store creates nothing)",
            dir.display()
        )));
    }
    let threshold = layers
        .offload_threshold
        .and_then(|bytes| usize::try_from(bytes).ok())
        .unwrap_or(DEFAULT_THRESHOLD);
    let layer = OffloadStore::local(store, dir)
        .map_err(|error| Failure::new(plain(&error)))?
        .with_threshold(threshold);
    Ok(Arc::new(layer))
}

/// The keys the URL (`layers`) or the flags (`payloads`) name, loaded;
/// `None` when neither names any.
pub fn load_keys(
    layers: &LayerUrlOptions,
    payloads: &PayloadArgs,
) -> Result<Option<a2_store::Keyring>, Failure> {
    let source = match (&payloads.keys, &layers.keys) {
        (Some(_), Some(_)) => return Err(twice("--keys", "keys=")),
        (Some(text), None) => Some(
            KeySource::parse(text)
                .map_err(|error| Failure::new(format!("--keys: {}", plain(&error))))?,
        ),
        (None, source) => source.clone(),
    };
    let Some(source) = source else {
        return Ok(None);
    };
    let keys = source
        .load()
        .map_err(|error| Failure::new(format!("keys {source}: {}", plain(&error))))?;
    Ok(Some(keys))
}

/// The failure of a layer given both as a flag and in the URL.
fn twice(flag: &str, key: &str) -> Failure {
    Failure::new(format!(
        "{flag} and the URL's {key} both say the same thing: give it once"
    ))
}

/// `options` with the keys and offload directory of `payloads`.
pub fn with_payloads(options: OpenOptions, payloads: &PayloadArgs) -> Result<OpenOptions, Failure> {
    let mut options = options;
    if let Some(source) = &payloads.keys {
        // The message of a bad source never repeats it (it may be a key).
        let source = KeySource::parse(source)
            .map_err(|error| Failure::new(format!("--keys: {}", plain(&error))))?;
        let keys = source
            .load()
            .map_err(|error| Failure::new(format!("--keys {source}: {}", plain(&error))))?;
        options = options.with_keys(Arc::new(keys));
    }
    if let Some(dir) = &payloads.offload {
        if !dir.is_dir() {
            return Err(Failure::new(format!(
                "--offload {}: no such directory (give the directory the store offloads to)",
                dir.display()
            )));
        }
        options = options.with_offload(OffloadOptions::directory(dir));
    }
    Ok(options)
}

/// A store error's message without its `invalid input: ` prefix.
fn plain(error: &a2_store::StoreError) -> String {
    let message = error.to_string();
    message
        .strip_prefix("invalid input: ")
        .unwrap_or(&message)
        .to_owned()
}

/// Opens `url` for a command that repairs existing data: a SQLite file or
/// PostgreSQL schema that does not exist is an error (it is never created
/// here).
pub async fn open_existing(url: &str) -> Result<Arc<dyn Store>, Failure> {
    open_checked(url, OpenOptions::default()).await
}

/// Opens the backend of `url` alone, for a command that stacks the payload
/// layers itself: like [`open_existing`] it never creates a database.
/// Answers the store and the layers the URL asked for.
pub async fn open_existing_backend(
    url: &str,
) -> Result<(Arc<dyn Store>, LayerUrlOptions), Failure> {
    let mut layered = parse_layered(url)?;
    let layers = std::mem::take(&mut layered.layers);
    require_database(url, &layered.store).await?;
    let store = a2_store::open_layered(&layered, OpenOptions::default())
        .await
        .map_err(|error| Failure::store(url, "opening the store", &error))?;
    Ok((store, layers))
}

async fn open_checked(url: &str, options: OpenOptions) -> Result<Arc<dyn Store>, Failure> {
    let layered = parse_layered(url)?;
    require_database(url, &layered.store).await?;
    a2_store::open_layered(&layered, options)
        .await
        .map_err(|error| Failure::store(url, "opening the store", &error))
}

/// `Ok` unless `parsed` names a SQLite file or PostgreSQL schema that does
/// not exist (a command that repairs or reads never creates one).
async fn require_database(url: &str, parsed: &StoreUrl) -> Result<(), Failure> {
    if let StoreUrl::Sqlite {
        location: SqliteLocation::File(path),
        ..
    } = parsed
    {
        if !path.is_file() {
            return Err(Failure::new(format!(
                "no SQLite database at '{}': check the path (this command never creates one)",
                path.display()
            )));
        }
    }
    if let StoreUrl::Postgres {
        url: connection,
        options,
    } = parsed
    {
        let schema = postgres::options(options, OpenOptions::default()).schema;
        // `None` when the server cannot be asked: opening then says why.
        let exists = postgres::schema_exists(connection, &schema).await.ok();
        if exists == Some(false) {
            return Err(Failure::new(format!(
                "no schema '{schema}' on the PostgreSQL server of {url}: check the URL's database and ?schema= (this command never creates one)"
            )));
        }
    }
    Ok(())
}

/// Opens a parsed URL with the system clock and random ids.
pub async fn open(url: &str, parsed: &StoreUrl) -> Result<Arc<dyn Store>, Failure> {
    open_with(url, parsed, OpenOptions::default()).await
}

async fn open_with(
    url: &str,
    parsed: &StoreUrl,
    options: OpenOptions,
) -> Result<Arc<dyn Store>, Failure> {
    a2_store::open_url(parsed, options)
        .await
        .map_err(|error| Failure::store(url, "opening the store", &error))
}

/// `Ok` when `session` has at least one stored row (a clear marker is never
/// reclaimed, so a cleared session still has one); otherwise the failure a
/// repair of a session that does not exist gives, saying nothing changed.
pub async fn require_session(store: &dyn Store, url: &str, session: &str) -> Result<(), Failure> {
    let rows = store
        .read(
            session,
            ReadOptions {
                limit: Some(1),
                ..ReadOptions::default()
            },
        )
        .await
        .map_err(|e| Failure::store(url, &format!("looking up session '{session}'"), &e))?;
    if rows.is_empty() {
        return Err(Failure::new(format!(
            "no session '{}' in '{url}': nothing was changed — check the id with `a2-store inspect {url} sessions`",
            crate::output::escape(session)
        )));
    }
    Ok(())
}
