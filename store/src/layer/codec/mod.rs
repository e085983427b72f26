//! Payload encryption at rest, as a layer over any [`Store`] (feature
//! `encryption`).
//!
//! [`EncryptedStore`] wraps an `Arc<dyn Store>` and implements [`Store`]:
//! it encrypts every payload on the way in (event payloads of `append` and
//! of `complete_attempt`'s returned events, snapshot states of
//! `write_state`, presence values of `set_presence`) and decrypts them
//! wherever they come back (`read`, `subscribe`, append and completion
//! results, claimed and dead-lettered heads of `claim_available`,
//! `claim_work` and `dead_letters`, the clear marker, `read_state`,
//! `read_presence`). Ids, types, indexes, causes, targets and consumers
//! stay readable: the store's rules need them. Every backend and the
//! conformance suite run through it unchanged.
//!
//! # Envelope
//!
//! An encrypted payload is stored as a JSON object, like any payload:
//!
//! ```text
//! {"$a2enc": 1, "kid": "k2", "sid": "chat-1", "ct": "<base64>"}
//! ```
//!
//! `$a2enc` is the envelope version, `kid` the id of the key it was
//! encrypted with, `sid` (events only) the session it was encrypted in, and
//! `ct` the 12-byte nonce, the ciphertext of the payload's JSON text and the
//! 16-byte tag, in standard base64 without padding.
//!
//! The top-level key `$a2enc` is reserved: writing a payload, state or
//! presence value that is an object with that key is refused with
//! `InvalidInput` (rename the key), so nothing written through the layer
//! reads back as an envelope it is not.
//!
//! # Cipher, nonce and associated data
//!
//! AES-256-GCM-SIV (RFC 8452, the RustCrypto `aes-gcm-siv` crate, AES-NI
//! and CLMUL when the CPU has them), under a key derived from each 32-byte
//! data key with HMAC-SHA256, used as a deterministic AEAD: the nonce is
//! the first 12 bytes of HMAC-SHA256, under a second derived key, of the
//! associated data (the place), and GCM-SIV derives the IV of each
//! message from the plaintext itself (POLYVAL under a per-nonce message
//! key, RFC 8452's synthetic IV), so distinct payloads of one place get
//! distinct IVs, and the same payload of the same place under the same
//! key encrypts to the same bytes. The contract needs that: an idempotent
//! replay (an append of stored ids, a repeated completion) compares the
//! stored payload with the new one. The price is that equal payloads of
//! one event, state or presence field under one key have equal
//! ciphertexts, which a reader of the database can see; nothing else is
//! revealed (GCM-SIV's bounds hold for far more messages per nonce than a
//! place ever gets: 2^32 and beyond). A replay whose stored row was
//! written under another key, nonce derivation or session (a fork) is
//! matched by decrypting the stored row. (XChaCha20-Poly1305 was
//! measured too: three times slower on 1 KB payloads, where Poly1305's
//! setup dominates.)
//!
//! The associated data binds each payload to where it belongs:
//!
//! | payload | bound to |
//! |---|---|
//! | event | the session it was encrypted in, and the event id |
//! | snapshot state | session, reducer, index |
//! | presence value | session, participant, field |
//!
//! An event's index is not bound: the store assigns it after the layer
//! encrypted the payload. Ids are unique in a session above its clear, so
//! the id names the event; a ciphertext moved to another event, state,
//! field or session does not decrypt, and the read fails with a `Backend`
//! error saying `payload could not be decrypted: ...` and naming the place
//! (session, event id and index, or reducer and index, or participant and
//! field) and the key id. Left open by not binding the index: an event
//! whose id was used again after a clear could be given the payload of the
//! cleared event of that id.
//!
//! The layer names events appended without an id (from [`RecyclingIds`],
//! which should be shared with the backend), since the id must be known
//! before the payload is encrypted; a refused call gives the ids back.
//!
//! # Forks
//!
//! [`Store::fork`] copies rows verbatim into a new session, so a fork's
//! copied rows carry ciphertexts bound to the session they were written in
//! (the `sid` of their envelope). When `sid` is not the session read, the
//! layer follows the fork chain through [`Store::sessions`] (cached per
//! session) and accepts the ciphertext only when the row's index was
//! copied from that very session (at or below the fork point, through as
//! many forks as the chain has). A ciphertext pasted into an unrelated
//! session is refused. When a session of the chain was deleted, which
//! session the rows below it came from can no longer be told, and those
//! rows are accepted from any session (their id and key still bind them).
//!
//! # Keys and rotation
//!
//! Keys come from a [`KeyProvider`]: the current key (id and key) encrypts
//! new payloads, any key is looked up by the id stored beside the payload.
//! [`Keyring`] holds several keys at once in memory and loads them from
//! text, an environment variable (`A2_STORE_KEYS=k1:<base64>,k2:<base64>`,
//! the last one current) or a file (one `kid:<base64>` per line). Rotate by
//! adding a key and making it current: new payloads use it, rows written
//! under older keys stay readable while their keys are loaded. A payload
//! naming a key the provider does not hold fails with a `Backend` error
//! naming the key id. Keys never appear in `Debug` output or errors.
//!
//! A replay (same ids, same payload) that comes after a rotation encrypts
//! under the new key and so differs from the stored row: it is answered
//! `IdempotencyConflict`, as a changed payload is. Rotate when few writes
//! are being retried, or keep the old key current until retries settle.
//!
//! # Turning encryption on over existing data
//!
//! A payload that is no envelope (plain JSON, written before the layer was
//! used) is returned unchanged, so the layer can be put over a store that
//! already has data; new payloads are encrypted from then on. Once no
//! plaintext row is left (or to refuse plaintext a database writer could
//! slip in), turn plaintext reads off with
//! [`with_plaintext_reads(false)`](EncryptedStore::with_plaintext_reads):
//! a plaintext payload then fails like a tampered one. The clear marker,
//! which the store writes itself, is always plain.
//!
//! # Example
//!
//! ```
//! # #[cfg(feature = "memory")]
//! # async fn demo() -> Result<(), a2_store::StoreError> {
//! use std::sync::Arc;
//!
//! use a2_store::{json, EncryptedStore, Keyring, NewEvent, OpenOptions, ReadOptions, RecyclingIds, SecretKey, Store};
//!
//! let keys = Keyring::new().with_key("k1", SecretKey::from_bytes([42; 32]))?;
//! let ids = RecyclingIds::default();
//! let inner = a2_store::open("memory:", OpenOptions::default().with_ids(ids.clone())).await?;
//! let store = EncryptedStore::new(Arc::clone(&inner), Arc::new(keys)).with_ids(ids);
//! store.append("chat-1", vec![NewEvent::new("msg", json!({"text": "hi"}))], Default::default()).await?;
//! // Through the layer: the payload as written. Below it: an envelope.
//! assert_eq!(store.read("chat-1", ReadOptions::default()).await?[0].payload, json!({"text": "hi"}));
//! let stored = inner.read("chat-1", ReadOptions::default()).await?;
//! assert_eq!(stored[0].payload["kid"], "k1");
//! # Ok(())
//! # }
//! # #[cfg(feature = "memory")]
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
//! ```

