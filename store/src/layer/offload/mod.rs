//! Large payloads kept in an object store (feature `offload`).
//!
//! [`OffloadStore`] wraps any `Arc<dyn Store>` and implements [`Store`].
//! An event payload (of [`Store::append`] and of the events a
//! [`Store::complete_attempt`] returns) or a snapshot state (of
//! [`Store::write_state`]) whose JSON is longer than the threshold
//! ([`DEFAULT_THRESHOLD`] unless [`OffloadStore::with_threshold`]) is written
//! to an [`ObjectStore`] (the [`object_store`] crate: local files, or S3, GCS
//! and Azure with the features `offload-aws`, `offload-gcp`,
//! `offload-azure`), and the row holds a small reference instead:
//!
//! ```json
//! {"$a2ref": 1, "sha256": "<hex SHA-256 of the JSON bytes>", "len": 10485772}
//! ```
//!
//! Every call that returns events or states (`read`, `subscribe`'s items,
//! the events of `append`, `complete_attempt` and `clear`, the heads of
//! `claim_available`, `claim_work` and `dead_letters`, `read_state`)
//! fetches the objects back and checks their SHA-256 and length. A missing
//! object, one whose bytes do not match, or one that is not JSON is an
//! [`ErrorCode::Backend`](crate::ErrorCode::Backend) error naming the
//! session and the event id and index (or the reducer and index): never a
//! panic, never a silent `null`.
//!
//! # The reserved key
//!
//! A payload or state that is a JSON object with the top-level key
//! [`REFERENCE_KEY`] (`"$a2ref"`) is refused with
//! [`ErrorCode::InvalidInput`](crate::ErrorCode::InvalidInput), whatever its
//! size: stored inline it would read back as a reference. Nested uses of the
//! key are plain data.
//!
//! # Keys
//!
//! `<prefix>/<SHA-256 of the session id>/events/<SHA-256 of the payload>`,
//! and `.../states/...` for snapshot states. The session id is hashed (any id
//! makes one safe, fixed-length directory; listings do not show ids). A
//! content key makes a replay idempotent: appending the same ids with the
//! same payload writes the same object and the same reference, so the
//! backend sees the same row and answers the replay as without the layer.
//!
//! # Order of writes, and crashes
//!
//! The object is written (with [`OffloadStore::local`], synced to disk)
//! before the row that references it is appended, so an acknowledged row
//! never points to a missing object. With [`OffloadStore::local`] a large
//! payload is written while it is serialized and hashed, to a staging
//! object (`<prefix>/<SHA-256 of the session id>/staging/<uuid>`) renamed
//! to its content key once complete: the append costs about the longest
//! of the three rather than their sum. Other object stores, where a rename
//! is a copy, get the payload serialized and hashed first and put under
//! its key. Payloads under the threshold are never copied or hashed. A
//! crash or an error between the two (or an append the backend refuses,
//! such as an idempotency conflict) leaves an orphan object no row
//! references, and a crash during a streamed write a staging object:
//! [`OffloadStore::sweep`] deletes both.
//!
//! # Lifetime
//!
//! - [`Store::delete_session`] (also when it answers `NotFound`, so a
//!   repeat finishes an interrupted cleanup) and [`Store::prune`] (the
//!   sessions it deleted) remove every object of the session.
//! - [`Store::reclaim`] removes the event objects referenced only by the
//!   rows it reclaimed (it reads the session's remaining rows to check).
//! - Snapshot states stay until their session is deleted: the store drops
//!   old checkpoints (`prune`) without saying which, so their objects are
//!   kept, and a sweep leaves states alone while the session has rows.
//! - Forks: the layer's [`Store::fork`] copies the objects the forked rows
//!   reference into the fork's directory *before* the backend copies the
//!   rows, so every row of the fork resolves in the fork's own directory and
//!   deleting the origin does not break the fork.
//!
//! # Presence
//!
//! Presence values stay inline: they are small, short-lived and overwritten
//! often (typing, cursors, status), and the store expires them on its own
//! (`prune` removes expired fields without saying which), so their objects
//! could never be removed in time.
//!
//! # Under encryption
//!
//! Apply the encryption layer above this one (`Encrypted(Offload(backend))`):
//! payloads are encrypted first, so the object store only ever holds
//! ciphertext.
//!
//! # Limits
//!
//! - Deleting a session while the same id is used again, at the same
//!   moment, may remove an object the new session just wrote; its read then
//!   fails with the missing-object error.
//! - A reclaim that races an append, in the same session, of a payload equal
//!   to a reclaimed one may remove the object the append just referenced.
//! - Changing the threshold changes which payloads are offloaded: repeating
//!   an append written before the change with a payload on the other side of
//!   the threshold is an idempotency conflict.
//!
//! # Example
//!
//! ```
//! # #[cfg(feature = "memory")]
//! # async fn demo() -> Result<(), a2_store::StoreError> {
//! use a2_store::layer::offload::OffloadStore;
//! use a2_store::prelude::*;
//!
//! # let scratch = tempfile::tempdir().map_err(|e| a2_store::StoreError::backend("a temporary directory", e))?;
//! let dir = scratch.path().join("payloads"); // any directory
//! let backend = a2_store::open("memory:", OpenOptions::default()).await?;
//! let store = OffloadStore::local(backend, &dir)?.with_threshold(1024);
//! let big = json!({"text": "x".repeat(4096)});
//! let appended = store
//!     .append("chat-1", vec![NewEvent::new("tool.result", big.clone())], AppendOptions::default())
//!     .await?;
//! assert_eq!(appended.events[0].payload, big); // read back through the layer
//! let read = store.read("chat-1", ReadOptions::default()).await?;
//! assert_eq!(read[0].payload, big);
//! # Ok(())
//! # }
//! # #[cfg(feature = "memory")]
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
//! ```

