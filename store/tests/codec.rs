//! The encryption layer (`EncryptedStore`) beyond the conformance suite:
//! what is stored below it, tampering (a flipped byte, swapped and pasted
//! ciphertexts, wrong and unknown key ids), rotation, forks, plaintext
//! passthrough and the reserved key, on the memory backend. Tampered rows
//! are written straight to the inner store, as someone with access to the
//! database would.
#![cfg(all(feature = "encryption", feature = "memory"))]

mod codec_support;

use std::collections::BTreeMap;
use std::sync::Arc;

use a2_store::layer::codec::{sealed_key_id, Reencrypt};
use a2_store::{
    json, ClaimRequest, ClaimWorkRequest, ClaimWorkResult, ClearRequest, CompleteRequest,
    CompleteResult, ConsumerDeclaration, DeleteSessionRequest, EncryptedStore, ErrorCode,
    FailRequest, ForkRequest, Keyring, NewEvent, OpenOptions, PresenceMeta, ReadOptions,
    ReadStateOptions, RecyclingIds, RewritePayloadsRequest, SecretKey, StateWrite, Store,
    StoreError, StreamExt, Target, Value,
};
use base64::Engine as _;

/// The base64 of the two test keys (never to appear in a message).
const KEY_TEXTS: [&str; 2] = [
    "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE",
    "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI",
];

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// A memory store, the layer over it (keys of [`codec_support::keyring`],
/// `k2` current) and the keyring.
struct Fixture {
    inner: Arc<dyn Store>,
    store: EncryptedStore,
    keys: Keyring,
}

async fn fixture() -> Fixture {
    let ids = RecyclingIds::default();
    let inner = a2_store::open("memory:", OpenOptions::default().with_ids(ids.clone()))
        .await
        .unwrap();
    let keys = codec_support::keyring();
    let store = EncryptedStore::new(Arc::clone(&inner), Arc::new(keys.clone())).with_ids(ids);
    Fixture { inner, store, keys }
}

fn msg(id: &str, payload: Value) -> NewEvent {
    NewEvent::new("msg", payload).with_id(id)
}

/// The stored payloads of `session`, read below the layer.
async fn stored(inner: &Arc<dyn Store>, session: &str) -> Vec<Value> {
    inner
        .read(session, ReadOptions::default())
        .await
        .unwrap()
        .into_iter()
        .map(|row| row.payload.into_value())
        .collect()
}

/// The error of reading `session` through the layer, checked to be a
/// `Backend` error that names no key material.
async fn read_error(store: &dyn Store, session: &str) -> String {
    let error = store
        .read(session, ReadOptions::default())
        .await
        .expect_err("the read must fail");
    checked(error)
}

fn checked(error: StoreError) -> String {
    assert_eq!(error.code(), ErrorCode::Backend, "{error}");
    let message = error.to_string();
    for key in KEY_TEXTS {
        assert!(!message.contains(key), "{message}");
    }
    message
}

#[test]
fn payloads_are_stored_as_envelopes_and_read_back_as_written() {
    block_on(async {
        let f = fixture().await;
        let payload = json!({"text": "my card is 4242", "n": [1, 2.5, null]});
        let appended = f
            .store
            .append(
                "s",
                vec![msg("m1", payload.clone()).with_target(Target::lane("agent", "main"))],
                Default::default(),
            )
            .await
            .unwrap();
        assert_eq!(appended.events[0].payload, payload);
        let below = stored(&f.inner, "s").await;
        let envelope = below[0].as_object().unwrap();
        assert_eq!(envelope["$a2enc"], 1);
        assert_eq!(envelope["kid"], "k2");
        assert_eq!(envelope["sid"], "s");
        assert!(!below[0].to_string().contains("4242"), "{}", below[0]);
        // Ids, types, targets stay readable: the inner store dispatches.
        let rows = f.inner.read("s", ReadOptions::default()).await.unwrap();
        assert_eq!(
            (rows[0].id.as_str(), rows[0].event_type.as_str()),
            ("m1", "msg")
        );
        let head = f
            .store
            .claim_available(ClaimRequest::new(
                "s",
                "w",
                std::time::Duration::from_secs(30),
            ))
            .await
            .unwrap()
            .into_heads()
            .remove(0);
        assert_eq!(head.event.payload, payload);
        let reply = NewEvent::new("reply", json!("secret answer"));
        let done = f
            .store
            .complete_attempt(CompleteRequest::for_head(&head, vec![reply]))
            .await
            .unwrap();
        let CompleteResult::Completed { events } = done else {
            panic!("not completed");
        };
        assert_eq!(events[0].payload, json!("secret answer"));
        let rows = f.store.read("s", ReadOptions::default()).await.unwrap();
        assert_eq!(rows[1].payload, json!("secret answer"));
        assert_eq!(stored(&f.inner, "s").await[1]["kid"], "k2");
    });
}