mod counters;
mod envelope;
mod ids;
mod keys;
mod lineage;
mod rewrite;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Weak};

use a2_store_api::{
    validate, AppendOptions, AppendResult, BulkRedrive, BulkRedriveResult, ClaimRequest,
    ClaimResult, ClaimWorkRequest, ClaimWorkResult, ClearRequest, ClearResult, CompleteRequest,
    CompleteResult, ConsumerDeclaration, Cursor, DeleteSessionRequest, DeleteSessionResult,
    ErrorCode, EventStream, FailRequest, FailResult, ForkRequest, ForkResult, Head, IdGenerator,
    ListSessions, ListWork, NewEvent, Pause, PauseRequest, Payload, PresenceMeta, PresenceResult,
    PresenceRow, PruneRequest, PruneResult, ReadOptions, ReadStateOptions, ReclaimResult,
    RedriveRequest, RedriveResult, RenewRequest, RenewResult, RescheduleRequest, RescheduleResult,
    Result, ResumeRequest, ResumeResult, RewritePayloadsRequest, RewritePayloadsResult,
    SessionInfo, SessionWork, StateRead, StateWrite, Store, StoreError, StoredEvent, WakeLogResult,
    CLEAR_EVENT_TYPE,
};
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::Value;

pub use envelope::RESERVED_KEY;
pub use ids::RecyclingIds;
pub use keys::{KeyProvider, Keyring, SecretKey, KEYS_ENV, MAX_KEY_ID_BYTES};
pub use rewrite::{Reencrypt, Reencrypted};

use counters::{Counters, Failure, LAYER};
use envelope::{OpenFailure, Place};
use lineage::{Lineages, Origin};

/// The key id of `value` when it is an envelope of the encryption layer
/// (`{"$a2enc": 1, "kid": "k2", ...}`), as the store holds it; `None` for
/// any other value (plain JSON, or an envelope too damaged to name its key).
///
/// For operator tools: a payload read without its key (through
/// [`EncryptedStore::with_missing_keys_left_sealed`], or straight from the
/// backend) can be shown as "encrypted (key k2)". Reads no key material.
///
/// ```
/// use a2_store::json;
/// use a2_store::layer::codec::sealed_key_id;
///
/// let stored = json!({"$a2enc": 1, "kid": "k2", "sid": "chat-1", "ct": "AAAA"});
/// assert_eq!(sealed_key_id(&stored), Some("k2"));
/// assert_eq!(sealed_key_id(&json!({"text": "hi"})), None);
/// ```
pub fn sealed_key_id(value: &Value) -> Option<&str> {
    match envelope::parse(value) {
        Ok(Some(envelope)) => Some(envelope.kid),
        _ => None,
    }
}

/// What the layer asks of a payload codec, one payload at a time: encode a
/// value for its place, decode a stored value read from a place. The
/// encryption codec is the one there is; an offloading codec (large
/// payloads kept in object storage) slots in here.
pub(crate) trait PayloadCodec: Send + Sync + fmt::Debug {
    /// The stored form of `value` at `place` (`sid`: name the session in
    /// the stored form, for events that forks may copy).
    fn encode(&self, sealer: &Sealer, place: &Place<'_>, value: &Value, sid: bool)
        -> Result<Value>;

    /// What was stored at `place`: a plain value, or an encoded one with
    /// the session it was encoded in (events).
    fn inspect<'v>(&self, place: &Place<'_>, stored: &'v Value) -> Result<Stored<'v>>;

    /// The value `stored` (as [`inspect`](Self::inspect) found it) holds,
    /// `place` naming the session it was encoded in.
    fn decode(&self, place: &Place<'_>, stored: &Stored<'_>) -> Result<Value>;
}

/// A stored value as a codec sees it.
#[derive(Debug)]
pub(crate) enum Stored<'v> {
    /// Not encoded (written before the layer was used).
    Plain,
    /// Encoded; `sid` is the session it was encoded in, when it says.
    Sealed(envelope::Envelope<'v>),
}

impl Stored<'_> {
    fn sid(&self) -> Option<&str> {
        match self {
            Stored::Plain => None,
            Stored::Sealed(envelope) => envelope.sid,
        }
    }
}