mod counters;
mod objects;
mod reference;
mod rewrite;
mod size;
mod streamed;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use a2_store_api::{validate, EventStream, Payload};
use a2_store_api::{
    AppendOptions, AppendResult, BulkRedrive, BulkRedriveResult, ClaimRequest, ClaimResult,
    ClaimWorkRequest, ClaimWorkResult, ClearRequest, ClearResult, CompleteRequest, CompleteResult,
    ConsumerDeclaration, Cursor, DeleteSessionRequest, DeleteSessionResult, FailRequest,
    FailResult, ForkRequest, ForkResult, Head, ListSessions, ListWork, NewEvent, Pause,
    PauseRequest, PresenceMeta, PresenceResult, PresenceRow, PruneRequest, PruneResult,
    ReadOptions, ReadStateOptions, ReclaimResult, RedriveRequest, RedriveResult, RenewRequest,
    RenewResult, RescheduleRequest, RescheduleResult, Result, ResumeRequest, ResumeResult,
    RewritePayloadsRequest, RewritePayloadsResult, SessionInfo, SessionWork, StateRead, StateWrite,
    Store, StoreError, StoredEvent, WakeLogResult, RECLAIM_BATCH,
};
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::Value;

pub use object_store;
use object_store::local::LocalFileSystem;
use object_store::ObjectStore;

use counters::{Counters, Failure, LAYER};
use objects::{Objects, Written};
pub use reference::REFERENCE_KEY;
use reference::{Kind, Reference};

/// What a row holds in place of an offloaded payload: the object's SHA-256
/// and length (see [`offload_reference`]).
///
/// Its `Display` is what operator tools show in place of the payload:
/// `offloaded (10485772 bytes, sha256 3b1f0c9d2e4a…)`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OffloadReference {
    /// Lower-case hexadecimal SHA-256 of the object's bytes (the payload's JSON).
    pub sha256: String,
    /// The object's length in bytes.
    pub len: u64,
}

impl fmt::Display for OffloadReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = self.sha256.get(..12).unwrap_or(&self.sha256);
        write!(f, "offloaded ({} bytes, sha256 {short}…)", self.len)
    }
}