#[test]
fn heads_streams_and_cross_session_claims_are_decrypted() {
    block_on(async {
        let f = fixture().await;
        let mut stream = f.store.subscribe("s", 0).await.unwrap();
        let job = |n: i64| {
            NewEvent::new("job", json!({ "n": n })).with_target(Target::lane("agent", "main"))
        };
        f.store
            .append("s", vec![job(1), job(2)], Default::default())
            .await
            .unwrap();
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first.payload, json!({"n": 1}));
        let request =
            ClaimWorkRequest::new("w", vec![ConsumerDeclaration::targeted("agent")], 30_000);
        let ClaimWorkResult::Claimed { sessions } = f.store.claim_work(request).await.unwrap()
        else {
            panic!("nothing claimed");
        };
        let head = &sessions[0].heads[0];
        assert_eq!(head.event.payload, json!({"n": 1}));
        f.store
            .fail_attempt(FailRequest::for_head(head, "down", 1))
            .await
            .unwrap();
        let dead = f.store.dead_letters("s").await.unwrap();
        assert_eq!(dead[0].event.payload, json!({"n": 1}));
        // A tampered row reaches the stream as an error, and the stream ends.
        let envelope = stored(&f.inner, "s").await.remove(0);
        f.inner
            .append("s", vec![msg("forged", envelope)], Default::default())
            .await
            .unwrap();
        assert_eq!(
            stream.next().await.unwrap().unwrap().payload,
            json!({"n": 2})
        );
        let error = stream.next().await.unwrap().unwrap_err();
        assert!(checked(error).contains("event 'forged' at index 3"));
        assert!(
            stream.next().await.is_none(),
            "the stream ends after its error"
        );
    });
}

/// `envelope` with one byte of its ciphertext flipped.
fn flipped(envelope: &Value) -> Value {
    let engine = base64::engine::general_purpose::STANDARD_NO_PAD;
    let mut bytes = engine.decode(envelope["ct"].as_str().unwrap()).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    let mut out = envelope.clone();
    out["ct"] = Value::String(engine.encode(bytes));
    out
}

#[test]
fn a_flipped_byte_fails_naming_the_event_and_key() {
    block_on(async {
        let f = fixture().await;
        f.store
            .append("s", vec![msg("e1", json!("hello"))], Default::default())
            .await
            .unwrap();
        let envelope = stored(&f.inner, "s").await.remove(0);
        f.inner
            .append("s", vec![msg("e2", json!(0))], Default::default())
            .await
            .unwrap();
        // Same session, same id as the original: only the byte differs.
        let tampered = flipped(&envelope);
        f.inner
            .append("t", vec![msg("e1", tampered)], Default::default())
            .await
            .unwrap();
        let mut forged = envelope.clone();
        forged["sid"] = json!("t");
        let mut bad = flipped(&forged);
        bad["sid"] = json!("t");
        f.inner
            .append("u", vec![msg("e1", bad)], Default::default())
            .await
            .unwrap();
        let message = read_error(&f.store, "u").await;
        assert!(
            message.starts_with("backend failure: payload could not be decrypted:"),
            "{message}"
        );
        // The forged sid names another session: refused before decrypting.
        assert!(
            message.contains("event 'e1' at index 1 of session 'u'"),
            "{message}"
        );
        // In its own session, a flipped byte fails the tag.
        let mut own = flipped(&envelope);
        own["sid"] = json!("v");
        f.inner
            .append("v", vec![msg("e1", own)], Default::default())
            .await
            .unwrap();
        let message = read_error(&f.store, "v").await;
        assert!(
            message.contains("event 'e1' at index 1 of session 'v' (key 'k2')"),
            "{message}"
        );
        assert!(message.contains("does not authenticate"), "{message}");
        // Garbage in the ciphertext or the envelope is an error, not a panic.
        for (session, junk) in [
            (
                "w1",
                json!({"$a2enc": 1, "kid": "k2", "sid": "w1", "ct": "*"}),
            ),
            (
                "w2",
                json!({"$a2enc": 1, "kid": "k2", "sid": "w2", "ct": ""}),
            ),
            (
                "w3",
                json!({"$a2enc": 1, "kid": ["k2"], "sid": "w3", "ct": ""}),
            ),
            ("w4", json!({"$a2enc": 7})),
            ("w5", json!({"$a2enc": 1, "kid": "k2", "ct": "AAAA"})),
        ] {
            f.inner
                .append(session, vec![msg("e1", junk)], Default::default())
                .await
                .unwrap();
            let message = read_error(&f.store, session).await;
            assert!(
                message.contains(&format!("session '{session}'")),
                "{message}"
            );
        }
    });
}