/// The key a call encrypts with, fetched once per call.
pub(crate) struct Sealer {
    kid: Arc<str>,
    key: SecretKey,
}

/// The encryption codec: envelopes under the provider's keys.
#[derive(Debug)]
struct Encryption {
    keys: Arc<dyn KeyProvider>,
    counters: Counters,
}

impl PayloadCodec for Encryption {
    fn encode(
        &self,
        sealer: &Sealer,
        place: &Place<'_>,
        value: &Value,
        sid: bool,
    ) -> Result<Value> {
        let sealed = envelope::seal(place, &sealer.kid, &sealer.key, value, sid);
        match &sealed {
            Ok(_) => self.counters.encoded(1, None),
            Err(error) if error.code() == ErrorCode::Backend => {
                self.counters.failed(Failure::Encrypt)
            }
            Err(_) => {}
        }
        sealed
    }

    fn inspect<'v>(&self, place: &Place<'_>, stored: &'v Value) -> Result<Stored<'v>> {
        match envelope::parse(stored) {
            Ok(None) => Ok(Stored::Plain),
            Ok(Some(envelope)) => Ok(Stored::Sealed(envelope)),
            Err(what) => {
                self.counters.failed(Failure::Decrypt);
                Err(undecryptable(format!(
                    "{} is stored in a malformed envelope: {what}",
                    place.describe()
                )))
            }
        }
    }

    fn decode(&self, place: &Place<'_>, stored: &Stored<'_>) -> Result<Value> {
        let Stored::Sealed(envelope) = stored else {
            return Err(undecryptable(format!(
                "{} is not encrypted",
                place.describe()
            )));
        };
        let Some(key) = self.keys.key(envelope.kid) else {
            self.counters.failed(Failure::MissingKey);
            return Err(undecryptable(format!(
                "{} was encrypted with key '{}', which the key provider does not hold: load that key (keep every key whose id rows still name)",
                place.describe(),
                envelope.kid
            )));
        };
        let opened = envelope::open(place, &key, envelope.ct);
        if opened.is_ok() {
            self.counters.decoded(1, None);
        } else {
            self.counters.failed(Failure::Decrypt);
        }
        opened.map_err(|failure| {
            let why = match failure {
                OpenFailure::Malformed => "its ciphertext is malformed (not base64, or too short)",
                OpenFailure::Unauthentic => {
                    "it does not authenticate: it was changed, copied from another event, state, field or session, or the key with that id is not the one it was written with"
                }
                OpenFailure::NotJson => "it decrypted to something that is not JSON",
            };
            undecryptable(format!(
                "{} (key '{}'): {why}",
                place.describe(),
                envelope.kid
            ))
        })
    }
}

/// A `Backend` error for a payload that cannot be read.
fn undecryptable(detail: String) -> StoreError {
    StoreError::Backend {
        message: format!("payload could not be decrypted: {detail}"),
        source: None,
    }
}

/// A [`Store`] that encrypts payloads on the way in and decrypts them on
/// the way out, over any store; see the [module docs](self) for what is
/// encrypted, the envelope, the cipher and key rotation.
///
/// ```
/// # #[cfg(feature = "memory")]
/// # async fn demo() -> Result<(), a2_store::StoreError> {
/// use std::sync::Arc;
/// use a2_store::{json, EncryptedStore, Keyring, NewEvent, OpenOptions, ReadOptions, SecretKey, Store};
///
/// let keys = Keyring::new().with_key("k1", SecretKey::from_bytes([1; 32]))?;
/// let inner = a2_store::open("memory:", OpenOptions::default()).await?;
/// let store: Arc<dyn Store> = Arc::new(EncryptedStore::new(inner, Arc::new(keys.clone())));
/// let event = NewEvent::new("msg", json!("secret")).with_id("m1");
/// store.append("chat-1", vec![event], Default::default()).await?;
/// // Rotate: new payloads use k2, old ones still read.
/// keys.insert("k2", SecretKey::from_bytes([2; 32]))?;
/// keys.set_current("k2")?;
/// assert_eq!(store.read("chat-1", ReadOptions::default()).await?[0].payload, json!("secret"));
/// # Ok(())
/// # }
/// # #[cfg(feature = "memory")]
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
#[derive(Clone)]
pub struct EncryptedStore {
    inner: Arc<dyn Store>,
    shared: Arc<Shared>,
}

/// What the store and its subscription streams share.
struct Shared {
    /// Weak: an open subscription must not keep the store alive.
    inner: Weak<dyn Store>,
    keys: Arc<dyn KeyProvider>,
    codec: Encryption,
    ids: RecyclingIds,
    plaintext_reads: bool,
    /// Leave a payload whose key is not held as stored (an envelope)
    /// instead of failing the read.
    missing_keys_left_sealed: bool,
    lineages: Lineages,
}