/// The reference `value` is when a row holds an offloaded payload
/// (`{"$a2ref": 1, "sha256": ..., "len": ...}`) as the backend stores it;
/// `None` for an inline payload (or a reference too damaged to read).
///
/// For operator tools reading a store without the object store: show
/// "offloaded (N bytes, sha256 …)" instead of the reference.
///
/// ```
/// use a2_store::json;
/// use a2_store::layer::offload::offload_reference;
///
/// let sha = "ab".repeat(32);
/// let row = json!({"$a2ref": 1, "sha256": sha, "len": 70000});
/// let reference = offload_reference(&row).unwrap();
/// assert_eq!(reference.len, 70000);
/// assert_eq!(reference.to_string(), "offloaded (70000 bytes, sha256 abababababab…)");
/// assert!(offload_reference(&json!({"text": "hi"})).is_none());
/// ```
pub fn offload_reference(value: &Value) -> Option<OffloadReference> {
    let reference = Reference::parse(value)?.ok()?;
    Some(OffloadReference {
        sha256: reference.sha256,
        len: reference.len,
    })
}

/// The objects a resolve of `values` fetches (references not written by
/// this call): how many, and their bytes.
fn to_fetch<'v>(values: impl Iterator<Item = &'v Value>, written: &Written) -> (u64, u64) {
    values
        .filter_map(|value| Reference::parse(value)?.ok())
        .filter(|reference| !written.contains_key(&reference.sha256))
        .fold((0, 0), |(objects, bytes), reference| {
            (objects + 1, bytes.saturating_add(reference.len))
        })
}

/// The default threshold: payloads whose JSON is longer than 64 KiB are
/// offloaded.
pub const DEFAULT_THRESHOLD: usize = 64 * 1024;

/// How many rows one read of a session's rows asks for (reclaim, fork and
/// sweep read the rows' references).
const ROWS_PAGE: usize = 1024;

/// A [`Store`] that keeps large payloads in an object store (see the
/// [module docs](self)).
///
/// ```
/// # #[cfg(feature = "memory")]
/// # async fn demo() -> Result<(), a2_store::StoreError> {
/// use std::sync::Arc;
///
/// use a2_store::layer::offload::{object_store, OffloadStore};
/// use a2_store::Store;
///
/// let backend = a2_store::open("memory:", a2_store::OpenOptions::default()).await?;
/// // Any object_store store: here in memory, with keys under "payloads/".
/// let objects = Arc::new(object_store::memory::InMemory::new());
/// let store: Arc<dyn Store> = Arc::new(
///     OffloadStore::new(backend, objects).with_prefix("payloads").with_threshold(256 * 1024),
/// );
/// # let _ = store;
/// # Ok(())
/// # }
/// # #[cfg(feature = "memory")]
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
pub struct OffloadStore {
    inner: Arc<dyn Store>,
    objects: Objects,
    counters: Arc<Counters>,
}

impl fmt::Debug for OffloadStore {
    // The object store is not shown: its configuration may carry credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OffloadStore")
            .field("threshold", &self.objects.threshold)
            .field("metrics", &self.counters.enabled())
            .finish_non_exhaustive()
    }
}

/// What [`OffloadStore::sweep`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepResult {
    /// Objects of the session looked at.
    pub examined: u64,
    /// Objects no row referenced, deleted.
    pub deleted: u64,
    /// Unreferenced objects kept because they are younger than the grace
    /// period (an append may be about to reference them).
    pub kept_young: u64,
}

impl OffloadStore {
    /// `inner` with payloads above [`DEFAULT_THRESHOLD`] kept in `objects`,
    /// at the root of it (see [`OffloadStore::with_prefix`]).
    ///
    /// With feature `offload-aws`, an S3 bucket (credentials from the
    /// environment; never put them in a URL you log):
    ///
    /// ```no_run
    /// # #[cfg(all(feature = "offload-aws", feature = "memory"))]
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    ///
    /// use a2_store::layer::offload::{object_store, OffloadStore};
    ///
    /// let s3 = object_store::aws::AmazonS3Builder::from_env()
    ///     .with_bucket_name("a2-payloads")
    ///     .build()?;
    /// let backend = a2_store::open("memory:", a2_store::OpenOptions::default()).await?;
    /// let store = OffloadStore::new(backend, Arc::new(s3)).with_prefix("prod");
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(inner: Arc<dyn Store>, objects: Arc<dyn ObjectStore>) -> Self {
        Self {
            inner,
            objects: Objects {
                store: objects,
                keys: reference::Keys::new(""),
                threshold: DEFAULT_THRESHOLD,
                local: None,
            },
            counters: Arc::new(Counters::new(LAYER, false)),
        }
    }

