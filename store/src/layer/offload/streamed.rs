//! Writing a large payload to the local object store while it is
//! serialized.
//!
//! An object's key is its content hash, known only once every byte is
//! serialized. Serializing, hashing, writing and syncing one after another
//! cost their sum (a 10 MB payload: about 5 ms to serialize, 6 ms to hash,
//! 3 ms to write and 5 ms to sync, locally). Here they run at once, each on
//! its own thread: the payload is serialized in parts of [`PART`] bytes;
//! each part is hashed and written to a staging file as it comes, and a
//! syncer flushes what is written while later parts are serialized, so the
//! final sync has about one part left. The finished file is renamed to its
//! content key through the object store (which syncs the directory). The
//! append then costs about the longest step rather than the sum.
//!
//! Written here rather than through `object_store`'s multipart upload:
//! that syncs a file only once it is complete, which puts the whole sync
//! after the last part. Used with the local file system only; with other
//! stores a rename is a copy, and the layer hashes first and puts the
//! object under its key.
//!
//! A staging file outlives its call only if the process dies between
//! writing it and renaming it: [`OffloadStore::sweep`](super::OffloadStore::sweep)
//! deletes staging objects older than its grace, and `delete_session`
//! deletes them with the session's other objects.

use std::fs::File;
use std::io::Write;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use a2_store_api::Payload;
use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use sha2::{Digest, Sha256};

use super::reference::{hex, Reference};

/// Bytes per part: serialized, hashed and written as one.
const PART: usize = 1024 * 1024;

/// Parts serialized ahead of their hash and their write: bounds the memory
/// a call holds besides the payload itself.
const AHEAD: usize = 4;

/// Why a streamed write failed.
#[derive(Debug)]
pub(super) enum Failed {
    /// The payload did not serialize as JSON.
    Serialize(serde_json::Error),
    /// The file could not be written or synced.
    Write(std::io::Error),
    /// The object store refused the staging key or the rename.
    Store(object_store::Error),
}

/// Writes `payload`'s JSON to the staging object `staging` of `local`,
/// synced, then renames it to the key `key_of` gives its reference; that
/// reference. On failure nothing is left under either key but what a
/// process death leaves for the sweep.
pub(super) async fn write(
    local: &LocalFileSystem,
    staging: &Path,
    payload: Payload,
    key_of: impl FnOnce(&Reference) -> Path,
) -> Result<Reference, Failed> {
    let file = local.path_to_filesystem(staging).map_err(Failed::Store)?;
    let (to_write, parts) = sync_channel::<Bytes>(AHEAD);
    let (to_hash, hash_parts) = sync_channel::<Bytes>(AHEAD);
    let serializer = tokio::task::spawn_blocking(move || serialize(&payload, &[to_write, to_hash]));
    let hasher = tokio::task::spawn_blocking(move || hash(hash_parts));
    let path = file.clone();
    let writer = tokio::task::spawn_blocking(move || write_file(&path, parts));
    let written = writer
        .await
        .map_err(|join| Failed::Write(std::io::Error::other(join)));
    let len = serializer
        .await
        .map_err(|join| Failed::Serialize(joined(join)));
    let sha256 = hasher.await.map_err(|join| Failed::Serialize(joined(join)));
    let outcome = match (written, len, sha256) {
        // The writer's error first: it stops the serializer too.
        (Err(failed) | Ok(Err(failed)), _, _)
        | (Ok(Ok(())), Err(failed) | Ok(Err(failed)), _)
        | (Ok(Ok(())), Ok(Ok(_)), Err(failed)) => Err(failed),
        (Ok(Ok(())), Ok(Ok(len)), Ok(sha256)) => Ok(Reference { sha256, len }),
    };
    let renamed = match outcome {
        Ok(reference) => local
            .rename(staging, &key_of(&reference))
            .await
            .map(|()| reference)
            .map_err(Failed::Store),
        Err(failed) => Err(failed),
    };
    if renamed.is_err() {
        // Best effort: a staging file left behind is the sweep's.
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_file(file)).await;
    }
    renamed
}

