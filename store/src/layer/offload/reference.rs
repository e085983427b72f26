//! The reference a row holds in place of an offloaded payload, and where
//! its object lives.

use std::fmt;

use a2_store_api::{Result, StoreError};
use object_store::path::Path;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// The reserved top-level key that marks a payload or snapshot state as a
/// reference to an offloaded object: `{"$a2ref": 1, "sha256": "<64 hex>",
/// "len": <bytes>}`.
///
/// An app payload (or state) that is a JSON object with this key at its top
/// level is refused with [`ErrorCode::InvalidInput`](crate::ErrorCode::InvalidInput),
/// whatever its size: stored inline it would read back as a reference.
pub const REFERENCE_KEY: &str = "$a2ref";

/// The version of the reference format this build writes and reads.
const VERSION: u64 = 1;

/// Lower-case hexadecimal of `bytes`.
pub(super) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

/// The SHA-256 of `bytes`, in lower-case hexadecimal.
pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `value`'s JSON bytes and their reference, hashed while they are written
/// (one pass over the bytes, not two).
pub(super) fn serialize(value: &Value) -> serde_json::Result<(Vec<u8>, Reference)> {
    struct Hashing {
        bytes: Vec<u8>,
        hasher: Sha256,
    }
    impl std::io::Write for Hashing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.hasher.update(buf);
            self.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Hashing {
        bytes: Vec::new(),
        hasher: Sha256::new(),
    };
    serde_json::to_writer(&mut out, value)?;
    let reference = Reference {
        sha256: hex(&out.hasher.finalize()),
        len: u64::try_from(out.bytes.len()).unwrap_or(u64::MAX),
    };
    Ok((out.bytes, reference))
}

/// Whether `value` uses the reserved key at its top level.
pub(super) fn uses_reserved_key(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|map| map.contains_key(REFERENCE_KEY))
}

/// A content reference: the object's SHA-256 and length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Reference {
    /// Lower-case hexadecimal SHA-256 of the object's bytes.
    pub sha256: String,
    /// The object's length in bytes.
    pub len: u64,
}

impl Reference {
    /// The reference of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self {
            sha256: sha256_hex(bytes),
            len: u64::try_from(bytes.len()).unwrap_or(u64::MAX),
        }
    }

    /// The JSON a row holds.
    pub fn to_value(&self) -> Value {
        json!({ REFERENCE_KEY: VERSION, "sha256": self.sha256, "len": self.len })
    }

    /// `None` when `value` is no reference (an inline payload); else the
    /// reference, or what is wrong with it.
    pub fn parse(value: &Value) -> Option<std::result::Result<Self, String>> {
        let map = value.as_object()?;
        let version = map.get(REFERENCE_KEY)?;
        Some(Self::parse_fields(map, version))
    }

    fn parse_fields(
        map: &Map<String, Value>,
        version: &Value,
    ) -> std::result::Result<Self, String> {
        if version.as_u64() != Some(VERSION) {
            return Err(format!(
                "reference version {version} is not one this build reads ({VERSION}): upgrade a2-store"
            ));
        }
        let sha256 = map
            .get("sha256")
            .and_then(Value::as_str)
            .filter(|sha| sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or("its sha256 is not 64 hexadecimal digits")?;
        let len = map
            .get("len")
            .and_then(Value::as_u64)
            .ok_or("its len is not a byte count")?;
        Ok(Self {
            sha256: sha256.to_ascii_lowercase(),
            len,
        })
    }
}

/// What an offloaded payload belongs to, as errors name it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Place<'a> {
    /// An event payload.
    Event {
        session: &'a str,
        id: &'a str,
        index: u64,
    },
    /// A snapshot state.
    State {
        session: &'a str,
        reducer: &'a str,
        index: u64,
    },
}

impl fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Event { session, id, index } => write!(
                f,
                "the payload of event '{id}' (index {index}) in session '{session}'"
            ),
            Self::State {
                session,
                reducer,
                index,
            } => write!(
                f,
                "the state of reducer '{reducer}' at index {index} in session '{session}'"
            ),
        }
    }
}

/// Which kind of object: event payloads and snapshot states live apart, so
/// a sweep of event objects never looks at states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Event payloads.
    Event,
    /// Snapshot states.
    State,
}