/// What a layer is built with, kept across the `with_*` builders.
#[derive(Clone)]
struct Settings {
    ids: RecyclingIds,
    plaintext_reads: bool,
    missing_keys_left_sealed: bool,
    metrics: bool,
}

impl fmt::Debug for EncryptedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncryptedStore")
            .field("keys", &self.shared.keys)
            .field("plaintext_reads", &self.shared.plaintext_reads)
            .field(
                "missing_keys_left_sealed",
                &self.shared.missing_keys_left_sealed,
            )
            .field("metrics", &self.shared.codec.counters.enabled())
            .finish_non_exhaustive()
    }
}

impl EncryptedStore {
    /// `inner` with payloads encrypted under `keys`. Events appended
    /// without an id are named from [`RecyclingIds::default`] (random
    /// time-ordered ids); give the layer and the backend one shared
    /// generator with [`with_ids`](Self::with_ids) to keep one sequence.
    /// Plaintext rows are read as they are (see
    /// [`with_plaintext_reads`](Self::with_plaintext_reads)).
    pub fn new(inner: Arc<dyn Store>, keys: Arc<dyn KeyProvider>) -> Self {
        let settings = Settings {
            ids: RecyclingIds::default(),
            plaintext_reads: true,
            missing_keys_left_sealed: false,
            metrics: false,
        };
        Self::build(inner, keys, settings)
    }

    /// The same layer, naming unnamed events from `ids` (pass a clone of
    /// the generator the backend was opened with).
    pub fn with_ids(self, ids: RecyclingIds) -> Self {
        let settings = Settings {
            ids,
            ..self.settings()
        };
        self.rebuild(settings)
    }

    /// The same layer, reading plaintext (non-envelope) payloads as they
    /// are when `allowed` (the default, for stores that hold rows written
    /// before encryption was turned on), or failing on them with a
    /// `Backend` error when not (so a plaintext payload written straight
    /// into the database is never taken for one the app wrote).
    ///
    /// ```
    /// # #[cfg(feature = "memory")]
    /// # async fn demo() -> Result<(), a2_store::StoreError> {
    /// use std::sync::Arc;
    /// use a2_store::{json, EncryptedStore, ErrorCode, Keyring, NewEvent, OpenOptions, ReadOptions, SecretKey, Store};
    ///
    /// let inner = a2_store::open("memory:", OpenOptions::default()).await?;
    /// // A row written before encryption was turned on.
    /// inner.append("chat-1", vec![NewEvent::new("msg", json!("old"))], Default::default()).await?;
    /// let keys = Arc::new(Keyring::new().with_key("k1", SecretKey::from_bytes([1; 32]))?);
    /// let lenient = EncryptedStore::new(Arc::clone(&inner), keys.clone());
    /// assert_eq!(lenient.read("chat-1", ReadOptions::default()).await?[0].payload, json!("old"));
    /// let strict = EncryptedStore::new(inner, keys).with_plaintext_reads(false);
    /// let error = strict.read("chat-1", ReadOptions::default()).await.unwrap_err();
    /// assert_eq!(error.code(), ErrorCode::Backend);
    /// # Ok(())
    /// # }
    /// # #[cfg(feature = "memory")]
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    pub fn with_plaintext_reads(self, allowed: bool) -> Self {
        let settings = Settings {
            plaintext_reads: allowed,
            ..self.settings()
        };
        self.rebuild(settings)
    }

    /// The same layer, leaving a payload whose key the provider does not
    /// hold as it is stored (its envelope, `{"$a2enc": 1, "kid": ...}`)
    /// when `sealed`, instead of failing the whole read with a `Backend`
    /// error naming the key (the default, `false`).
    ///
    /// For operator tools that show what they can: the payloads of the
    /// keys they were given decrypted, the others as "encrypted (key k2)"
    /// (see [`sealed_key_id`]). An app should leave it off: a payload it
    /// reads would otherwise be an envelope instead of its data. A
    /// payload that does not authenticate under a key that *is* held
    /// still fails.
    ///
    /// ```
    /// # #[cfg(feature = "memory")]
    /// # async fn demo() -> Result<(), a2_store::StoreError> {
    /// use std::sync::Arc;
    /// use a2_store::layer::codec::sealed_key_id;
    /// use a2_store::{json, EncryptedStore, Keyring, NewEvent, OpenOptions, ReadOptions, SecretKey, Store};
    ///
    /// let inner = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let k2 = Keyring::new().with_key("k2", SecretKey::from_bytes([2; 32]))?;
    /// let writer = EncryptedStore::new(Arc::clone(&inner), Arc::new(k2));
    /// writer.append("chat-1", vec![NewEvent::new("msg", json!("secret"))], Default::default()).await?;
    ///
    /// // An operator holding only k1: the row stays sealed, the read succeeds.
    /// let k1 = Keyring::new().with_key("k1", SecretKey::from_bytes([1; 32]))?;
    /// let reader = EncryptedStore::new(inner, Arc::new(k1)).with_missing_keys_left_sealed(true);
    /// let rows = reader.read("chat-1", ReadOptions::default()).await?;
    /// assert_eq!(sealed_key_id(&rows[0].payload), Some("k2"));
    /// # Ok(())
    /// # }
    /// # #[cfg(feature = "memory")]
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    pub fn with_missing_keys_left_sealed(self, sealed: bool) -> Self {
        let settings = Settings {
            missing_keys_left_sealed: sealed,
            ..self.settings()
        };
        self.rebuild(settings)
    }

