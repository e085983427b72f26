//! Writing a large payload to the object store while it is serialized.
//!
//! An object's key is its content hash, known only once every byte is
//! serialized. Serializing, hashing and writing one after another cost
//! their sum (a 10 MB payload: about 5 ms to serialize, 6 ms to hash and
//! 7 ms to write and sync, locally). Here the three run at once on their
//! own threads: the payload is serialized in parts of [`PART`] bytes, each
//! part is hashed and written to a staging object as it comes, and the
//! finished staging object is renamed to its content key. The append then
//! costs about the longest of the three. Used where a rename is cheap (the
//! local file system: one `rename(2)` and a directory sync); elsewhere the
//! layer hashes first and writes the object under its key in one put.
//!
//! A staging object outlives its call only if the process dies between
//! writing it and renaming it: [`OffloadStore::sweep`](super::OffloadStore::sweep)
//! deletes staging objects older than its grace, and `delete_session`
//! deletes them with the session's other objects.

use std::io::Write;
use std::sync::Arc;

use a2_store_api::Payload;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::reference::{hex, Reference};

/// Bytes per part: serialized, hashed and written as one.
const PART: usize = 1024 * 1024;

/// Parts serialized ahead of their writes, and writes in flight at once:
/// bounds the memory a call holds besides the payload itself.
const AHEAD: usize = 4;

/// Why a streamed write failed.
#[derive(Debug)]
pub(super) enum Failed {
    /// The payload did not serialize as JSON.
    Serialize(serde_json::Error),
    /// The object store refused a write, the completion or the rename.
    Store(object_store::Error),
}

/// Writes `payload`'s JSON to `staging`, then renames it to the key
/// `key_of` gives its reference; that reference. On failure, nothing is
/// left under either key (a failed upload is aborted, a completed staging
/// object deleted) but what a process death leaves for the sweep.
pub(super) async fn write(
    store: &Arc<dyn ObjectStore>,
    staging: &Path,
    payload: Payload,
    key_of: impl FnOnce(&Reference) -> Path,
) -> Result<Reference, Failed> {
    let upload = store.put_multipart(staging).await.map_err(Failed::Store)?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
    let (parts, mut serialized) = mpsc::channel::<Bytes>(AHEAD);
    let serializer = tokio::task::spawn_blocking(move || serialize(&payload, parts));
    let (to_hash, hash_parts) = std::sync::mpsc::channel::<Bytes>();
    let hasher = tokio::task::spawn_blocking(move || {
        let mut hasher = Sha256::new();
        for part in hash_parts {
            hasher.update(&part);
        }
        hex(&hasher.finalize())
    });
    let mut written = Ok(());
    while let Some(part) = serialized.recv().await {
        // The hasher lives until `to_hash` is dropped below.
        let _ = to_hash.send(part.clone());
        written = writer.wait_for_capacity(AHEAD).await;
        if written.is_err() {
            break;
        }
        writer.put(part);
    }
    // Ends the serializer early after a failed write (its next part has
    // nowhere to go), and the hasher's input.
    drop(serialized);
    drop(to_hash);
    let len = serializer
        .await
        .map_err(|join| Failed::Serialize(joined(join)));
    let sha256 = hasher.await.map_err(joined);
    let (len, sha256) = match (written, len, sha256) {
        (Err(error), _, _) => return Err(abort(writer, Failed::Store(error)).await),
        (Ok(()), Err(error) | Ok(Err(error)), _) => return Err(abort(writer, error).await),
        (Ok(()), Ok(Ok(_)), Err(error)) => {
            return Err(abort(writer, Failed::Serialize(error)).await)
        }
        (Ok(()), Ok(Ok(len)), Ok(sha256)) => (len, sha256),
    };
    writer.finish().await.map_err(Failed::Store)?;
    let reference = Reference { sha256, len };
    let key = key_of(&reference);
    if let Err(error) = store.rename(staging, &key).await {
        // Best effort: a staging object left behind is the sweep's.
        let _ = store.delete(staging).await;
        return Err(Failed::Store(error));
    }
    Ok(reference)
}

/// Aborts the upload (best effort: a failed abort leaves a staging object
/// for the sweep) and hands `error` back.
async fn abort(writer: WriteMultipart, error: Failed) -> Failed {
    let _ = writer.abort().await;
    error
}

/// A blocking task that did not finish (a panic in `serde_json`, or the
/// runtime shutting down), as a serialization error.
fn joined(join: tokio::task::JoinError) -> serde_json::Error {
    serde_json::Error::io(std::io::Error::other(join))
}

