//! The envelope an encrypted payload is stored as, where a payload belongs
//! ([`Place`], bound as associated data), and the cipher.
//!
//! ```text
//! {"$a2enc": 1, "kid": "k2", "sid": "chat-1", "ct": "<base64: nonce(12) | ciphertext | tag(16)>"}
//! ```
//!
//! `sid` (events only) names the session the payload was encrypted in, so a
//! fork, which copies rows verbatim, can still authenticate them.

use a2_store_api::{Result, StoreError};
use aes_gcm_siv::aead::AeadInOut;
use aes_gcm_siv::Nonce;
use base64::Engine as _;
use hmac::Mac;
use serde_json::{Map, Value};

use super::keys::SecretKey;

/// The reserved key that marks an encrypted payload.
pub const RESERVED_KEY: &str = "$a2enc";

/// The envelope format version written in [`RESERVED_KEY`].
pub(crate) const VERSION: u64 = 1;

/// Nonce and tag bytes of AES-256-GCM-SIV.
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;

/// The base64 of the ciphertext: standard alphabet, no padding.
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD_NO_PAD;

/// Where a payload belongs; bound to its ciphertext as associated data.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Place<'a> {
    /// An event's payload: the session it was encrypted in and its id.
    /// The index is not bound: the store assigns it after encryption.
    Event {
        session: &'a str,
        id: &'a str,
        /// For messages only (not bound).
        index: Option<u64>,
        /// The session the row was read in, when a fork copied it there
        /// from `session` (for messages only).
        read_in: Option<&'a str>,
    },
    /// A reducer snapshot's state.
    State {
        session: &'a str,
        reducer: &'a str,
        index: u64,
    },
    /// A presence field's value.
    Presence {
        session: &'a str,
        participant: &'a str,
        field: &'a str,
    },
}

impl Place<'_> {
    /// The associated data: a version tag, the kind, then each field
    /// length-prefixed (so no two places share a byte string).
    fn associated_data(&self) -> Vec<u8> {
        fn put(out: &mut Vec<u8>, field: &[u8]) {
            out.extend_from_slice(&(field.len() as u64).to_le_bytes());
            out.extend_from_slice(field);
        }
        let mut out = Vec::with_capacity(96);
        out.extend_from_slice(b"a2enc1");
        match *self {
            Place::Event { session, id, .. } => {
                out.push(1);
                put(&mut out, session.as_bytes());
                put(&mut out, id.as_bytes());
            }
            Place::State {
                session,
                reducer,
                index,
            } => {
                out.push(2);
                put(&mut out, session.as_bytes());
                put(&mut out, reducer.as_bytes());
                out.extend_from_slice(&index.to_le_bytes());
            }
            Place::Presence {
                session,
                participant,
                field,
            } => {
                out.push(3);
                put(&mut out, session.as_bytes());
                put(&mut out, participant.as_bytes());
                put(&mut out, field.as_bytes());
            }
        }
        out
    }

    /// The place in words, for errors.
    pub(crate) fn describe(&self) -> String {
        match *self {
            Place::Event {
                session,
                id,
                index,
                read_in,
            } => {
                let at = index
                    .map(|index| format!(" at index {index}"))
                    .unwrap_or_default();
                match read_in {
                    Some(read_in) if read_in != session => format!(
                        "event '{id}'{at} of session '{read_in}' (copied from session '{session}')"
                    ),
                    _ => format!("event '{id}'{at} of session '{session}'"),
                }
            }
            Place::State {
                session,
                reducer,
                index,
            } => {
                format!("the state of reducer '{reducer}' at index {index} of session '{session}'")
            }
            Place::Presence {
                session,
                participant,
                field,
            } => format!(
                "presence field '{field}' of participant '{participant}' in session '{session}'"
            ),
        }
    }

    /// The session the place is in.
    pub(crate) fn session(&self) -> &str {
        match *self {
            Place::Event { session, .. }
            | Place::State { session, .. }
            | Place::Presence { session, .. } => session,
        }
    }
}

/// A stored envelope, parsed (borrowing the stored value).
#[derive(Debug)]
pub(crate) struct Envelope<'v> {
    pub(crate) kid: &'v str,
    pub(crate) sid: Option<&'v str>,
    pub(crate) ct: &'v str,
}

