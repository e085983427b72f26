//! `open` applies the payload layers from a URL (`keys=`, `offload=`,
//! `offload_threshold=`) and from `OpenOptions`: the backend holds
//! envelopes and references, the offload directory holds the objects (as
//! ciphertext), and everything reads back through the opened store.

#[path = "support/backends.rs"]
mod backends;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use a2_store::layer::codec::sealed_key_id;
use a2_store::layer::offload::offload_reference;
use a2_store::prelude::*;
use a2_store::{Keyring, OffloadOptions, ReadStateOptions, SecretKey, StateWrite};
use backends::Sqlite;

/// Two keys, `k2` current, in the file format `keys=file:` reads.
const KEYS: &str = "k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\nk2:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\n";

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(future)
}

/// A temporary directory with the key file and an offload directory.
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("keys"), KEYS).expect("the key file");
        Self { dir }
    }

    fn keys(&self) -> PathBuf {
        self.dir.path().join("keys")
    }

    fn objects(&self) -> PathBuf {
        self.dir.path().join("objects")
    }

    /// The layer keys to append to a URL's query.
    fn query(&self) -> String {
        format!(
            "keys=file:{}&offload={}&offload_threshold=256",
            self.keys().display(),
            self.objects().display()
        )
    }
}

fn big() -> Value {
    json!({"tool": "fetch", "body": "x".repeat(4096)})
}