    /// The same layer, recording its `metrics` when `enabled` (off by
    /// default; [`open`](crate::open) turns it on with
    /// `OpenOptions::with_metrics`): `a2_store_payload_encodes_total`,
    /// `a2_store_payload_decodes_total` and
    /// `a2_store_payload_failures_total{kind}` (`encrypt`, `missing_key`,
    /// `decrypt`, `plaintext`), each labelled `layer="encryption"`.
    #[cfg(feature = "metrics")]
    pub fn with_metrics(self, enabled: bool) -> Self {
        let settings = Settings {
            metrics: enabled,
            ..self.settings()
        };
        self.rebuild(settings)
    }

    /// The settings this layer was built with.
    fn settings(&self) -> Settings {
        Settings {
            ids: self.shared.ids.clone(),
            plaintext_reads: self.shared.plaintext_reads,
            missing_keys_left_sealed: self.shared.missing_keys_left_sealed,
            metrics: self.shared.codec.counters.enabled(),
        }
    }

    /// This layer's store and keys with `settings`.
    fn rebuild(self, settings: Settings) -> Self {
        let keys = Arc::clone(&self.shared.keys);
        Self::build(self.inner, keys, settings)
    }

    fn build(inner: Arc<dyn Store>, keys: Arc<dyn KeyProvider>, settings: Settings) -> Self {
        let shared = Arc::new(Shared {
            inner: Arc::downgrade(&inner),
            codec: Encryption {
                keys: Arc::clone(&keys),
                counters: Counters::new(LAYER, settings.metrics),
            },
            keys,
            ids: settings.ids,
            plaintext_reads: settings.plaintext_reads,
            missing_keys_left_sealed: settings.missing_keys_left_sealed,
            lineages: Lineages::default(),
        });
        Self { inner, shared }
    }

    /// The wrapped store (payloads as stored: envelopes).
    ///
    /// ```
    /// # #[cfg(feature = "memory")]
    /// # async fn demo() -> Result<(), a2_store::StoreError> {
    /// use std::sync::Arc;
    /// use a2_store::{json, EncryptedStore, Keyring, NewEvent, OpenOptions, ReadOptions, SecretKey, Store};
    ///
    /// let keys = Keyring::new().with_key("k1", SecretKey::from_bytes([1; 32]))?;
    /// let inner = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let store = EncryptedStore::new(inner, Arc::new(keys));
    /// store.append("chat-1", vec![NewEvent::new("msg", json!("hi"))], Default::default()).await?;
    /// let stored = store.inner().read("chat-1", ReadOptions::default()).await?;
    /// assert_eq!(stored[0].payload["$a2enc"], 1); // an envelope, not "hi"
    /// # Ok(())
    /// # }
    /// # #[cfg(feature = "memory")]
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    /// The key of this call's writes.
    fn sealer(&self) -> Result<Sealer> {
        let (kid, key) = self.shared.keys.current().inspect_err(|_| {
            self.shared.codec.counters.failed(Failure::Encrypt);
        })?;
        Ok(Sealer { kid, key })
    }

    /// Encrypts a batch's payloads for `session`, naming unnamed events;
    /// returns the batch and the ids drawn.
    fn seal_events(
        &self,
        session: &str,
        events: &mut [NewEvent],
    ) -> Result<(Vec<Value>, Vec<String>)> {
        let sealer = self.sealer()?;
        let mut drawn = Vec::new();
        let mut plaintexts = Vec::with_capacity(events.len());
        let result = events.iter_mut().try_for_each(|event| {
            let id = match &event.id {
                Some(id) => id.clone(),
                None => {
                    let id = self.shared.ids.next_id();
                    drawn.push(id.clone());
                    event.id = Some(id.clone());
                    id
                }
            };
            let place = Place::Event {
                session,
                id: &id,
                index: None,
                read_in: None,
            };
            let sealed = self
                .shared
                .codec
                .encode(&sealer, &place, &event.payload, true)?;
            plaintexts
                .push(std::mem::replace(&mut event.payload, Payload::new(sealed)).into_value());
            Ok(())
        });
        match result {
            Ok(()) => Ok((plaintexts, drawn)),
            Err(error) => {
                self.shared.ids.give_back(drawn);
                Err(error)
            }
        }
    }