/// Serializes `payload` into parts of [`PART`] bytes sent on `parts`; the
/// number of bytes. Stops with an error when the parts' receiver is gone.
fn serialize(payload: &Payload, parts: mpsc::Sender<Bytes>) -> Result<u64, Failed> {
    let mut out = Parts {
        buffer: Vec::with_capacity(PART),
        parts,
        len: 0,
    };
    serde_json::to_writer(&mut out, payload.as_value()).map_err(Failed::Serialize)?;
    out.send()
        .map_err(|error| Failed::Serialize(serde_json::Error::io(error)))?;
    Ok(out.len)
}

/// A writer that cuts what is written into parts.
struct Parts {
    buffer: Vec<u8>,
    parts: mpsc::Sender<Bytes>,
    len: u64,
}

impl Parts {
    /// Sends the buffer as one part (nothing when it is empty).
    fn send(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let part = std::mem::replace(&mut self.buffer, Vec::with_capacity(PART));
        self.len += u64::try_from(part.len()).unwrap_or(u64::MAX);
        self.parts.blocking_send(Bytes::from(part)).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the object store write stopped",
            )
        })
    }
}

impl Write for Parts {
    fn write(&mut self, mut buf: &[u8]) -> std::io::Result<usize> {
        let written = buf.len();
        while !buf.is_empty() {
            let room = PART - self.buffer.len();
            let (now, later) = buf.split_at(room.min(buf.len()));
            self.buffer.extend_from_slice(now);
            buf = later;
            if self.buffer.len() == PART {
                self.send()?;
            }
        }
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether `value`'s JSON is longer than `threshold` bytes, found without
/// a copy or a hash: first from the lengths of its strings and keys alone
/// (a lower bound of the JSON's length, so a large payload is known at
/// once, without scanning its text), else by serializing into a counter
/// that stops at the threshold.
pub(super) fn exceeds(value: &serde_json::Value, threshold: usize) -> bool {
    text_over(value, threshold) || serializes_over(value, threshold)
}

/// Whether the strings and keys of `value` alone hold more than `budget`
/// bytes (their JSON is at least as long); stops as soon as they do.
fn text_over(value: &serde_json::Value, budget: usize) -> bool {
    use serde_json::Value;
    let mut left = budget;
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        let text = match value {
            Value::String(text) => text.len(),
            Value::Array(items) => {
                stack.extend(items);
                0
            }
            Value::Object(map) => {
                stack.extend(map.values());
                map.keys().map(String::len).sum()
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        };
        match left.checked_sub(text) {
            Some(rest) => left = rest,
            None => return true,
        }
    }
    false
}

/// Whether `value` serializes to more than `threshold` bytes: serialized
/// into a counter that keeps nothing and stops at the threshold.
fn serializes_over(value: &serde_json::Value, threshold: usize) -> bool {
    struct Counting {
        left: usize,
    }
    impl Write for Counting {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            match self.left.checked_sub(buf.len()) {
                Some(left) => {
                    self.left = left;
                    Ok(buf.len())
                }
                None => Err(std::io::Error::other("over the threshold")),
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Any error is the threshold's: a `Value` serializes.
    serde_json::to_writer(&mut Counting { left: threshold }, value).is_err()
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use serde_json::json;

    #[test]
    fn exceeds_counts_the_json_bytes() {
        let value = json!({"a": "xyz"});
        let len = serde_json::to_vec(&value).unwrap().len();
        assert!(!exceeds(&value, len));
        assert!(exceeds(&value, len - 1));
        assert!(exceeds(&value, 0));
        // Past the threshold on its strings alone, or only with its syntax.
        let long = json!({"k": "x".repeat(100)});
        assert!(text_over(&long, 100));
        assert!(exceeds(&long, 100));
        let many = json!([[1, 2, 3], [4, 5, 6]]);
        assert!(!text_over(&many, 1));
        assert!(exceeds(&many, 16));
        assert!(!exceeds(&many, 17));
    }

    #[tokio::test]
    async fn a_streamed_write_lands_under_its_content_key() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        // Parts and a remainder: 3.5 parts of JSON.
        let value = json!({"body": "é".repeat(PART * 7 / 4)});
        let bytes = serde_json::to_vec(&value).unwrap();
        let staging = Path::from("staging/one");
        let reference = write(&store, &staging, Payload::new(value), |reference| {
            Path::from(format!("objects/{}", reference.sha256))
        })
        .await
        .unwrap();
        assert_eq!(reference, Reference::of(&bytes));
        let key = Path::from(format!("objects/{}", reference.sha256));
        let stored = store.get(&key).await.unwrap().bytes().await.unwrap();
        assert_eq!(stored.as_ref(), bytes.as_slice());
        assert!(store.head(&staging).await.is_err(), "staging object left");
    }
}
