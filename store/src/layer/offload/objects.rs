//! The object store side of the offloading layer: writing, fetching,
//! copying and deleting offloaded payloads.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use a2_store_api::{Payload, Result, StoreError, StoredEvent};
use futures::{StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde_json::Value;

use super::reference::{check, reserved_key_used, Keys, Kind, Place, Reference};
use super::streamed::Failed;

/// How many objects one call fetches at once.
const FETCHES_IN_FLIGHT: usize = 16;

/// Payloads this call wrote, by SHA-256: results resolve them without a
/// fetch.
pub(super) type Written = HashMap<String, Payload>;

/// The object store, where keys go in it, and the size above which a
/// payload is offloaded. Cheap to clone (streams keep one).
#[derive(Clone)]
pub(super) struct Objects {
    pub store: Arc<dyn ObjectStore>,
    pub keys: Keys,
    pub threshold: usize,
    /// The same store when it is the local file system: large payloads
    /// are then written while they are serialized, to a staging file
    /// renamed to its key (see `streamed.rs`).
    pub local: Option<Arc<LocalFileSystem>>,
}

impl Objects {
    /// The payload a row of `session` holds for `payload`: `payload` itself
    /// when its JSON is at most the threshold, else a reference to the
    /// object just written (and, with the local store, synced) under it.
    pub async fn offload_event(
        &self,
        session: &str,
        payload: Payload,
        written: &mut Written,
    ) -> Result<Payload> {
        if super::reference::uses_reserved_key(&payload) {
            return Err(reserved_key_used("an event payload"));
        }
        let Some(reference) = self.offload(session, Kind::Event, &payload).await? else {
            return Ok(payload);
        };
        let row = Payload::new(reference.to_value());
        written.insert(reference.sha256, payload);
        Ok(row)
    }

    /// The state a snapshot row of `session` holds for `state` (see
    /// [`Objects::offload_event`]).
    pub async fn offload_state(&self, session: &str, state: Value) -> Result<Value> {
        if super::reference::uses_reserved_key(&state) {
            return Err(reserved_key_used("a snapshot state"));
        }
        let state = Payload::new(state);
        Ok(match self.offload(session, Kind::State, &state).await? {
            Some(reference) => reference.to_value(),
            None => state.into_value(),
        })
    }

    /// Writes `value` when its JSON exceeds the threshold; its reference.
    /// Small payloads cost one serialization that stops at the threshold;
    /// large ones are written while they are serialized where renames are
    /// cheap ([`Objects::local`], see `streamed.rs`), else serialized,
    /// hashed and put under their key.
    async fn offload(
        &self,
        session: &str,
        kind: Kind,
        value: &Payload,
    ) -> Result<Option<Reference>> {
        if !super::size::exceeds(value, self.threshold) {
            return Ok(None);
        }
        let written = if let Some(local) = &self.local {
            let staging = self.keys.staging(session);
            let key_of = |reference: &Reference| self.keys.object(session, kind, reference);
            super::streamed::write(local, &staging, value.clone(), key_of)
                .await
                .map_err(|failed| match failed {
                    Failed::Serialize(error) => not_json(&error),
                    Failed::Write(error) => not_written(session, &staging, error),
                    Failed::Store(error) => not_written(session, &staging, error),
                })
        } else {
            self.put(session, kind, value).await
        };
        written.map(Some)
    }

    /// Serializes and hashes `value`, then puts it under its key.
    async fn put(&self, session: &str, kind: Kind, value: &Value) -> Result<Reference> {
        let (bytes, reference) =
            super::reference::serialize(value).map_err(|error| not_json(&error))?;
        let path = self.keys.object(session, kind, &reference);
        self.store
            .put(&path, PutPayload::from(bytes))
            .await
            .map_err(|error| not_written(session, &path, error))?;
        Ok(reference)
    }

    /// `event` with its payload fetched back when the row holds a reference.
    pub async fn resolve_event(
        &self,
        mut event: StoredEvent,
        written: &Written,
    ) -> Result<StoredEvent> {
        let Some(parsed) = Reference::parse(&event.payload) else {
            return Ok(event);
        };
        let place = Place::Event {
            session: &event.session_id,
            id: &event.id,
            index: event.index,
        };
        let reference = parsed.map_err(|why| corrupt_reference(place, &why))?;
        if let Some(payload) = written.get(&reference.sha256) {
            event.payload = payload.clone();
            return Ok(event);
        }
        let path = self.keys.object(&event.session_id, Kind::Event, &reference);
        let value = self.fetch(&path, place, &reference).await?;
        event.payload = Payload::new(value);
        Ok(event)
    }

    /// Every event of `events` resolved, in order.
    pub async fn resolve_events(
        &self,
        events: Vec<StoredEvent>,
        written: &Written,
    ) -> Result<Vec<StoredEvent>> {
        if !events
            .iter()
            .any(|event| Reference::parse(&event.payload).is_some())
        {
            return Ok(events);
        }
        futures::stream::iter(events)
            .map(|event| self.resolve_event(event, written))
            .buffered(FETCHES_IN_FLIGHT)
            .try_collect()
            .await
    }

    /// `state` fetched back when it is a reference.
    pub async fn resolve_state(
        &self,
        session: &str,
        reducer: &str,
        index: u64,
        state: Value,
    ) -> Result<Value> {
        let Some(parsed) = Reference::parse(&state) else {
            return Ok(state);
        };
        let place = Place::State {
            session,
            reducer,
            index,
        };
        let reference = parsed.map_err(|why| corrupt_reference(place, &why))?;
        let path = self.keys.object(session, Kind::State, &reference);
        self.fetch(&path, place, &reference).await
    }

    /// The object at `path`, checked against `reference` and decoded.
    async fn fetch(&self, path: &Path, place: Place<'_>, reference: &Reference) -> Result<Value> {
        let bytes = match self.store.get(path).await {
            Ok(found) => found.bytes().await,
            Err(error) => Err(error),
        };
        let bytes = bytes.map_err(|error| match error {
            object_store::Error::NotFound { .. } => StoreError::backend(
                format!(
                    "{place} was offloaded to the object store, but its object ({path}, sha256 \
                     {}) is missing: it was deleted outside this store, or the store is opened \
                     on another object store or prefix than the one it was written with",
                    reference.sha256
                ),
                error,
            ),
            error => StoreError::backend(
                format!("could not fetch {place} from the object store (object {path}); retry"),
                error,
            ),
        })?;
        check(place, reference, &bytes)?;
        serde_json::from_slice(&bytes).map_err(|error| {
            StoreError::backend(
                format!("{place} was fetched from the object store but is not JSON"),
                error,
            )
        })
    }

    /// Copies the objects `rows` of `from` reference under `into`.
    pub async fn copy_events(&self, from: &str, into: &str, rows: &[StoredEvent]) -> Result<u64> {
        let mut copied = BTreeSet::new();
        for row in rows {
            let Some(parsed) = Reference::parse(&row.payload) else {
                continue;
            };
            let place = Place::Event {
                session: from,
                id: &row.id,
                index: row.index,
            };
            let reference = parsed.map_err(|why| corrupt_reference(place, &why))?;
            if !copied.insert(reference.sha256.clone()) {
                continue;
            }
            let source = self.keys.object(from, Kind::Event, &reference);
            let target = self.keys.object(into, Kind::Event, &reference);
            self.store
                .copy(&source, &target)
                .await
                .map_err(|error| match error {
                    object_store::Error::NotFound { .. } => StoreError::backend(
                        format!(
                            "cannot fork: {place} was offloaded, but its object ({source}) is \
                             missing; nothing was forked"
                        ),
                        error,
                    ),
                    error => StoreError::backend(
                        format!(
                            "cannot fork: copying {place} in the object store failed; nothing \
                             was forked, retry"
                        ),
                        error,
                    ),
                })?;
        }
        Ok(u64::try_from(copied.len()).unwrap_or(u64::MAX))
    }

    /// Deletes `paths`; how many were deleted (an object already gone counts
    /// as deleted).
    pub async fn delete(&self, paths: Vec<Path>, session: &str) -> Result<u64> {
        let count = u64::try_from(paths.len()).unwrap_or(u64::MAX);
        let locations = futures::stream::iter(paths.into_iter().map(Ok)).boxed();
        let mut results = self.store.delete_stream(locations);
        while let Some(result) = results.next().await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(error) => {
                    return Err(StoreError::backend(
                        format!(
                            "could not delete the offloaded objects of session '{session}' from \
                             the object store; nothing references them: sweep the session again"
                        ),
                        error,
                    ))
                }
            }
        }
        Ok(count)
    }

    /// Every object under `dir`.
    pub async fn list(&self, dir: &Path, session: &str) -> Result<Vec<object_store::ObjectMeta>> {
        self.store
            .list(Some(dir))
            .try_collect()
            .await
            .map_err(|error| {
                StoreError::backend(
                    format!(
                        "could not list the offloaded objects of session '{session}' in the \
                         object store"
                    ),
                    error,
                )
            })
    }

    /// Deletes every object of `session`; how many.
    pub async fn delete_session(&self, session: &str) -> Result<u64> {
        let dir = self.keys.session(session);
        let objects = self.list(&dir, session).await?;
        let paths = objects.into_iter().map(|meta| meta.location).collect();
        self.delete(paths, session)
            .await
            .map_err(|error| StoreError::Backend {
                message: format!(
                    "session '{session}' was deleted, but removing its offloaded objects failed \
                     (nothing references them): call delete_session again, which answers \
                     NotFound and removes them"
                ),
                source: Some(Box::new(error)),
            })
    }
}

/// The error of a row whose reference does not parse.
fn corrupt_reference(place: Place<'_>, why: &str) -> StoreError {
    StoreError::Backend {
        message: format!(
            "{place} holds an offload reference that cannot be read: {why} (a corrupt row)"
        ),
        source: None,
    }
}

/// The error of a payload that does not serialize as JSON.
fn not_json(error: &serde_json::Error) -> StoreError {
    StoreError::invalid_input(format!("a payload does not serialize as JSON: {error}"))
}

/// The error of an object store write (to `path`) that failed: nothing was
/// appended.
fn not_written(
    session: &str,
    path: &Path,
    error: impl std::error::Error + Send + Sync + 'static,
) -> StoreError {
    StoreError::backend(
        format!(
            "could not write a payload to the object store (object {path}) for session \
             '{session}'; nothing was appended, retry"
        ),
        error,
    )
}