#[test]
fn a_ciphertext_swapped_between_events_or_pasted_into_another_session_fails() {
    block_on(async {
        let f = fixture().await;
        f.store
            .append(
                "s",
                vec![msg("e1", json!("first")), msg("e2", json!("second"))],
                Default::default(),
            )
            .await
            .unwrap();
        let envelopes = stored(&f.inner, "s").await;
        // e3 in the same session carrying e2's ciphertext (its sid is right).
        f.inner
            .append(
                "s",
                vec![msg("e3", envelopes[1].clone())],
                Default::default(),
            )
            .await
            .unwrap();
        let message = read_error(&f.store, "s").await;
        assert!(
            message.contains("event 'e3' at index 3 of session 's' (key 'k2')"),
            "{message}"
        );
        // The same id in another session, sid left as it was: not a fork of it.
        f.inner
            .append(
                "other",
                vec![msg("e1", envelopes[0].clone())],
                Default::default(),
            )
            .await
            .unwrap();
        let message = read_error(&f.store, "other").await;
        assert!(
            message
                .contains("event 'e1' at index 1 of session 'other' was encrypted in session 's'"),
            "{message}"
        );
        // ... and with the sid rewritten to the new session: the tag fails.
        let mut moved = envelopes[0].clone();
        moved["sid"] = json!("other2");
        f.inner
            .append("other2", vec![msg("e1", moved)], Default::default())
            .await
            .unwrap();
        assert!(read_error(&f.store, "other2")
            .await
            .contains("does not authenticate"));
    });
}

#[test]
fn wrong_and_unknown_key_ids_fail_naming_the_id_only() {
    block_on(async {
        let f = fixture().await;
        f.store
            .append("s", vec![msg("e1", json!("x"))], Default::default())
            .await
            .unwrap();
        let envelope = stored(&f.inner, "s").await.remove(0);
        for (session, kid, expected) in [
            (
                "t1",
                "k9",
                "was encrypted with key 'k9', which the key provider does not hold",
            ),
            ("t2", "k1", "(key 'k1'): it does not authenticate"),
        ] {
            let mut relabelled = envelope.clone();
            relabelled["kid"] = json!(kid);
            relabelled["sid"] = json!(session);
            f.inner
                .append(session, vec![msg("e1", relabelled)], Default::default())
                .await
                .unwrap();
            let message = read_error(&f.store, session).await;
            assert!(message.contains(expected), "{message}");
        }
        // A layer whose ring lacks k2 cannot read what k2 wrote.
        let partial = Keyring::new()
            .with_key("k1", SecretKey::from_bytes([1; 32]))
            .unwrap();
        let reader = EncryptedStore::new(Arc::clone(&f.inner), Arc::new(partial));
        assert!(read_error(&reader, "s").await.contains("key 'k2'"));
        // A ring with a different key under the id k2: the tag fails.
        let impostor = Keyring::new()
            .with_key("k2", SecretKey::from_bytes([9; 32]))
            .unwrap();
        let reader = EncryptedStore::new(Arc::clone(&f.inner), Arc::new(impostor));
        assert!(read_error(&reader, "s")
            .await
            .contains("does not authenticate"));
        // No key at all: writes are refused, naming no key.
        let empty = EncryptedStore::new(Arc::clone(&f.inner), Arc::new(Keyring::new()));
        let refused = empty
            .append("s", vec![msg("e9", json!(1))], Default::default())
            .await
            .unwrap_err();
        assert_eq!(refused.code(), ErrorCode::InvalidInput);
    });
}