/// `Ok(None)`: `value` is no envelope (plain JSON, written before
/// encryption was on); `Err(what)`: it claims to be one but is malformed.
pub(crate) fn parse(value: &Value) -> std::result::Result<Option<Envelope<'_>>, String> {
    let Value::Object(map) = value else {
        return Ok(None);
    };
    let Some(version) = map.get(RESERVED_KEY) else {
        return Ok(None);
    };
    if version.as_u64() != Some(VERSION) {
        return Err(format!(
            "envelope version {version} is not {VERSION}: written by a newer a2-store, or damaged"
        ));
    }
    let text = |name: &str| match map.get(name) {
        Some(Value::String(text)) => Ok(Some(text.as_str())),
        None => Ok(None),
        Some(_) => Err(format!("envelope field '{name}' is not a string")),
    };
    let kid = text("kid")?.ok_or("the envelope has no key id ('kid')")?;
    let ct = text("ct")?.ok_or("the envelope has no ciphertext ('ct')")?;
    let sid = text("sid")?;
    if map.len() != 3 + usize::from(sid.is_some()) {
        return Err("the envelope has fields it should not have".to_owned());
    }
    Ok(Some(Envelope { kid, sid, ct }))
}

/// Refuses a plaintext that would read back as an envelope.
pub(crate) fn check_plaintext(place: &Place<'_>, value: &Value) -> Result<()> {
    match value {
        Value::Object(map) if map.contains_key(RESERVED_KEY) => {
            Err(StoreError::invalid_input(format!(
                "{} has the top-level key '{RESERVED_KEY}', which the encryption layer reserves: rename that key",
                place.describe()
            )))
        }
        _ => Ok(()),
    }
}

/// Encrypts `value` for `place` under `key` (id `kid`) into an envelope.
/// Deterministic: the same key, place and value give the same envelope (the
/// nonce is an HMAC of the place, the IV GCM-SIV's synthetic one), so
/// replays compare equal.
pub(crate) fn seal(
    place: &Place<'_>,
    kid: &str,
    key: &SecretKey,
    value: &Value,
    with_session: bool,
) -> Result<Value> {
    check_plaintext(place, value)?;
    let aad = place.associated_data();
    let plaintext = serde_json::to_vec(value).map_err(|error| StoreError::Backend {
        message: format!(
            "payload could not be encrypted: {} is not serializable",
            place.describe()
        ),
        source: Some(Box::new(error)),
    })?;
    let derived = key.derived();
    // The nonce names the place only: AES-GCM-SIV derives its IV from the
    // plaintext itself (POLYVAL under the message key), so one place's
    // distinct payloads still get distinct IVs, and hashing the whole
    // plaintext once more (HMAC, 1-2 µs per KB) buys nothing.
    let mut mac = derived.nonce_mac.clone();
    mac.update(&aad);
    let digest = mac.finalize().into_bytes();
    let nonce_bytes = &digest[..NONCE_LEN];
    let nonce = Nonce::try_from(nonce_bytes).map_err(|_| encrypt_failed(place))?;
    let mut out = Vec::with_capacity(NONCE_LEN + plaintext.len() + TAG_LEN);
    out.extend_from_slice(nonce_bytes);
    out.extend_from_slice(&plaintext);
    let tag = derived
        .cipher
        .encrypt_inout_detached(&nonce, &aad, (&mut out[NONCE_LEN..]).into())
        .map_err(|_| encrypt_failed(place))?;
    out.extend_from_slice(&tag);
    let mut map = Map::new();
    map.insert(RESERVED_KEY.to_owned(), Value::from(VERSION));
    map.insert("kid".to_owned(), Value::from(kid));
    if with_session {
        map.insert("sid".to_owned(), Value::from(place.session()));
    }
    map.insert("ct".to_owned(), Value::String(B64.encode(&out)));
    Ok(Value::Object(map))
}

fn encrypt_failed(place: &Place<'_>) -> StoreError {
    StoreError::Backend {
        message: format!(
            "payload could not be encrypted: {} is too large for the cipher",
            place.describe()
        ),
        source: None,
    }
}

/// Why a ciphertext did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpenFailure {
    /// `ct` is not base64 or too short to hold a nonce and a tag.
    Malformed,
    /// The tag does not verify: changed bytes, another place, another key.
    Unauthentic,
    /// It authenticated but is not JSON (never written by this layer).
    NotJson,
}

