//! [`Store::rewrite_payloads`](a2_store_api::Store::rewrite_payloads) through the encryption layer, and
//! [`EncryptedStore::reencrypt`]: old rows moved to the current key in
//! bounded pages.
//!
//! Through the layer, a rewrite speaks plaintext like every other call: the
//! caller's `expected` is what it read through the layer and `new` is
//! encrypted under the current key. The layer reads the stored rows of the
//! items, and where a row decrypts to `expected` it hands the store below
//! the stored envelope as the expected value, so the store's own
//! compare-and-set (under its locks) decides; a row that does not decrypt
//! to `expected` is handed an envelope that cannot match, and the store
//! answers `PAYLOAD_MISMATCH` naming that item.

use std::collections::HashMap;

use a2_store_api::{
    validate, ErrorCode, EventRewrite, ListSessions, Payload, PresenceRewrite, PresenceRow,
    ReadOptions, ReadStateOptions, Result, RewritePayloadsRequest, RewritePayloadsResult,
    StateRewrite, StoreError, StoredEvent, CLEAR_EVENT_TYPE, MAX_REWRITE_ITEMS,
};
use serde_json::Value;

use super::envelope::{self, Place};
use super::{EncryptedStore, PayloadCodec, Sealer};
use crate::layer::rows::{events_at, state_at};

/// How many times [`EncryptedStore::reencrypt`] reads a page again when a
/// row changed between its read and its rewrite (a presence value set, a
/// concurrent re-encryption), before it answers the mismatch.
const PAGE_ATTEMPTS: usize = 3;

/// What [`EncryptedStore::reencrypt`] rewrites and how.
///
/// ```
/// use a2_store::layer::codec::Reencrypt;
///
/// let options = Reencrypt::default().with_reducers(["summary"]).with_page(200);
/// assert_eq!(options.page, 200);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reencrypt {
    /// Events read and rewritten per [`Store::rewrite_payloads`](a2_store_api::Store::rewrite_payloads) call
    /// (1 to [`MAX_REWRITE_ITEMS`]; 500 by default).
    pub page: usize,
    /// The reducers whose latest snapshot (head and checkpoint) is
    /// re-encrypted too: the store cannot list reducers, so name them.
    /// None by default.
    pub reducers: Vec<String>,
    /// Encrypt rows stored as plain JSON (written before encryption was
    /// turned on) as well; `true` by default. Clear markers stay plain.
    pub plaintext: bool,
}

impl Default for Reencrypt {
    fn default() -> Self {
        Self {
            page: 500,
            reducers: Vec::new(),
            plaintext: true,
        }
    }
}

impl Reencrypt {
    /// Rewrites `page` events per call (clamped to 1..=[`MAX_REWRITE_ITEMS`]).
    pub fn with_page(mut self, page: usize) -> Self {
        self.page = page.clamp(1, MAX_REWRITE_ITEMS);
        self
    }

    /// Re-encrypts the latest snapshots of these reducers as well.
    pub fn with_reducers<I, S>(mut self, reducers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.reducers = reducers.into_iter().map(Into::into).collect();
        self
    }

    /// Leaves rows stored as plain JSON as they are when `false`.
    pub fn with_plaintext(mut self, encrypt: bool) -> Self {
        self.plaintext = encrypt;
        self
    }
}

/// What [`EncryptedStore::reencrypt`] did to one session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reencrypted {
    /// Rows rewritten under the current key (events, snapshot states and
    /// presence values).
    pub rewritten: RewritePayloadsResult,
    /// Rows read that were already sealed under the current key (clear
    /// markers, never encrypted, and plain rows kept plain are not counted).
    pub current: u64,
    /// `rewrite_payloads` calls made (pages).
    pub pages: u64,
}

/// One page [`EncryptedStore::reencrypt`] reads and rewrites.
enum Page<'o> {
    /// Up to `limit` events above index `after`.
    Events { after: u64, limit: usize },
    /// Every presence value of the session.
    Presence,
    /// The latest snapshot of a reducer.
    State(&'o str),
}

/// What a page read: its rows, those of them sealed under the current key
/// already (clear markers and plain rows are neither), and the last event
/// index read.
#[derive(Default)]
struct PageRead {
    rows: usize,
    current: u64,
    last: Option<u64>,
}

/// Where a stored payload stands against the current key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// Sealed under the current key (an event's also bound to its session,
    /// as a fork's copied rows are not): left as it is, counted current.
    Current,
    /// Plain, and plain rows are kept (`with_plaintext(false)`): left as it is.
    KeptPlain,
    /// Anything else (another key, another session, plain, malformed):
    /// rewritten.
    Stale,
}

