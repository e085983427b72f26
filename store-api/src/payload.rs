//! [`Payload`]: an event's JSON value, shared rather than copied.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// An event's JSON payload. Immutable once built and reference-counted:
/// cloning an event, a head or a read row shares the value instead of
/// copying it, so a store hands the same payload to its log, its
/// subscribers and every claim without a deep copy.
///
/// Reads as a [`Value`] through `Deref`, compares equal to a `Value` with the
/// same content, and serializes as the bare JSON value (no wrapper).
#[derive(Clone, Default)]
pub struct Payload(Arc<Value>);

impl Payload {
    /// Wraps `value`.
    pub fn new(value: Value) -> Self {
        Self(Arc::new(value))
    }

    /// The JSON value.
    pub fn as_value(&self) -> &Value {
        &self.0
    }

    /// The JSON value, owned: moved out when this is the only reference,
    /// else copied.
    pub fn into_value(self) -> Value {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone())
    }

    /// Whether both share one value (equal without comparing content).
    pub fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Deref for Payload {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.0
    }
}

impl AsRef<Value> for Payload {
    fn as_ref(&self) -> &Value {
        &self.0
    }
}

impl From<Value> for Payload {
    fn from(value: Value) -> Self {
        Self::new(value)
    }
}

impl From<Payload> for Value {
    fn from(payload: Payload) -> Self {
        payload.into_value()
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.ptr_eq(other) || *self.0 == *other.0
    }
}

impl PartialEq<Value> for Payload {
    fn eq(&self, other: &Value) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<Payload> for Value {
    fn eq(&self, other: &Payload) -> bool {
        *self == *other.0
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// The compact JSON text of the value.
impl fmt::Display for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn clones_share_the_value() {
        let payload = Payload::new(json!({"a": [1, 2]}));
        let copy = payload.clone();
        assert!(payload.ptr_eq(&copy));
        assert_eq!(copy, json!({"a": [1, 2]}));
        assert_eq!(json!({"a": [1, 2]}), copy);
    }

    #[test]
    fn equal_content_is_equal_unshared() {
        let a = Payload::new(json!({"a": 1}));
        let b = Payload::new(json!({"a": 1}));
        assert!(!a.ptr_eq(&b));
        assert_eq!(a, b);
        assert_ne!(a, Payload::new(json!({"a": 2})));
    }

    #[test]
    fn serializes_as_the_bare_value() {
        let payload = Payload::new(json!({"text": "hi", "n": 3}));
        let text = serde_json::to_string(&payload).unwrap();
        assert_eq!(text, r#"{"n":3,"text":"hi"}"#);
        assert_eq!(payload.to_string(), text);
        let back: Payload = serde_json::from_str(&text).unwrap();
        assert_eq!(back, payload);
    }

    #[test]
    fn into_value_moves_a_sole_reference_and_copies_a_shared_one() {
        let payload = Payload::new(json!([1]));
        let shared = payload.clone();
        assert_eq!(payload.into_value(), json!([1]));
        assert_eq!(shared.into_value(), json!([1]));
        assert_eq!(Payload::default(), Value::Null);
    }
}