    /// After an `IdempotencyConflict`: the batch's events whose stored rows
    /// decrypt to the very plaintext given (rows encrypted elsewhere, copied
    /// by a fork from another session, or under another key before a
    /// rotation, or rewritten by a re-encryption) are given the stored
    /// envelopes, so a true replay compares equal. Finds the rows by
    /// reading the session (a rare path). Returns whether anything changed.
    async fn reseal_replay(
        &self,
        session: &str,
        events: &mut [NewEvent],
        plaintexts: &[Value],
    ) -> Result<bool> {
        let mut wanted: BTreeMap<&str, usize> = BTreeMap::new();
        for (position, event) in events.iter().enumerate() {
            if let Some(id) = &event.id {
                wanted.insert(id.as_str(), position);
            }
        }
        let mut found: Vec<(usize, StoredEvent)> = Vec::new();
        let mut after = 0;
        while !wanted.is_empty() {
            let page = self
                .inner
                .read(
                    session,
                    ReadOptions {
                        after: Some(after),
                        through: None,
                        limit: Some(REPLAY_PAGE),
                    },
                )
                .await?;
            let last = page.last().map(|row| row.index);
            let full = page.len() == REPLAY_PAGE;
            for row in page {
                if let Some(position) = wanted.remove(row.id.as_str()) {
                    found.push((position, row));
                }
            }
            match last {
                Some(last) if full => after = last,
                _ => break,
            }
        }
        let mut changed = false;
        for (position, row) in found {
            let (Some(event), Some(plaintext)) =
                (events.get_mut(position), plaintexts.get(position))
            else {
                continue;
            };
            if envelope::parse(&row.payload).ok().flatten().is_none() {
                continue;
            }
            // The stored row, decrypted where it was written (a fork's copy
            // through its chain, an old key, an older nonce derivation),
            // replays when it holds this very plaintext.
            let mut opened = row.clone();
            if self.shared.open_event(&mut opened).await.is_err() || opened.payload != *plaintext {
                continue;
            }
            if event.payload != row.payload {
                event.payload = row.payload;
                changed = true;
            }
        }
        Ok(changed)
    }

    /// Gives back `drawn` unless the call may have stored them.
    fn settle_ids<T>(&self, result: &Result<T>, drawn: Vec<String>, stored: impl Fn(&T) -> bool) {
        let keep = match result {
            Ok(value) => stored(value),
            // The one error whose call may have been applied.
            Err(error) => error.code() == ErrorCode::Unavailable,
        };
        if !keep {
            self.shared.ids.give_back(drawn);
        }
    }
}

/// Puts the written plaintexts back into the rows a write returned (the
/// rows of the batch, in its order, when the ids match), decrypting the
/// others.
async fn restore(
    shared: &Shared,
    rows: &mut [StoredEvent],
    ids: &[Option<String>],
    plaintexts: Vec<Value>,
) -> Result<()> {
    let matches = rows.len() == ids.len()
        && rows
            .iter()
            .zip(ids)
            .all(|(row, id)| id.as_deref() == Some(row.id.as_str()));
    if matches {
        for (row, plaintext) in rows.iter_mut().zip(plaintexts) {
            row.payload = Payload::new(plaintext);
        }
        Ok(())
    } else {
        shared.open_events(rows).await
    }
}

/// Rows read per page while looking for the rows a replay names.
const REPLAY_PAGE: usize = 512;

/// Whether a write was refused as an idempotency conflict.
fn is_conflict<T>(result: &Result<T>) -> bool {
    matches!(result, Err(error) if error.code() == ErrorCode::IdempotencyConflict)
}

/// The ids of a sealed batch (every event is named by then).
fn batch_ids(events: &[NewEvent]) -> Vec<Option<String>> {
    events.iter().map(|event| event.id.clone()).collect()
}

impl Shared {
    /// Decrypts the payloads of `rows` in place.
    async fn open_events(&self, rows: &mut [StoredEvent]) -> Result<()> {
        for row in rows {
            self.open_event(row).await?;
        }
        Ok(())
    }

    /// Decrypts the payload of the events of `heads` in place.
    async fn open_heads(&self, heads: &mut [Head]) -> Result<()> {
        for head in heads {
            self.open_event(&mut head.event).await?;
        }
        Ok(())
    }

    /// Decrypts one event's payload in place.
    async fn open_event(&self, row: &mut StoredEvent) -> Result<()> {
        let place = Place::Event {
            session: &row.session_id,
            id: &row.id,
            index: Some(row.index),
            read_in: None,
        };
        let stored = self.codec.inspect(&place, &row.payload)?;
        let written_in = match (&stored, stored.sid()) {
            (Stored::Plain, _) => {
                if self.plaintext_reads || row.event_type == CLEAR_EVENT_TYPE {
                    return Ok(());
                }
                self.codec.counters.failed(Failure::Plaintext);
                return Err(plaintext_refused(&place));
            }
            (Stored::Sealed(_), None) => {
                return Err(undecryptable(format!(
                    "{} is stored in an envelope that names no session ('sid')",
                    place.describe()
                )))
            }
            (Stored::Sealed(_), Some(sid)) => sid,
        };
        if self.left_sealed(&stored) {
            return Ok(());
        }
        if written_in != row.session_id {
            self.check_copied(&row.session_id, &row.id, row.index, written_in)
                .await?;
        }
        let bound = Place::Event {
            session: written_in,
            id: &row.id,
            index: Some(row.index),
            read_in: Some(&row.session_id),
        };
        let value = self.codec.decode(&bound, &stored)?;
        row.payload = Payload::new(value);
        Ok(())
    }