    /// `inner` with large payloads kept as files under the directory `dir`
    /// (created if missing), each file synced to disk before the row that
    /// references it is written.
    ///
    /// ```
    /// # #[cfg(feature = "memory")]
    /// # async fn demo() -> Result<(), a2_store::StoreError> {
    /// use a2_store::layer::offload::OffloadStore;
    ///
    /// let backend = a2_store::open("memory:", a2_store::OpenOptions::default()).await?;
    /// # let scratch = tempfile::tempdir().map_err(|e| a2_store::StoreError::backend("a temporary directory", e))?;
    /// let store = OffloadStore::local(backend, scratch.path().join("payloads"))?;
    /// # let _ = store;
    /// # Ok(())
    /// # }
    /// # #[cfg(feature = "memory")]
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    pub fn local(inner: Arc<dyn Store>, dir: impl AsRef<std::path::Path>) -> Result<Self> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|error| {
            StoreError::backend(
                format!(
                    "cannot create the offload directory {}: check the path and its permissions",
                    dir.display()
                ),
                error,
            )
        })?;
        let files = LocalFileSystem::new_with_prefix(dir)
            .map_err(|error| {
                StoreError::backend(
                    format!(
                        "cannot use {} as the offload directory: give an existing directory",
                        dir.display()
                    ),
                    error,
                )
            })?
            .with_fsync(true);
        let files = Arc::new(files);
        let mut store = Self::new(inner, Arc::clone(&files) as Arc<dyn ObjectStore>);
        store.objects.local = Some(files);
        Ok(store)
    }

    /// The same store, offloading payloads whose JSON is longer than
    /// `bytes` (0 offloads every payload).
    pub fn with_threshold(mut self, bytes: usize) -> Self {
        self.objects.threshold = bytes;
        self
    }

    /// The same store, with every key under `prefix` (e.g. `"a2/payloads"`)
    /// in the object store.
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        self.objects.keys = reference::Keys::new(prefix);
        self
    }

    /// The same store, recording its `metrics` when `enabled` (off by
    /// default; [`open`](crate::open) turns it on with
    /// `OpenOptions::with_metrics`), each labelled `layer="offload"`:
    /// `a2_store_payload_encodes_total` (objects written),
    /// `a2_store_payload_decodes_total` (objects fetched),
    /// `a2_store_payload_bytes_offloaded_total`,
    /// `a2_store_payload_bytes_fetched_total` and
    /// `a2_store_payload_failures_total{kind}` (`put`, `fetch`, `delete`,
    /// `copy`).
    #[cfg(feature = "metrics")]
    pub fn with_metrics(mut self, enabled: bool) -> Self {
        self.counters = Arc::new(Counters::new(LAYER, enabled));
        self
    }

    /// The threshold in bytes.
    pub fn threshold(&self) -> usize {
        self.objects.threshold
    }

    /// The wrapped store: its rows hold the references.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// The object store the payloads go to.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.objects.store
    }

    /// Deletes the objects of `session_id` that no row references and that
    /// are older than `grace` (objects a crash or a refused append left
    /// behind). Keep `grace` above the longest append, so an object written
    /// by an append under way, whose row is not yet visible, is kept.
    ///
    /// Event objects are checked against every remaining row of the
    /// session. Staging objects (a streamed write that died before its
    /// rename) are never referenced. Snapshot states are only removed when
    /// the session has no row left (deleted): which checkpoints the store
    /// still keeps cannot be listed. Costs a read of the session's rows.
    ///
    /// ```
    /// # #[cfg(feature = "memory")]
    /// # async fn demo() -> Result<(), a2_store::StoreError> {
    /// use std::time::Duration;
    ///
    /// use a2_store::layer::offload::OffloadStore;
    ///
    /// let backend = a2_store::open("memory:", a2_store::OpenOptions::default()).await?;
    /// # let scratch = tempfile::tempdir().map_err(|e| a2_store::StoreError::backend("a temporary directory", e))?;
    /// let store = OffloadStore::local(backend, scratch.path().join("payloads"))?;
    /// let swept = store.sweep("chat-1", Duration::from_secs(3600)).await?;
    /// assert_eq!(swept.deleted, 0);
    /// # Ok(())
    /// # }
    /// # #[cfg(feature = "memory")]
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    pub async fn sweep(&self, session_id: &str, grace: Duration) -> Result<SweepResult> {
        let objects = &self.objects;
        let found = objects
            .list(&objects.keys.session(session_id), session_id)
            .await?;
        let rows = self.rows(session_id, None).await?;
        let referenced: HashSet<String> = references(&rows)
            .map(|reference| reference.sha256)
            .collect();
        let events = objects.keys.kind(session_id, Kind::Event);
        let staging = objects.keys.staging_dir(session_id);
        let cutoff = now_ms().saturating_sub(i64::try_from(grace.as_millis()).unwrap_or(i64::MAX));
        let mut result = SweepResult::default();
        let mut doomed = Vec::new();
        for meta in found {
            result.examined += 1;
            let is_event = meta.location.prefix_matches(&events);
            let unreferenced = if meta.location.prefix_matches(&staging) {
                // A write that died before its rename.
                true
            } else if is_event {
                meta.location
                    .filename()
                    .is_none_or(|sha| !referenced.contains(sha))
            } else {
                rows.is_empty()
            };
            if !unreferenced {
                continue;
            }
            if meta.last_modified.timestamp_millis() > cutoff {
                result.kept_young += 1;
            } else {
                doomed.push(meta.location);
            }
        }
        result.deleted = objects.delete(doomed, session_id).await?;
        Ok(result)
    }

    /// The rows of `session_id` as stored (references unresolved), through
    /// `through` when given.
    async fn rows(&self, session_id: &str, through: Option<u64>) -> Result<Vec<StoredEvent>> {
        let mut rows = Vec::new();
        let mut after = 0;
        loop {
            let mut options = ReadOptions::new().with_after(after).with_limit(ROWS_PAGE);
            if let Some(through) = through {
                options = options.with_through(through);
            }
            let page = self.inner.read(session_id, options).await?;
            let full = page.len() >= ROWS_PAGE;
            match page.last() {
                Some(last) => after = last.index,
                None => break,
            }
            rows.extend(page);
            if !full {
                break;
            }
        }
        Ok(rows)
    }

    /// `heads` with their events resolved.
    async fn resolve_heads(&self, heads: Vec<Head>) -> Result<Vec<Head>> {
        let mut resolved = Vec::with_capacity(heads.len());
        for mut head in heads {
            head.event = resolve_event(&self.objects, &self.counters, head.event).await?;
            resolved.push(head);
        }
        Ok(resolved)
    }

    /// `events` resolved (see [`Objects::resolve_events`]), counted.
    async fn resolve_events(
        &self,
        events: Vec<StoredEvent>,
        written: &Written,
    ) -> Result<Vec<StoredEvent>> {
        let (objects, bytes) = to_fetch(events.iter().map(|event| &*event.payload), written);
        let resolved = self.objects.resolve_events(events, written).await;
        match &resolved {
            Ok(_) => self.counters.decoded(objects, Some(bytes)),
            Err(_) => self.counters.failed(Failure::Fetch),
        }
        resolved
    }

    /// Records the failure `why` of `result`, when it failed.
    fn count<T>(&self, result: Result<T>, why: Failure) -> Result<T> {
        if result.is_err() {
            self.counters.failed(why);
        }
        result
    }

    /// `events` with their payloads offloaded where large.
    async fn offload_events(
        &self,
        session_id: &str,
        events: Vec<NewEvent>,
        written: &mut Written,
    ) -> Result<Vec<NewEvent>> {
        let mut rows = Vec::with_capacity(events.len());
        for mut event in events {
            let payload = std::mem::take(&mut event.payload);
            let row = self
                .objects
                .offload_event(session_id, payload, written)
                .await;
            event.payload = self.count_offload(row)?;
            rows.push(event);
        }
        Ok(rows)
    }

    /// Counts what an offload of one payload or state did: an object
    /// written (its row a reference), or a failure of the object store
    /// (an `InvalidInput`, the reserved key, is the caller's).
    fn count_offload<T: std::ops::Deref<Target = Value>>(&self, row: Result<T>) -> Result<T> {
        match &row {
            Ok(value) => {
                if let Some(Ok(reference)) = Reference::parse(value) {
                    self.counters.encoded(1, Some(reference.len));
                }
            }
            Err(error) if error.code() != a2_store_api::ErrorCode::InvalidInput => {
                self.counters.failed(Failure::Put);
            }
            Err(_) => {}
        }
        row
    }
}

