//! Payloads the payload layers left as stored: an envelope shows as
//! `encrypted (key k2)` and a reference as `offloaded (...)`, wherever the
//! console shows a payload (events, dead letters, snapshots, presence);
//! a console over the encryption layer with the key shows the payload.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use a2_store::prelude::*;
use a2_store::{EncryptedStore, Keyring, PresenceMeta, SecretKey, StateWrite, Store};
use axum::http::StatusCode;

use crate::common::*;

fn keys(kid: &str, byte: u8) -> Arc<Keyring> {
    Arc::new(
        Keyring::new()
            .with_key(kid, SecretKey::from_bytes([byte; 32]))
            .expect("a keyring"),
    )
}

/// A memory store (as stored: envelopes and a reference) with `chat-1`
/// written through the encryption layer under `k2`: two messages (the
/// agent's head dead-lettered), a presence value and a snapshot; and one
/// offloaded payload's reference.
async fn sealed_store() -> Arc<dyn Store> {
    let inner = memory().await;
    let writer: Arc<dyn Store> = Arc::new(EncryptedStore::new(inner.clone(), keys("k2", 2)));
    let events = ["secret words 0", "secret words 1"]
        .map(|text| {
            NewEvent::new("msg", json!({ "text": text })).with_target(Target::lane("agent", "main"))
        })
        .to_vec();
    writer
        .append("chat-1", events, AppendOptions::default())
        .await
        .unwrap();
    kill_head(&writer, "chat-1", "model timed out").await;
    let mut values = BTreeMap::new();
    values.insert("typing".to_owned(), json!("secret draft"));
    writer
        .set_presence(
            "chat-1",
            "alice",
            values,
            PresenceMeta::new(1, Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    writer
        .write_state(
            "chat-1",
            "summary",
            vec![StateWrite::new(1, json!({"summary": "private words"}))],
        )
        .await
        .unwrap();
    let reference = json!({"$a2ref": 1, "sha256": "ab".repeat(32), "len": 70000});
    inner
        .append(
            "chat-1",
            vec![NewEvent::new("tool.result", reference)],
            AppendOptions::default(),
        )
        .await
        .unwrap();
    inner
}

const PAGES: [&str; 3] = [
    "/sessions/chat-1?reducer=summary",
    "/dead-letters?consumer=agent",
    "/redrive-all?consumer=agent",
];

#[tokio::test]
async fn envelopes_and_references_show_as_what_they_are() {
    let store = sealed_store().await;
    let app = app(&store, options());
    let page = get(&app, PAGES[0]).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    page.assert_safe();
    // Two events, the dead letter, the presence value and the snapshot.
    assert_eq!(
        page.body.matches("encrypted (key k2)").count(),
        5,
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("offloaded (70000 bytes, sha256 abababababab…)"),
        "{}",
        page.body
    );
    for page in PAGES {
        let page = get(&app, page).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(page.body.contains("data-testid=\"sealed\""));
        for stored in ["$a2enc", "\"ct\"", "secret", "private"] {
            assert!(!page.body.contains(stored), "shows {stored}: {}", page.body);
        }
    }
}

#[tokio::test]
async fn with_the_key_payloads_show_and_other_keys_stay_sealed() {
    let store = sealed_store().await;
    let with_key: Arc<dyn Store> = Arc::new(
        EncryptedStore::new(store.clone(), keys("k2", 2)).with_missing_keys_left_sealed(true),
    );
    let page = get(&app(&with_key, options()), PAGES[0]).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    for plain in ["secret words 1", "secret draft", "private words"] {
        assert!(page.body.contains(plain), "{plain}: {}", page.body);
    }
    assert!(!page.body.contains("encrypted (key"));
    let dead = get(&app(&with_key, options()), PAGES[1]).await;
    assert!(dead.body.contains("secret words 0"), "{}", dead.body);

    // Another key only: every page still answers, the payloads sealed.
    let other: Arc<dyn Store> =
        Arc::new(EncryptedStore::new(store, keys("k1", 1)).with_missing_keys_left_sealed(true));
    let app = app(&other, options());
    for uri in PAGES {
        let page = get(&app, uri).await;
        assert_eq!(page.status, StatusCode::OK, "{uri}: {}", page.body);
        assert!(!page.body.contains("secret"), "{uri}");
    }
    let page = get(&app, PAGES[0]).await;
    assert_eq!(page.body.matches("encrypted (key k2)").count(), 5);
}