    /// Accepts a ciphertext of session `written_in` at `index` of
    /// `session` only when the row was copied there from that session by
    /// a fork (through the fork chain).
    async fn check_copied(
        &self,
        session: &str,
        id: &str,
        index: u64,
        written_in: &str,
    ) -> Result<()> {
        for fresh in [false, true] {
            let Some(inner) = self.inner.upgrade() else {
                return Err(StoreError::Backend {
                    message: format!(
                        "payload could not be decrypted: event '{id}' at index {index} of session '{session}' was copied by a fork, and the store was dropped before its origin could be checked"
                    ),
                    source: None,
                });
            };
            let lineage = self.lineages.of(inner.as_ref(), session, fresh).await?;
            match lineage.origin(session, index) {
                Origin::Unknown => return Ok(()),
                Origin::Session(origin) if origin == written_in => return Ok(()),
                Origin::Session(_) if fresh => {
                    let chain = lineage.sessions(session).join("' <- '");
                    return Err(undecryptable(format!(
                        "event '{id}' at index {index} of session '{session}' was encrypted in session '{written_in}', which is not where the row was written or copied from (fork chain '{chain}'): it was copied from another session"
                    )));
                }
                Origin::Session(_) => {}
            }
        }
        Ok(())
    }

    /// Decrypts a snapshot's state.
    fn open_state(
        &self,
        session: &str,
        reducer: &str,
        index: u64,
        state: &mut Value,
    ) -> Result<()> {
        let place = Place::State {
            session,
            reducer,
            index,
        };
        self.open_value(&place, state)
    }

    /// Decrypts a state or presence value in place.
    fn open_value(&self, place: &Place<'_>, value: &mut Value) -> Result<()> {
        let stored = self.codec.inspect(place, value)?;
        if let Stored::Plain = stored {
            if self.plaintext_reads {
                return Ok(());
            }
            self.codec.counters.failed(Failure::Plaintext);
            return Err(plaintext_refused(place));
        }
        if self.left_sealed(&stored) {
            return Ok(());
        }
        let opened = self.codec.decode(place, &stored)?;
        *value = opened;
        Ok(())
    }
}

impl Shared {
    /// Whether `stored` stays sealed: its key is not held and the layer
    /// leaves such payloads as they are (counted as a missing key).
    fn left_sealed(&self, stored: &Stored<'_>) -> bool {
        let Stored::Sealed(envelope) = stored else {
            return false;
        };
        if !self.missing_keys_left_sealed || self.keys.key(envelope.kid).is_some() {
            return false;
        }
        self.codec.counters.failed(Failure::MissingKey);
        true
    }
}

fn plaintext_refused(place: &Place<'_>) -> StoreError {
    StoreError::Backend {
        message: format!(
            "payload is not encrypted: {} is plain JSON and plaintext reads are off (with_plaintext_reads(false)); it was written before encryption was turned on, or behind the store's back",
            place.describe()
        ),
        source: None,
    }
}

#[async_trait]
impl Store for EncryptedStore {
    async fn append(
        &self,
        session_id: &str,
        mut events: Vec<NewEvent>,
        options: AppendOptions,
    ) -> Result<AppendResult> {
        validate::append(session_id, &events, &options)?;
        let (plaintexts, drawn) = self.seal_events(session_id, &mut events)?;
        let ids = batch_ids(&events);
        let mut result = self
            .inner
            .append(session_id, events.clone(), options.clone())
            .await;
        if is_conflict(&result)
            && self
                .reseal_replay(session_id, &mut events, &plaintexts)
                .await?
        {
            result = self.inner.append(session_id, events, options).await;
        }
        self.settle_ids(&result, drawn, |_| true);
        let mut result = result?;
        restore(&self.shared, &mut result.events, &ids, plaintexts).await?;
        Ok(result)
    }

    async fn claim_available(&self, request: ClaimRequest) -> Result<ClaimResult> {
        let mut result = self.inner.claim_available(request).await?;
        if let ClaimResult::Claimed {
            heads,
            dead_lettered,
            ..
        } = &mut result
        {
            self.shared.open_heads(heads).await?;
            self.shared.open_heads(dead_lettered).await?;
        }
        Ok(result)
    }

    async fn renew_claims(&self, request: RenewRequest) -> Result<RenewResult> {
        self.inner.renew_claims(request).await
    }

    async fn complete_attempt(&self, mut request: CompleteRequest) -> Result<CompleteResult> {
        validate::complete_attempt(&request)?;
        let session = request.session_id.clone();
        let (plaintexts, drawn) = self.seal_events(&session, &mut request.events)?;
        let ids = batch_ids(&request.events);
        let mut result = self.inner.complete_attempt(request.clone()).await;
        if is_conflict(&result)
            && self
                .reseal_replay(&session, &mut request.events, &plaintexts)
                .await?
        {
            result = self.inner.complete_attempt(request).await;
        }
        self.settle_ids(&result, drawn, |done| {
            matches!(done, CompleteResult::Completed { .. })
        });
        let mut result = result?;
        if let CompleteResult::Completed { events: rows } = &mut result {
            restore(&self.shared, rows, &ids, plaintexts).await?;
        }
        Ok(result)
    }

    async fn fail_attempt(&self, request: FailRequest) -> Result<FailResult> {
        self.inner.fail_attempt(request).await
    }

    async fn dead_letters(&self, session_id: &str) -> Result<Vec<Head>> {
        let mut heads = self.inner.dead_letters(session_id).await?;
        self.shared.open_heads(&mut heads).await?;
        Ok(heads)
    }

    async fn redrive(&self, request: RedriveRequest) -> Result<RedriveResult> {
        self.inner.redrive(request).await
    }