/// `event` resolved by `objects` (nothing written by the call), counted.
async fn resolve_event(
    objects: &Objects,
    counters: &Counters,
    event: StoredEvent,
) -> Result<StoredEvent> {
    let none = Written::new();
    let (fetches, bytes) = to_fetch(std::iter::once(&*event.payload), &none);
    let resolved = objects.resolve_event(event, &none).await;
    match &resolved {
        Ok(_) => counters.decoded(fetches, Some(bytes)),
        Err(_) => counters.failed(Failure::Fetch),
    }
    resolved
}

/// The references `rows` hold (rows with a corrupt reference are skipped:
/// reads report them).
fn references(rows: &[StoredEvent]) -> impl Iterator<Item = Reference> + '_ {
    rows.iter()
        .filter_map(|row| Reference::parse(&row.payload).and_then(|parsed| parsed.ok()))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[async_trait]
impl Store for OffloadStore {
    async fn append(
        &self,
        session_id: &str,
        events: Vec<NewEvent>,
        options: AppendOptions,
    ) -> Result<AppendResult> {
        // The backend's own checks first (nesting depth, names, ids): a
        // request it refuses writes no object, and a payload it would
        // refuse is not hidden behind a reference.
        validate::append(session_id, &events, &options)?;
        let mut written = Written::new();
        let events = self
            .offload_events(session_id, events, &mut written)
            .await?;
        let mut result = self.inner.append(session_id, events, options).await?;
        result.events = self.resolve_events(result.events, &written).await?;
        Ok(result)
    }