#[test]
fn rotation_encrypts_new_payloads_with_the_new_key_and_reads_old_ones() {
    block_on(async {
        let f = fixture().await;
        f.keys.set_current("k1").unwrap();
        f.store
            .append("s", vec![msg("old", json!("before"))], Default::default())
            .await
            .unwrap();
        f.keys.insert("k3", SecretKey::from_bytes([3; 32])).unwrap();
        f.keys.set_current("k3").unwrap();
        f.store
            .append("s", vec![msg("new", json!("after"))], Default::default())
            .await
            .unwrap();
        let below = stored(&f.inner, "s").await;
        assert_eq!(
            (below[0]["kid"].as_str(), below[1]["kid"].as_str()),
            (Some("k1"), Some("k3"))
        );
        let rows = f.store.read("s", ReadOptions::default()).await.unwrap();
        assert_eq!(rows[0].payload, json!("before"));
        assert_eq!(rows[1].payload, json!("after"));
        // A replay of the old write after the rotation still replays.
        let replay = f
            .store
            .append("s", vec![msg("old", json!("before"))], Default::default())
            .await
            .unwrap();
        assert_eq!(replay.events[0].index, 1);
        assert_eq!(replay.events[0].payload, json!("before"));
        // A changed payload is still a conflict.
        let conflict = f
            .store
            .append("s", vec![msg("old", json!("changed"))], Default::default())
            .await
            .unwrap_err();
        assert_eq!(conflict.code(), ErrorCode::IdempotencyConflict);
    });
}

#[test]
fn plaintext_rows_pass_through_unless_plaintext_reads_are_off() {
    block_on(async {
        let f = fixture().await;
        let strict = EncryptedStore::new(Arc::clone(&f.inner), Arc::new(f.keys.clone()))
            .with_plaintext_reads(false);
        // The clear marker is the store's own, always plain: strict reads take it.
        f.store
            .append("s", vec![msg("e1", json!(1))], Default::default())
            .await
            .unwrap();
        f.store.clear(ClearRequest::new("s")).await.unwrap();
        let rows = strict.read("s", ReadOptions::default()).await.unwrap();
        assert_eq!(
            rows.last().map(|row| row.event_type.as_str()),
            Some(a2_store::CLEAR_EVENT_TYPE)
        );
        f.inner
            .append(
                "p",
                vec![msg("legacy", json!({"text": "old row"}))],
                Default::default(),
            )
            .await
            .unwrap();
        f.store
            .append(
                "p",
                vec![msg("new", json!({"text": "new row"}))],
                Default::default(),
            )
            .await
            .unwrap();
        let rows = f.store.read("p", ReadOptions::default()).await.unwrap();
        assert_eq!(rows[0].payload, json!({"text": "old row"}));
        assert_eq!(rows[1].payload, json!({"text": "new row"}));
        let message = read_error(&strict, "p").await;
        assert!(
            message.contains("payload is not encrypted: event 'legacy'"),
            "{message}"
        );
    });
}

#[test]
fn the_reserved_key_is_refused_everywhere() {
    block_on(async {
        let f = fixture().await;
        let reserved = json!({"$a2enc": 1, "kid": "k2", "ct": "x"});
        let error = f
            .store
            .append("s", vec![msg("e1", reserved.clone())], Default::default())
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidInput);
        assert!(error.to_string().contains("'$a2enc'"), "{error}");
        let write = StateWrite {
            index: 1,
            state: reserved.clone(),
            pins: vec![],
        };
        let error = f
            .store
            .write_state("s", "r", vec![write])
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidInput);
        let values = BTreeMap::from([("f".to_owned(), reserved)]);
        let meta = PresenceMeta {
            at: 1,
            seen: None,
            ttl_ms: 60_000,
        };
        let error = f
            .store
            .set_presence("s", "p", values, meta)
            .await
            .unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidInput);
        // Nested, it is just a key.
        f.store
            .append(
                "s",
                vec![msg("e2", json!({"inner": {"$a2enc": 1}}))],
                Default::default(),
            )
            .await
            .unwrap();
    });
}