impl Kind {
    fn dir(self) -> &'static str {
        match self {
            Self::Event => "events",
            Self::State => "states",
        }
    }
}

/// Object keys: `<prefix>/<sha256 of the session id>/{events,states}/<sha256>`,
/// and `<prefix>/<sha256 of the session id>/staging/<uuid>` while a large
/// payload is written.
///
/// The session id is hashed so any id (slashes, dots, non-ASCII, any
/// length) makes one fixed-length directory, and the object store's
/// listing does not show session ids.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    prefix: Path,
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: Path::from(prefix),
        }
    }

    /// The directory of every object of `session`.
    pub fn session(&self, session: &str) -> Path {
        self.prefix.clone().join(sha256_hex(session.as_bytes()))
    }

    /// The directory of `session`'s objects of `kind`.
    pub fn kind(&self, session: &str, kind: Kind) -> Path {
        self.session(session).join(kind.dir())
    }

    /// The directory of `session`'s staging objects: objects being written
    /// before they are renamed to their content key.
    pub fn staging_dir(&self, session: &str) -> Path {
        self.session(session).join("staging")
    }

    /// A fresh staging object of `session`.
    pub fn staging(&self, session: &str) -> Path {
        use a2_store_api::IdGenerator;
        self.staging_dir(session)
            .join(a2_store_api::RandomIds.next_id().as_str())
    }

    /// The object of `reference` in `session`.
    pub fn object(&self, session: &str, kind: Kind, reference: &Reference) -> Path {
        self.kind(session, kind).join(reference.sha256.as_str())
    }
}

/// The [`ErrorCode::InvalidInput`](crate::ErrorCode::InvalidInput) error
/// of a payload or state that uses the reserved key.
pub(super) fn reserved_key_used(what: &str) -> StoreError {
    StoreError::invalid_input(format!(
        "{what} is a JSON object with the key '{REFERENCE_KEY}', which the offloading layer \
         reserves for its references: rename that key (or nest the object one level down)"
    ))
}

/// Checks a fetched object against its reference.
pub(super) fn check(place: Place<'_>, reference: &Reference, bytes: &[u8]) -> Result<()> {
    let found = Reference::of(bytes);
    if found == *reference {
        return Ok(());
    }
    Err(StoreError::Backend {
        message: format!(
            "{place} was offloaded to the object store, but the object found does not match \
             the row's reference (expected sha256 {} and {} bytes, found sha256 {} and {} \
             bytes): the object was corrupted or replaced; restore it from a backup",
            reference.sha256, reference.len, found.sha256, found.len
        ),
        source: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_round_trip_and_name_their_content() {
        let reference = Reference::of(b"hello");
        assert_eq!(
            reference.sha256,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        let value = reference.to_value();
        assert_eq!(value["$a2ref"], 1);
        assert_eq!(value["len"], 5);
        assert_eq!(Reference::parse(&value), Some(Ok(reference)));
        assert_eq!(Reference::parse(&json!({"a": 1})), None);
        assert_eq!(Reference::parse(&json!("text")), None);
        assert!(matches!(
            Reference::parse(&json!({"$a2ref": 2, "sha256": "00", "len": 1})),
            Some(Err(_))
        ));
        assert!(matches!(
            Reference::parse(&json!({"$a2ref": 1, "sha256": "zz", "len": 1})),
            Some(Err(_))
        ));
    }

    #[test]
    fn serializing_hashes_the_bytes_written() {
        let value = json!({"text": "x".repeat(100_000), "n": [1, 2]});
        let (bytes, reference) = serialize(&value).unwrap();
        assert_eq!(bytes, serde_json::to_vec(&value).unwrap());
        assert_eq!(reference, Reference::of(&bytes));
    }

    #[test]
    fn keys_hash_the_session() {
        let keys = Keys::new("offload");
        let reference = Reference::of(b"x");
        let path = keys.object("a/../b", Kind::Event, &reference);
        let text = path.as_ref();
        assert!(text.starts_with("offload/"), "{text}");
        assert!(text.contains("/events/"), "{text}");
        assert!(!text.contains(".."), "{text}");
        assert!(text.ends_with(&reference.sha256), "{text}");
        assert_ne!(keys.session("a"), keys.session("b"));
    }
}
