//! The baselines do the work they claim to: rows in order, heads handed out
//! one at a time in queue order, stale attempts refused.

use a2_benches::baseline::collections::{Lane, Log};
use a2_benches::baseline::sqlite::{RawSqlite, Storage};
use a2_conformance::bench::{payload, PAYLOAD_BYTES, START_MS};
use a2_store_api::RandomIds;

#[test]
fn payloads_are_about_200_bytes() {
    let text = serde_json::to_string(&payload(123_456)).unwrap();
    let size = text.len();
    assert!(
        (PAYLOAD_BYTES - 20..=PAYLOAD_BYTES + 20).contains(&size),
        "payload is {size} bytes: {text}"
    );
}

#[test]
fn collections_lane_hands_out_heads_in_order_once() {
    let mut log = Log::default();
    let mut lane = Lane::default();
    let stored = log.append(
        &RandomIds,
        (0..3)
            .map(|n| ("work".to_owned(), payload(n).into()))
            .collect(),
    );
    assert_eq!(
        stored.iter().map(|row| row.index).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    for row in &stored {
        lane.push(row.index);
    }
    let (first, attempt) = lane.claim(&log, "w1", START_MS).unwrap();
    assert_eq!((first.index, attempt), (1, 1));
    assert!(lane.claim(&log, "w2", START_MS).is_none(), "head is busy");
    assert!(!lane.complete(1, 2), "a stale attempt is refused");
    assert!(lane.complete(1, 1));
    assert!(!lane.complete(1, 1), "completed once");
    let (second, attempt) = lane.claim(&log, "w1", START_MS).unwrap();
    assert_eq!((second.index, attempt), (2, 1));
}

#[test]
fn rusqlite_lane_hands_out_heads_in_order_once() {
    let mut db = RawSqlite::open(Storage::Memory);
    let events = (0..3).map(|n| ("work", payload(n))).collect::<Vec<_>>();
    let indexes = db.append(&events);
    assert_eq!(indexes, [1, 2, 3]);
    let mut cursor = None;
    db.queue(&mut cursor, &indexes);
    let (cid, index, attempt) = db.claim("w1", START_MS).unwrap();
    assert_eq!((index, attempt), (1, 1));
    assert!(db.claim("w2", START_MS).is_none(), "head is busy");
    assert!(!db.complete(cid, index, 2), "a stale attempt is refused");
    assert!(db.complete(cid, index, 1));
    assert!(!db.complete(cid, index, 1), "completed once");
    let (_, index, attempt) = db.claim("w1", START_MS).unwrap();
    assert_eq!((index, attempt), (2, 1));
}