    async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimResult> {
        match self.inner.claim_available(request).await? {
            ClaimResult::Claimed {
                heads,
                dead_lettered,
                head,
            } => Ok(ClaimResult::Claimed {
                heads: self.resolve_heads(heads).await?,
                dead_lettered: self.resolve_heads(dead_lettered).await?,
                head,
            }),
            other => Ok(other),
        }
    }

    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewResult> {
        self.inner.renew_claims(request).await
    }

    async fn complete_attempt(&self, mut request: CompleteRequest) -> Result<CompleteResult> {
        validate::complete_attempt(&request)?;
        let mut written = Written::new();
        let events = std::mem::take(&mut request.events);
        request.events = self
            .offload_events(&request.session_id, events, &mut written)
            .await?;
        match self.inner.complete_attempt(request).await? {
            CompleteResult::Completed { events } => Ok(CompleteResult::Completed {
                events: self.resolve_events(events, &written).await?,
            }),
            other => Ok(other),
        }
    }

    async fn fail_attempt(&self, request: FailRequest) -> Result<FailResult> {
        self.inner.fail_attempt(request).await
    }

    async fn dead_letters(&self, session_id: &str) -> Result<Vec<Head>> {
        let heads = self.inner.dead_letters(session_id).await?;
        self.resolve_heads(heads).await
    }

    async fn redrive(&self, request: RedriveRequest) -> Result<RedriveResult> {
        self.inner.redrive(request).await
    }

    async fn clear(&self, request: ClearRequest) -> Result<ClearResult> {
        match self.inner.clear(request).await? {
            ClearResult::Cleared { marker } => Ok(ClearResult::Cleared {
                marker: resolve_event(&self.objects, &self.counters, marker).await?,
            }),
            other => Ok(other),
        }
    }