/// Decrypts `envelope.ct` for `place` (whose session is the one the payload
/// was encrypted in) under `key`.
pub(crate) fn open(
    place: &Place<'_>,
    key: &SecretKey,
    ct: &str,
) -> std::result::Result<Value, OpenFailure> {
    let mut bytes = B64.decode(ct).map_err(|_| OpenFailure::Malformed)?;
    if bytes.len() < NONCE_LEN + TAG_LEN {
        return Err(OpenFailure::Malformed);
    }
    let aad = place.associated_data();
    let (nonce, rest) = bytes.split_at_mut(NONCE_LEN);
    let nonce = Nonce::try_from(&*nonce).map_err(|_| OpenFailure::Malformed)?;
    let (body, tag) = rest.split_at_mut(rest.len() - TAG_LEN);
    let tag = aes_gcm_siv::Tag::try_from(&*tag).map_err(|_| OpenFailure::Malformed)?;
    key.derived()
        .cipher
        .decrypt_inout_detached(&nonce, &aad, body.into(), &tag)
        .map_err(|_| OpenFailure::Unauthentic)?;
    serde_json::from_slice(body).map_err(|_| OpenFailure::NotJson)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event<'a>(session: &'a str, id: &'a str) -> Place<'a> {
        Place::Event {
            session,
            id,
            index: None,
            read_in: None,
        }
    }

    #[test]
    fn seal_is_deterministic_per_place_and_opens_only_there() {
        let key = SecretKey::from_bytes([9; 32]);
        let value = json!({"text": "hi", "n": [1, 2.5, null]});
        let a = seal(&event("s", "e1"), "k1", &key, &value, true).unwrap();
        assert_eq!(
            a,
            seal(&event("s", "e1"), "k1", &key, &value, true).unwrap()
        );
        let b = seal(&event("s", "e2"), "k1", &key, &value, true).unwrap();
        assert_ne!(
            a["ct"], b["ct"],
            "another event: another nonce and ciphertext"
        );
        let envelope = parse(&a).unwrap().unwrap();
        assert_eq!((envelope.kid, envelope.sid), ("k1", Some("s")));
        assert_eq!(open(&event("s", "e1"), &key, envelope.ct).unwrap(), value);
        assert_eq!(
            open(&event("s", "e2"), &key, envelope.ct),
            Err(OpenFailure::Unauthentic)
        );
        assert_eq!(
            open(&event("t", "e1"), &key, envelope.ct),
            Err(OpenFailure::Unauthentic)
        );
        let other = SecretKey::from_bytes([8; 32]);
        assert_eq!(
            open(&event("s", "e1"), &other, envelope.ct),
            Err(OpenFailure::Unauthentic)
        );
        assert_eq!(
            open(&event("s", "e1"), &key, "!!"),
            Err(OpenFailure::Malformed)
        );
        assert_eq!(
            open(&event("s", "e1"), &key, "AAAA"),
            Err(OpenFailure::Malformed)
        );
    }

    #[test]
    fn places_of_different_kinds_never_share_associated_data() {
        let state = Place::State {
            session: "s",
            reducer: "r",
            index: 1,
        };
        let presence = Place::Presence {
            session: "s",
            participant: "r",
            field: "",
        };
        assert_ne!(state.associated_data(), presence.associated_data());
        // Length prefixes: ("ab", "c") and ("a", "bc") differ.
        assert_ne!(
            event("ab", "c").associated_data(),
            event("a", "bc").associated_data()
        );
    }

    #[test]
    fn parse_tells_plain_json_from_envelopes_and_rejects_odd_ones() {
        for plain in [json!(null), json!("x"), json!([1]), json!({"a": 1})] {
            assert!(parse(&plain).unwrap().is_none());
        }
        let bad = [
            json!({"$a2enc": 2, "kid": "k", "ct": "x"}),
            json!({"$a2enc": "1", "kid": "k", "ct": "x"}),
            json!({"$a2enc": 1, "ct": "x"}),
            json!({"$a2enc": 1, "kid": "k"}),
            json!({"$a2enc": 1, "kid": 5, "ct": "x"}),
            json!({"$a2enc": 1, "kid": "k", "ct": "x", "extra": true}),
        ];
        for value in bad {
            assert!(parse(&value).is_err(), "{value}");
        }
        let place = event("s", "e");
        let refused = check_plaintext(&place, &json!({"$a2enc": 1})).unwrap_err();
        assert_eq!(refused.code(), a2_store_api::ErrorCode::InvalidInput);
    }
}