    async fn clear(&self, request: ClearRequest) -> Result<ClearResult> {
        let mut result = self.inner.clear(request).await?;
        if let ClearResult::Cleared { marker } = &mut result {
            self.shared.open_event(marker).await?;
        }
        Ok(result)
    }

    async fn reclaim(&self, session_id: &str) -> Result<ReclaimResult> {
        self.inner.reclaim(session_id).await
    }

    async fn read(&self, session_id: &str, options: ReadOptions) -> Result<Vec<StoredEvent>> {
        let mut rows = self.inner.read(session_id, options).await?;
        self.shared.open_events(&mut rows).await?;
        Ok(rows)
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
        let shared = Arc::clone(&self.shared);
        // Decrypts each row; after an error (the inner stream's or a row
        // that does not decrypt) the stream ends, without waiting for more.
        let opened = futures::stream::unfold(
            (stream, shared, false),
            |(mut stream, shared, ended)| async move {
                if ended {
                    return None;
                }
                let item = match stream.next().await? {
                    Ok(mut row) => shared.open_event(&mut row).await.map(|()| row),
                    Err(error) => Err(error),
                };
                let ended = item.is_err();
                Some((item, (stream, shared, ended)))
            },
        );
        Ok(Box::pin(opened))
    }

    async fn write_state(
        &self,
        session_id: &str,
        reducer: &str,
        mut writes: Vec<StateWrite>,
    ) -> Result<()> {
        validate::write_state(session_id, reducer, &writes)?;
        let sealer = self.sealer()?;
        for write in &mut writes {
            let place = Place::State {
                session: session_id,
                reducer,
                index: write.index,
            };
            write.state = self
                .shared
                .codec
                .encode(&sealer, &place, &write.state, false)?;
        }
        self.inner.write_state(session_id, reducer, writes).await
    }

    async fn read_state(
        &self,
        session_id: &str,
        reducer: &str,
        options: ReadStateOptions,
    ) -> Result<StateRead> {
        let mut read = self.inner.read_state(session_id, reducer, options).await?;
        if let Some(snapshot) = &mut read.snapshot {
            self.shared
                .open_state(session_id, reducer, snapshot.index, &mut snapshot.state)?;
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
        validate::set_presence(session_id, participant, &values, &meta)?;
        let sealer = self.sealer()?;
        let mut sealed = BTreeMap::new();
        for (field, value) in &values {
            // `null` deletes the field: the store must see it as it is.
            let stored = if value.is_null() {
                Value::Null
            } else {
                let place = Place::Presence {
                    session: session_id,
                    participant,
                    field,
                };
                self.shared.codec.encode(&sealer, &place, value, false)?
            };
            sealed.insert(field.clone(), stored);
        }
        let mut result = self
            .inner
            .set_presence(session_id, participant, sealed, meta)
            .await?;
        for (field, value) in &mut result.applied {
            match values.get(field) {
                Some(plaintext) => *value = plaintext.clone(),
                None => {
                    let place = Place::Presence {
                        session: session_id,
                        participant,
                        field,
                    };
                    self.shared.open_value(&place, value)?;
                }
            }
        }
        Ok(result)
    }

    async fn read_presence(&self, session_id: &str) -> Result<Vec<PresenceRow>> {
        let mut rows = self.inner.read_presence(session_id).await?;
        for row in &mut rows {
            let place = Place::Presence {
                session: session_id,
                participant: &row.participant,
                field: &row.field,
            };
            let mut value = std::mem::take(&mut row.value);
            self.shared.open_value(&place, &mut value)?;
            row.value = value;
        }
        Ok(rows)
    }

    async fn sessions(&self, options: ListSessions) -> Result<Vec<SessionInfo>> {
        self.inner.sessions(options).await
    }

    fn claims_in_one_step(&self) -> bool {
        self.inner.claims_in_one_step()
    }

    async fn claim_work(&self, request: ClaimWorkRequest) -> Result<ClaimWorkResult> {
        let mut result = self.inner.claim_work(request).await?;
        if let ClaimWorkResult::Claimed { sessions } = &mut result {
            for session in sessions {
                self.shared.open_heads(&mut session.heads).await?;
                self.shared.open_heads(&mut session.dead_lettered).await?;
            }
        }
        Ok(result)
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

    async fn fork(&self, request: ForkRequest) -> Result<ForkResult> {
        let into = request.into.clone();
        let result = self.inner.fork(request).await;
        self.shared.lineages.forget(&into);
        result
    }

    async fn delete_session(&self, request: DeleteSessionRequest) -> Result<DeleteSessionResult> {
        let session = request.session_id.clone();
        let result = self.inner.delete_session(request).await;
        self.shared.lineages.forget(&session);
        result
    }

    async fn prune(&self, request: PruneRequest) -> Result<PruneResult> {
        let dry_run = request.dry_run;
        let result = self.inner.prune(request).await?;
        if !dry_run {
            for session in &result.sessions {
                self.shared.lineages.forget(session);
            }
        }
        Ok(result)
    }

    /// Plaintext in, like every call through the layer: `expected` as read
    /// through it, `new` encrypted under the current key (see
    /// [`EncryptedStore::reencrypt`] for moving rows to a new key).
    async fn rewrite_payloads(
        &self,
        request: RewritePayloadsRequest,
    ) -> Result<RewritePayloadsResult> {
        self.rewrite(request).await
    }
}