    async fn reclaim(&self, session_id: &str) -> Result<ReclaimResult> {
        // The rows a reclaim may delete: the lowest RECLAIM_BATCH stored.
        let before = self
            .inner
            .read(session_id, ReadOptions::new().with_limit(RECLAIM_BATCH))
            .await?;
        let result = self.inner.reclaim(session_id).await?;
        if result.reclaimed == 0
            || before
                .iter()
                .all(|row| Reference::parse(&row.payload).is_none())
        {
            return Ok(result);
        }
        // What is left: the rows above the lowest remaining index.
        let remaining = self.rows(session_id, None).await?;
        let lowest = remaining.first().map_or(u64::MAX, |row| row.index);
        let gone: Vec<&StoredEvent> = before.iter().filter(|row| row.index < lowest).collect();
        let kept: HashSet<String> = references(&remaining)
            .map(|reference| reference.sha256)
            .collect();
        let mut doomed = HashSet::new();
        for row in gone {
            if let Some(Ok(reference)) = Reference::parse(&row.payload) {
                if !kept.contains(&reference.sha256) {
                    doomed.insert(
                        self.objects
                            .keys
                            .object(session_id, Kind::Event, &reference),
                    );
                }
            }
        }
        let deleted = self
            .objects
            .delete(doomed.into_iter().collect(), session_id)
            .await;
        self.count(deleted, Failure::Delete)?;
        Ok(result)
    }

    async fn read(&self, session_id: &str, options: ReadOptions) -> Result<Vec<StoredEvent>> {
        let rows = self.inner.read(session_id, options).await?;
        self.resolve_events(rows, &Written::new()).await
    }

    async fn wake_log(
        &self,
        session_id: &str,
        consumer: &ConsumerDeclaration,
    ) -> Result<WakeLogResult> {
        self.inner.wake_log(session_id, consumer).await
    }

    async fn cursors(&self, session_id: &str) -> Result<Vec<Cursor>> {
        self.inner.cursors(session_id).await
    }

    async fn subscribe(&self, session_id: &str, after: u64) -> Result<EventStream> {
        let stream = self.inner.subscribe(session_id, after).await?;
        let objects = (self.objects.clone(), Arc::clone(&self.counters));
        // Each event resolved as it comes; the stream ends after its first
        // error (without waiting for another event).
        let resolved = futures::stream::unfold(Some((stream, objects)), |state| async move {
            let (mut stream, objects) = state?;
            let item = match stream.next().await? {
                Ok(event) => resolve_event(&objects.0, &objects.1, event).await,
                Err(error) => Err(error),
            };
            let next = item.is_ok().then_some((stream, objects));
            Some((item, next))
        });
        Ok(Box::pin(resolved))
    }

    async fn write_state(
        &self,
        session_id: &str,
        reducer: &str,
        writes: Vec<StateWrite>,
    ) -> Result<()> {
        validate::write_state(session_id, reducer, &writes)?;
        let mut rows = Vec::with_capacity(writes.len());
        for mut write in writes {
            let state = std::mem::take(&mut write.state);
            let row = self.objects.offload_state(session_id, state).await;
            write.state = self.count_offload(row.map(Payload::new))?.into_value();
            rows.push(write);
        }
        self.inner.write_state(session_id, reducer, rows).await
    }

    async fn read_state(
        &self,
        session_id: &str,
        reducer: &str,
        options: ReadStateOptions,
    ) -> Result<StateRead> {
        let mut read = self.inner.read_state(session_id, reducer, options).await?;
        if let Some(snapshot) = read.snapshot.as_mut() {
            let state = std::mem::take(&mut snapshot.state);
            let (fetches, bytes) = to_fetch(std::iter::once(&state), &Written::new());
            let resolved = self
                .objects
                .resolve_state(session_id, reducer, snapshot.index, state)
                .await;
            snapshot.state = self.count(resolved, Failure::Fetch)?;
            self.counters.decoded(fetches, Some(bytes));
        }
        Ok(read)
    }