/// A blocking task that did not finish (a panic, or the runtime shutting
/// down), as a serialization error.
fn joined(join: tokio::task::JoinError) -> serde_json::Error {
    serde_json::Error::io(std::io::Error::other(join))
}

/// The SHA-256 of the parts, in order, in hexadecimal.
fn hash(parts: Receiver<Bytes>) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(&part);
    }
    hex(&hasher.finalize())
}

/// Writes the parts to a new file at `path` (its directory made if
/// missing) and syncs it. A second thread syncs what is written while
/// later parts arrive (`fdatasync` covers every page written before it),
/// so the last sync waits for about one part.
fn write_file(path: &std::path::Path, parts: Receiver<Bytes>) -> Result<(), Failed> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Failed::Write)?;
    }
    let mut file = File::create(path).map_err(Failed::Write)?;
    let syncing = file.try_clone().map_err(Failed::Write)?;
    let (tick, ticks) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let syncer = scope.spawn(move || -> std::io::Result<()> {
            while ticks.recv().is_ok() {
                // One sync for every part written since the last one.
                while ticks.try_recv().is_ok() {}
                syncing.sync_data()?;
            }
            Ok(())
        });
        let mut written = Ok(());
        for part in parts {
            written = file.write_all(&part);
            if written.is_err() {
                break;
            }
            // A syncer that failed has stopped listening; its error comes
            // from `join`.
            let _ = tick.send(());
        }
        drop(tick);
        let synced = syncer
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the syncer thread panicked")));
        written.and(synced).and_then(|()| file.sync_all())
    })
    .map_err(Failed::Write)
}

/// Serializes `payload` into parts of [`PART`] bytes, each sent to every
/// one of `to`; the number of bytes. Stops with an error when a receiver
/// is gone (its thread failed).
fn serialize(payload: &Payload, to: &[SyncSender<Bytes>]) -> Result<u64, Failed> {
    let mut out = Parts {
        buffer: Vec::with_capacity(PART),
        to,
        len: 0,
    };
    serde_json::to_writer(&mut out, payload.as_value()).map_err(Failed::Serialize)?;
    out.send()
        .map_err(|error| Failed::Serialize(serde_json::Error::io(error)))?;
    Ok(out.len)
}

/// A writer that cuts what is written into parts.
struct Parts<'a> {
    buffer: Vec<u8>,
    to: &'a [SyncSender<Bytes>],
    len: u64,
}

impl Parts<'_> {
    /// Sends the buffer as one part (nothing when it is empty).
    fn send(&mut self) -> std::io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let part = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(PART),
        ));
        self.len += u64::try_from(part.len()).unwrap_or(u64::MAX);
        for to in self.to {
            to.send(part.clone()).map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the write stopped")
            })?;
        }
        Ok(())
    }
}

impl Write for Parts<'_> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_streamed_write_lands_under_its_content_key() {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalFileSystem::new_with_prefix(dir.path())
            .unwrap()
            .with_fsync(true);
        // Parts and a remainder: 3.5 parts of JSON.
        let value = json!({"body": "é".repeat(PART * 7 / 4)});
        let bytes = serde_json::to_vec(&value).unwrap();
        let staging = Path::from("s/staging/one");
        let reference = write(&local, &staging, Payload::new(value), |reference| {
            Path::from(format!("s/events/{}", reference.sha256))
        })
        .await
        .unwrap();
        assert_eq!(reference, Reference::of(&bytes));
        let key = Path::from(format!("s/events/{}", reference.sha256));
        let stored = local.get(&key).await.unwrap().bytes().await.unwrap();
        assert_eq!(stored.as_ref(), bytes.as_slice());
        assert!(local.head(&staging).await.is_err(), "staging object left");
    }

    #[tokio::test]
    async fn a_failed_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let local = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        // The staging file cannot be made: its directory is a file.
        std::fs::write(dir.path().join("s"), b"in the way").unwrap();
        let value = json!({"body": "x".repeat(PART * 3)});
        let failed = write(
            &local,
            &Path::from("s/staging/one"),
            Payload::new(value),
            |_| Path::from("s/events/never"),
        )
        .await
        .unwrap_err();
        assert!(matches!(failed, Failed::Write(_)), "{failed:?}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "only the file in the way: {left:?}");
    }
}