#[test]
fn forks_read_copied_rows_through_the_chain_and_refuse_pasted_ones() {
    block_on(async {
        let f = fixture().await;
        let turns = (1..=3).map(|n| msg(&format!("t{n}"), json!(n))).collect();
        f.store
            .append("a", turns, Default::default())
            .await
            .unwrap();
        f.store
            .fork(ForkRequest::new("a", "b").through(2))
            .await
            .unwrap();
        f.store
            .append("b", vec![msg("b3", json!("in b"))], Default::default())
            .await
            .unwrap();
        f.store.fork(ForkRequest::new("b", "c")).await.unwrap();
        f.store
            .append("c", vec![msg("c4", json!("in c"))], Default::default())
            .await
            .unwrap();
        let payloads = |rows: Vec<a2_store::StoredEvent>| {
            rows.into_iter()
                .map(|row| row.payload.into_value())
                .collect::<Vec<_>>()
        };
        let expected = vec![json!(1), json!(2), json!("in b"), json!("in c")];
        assert_eq!(
            payloads(f.store.read("c", ReadOptions::default()).await.unwrap()),
            expected
        );
        // A fresh layer (no cache) reads the fork through sessions().
        let fresh = EncryptedStore::new(Arc::clone(&f.inner), Arc::new(f.keys.clone()));
        assert_eq!(
            payloads(fresh.read("c", ReadOptions::default()).await.unwrap()),
            expected
        );
        // Below the layer, the copied rows name the session they were written in.
        let below = stored(&f.inner, "c").await;
        let sids: Vec<_> = below.iter().map(|value| value["sid"].clone()).collect();
        assert_eq!(sids, [json!("a"), json!("a"), json!("b"), json!("c")]);
        // a's third turn, pasted into c at an index b wrote: refused.
        let a_rows = stored(&f.inner, "a").await;
        f.inner
            .append("c", vec![msg("t3", a_rows[2].clone())], Default::default())
            .await
            .unwrap();
        let message = read_error(&fresh, "c").await;
        assert!(
            message.contains("event 't3' at index 5 of session 'c' was encrypted in session 'a'"),
            "{message}"
        );
        assert!(
            message.contains("fork chain 'c' <- 'b' <- 'a'"),
            "{message}"
        );
        // Deleting the middle session keeps the copied rows readable.
        f.store
            .delete_session(DeleteSessionRequest::new("b").forced())
            .await
            .unwrap();
        let rows = fresh
            .read(
                "c",
                ReadOptions {
                    through: Some(4),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(payloads(rows), expected);
    });
}

#[test]
fn states_and_presence_are_encrypted_and_bound_to_their_place() {
    block_on(async {
        let f = fixture().await;
        let write = |index: u64, state: Value| StateWrite {
            index,
            state,
            pins: vec![],
        };
        f.store
            .write_state(
                "s",
                "summary",
                vec![write(1, json!({"summary": "private"}))],
            )
            .await
            .unwrap();
        let read = f
            .store
            .read_state("s", "summary", ReadStateOptions::default())
            .await
            .unwrap();
        assert_eq!(read.snapshot.unwrap().state, json!({"summary": "private"}));
        let below = f
            .inner
            .read_state("s", "summary", ReadStateOptions::default())
            .await
            .unwrap()
            .snapshot
            .unwrap()
            .state;
        assert_eq!(below["kid"], "k2");
        assert!(below.get("sid").is_none());
        // The same ciphertext at another index or reducer does not decrypt.
        f.inner
            .write_state("s", "summary", vec![write(2, below.clone())])
            .await
            .unwrap();
        let error = f
            .store
            .read_state("s", "summary", ReadStateOptions::default())
            .await
            .unwrap_err();
        let message = checked(error);
        assert!(
            message.contains("the state of reducer 'summary' at index 2 of session 's' (key 'k2')"),
            "{message}"
        );
        let meta = PresenceMeta {
            at: 1,
            seen: None,
            ttl_ms: 60_000,
        };
        let values = BTreeMap::from([
            ("typing".to_owned(), json!(true)),
            ("draft".to_owned(), json!("half a secret")),
        ]);
        let applied = f
            .store
            .set_presence("s", "alice", values.clone(), meta)
            .await
            .unwrap();
        assert_eq!(applied.applied, values);
        let rows = f.store.read_presence("s").await.unwrap();
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|row| values[&row.field] == row.value));
        // A null still deletes the field.
        let later = PresenceMeta { at: 2, ..meta };
        f.store
            .set_presence(
                "s",
                "alice",
                BTreeMap::from([("draft".to_owned(), Value::Null)]),
                later,
            )
            .await
            .unwrap();
        assert_eq!(f.store.read_presence("s").await.unwrap().len(), 1);
        // Alice's value moved to bob: refused, naming the field.
        let typing = f.inner.read_presence("s").await.unwrap().remove(0).value;
        f.inner
            .set_presence(
                "s",
                "bob",
                BTreeMap::from([("typing".to_owned(), typing)]),
                meta,
            )
            .await
            .unwrap();
        let message = checked(f.store.read_presence("s").await.unwrap_err());
        assert!(
            message.contains("presence field 'typing' of participant 'bob' in session 's'"),
            "{message}"
        );
    });
}