/// Appends a small and a large payload, a state and a presence value, and
/// reads them back through `store`.
async fn write_and_read_back(store: &dyn Store) {
    let events = vec![
        NewEvent::new("msg", json!({"text": "hi"})).with_id("m1"),
        NewEvent::new("tool.result", big()).with_id("m2"),
    ];
    let appended = store
        .append("chat-1", events, AppendOptions::default())
        .await
        .unwrap();
    assert_eq!(appended.events[1].payload, big());
    store
        .write_state("chat-1", "summary", vec![StateWrite::new(2, big())])
        .await
        .unwrap();
    let mut presence = std::collections::BTreeMap::new();
    presence.insert("status".to_owned(), json!("typing"));
    store
        .set_presence(
            "chat-1",
            "alice",
            presence,
            a2_store::PresenceMeta::new(1, Duration::from_secs(600)),
        )
        .await
        .unwrap();
    let rows = store.read("chat-1", ReadOptions::default()).await.unwrap();
    assert_eq!(rows[0].payload, json!({"text": "hi"}));
    assert_eq!(rows[1].payload, big());
    let state = store
        .read_state("chat-1", "summary", ReadStateOptions::default())
        .await
        .unwrap();
    assert_eq!(state.snapshot.map(|s| s.state), Some(big()));
    let presence = store.read_presence("chat-1").await.unwrap();
    assert_eq!(presence[0].value, json!("typing"));
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// The offload directory holds the large payload and the state, each as
/// an envelope (encrypted before it was offloaded), none in plaintext.
fn objects_are_ciphertext(dir: &Path) {
    let objects = files(dir);
    assert_eq!(objects.len(), 2, "{objects:?}");
    for object in objects {
        let bytes = std::fs::read(&object).unwrap();
        let value: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(sealed_key_id(&value), Some("k2"), "{}", object.display());
        assert!(!String::from_utf8_lossy(&bytes).contains("xxxx"));
    }
}

#[test]
fn a_memory_url_with_keys_and_offload_encrypts_and_offloads() {
    let setup = Setup::new();
    block_on(async {
        let url = format!("memory:?{}", setup.query());
        let store = a2_store::open(&url, OpenOptions::default()).await.unwrap();
        write_and_read_back(store.as_ref()).await;
    });
    objects_are_ciphertext(&setup.objects());
}

#[test]
fn a_sqlite_url_with_keys_and_offload_encrypts_and_offloads() {
    let setup = Setup::new();
    let sqlite = Sqlite::new();
    let base = sqlite.fresh_url();
    block_on(async {
        let url = format!("{base}&{}", setup.query());
        let store = a2_store::open(&url, OpenOptions::default()).await.unwrap();
        write_and_read_back(store.as_ref()).await;
        drop(store);

        // The same file without the layers: what the database holds.
        let raw = a2_store::open(&base, OpenOptions::default()).await.unwrap();
        let rows = raw.read("chat-1", ReadOptions::default()).await.unwrap();
        assert_eq!(sealed_key_id(&rows[0].payload), Some("k2"), "{:?}", rows[0]);
        let reference = offload_reference(&rows[1].payload).expect("a reference");
        assert!(reference.len > 4096, "{reference:?}");
        assert!(rows[1].payload.to_string().len() < 200);
        let state = raw
            .read_state("chat-1", "summary", ReadStateOptions::default())
            .await
            .unwrap();
        assert!(offload_reference(&state.snapshot.unwrap().state).is_some());
        let presence = raw.read_presence("chat-1").await.unwrap();
        assert_eq!(sealed_key_id(&presence[0].value), Some("k2"));
        assert_eq!(
            a2_store::stored_payload_placeholder(&rows[0].payload).as_deref(),
            Some("encrypted (key k2)")
        );
    });
    objects_are_ciphertext(&setup.objects());
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_url_with_keys_and_offload_encrypts_and_offloads() {
    let Some(server) = backends::postgres_url() else {
        eprintln!("A2_POSTGRES_URL is not set: the PostgreSQL part was not run");
        return;
    };
    let setup = Setup::new();
    let scratch = a2_store::postgres::ScratchSchemas::new(server.clone(), "a2ol_");
    let schema = scratch.fresh_schema().unwrap();
    let join = if server.contains('?') { '&' } else { '?' };
    let base = format!("{server}{join}schema={schema}");
    block_on(async {
        let url = format!("{base}&{}", setup.query());
        let store = a2_store::open(&url, OpenOptions::default()).await.unwrap();
        write_and_read_back(store.as_ref()).await;
        let raw = a2_store::open(&base, OpenOptions::default()).await.unwrap();
        let rows = raw.read("chat-1", ReadOptions::default()).await.unwrap();
        assert_eq!(sealed_key_id(&rows[0].payload), Some("k2"));
        assert!(offload_reference(&rows[1].payload).is_some());
        drop((store, raw));
        scratch.drop_all().await.unwrap();
    });
    objects_are_ciphertext(&setup.objects());
}

#[test]
fn options_apply_the_same_layers_and_clash_with_the_url() {
    let setup = Setup::new();
    block_on(async {
        let keys = Keyring::new()
            .with_key("k7", SecretKey::from_bytes([7; 32]))
            .unwrap();
        let options = OpenOptions::default()
            .with_keys(Arc::new(keys.clone()))
            .with_offload(OffloadOptions::directory(setup.objects()).with_threshold(256));
        let store = a2_store::open("memory:", options).await.unwrap();
        let appended = store
            .append(
                "chat-1",
                vec![NewEvent::new("tool.result", big())],
                AppendOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(appended.events[0].payload, big());
        let objects = files(&setup.objects());
        assert_eq!(objects.len(), 1);
        let object: Value = serde_json::from_slice(&std::fs::read(&objects[0]).unwrap()).unwrap();
        assert_eq!(sealed_key_id(&object), Some("k7"));

        let both = OpenOptions::default().with_keys(Arc::new(keys));
        let url = format!("memory:?keys=file:{}", setup.keys().display());
        let error = a2_store::open(&url, both).await.err().expect("an error");
        assert_eq!(error.code(), ErrorCode::InvalidInput);
        assert!(error.to_string().contains("give it once"), "{error}");
    });
}

#[test]
fn layer_errors_name_the_variable_file_or_directory_never_a_key() {
    let setup = Setup::new();
    block_on(async {
        let error = a2_store::open(
            "memory:?keys=env:A2_OPEN_LAYERS_SURELY_UNSET",
            OpenOptions::default(),
        )
        .await
        .err()
        .expect("an error");
        assert_eq!(error.code(), ErrorCode::InvalidInput);
        assert!(
            error.to_string().contains("A2_OPEN_LAYERS_SURELY_UNSET"),
            "{error}"
        );

        let missing = setup.dir.path().join("no-such-keys");
        let url = format!("memory:?keys=file:{}", missing.display());
        let error = a2_store::open(&url, OpenOptions::default())
            .await
            .err()
            .expect("an error");
        assert!(
            error.to_string().contains("cannot read the key file"),
            "{error}"
        );

        let error = a2_store::open("memory:?keys=k1:AQEBAQEB", OpenOptions::default())
            .await
            .err()
            .expect("an error");
        assert!(!error.to_string().contains("AQEBAQEB"), "{error}");

        // Read-only creates nothing, the offload directory included.
        let sqlite = Sqlite::new();
        let base = sqlite.fresh_url();
        drop(a2_store::open(&base, OpenOptions::default()).await.unwrap());
        let url = format!("{base}&offload={}", setup.objects().display());
        let error = a2_store::open(&url, OpenOptions::default().with_read_only(true))
            .await
            .err()
            .expect("an error");
        assert!(
            error.to_string().contains("no offload directory"),
            "{error}"
        );
        assert!(!setup.objects().exists());
    });
}

#[test]
fn missing_keys_fail_reads_unless_left_sealed() {
    use a2_store::EncryptedStore;

    let setup = Setup::new();
    block_on(async {
        let inner = a2_store::open("memory:", OpenOptions::default())
            .await
            .unwrap();
        let url_keys = Keyring::from_file(setup.keys()).unwrap();
        let writer = EncryptedStore::new(Arc::clone(&inner), Arc::new(url_keys));
        writer
            .append(
                "chat-1",
                vec![NewEvent::new("msg", json!("secret"))],
                AppendOptions::default(),
            )
            .await
            .unwrap();
        let other = Arc::new(
            Keyring::new()
                .with_key("k9", SecretKey::from_bytes([9; 32]))
                .unwrap(),
        );
        let strict = EncryptedStore::new(Arc::clone(&inner), other.clone());
        let error = strict
            .read("chat-1", ReadOptions::default())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("key 'k2'"), "{error}");
        let lenient = EncryptedStore::new(inner, other).with_missing_keys_left_sealed(true);
        let rows = lenient
            .read("chat-1", ReadOptions::default())
            .await
            .unwrap();
        assert_eq!(sealed_key_id(&rows[0].payload), Some("k2"));
    });
}

#[cfg(feature = "metrics")]
mod counters {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use metrics_util::{CompositeKey, MetricKind};

    use super::*;

    /// Counters recorded: (name, sorted labels, value).
    type Recorded = Vec<(String, Vec<(String, String)>, u64)>;

    /// The counters recorded while `work` ran: (name, sorted labels) -> value.
    fn recorded(work: impl FnOnce()) -> Recorded {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, work);
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(key, _, _, value): (CompositeKey, _, _, _)| {
                let (kind, key) = key.into_parts();
                let DebugValue::Counter(count) = value else {
                    return None;
                };
                (kind == MetricKind::Counter).then(|| {
                    let mut labels: Vec<(String, String)> = key
                        .labels()
                        .map(|l| (l.key().to_owned(), l.value().to_owned()))
                        .collect();
                    labels.sort();
                    (key.name().to_owned(), labels, count)
                })
            })
            .collect()
    }

    fn count(recorded: &Recorded, name: &str, labels: &[(&str, &str)]) -> u64 {
        let mut wanted: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        wanted.sort();
        recorded
            .iter()
            .filter(|(n, l, _)| n == name && *l == wanted)
            .map(|(_, _, value)| *value)
            .sum()
    }

    #[test]
    fn both_layers_count_encodes_decodes_bytes_and_failures() {
        let setup = Setup::new();
        let recorded = recorded(|| {
            block_on(async {
                let url = format!("memory:?{}", setup.query());
                let options = OpenOptions::default().with_metrics(true);
                let store = a2_store::open(&url, options).await.unwrap();
                write_and_read_back(store.as_ref()).await;
                // A damaged object: the read fails, counted as a fetch failure.
                for object in files(&setup.objects()) {
                    std::fs::write(object, b"{}").unwrap();
                }
                assert!(store.read("chat-1", ReadOptions::default()).await.is_err());
            });
        });
        let encryption = [("layer", "encryption")];
        let offload = [("layer", "offload")];
        // Appended: two payloads, a state and a presence value encrypted.
        assert_eq!(
            count(&recorded, "a2_store_payload_encodes_total", &encryption),
            4
        );
        assert!(count(&recorded, "a2_store_payload_decodes_total", &encryption) >= 4);
        assert_eq!(
            count(&recorded, "a2_store_payload_encodes_total", &offload),
            2
        );
        // The append's own result is resolved without a fetch: the read
        // and the state read fetch one object each.
        assert_eq!(
            count(&recorded, "a2_store_payload_decodes_total", &offload),
            2
        );
        let offloaded = count(
            &recorded,
            "a2_store_payload_bytes_offloaded_total",
            &offload,
        );
        assert!(offloaded > 2 * 4096, "{offloaded}");
        let fetched = count(&recorded, "a2_store_payload_bytes_fetched_total", &offload);
        assert_eq!(fetched, offloaded);
        assert_eq!(
            count(
                &recorded,
                "a2_store_payload_failures_total",
                &[("layer", "offload"), ("kind", "fetch")]
            ),
            1
        );
    }

    #[test]
    fn a_missing_key_counts_as_a_failure_even_when_left_sealed() {
        use a2_store::EncryptedStore;

        let recorded = recorded(|| {
            block_on(async {
                let inner = a2_store::open("memory:", OpenOptions::default())
                    .await
                    .unwrap();
                let k2 = Keyring::new()
                    .with_key("k2", SecretKey::from_bytes([2; 32]))
                    .unwrap();
                let writer = EncryptedStore::new(Arc::clone(&inner), Arc::new(k2));
                writer
                    .append(
                        "chat-1",
                        vec![NewEvent::new("msg", json!("secret"))],
                        AppendOptions::default(),
                    )
                    .await
                    .unwrap();
                let k1 = Keyring::new()
                    .with_key("k1", SecretKey::from_bytes([1; 32]))
                    .unwrap();
                let reader = EncryptedStore::new(inner, Arc::new(k1))
                    .with_missing_keys_left_sealed(true)
                    .with_metrics(true);
                reader.read("chat-1", ReadOptions::default()).await.unwrap();
            });
        });
        assert_eq!(
            count(
                &recorded,
                "a2_store_payload_failures_total",
                &[("layer", "encryption"), ("kind", "missing_key")]
            ),
            1
        );
        assert_eq!(
            count(
                &recorded,
                "a2_store_payload_encodes_total",
                &[("layer", "encryption")]
            ),
            0,
            "the writer's counters were off"
        );
    }
}