/// Where `stored` stands (for an event, `sid` is its session).
fn standing(sealer: &Sealer, stored: &Value, sid: Option<&str>, options: &Reencrypt) -> Standing {
    match envelope::parse(stored) {
        Ok(Some(sealed)) if sealed.kid == &*sealer.kid && (sid.is_none() || sealed.sid == sid) => {
            Standing::Current
        }
        Ok(None) if !options.plaintext => Standing::KeptPlain,
        _ => Standing::Stale,
    }
}

impl Reencrypted {
    /// Adds what another run did (for totals over several sessions).
    pub fn add(&mut self, other: &Reencrypted) {
        self.rewritten.events += other.rewritten.events;
        self.rewritten.states += other.rewritten.states;
        self.rewritten.presence += other.rewritten.presence;
        self.current += other.current;
        self.pages += other.pages;
    }
}

impl EncryptedStore {
    /// `rewrite_payloads` through the layer (see the module docs).
    pub(super) async fn rewrite(
        &self,
        request: RewritePayloadsRequest,
    ) -> Result<RewritePayloadsResult> {
        validate::rewrite_payloads(&request)?;
        let sealer = self.sealer()?;
        let session = request.session_id.as_str();
        let rows = events_at(
            self.inner.as_ref(),
            session,
            request.events.iter().map(|item| item.index),
        )
        .await?;
        let mut stored = RewritePayloadsRequest::new(session);
        stored.incarnation = request.incarnation;
        for item in &request.events {
            stored
                .events
                .push(self.event_item(&sealer, &rows, item).await?);
        }
        for item in &request.states {
            stored
                .states
                .push(self.state_item(&sealer, session, item).await?);
        }
        if !request.presence.is_empty() {
            let rows = self.inner.read_presence(session).await?;
            for item in &request.presence {
                stored
                    .presence
                    .push(self.presence_item(&sealer, session, &rows, item)?);
            }
        }
        self.inner.rewrite_payloads(stored).await
    }

    /// The stored form of one event item.
    async fn event_item(
        &self,
        sealer: &Sealer,
        rows: &HashMap<u64, StoredEvent>,
        item: &EventRewrite,
    ) -> Result<EventRewrite> {
        let Some(row) = rows.get(&item.index) else {
            // Not stored above the clear: the store below says so.
            return Ok(item.clone());
        };
        let place = Place::Event {
            session: &row.session_id,
            id: &row.id,
            index: Some(row.index),
            read_in: None,
        };
        let mut opened = row.clone();
        self.shared.open_event(&mut opened).await?;
        let expected = if opened.payload == item.expected {
            row.payload.clone()
        } else {
            Payload::new(self.unmatchable(sealer, &place, &item.expected)?)
        };
        let new = self.shared.codec.encode(sealer, &place, &item.new, true)?;
        Ok(EventRewrite {
            index: item.index,
            expected,
            new: Payload::new(new),
        })
    }

    /// The stored form of one snapshot item.
    async fn state_item(
        &self,
        sealer: &Sealer,
        session: &str,
        item: &StateRewrite,
    ) -> Result<StateRewrite> {
        let place = Place::State {
            session,
            reducer: &item.reducer,
            index: item.index,
        };
        let Some(state) = state_at(self.inner.as_ref(), session, &item.reducer, item.index).await?
        else {
            return Ok(item.clone());
        };
        let mut opened = state.clone();
        self.shared.open_value(&place, &mut opened)?;
        let expected = if opened == item.expected {
            state
        } else {
            self.unmatchable(sealer, &place, &item.expected)?
        };
        let new = self.shared.codec.encode(sealer, &place, &item.new, false)?;
        Ok(StateRewrite {
            reducer: item.reducer.clone(),
            index: item.index,
            expected,
            new,
        })
    }

    /// The stored form of one presence item.
    fn presence_item(
        &self,
        sealer: &Sealer,
        session: &str,
        rows: &[PresenceRow],
        item: &PresenceRewrite,
    ) -> Result<PresenceRewrite> {
        let place = Place::Presence {
            session,
            participant: &item.participant,
            field: &item.field,
        };
        let Some(row) = rows
            .iter()
            .find(|row| row.participant == item.participant && row.field == item.field)
        else {
            return Ok(item.clone());
        };
        let mut opened = row.value.clone();
        self.shared.open_value(&place, &mut opened)?;
        let expected = if opened == item.expected {
            row.value.clone()
        } else {
            self.unmatchable(sealer, &place, &item.expected)?
        };
        let new = self.shared.codec.encode(sealer, &place, &item.new, false)?;
        Ok(PresenceRewrite {
            participant: item.participant.clone(),
            field: item.field.clone(),
            expected,
            new,
        })
    }