/// The key id of every stored event payload of `session` (clear markers
/// and plain rows: `None`).
async fn stored_kids(inner: &Arc<dyn Store>, session: &str) -> Vec<Option<String>> {
    stored(inner, session)
        .await
        .iter()
        .map(|payload| sealed_key_id(payload).map(str::to_owned))
        .collect()
}

#[test]
fn a_rewrite_through_the_layer_speaks_plaintext_and_encrypts_under_the_current_key() {
    block_on(async {
        let f = fixture().await;
        f.keys.set_current("k1").unwrap();
        f.store
            .append("s", vec![msg("a", json!("first"))], Default::default())
            .await
            .unwrap();
        f.keys.set_current("k2").unwrap();
        let rewrite = RewritePayloadsRequest::new("s").event(1, json!("first"), json!("second"));
        let done = f.store.rewrite_payloads(rewrite.clone()).await.unwrap();
        assert_eq!(done.events, 1);
        let rows = f.store.read("s", ReadOptions::default()).await.unwrap();
        assert_eq!(rows[0].payload, json!("second"));
        assert_eq!(stored_kids(&f.inner, "s").await, [Some("k2".to_owned())]);
        // The row no longer holds "first": refused by the store below, naming the event.
        let stale = f.store.rewrite_payloads(rewrite).await.unwrap_err();
        assert_eq!(stale.code(), ErrorCode::PayloadMismatch, "{stale}");
        // An index that is not stored: the store below says so.
        let missing = RewritePayloadsRequest::new("s").event(9, json!("x"), json!("y"));
        let missing = f.store.rewrite_payloads(missing).await.unwrap_err();
        assert_eq!(missing.code(), ErrorCode::NoSuchEvent, "{missing}");
        assert_eq!(
            f.store.read("s", ReadOptions::default()).await.unwrap()[0].payload,
            json!("second")
        );
    });
}