    async fn set_presence(
        &self,
        session_id: &str,
        participant: &str,
        values: BTreeMap<String, Value>,
        meta: PresenceMeta,
    ) -> Result<PresenceResult> {
        self.inner
            .set_presence(session_id, participant, values, meta)
            .await
    }

    async fn read_presence(&self, session_id: &str) -> Result<Vec<PresenceRow>> {
        self.inner.read_presence(session_id).await
    }

    async fn sessions(&self, options: ListSessions) -> Result<Vec<SessionInfo>> {
        self.inner.sessions(options).await
    }

    fn claims_in_one_step(&self) -> bool {
        self.inner.claims_in_one_step()
    }

    async fn claim_work(&self, request: ClaimWorkRequest) -> Result<ClaimWorkResult> {
        match self.inner.claim_work(request).await? {
            ClaimWorkResult::Claimed { sessions } => {
                let mut resolved = Vec::with_capacity(sessions.len());
                for mut claim in sessions {
                    claim.heads = self.resolve_heads(std::mem::take(&mut claim.heads)).await?;
                    claim.dead_lettered = self
                        .resolve_heads(std::mem::take(&mut claim.dead_lettered))
                        .await?;
                    resolved.push(claim);
                }
                Ok(ClaimWorkResult::Claimed { sessions: resolved })
            }
            other => Ok(other),
        }
    }

    async fn list_work(&self, request: ListWork) -> Result<Vec<SessionWork>> {
        self.inner.list_work(request).await
    }

    async fn reschedule(&self, request: RescheduleRequest) -> Result<RescheduleResult> {
        self.inner.reschedule(request).await
    }

    async fn pause(&self, request: PauseRequest) -> Result<Pause> {
        self.inner.pause(request).await
    }

    async fn resume(&self, request: ResumeRequest) -> Result<ResumeResult> {
        self.inner.resume(request).await
    }

    async fn pauses(&self, session_id: Option<&str>) -> Result<Vec<Pause>> {
        self.inner.pauses(session_id).await
    }

    async fn redrive_all(&self, request: BulkRedrive) -> Result<BulkRedriveResult> {
        self.inner.redrive_all(request).await
    }

    async fn fork(&self, mut request: ForkRequest) -> Result<ForkResult> {
        validate::fork(&request)?;
        // Copy the objects first, so every row the fork acknowledges
        // resolves under the fork's own directory. The fork's range is
        // pinned to the rows read here.
        let rows = self.rows(&request.session_id, request.through).await?;
        if request.through.is_none() {
            request.through = rows.last().map(|row| row.index);
        }
        if request.into != request.session_id {
            let copied = self
                .objects
                .copy_events(&request.session_id, &request.into, &rows)
                .await;
            self.count(copied, Failure::Copy)?;
        }
        self.inner.fork(request).await
    }

    async fn delete_session(&self, request: DeleteSessionRequest) -> Result<DeleteSessionResult> {
        let session_id = request.session_id.clone();
        let result = self.inner.delete_session(request).await?;
        // Only a delete removes objects: `NotFound` can leave rows the
        // objects belong to (a snapshot of a session without events), and
        // objects of an earlier delete whose object removal failed are
        // orphans `sweep` removes.
        if let DeleteSessionResult::Deleted { .. } = result {
            let deleted = self.objects.delete_session(&session_id).await;
            self.count(deleted, Failure::Delete)?;
        }
        Ok(result)
    }

    async fn prune(&self, request: PruneRequest) -> Result<PruneResult> {
        let dry_run = request.dry_run;
        let result = self.inner.prune(request).await?;
        if !dry_run {
            for session_id in &result.sessions {
                let deleted = self.objects.delete_session(session_id).await;
                self.count(deleted, Failure::Delete)?;
            }
        }
        Ok(result)
    }

    /// Payloads as read through the layer; a large `new` is offloaded
    /// first, and the objects old payloads referenced stay until
    /// [`OffloadStore::sweep`] (see the module `rewrite`).
    async fn rewrite_payloads(
        &self,
        request: RewritePayloadsRequest,
    ) -> Result<RewritePayloadsResult> {
        self.rewrite(request).await
    }
}