    /// An expected value for a row that does not hold `expected`: its
    /// envelope, which cannot equal the stored one (a different plaintext
    /// of the same place never seals to the same bytes), so the store
    /// below answers the mismatch naming the item.
    fn unmatchable(&self, sealer: &Sealer, place: &Place<'_>, expected: &Value) -> Result<Value> {
        envelope::check_plaintext(place, expected).map_or_else(
            |_| Ok(expected.clone()),
            |()| envelope::seal(place, &sealer.kid, &sealer.key, expected, false),
        )
    }

    /// Re-encrypts every payload of `session` not under the current key
    /// (rows of an older key, and plain rows unless
    /// [`Reencrypt::plaintext`] is off), a page of events per
    /// [`Store::rewrite_payloads`](a2_store_api::Store::rewrite_payloads) call, then its presence values and the
    /// latest snapshots of [`Reencrypt::reducers`]. Old keys stay needed
    /// until every session was re-encrypted: only then can a key be
    /// dropped from the provider.
    ///
    /// Each page is compare-and-set: a row that changed between the read
    /// and the rewrite refuses the page, which is read again (up to three
    /// times) and rewritten. A row whose key is not held fails the call
    /// naming it; pages already rewritten stay rewritten, so running it
    /// again continues.
    ///
    /// ```
    /// # #[cfg(feature = "memory")]
    /// # async fn demo() -> Result<(), a2_store::StoreError> {
    /// use std::sync::Arc;
    /// use a2_store::layer::codec::{sealed_key_id, Reencrypt};
    /// use a2_store::{json, EncryptedStore, Keyring, NewEvent, OpenOptions, ReadOptions, SecretKey, Store};
    ///
    /// let keys = Keyring::new().with_key("k1", SecretKey::from_bytes([1; 32]))?;
    /// let raw = a2_store::open("memory:", OpenOptions::default()).await?;
    /// let store = EncryptedStore::new(raw.clone(), Arc::new(keys.clone()));
    /// store.append("chat-1", vec![NewEvent::new("msg", json!("hi"))], Default::default()).await?;
    /// keys.insert("k2", SecretKey::from_bytes([2; 32]))?;
    /// keys.set_current("k2")?;
    /// let done = store.reencrypt("chat-1", Reencrypt::default()).await?;
    /// assert_eq!(done.rewritten.events, 1);
    /// let stored = raw.read("chat-1", ReadOptions::default()).await?;
    /// assert_eq!(sealed_key_id(&stored[0].payload), Some("k2"));
    /// # Ok(())
    /// # }
    /// # #[cfg(feature = "memory")]
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    pub async fn reencrypt(&self, session_id: &str, options: Reencrypt) -> Result<Reencrypted> {
        let page = options.page.clamp(1, MAX_REWRITE_ITEMS);
        let mut done = Reencrypted::default();
        let mut after = 0;
        loop {
            let events = Page::Events { after, limit: page };
            let (read, last) = self
                .rewrite_page(session_id, &events, &options, &mut done)
                .await?;
            match last {
                Some(last) if read == page => after = last,
                _ => break,
            }
        }
        self.rewrite_page(session_id, &Page::Presence, &options, &mut done)
            .await?;
        for reducer in &options.reducers {
            self.rewrite_page(session_id, &Page::State(reducer), &options, &mut done)
                .await?;
        }
        Ok(done)
    }

    /// Re-encrypts every session the store lists (see
    /// [`reencrypt`](Self::reencrypt)), a page of sessions at a time;
    /// returns the totals.
    pub async fn reencrypt_all(&self, options: Reencrypt) -> Result<Reencrypted> {
        let mut total = Reencrypted::default();
        let mut list = ListSessions::new().with_limit(MAX_REWRITE_ITEMS);
        loop {
            let sessions = self.inner.sessions(list.clone()).await?;
            for session in &sessions {
                let done = self.reencrypt(&session.session_id, options.clone()).await?;
                total.add(&done);
            }
            match sessions.last() {
                Some(last) if sessions.len() == MAX_REWRITE_ITEMS => {
                    list = list.with_after(last.session_id.clone());
                }
                _ => return Ok(total),
            }
        }
    }