#[test]
fn reencrypt_moves_every_row_to_the_current_key_in_pages_and_then_finds_nothing() {
    block_on(async {
        let f = fixture().await;
        f.keys.set_current("k1").unwrap();
        let events: Vec<NewEvent> = (1..=7)
            .map(|n| msg(&format!("e{n}"), json!({ "n": n })))
            .collect();
        f.store
            .append("s", events, Default::default())
            .await
            .unwrap();
        // A row written before encryption was turned on.
        f.inner
            .append("s", vec![msg("plain", json!("old"))], Default::default())
            .await
            .unwrap();
        let state = StateWrite {
            index: 8,
            state: json!({"sum": 28}),
            pins: vec![],
        };
        f.store.write_state("s", "sum", vec![state]).await.unwrap();
        let meta = PresenceMeta {
            at: 1,
            seen: None,
            ttl_ms: 60_000,
        };
        let values = BTreeMap::from([("draft".to_owned(), json!("half a secret"))]);
        f.store
            .set_presence("s", "alice", values, meta)
            .await
            .unwrap();
        let before = f.store.read("s", ReadOptions::default()).await.unwrap();

        f.keys.set_current("k2").unwrap();
        let options = Reencrypt::default().with_page(3).with_reducers(["sum"]);
        let done = f.store.reencrypt("s", options.clone()).await.unwrap();
        assert_eq!(
            (
                done.rewritten.events,
                done.rewritten.states,
                done.rewritten.presence
            ),
            (8, 1, 1)
        );
        assert_eq!((done.pages, done.current), (3 + 1 + 1, 0));
        assert!(stored_kids(&f.inner, "s")
            .await
            .iter()
            .all(|kid| kid.as_deref() == Some("k2")));
        let state = f
            .inner
            .read_state("s", "sum", ReadStateOptions::default())
            .await
            .unwrap();
        assert_eq!(sealed_key_id(&state.snapshot.unwrap().state), Some("k2"));
        let presence = f.inner.read_presence("s").await.unwrap();
        assert_eq!(sealed_key_id(&presence[0].value), Some("k2"));
        // Through the layer nothing changed.
        let after = f.store.read("s", ReadOptions::default()).await.unwrap();
        assert_eq!(before, after);
        // k1 is no longer needed: a layer without it reads everything.
        let k2_only = Keyring::new()
            .with_key("k2", SecretKey::from_bytes([2; 32]))
            .unwrap();
        let without_k1 = EncryptedStore::new(Arc::clone(&f.inner), Arc::new(k2_only));
        assert_eq!(
            without_k1.read("s", ReadOptions::default()).await.unwrap(),
            after
        );
        // A second run finds every row current and rewrites nothing.
        let again = f.store.reencrypt("s", options.clone()).await.unwrap();
        assert_eq!(
            (again.rewritten.events, again.pages, again.current),
            (0, 0, 10)
        );
        // A clear marker (the store's own, never encrypted) is neither
        // rewritten nor counted as under the current key: the 8 events and
        // the presence value are (the snapshot, below the clear now, is no
        // longer read: `read_state_never_returns_below_clear`).
        f.store.clear(ClearRequest::new("s")).await.unwrap();
        let cleared = f.store.reencrypt("s", options).await.unwrap();
        assert_eq!(
            (cleared.rewritten.events, cleared.pages, cleared.current),
            (0, 0, 9)
        );
    });
}

#[test]
fn reencrypt_without_an_old_key_stops_naming_the_row_and_key_and_keeps_its_pages() {
    block_on(async {
        let f = fixture().await;
        f.store
            .append("s", vec![msg("new", json!("k2 row"))], Default::default())
            .await
            .unwrap();
        f.keys.set_current("k1").unwrap();
        f.store
            .append("s", vec![msg("old", json!("k1 row"))], Default::default())
            .await
            .unwrap();
        let k2_only = Keyring::new()
            .with_key("k2", SecretKey::from_bytes([2; 32]))
            .unwrap();
        let layer = EncryptedStore::new(Arc::clone(&f.inner), Arc::new(k2_only));
        let error = layer
            .reencrypt("s", Reencrypt::default().with_page(1))
            .await
            .unwrap_err();
        let message = checked(error);
        assert!(
            message.contains("'old'") && message.contains("'k1'"),
            "{message}"
        );
        assert_eq!(
            stored_kids(&f.inner, "s").await,
            [Some("k2".to_owned()), Some("k1".to_owned())]
        );
    });
}

#[test]
fn reencrypt_all_walks_every_session() {
    block_on(async {
        let f = fixture().await;
        f.keys.set_current("k1").unwrap();
        for session in ["a", "b", "c"] {
            f.store
                .append(session, vec![msg("m", json!(session))], Default::default())
                .await
                .unwrap();
        }
        f.keys.set_current("k2").unwrap();
        let done = f.store.reencrypt_all(Reencrypt::default()).await.unwrap();
        assert_eq!(done.rewritten.events, 3);
        for session in ["a", "b", "c"] {
            assert_eq!(
                stored_kids(&f.inner, session).await,
                [Some("k2".to_owned())]
            );
        }
    });
}