    /// Reads `page`, rewrites its stale rows, reading it again when a row
    /// changed in between; adds what it did to `done`. Answers the rows
    /// read and the last event index read.
    async fn rewrite_page(
        &self,
        session_id: &str,
        page: &Page<'_>,
        options: &Reencrypt,
        done: &mut Reencrypted,
    ) -> Result<(usize, Option<u64>)> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let sealer = self.sealer()?;
            let (request, read) = self.stale_page(session_id, page, options, &sealer).await?;
            if request.is_empty() {
                done.current += read.current;
                return Ok((read.rows, read.last));
            }
            match self.inner.rewrite_payloads(request).await {
                Ok(result) => {
                    done.rewritten.events += result.events;
                    done.rewritten.states += result.states;
                    done.rewritten.presence += result.presence;
                    done.current += read.current;
                    done.pages += 1;
                    return Ok((read.rows, read.last));
                }
                Err(error)
                    if error.code() == ErrorCode::PayloadMismatch && attempt < PAGE_ATTEMPTS => {}
                Err(error) => {
                    return Err(StoreError::Backend {
                        message: format!(
                            "re-encrypting session '{session_id}' stopped: {error}; pages already rewritten stay rewritten, run it again to continue"
                        ),
                        source: Some(Box::new(error)),
                    })
                }
            }
        }
    }

    /// The rewrite request of `page`'s rows not under the current key, and
    /// what was read.
    async fn stale_page(
        &self,
        session_id: &str,
        page: &Page<'_>,
        options: &Reencrypt,
        sealer: &Sealer,
    ) -> Result<(RewritePayloadsRequest, PageRead)> {
        let mut request = RewritePayloadsRequest::new(session_id);
        let mut current = 0;
        let mut count = |standing: Standing| {
            current += u64::from(standing == Standing::Current);
            standing == Standing::Stale
        };
        match page {
            Page::Events { after, limit } => {
                let read = ReadOptions {
                    after: Some(*after),
                    through: None,
                    limit: Some(*limit),
                };
                let rows = self.inner.read(session_id, read).await?;
                for row in &rows {
                    // The store's clear markers are never encrypted.
                    if row.event_type == CLEAR_EVENT_TYPE {
                        continue;
                    }
                    let sid = Some(row.session_id.as_str());
                    if count(standing(sealer, &row.payload, sid, options)) {
                        request.events.push(self.reseal_event(sealer, row).await?);
                    }
                }
                let read = PageRead {
                    rows: rows.len(),
                    current,
                    last: rows.last().map(|row| row.index),
                };
                Ok((request, read))
            }
            Page::Presence => {
                let rows = self.inner.read_presence(session_id).await?;
                for row in &rows {
                    let place = Place::Presence {
                        session: session_id,
                        participant: &row.participant,
                        field: &row.field,
                    };
                    if count(standing(sealer, &row.value, None, options)) {
                        let new = self.reseal_value(sealer, &place, &row.value)?;
                        request =
                            request.presence(&row.participant, &row.field, row.value.clone(), new);
                    }
                }
                let read = PageRead {
                    rows: rows.len(),
                    current,
                    last: None,
                };
                Ok((request, read))
            }
            Page::State(reducer) => {
                let read = self
                    .inner
                    .read_state(session_id, reducer, ReadStateOptions::default())
                    .await?;
                let Some(snapshot) = read.snapshot else {
                    return Ok((request, PageRead::default()));
                };
                let place = Place::State {
                    session: session_id,
                    reducer,
                    index: snapshot.index,
                };
                if count(standing(sealer, &snapshot.state, None, options)) {
                    let new = self.reseal_value(sealer, &place, &snapshot.state)?;
                    request = request.state(*reducer, snapshot.index, snapshot.state, new);
                }
                let read = PageRead {
                    rows: 1,
                    current,
                    last: None,
                };
                Ok((request, read))
            }
        }
    }

    /// The rewrite of the stale event `row` under the current key.
    async fn reseal_event(&self, sealer: &Sealer, row: &StoredEvent) -> Result<EventRewrite> {
        let mut opened = row.clone();
        self.shared.open_event(&mut opened).await?;
        self.refuse_left_sealed(&opened.payload, || {
            format!(
                "event '{}' at index {} of session '{}'",
                row.id, row.index, row.session_id
            )
        })?;
        let place = Place::Event {
            session: &row.session_id,
            id: &row.id,
            index: Some(row.index),
            read_in: None,
        };
        let new = self
            .shared
            .codec
            .encode(sealer, &place, &opened.payload, true)?;
        Ok(EventRewrite {
            index: row.index,
            expected: row.payload.clone(),
            new: Payload::new(new),
        })
    }

    /// The stale state or presence value `stored` at `place` sealed under
    /// the current key.
    fn reseal_value(&self, sealer: &Sealer, place: &Place<'_>, stored: &Value) -> Result<Value> {
        let mut opened = stored.clone();
        self.shared.open_value(place, &mut opened)?;
        self.refuse_left_sealed(&opened, || place.describe())?;
        self.shared.codec.encode(sealer, place, &opened, false)
    }

    /// A payload still sealed after opening (its key is not held and the
    /// layer leaves such payloads sealed) cannot be re-encrypted.
    fn refuse_left_sealed(&self, opened: &Value, what: impl Fn() -> String) -> Result<()> {
        match super::sealed_key_id(opened) {
            Some(kid) => Err(StoreError::Backend {
                message: format!(
                    "payload could not be re-encrypted: {} was encrypted with key '{kid}', which the key provider does not hold: load that key",
                    what()
                ),
                source: None,
            }),
            None => Ok(()),
        }
    }
}
