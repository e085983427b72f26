//! What the payload layers read of a session to translate a
//! [`RewritePayloadsRequest`](a2_store_api::RewritePayloadsRequest): the rows
//! as the store below holds them, so the `expected` payloads a caller gives
//! (as read through the layer) can be matched to the stored forms.

use std::collections::HashMap;

use a2_store_api::{ReadOptions, ReadStateOptions, Result, Store, StoredEvent};

/// The stored events of `session` at `indexes` (those that exist above
/// the clear), read in one span when the indexes are close together and
/// one by one otherwise, so a sparse page never reads the whole log.
pub(crate) async fn events_at(
    store: &dyn Store,
    session: &str,
    indexes: impl IntoIterator<Item = u64>,
) -> Result<HashMap<u64, StoredEvent>> {
    let mut wanted: Vec<u64> = indexes.into_iter().collect();
    wanted.sort_unstable();
    wanted.dedup();
    let (Some(&first), Some(&last)) = (wanted.first(), wanted.last()) else {
        return Ok(HashMap::new());
    };
    let span = last - first + 1;
    let spans: Vec<(u64, u64)> = if span <= 4 * wanted.len() as u64 {
        vec![(first, last)]
    } else {
        wanted.iter().map(|&index| (index, index)).collect()
    };
    let mut rows = HashMap::with_capacity(wanted.len());
    for (from, through) in spans {
        let options = ReadOptions {
            after: from.checked_sub(1),
            through: Some(through),
            ..ReadOptions::default()
        };
        for row in store.read(session, options).await? {
            if wanted.binary_search(&row.index).is_ok() {
                rows.insert(row.index, row);
            }
        }
    }
    Ok(rows)
}

/// The stored state of `reducer`'s snapshot at exactly `index` of
/// `session`, when there is one.
pub(crate) async fn state_at(
    store: &dyn Store,
    session: &str,
    reducer: &str,
    index: u64,
) -> Result<Option<serde_json::Value>> {
    let read = store
        .read_state(session, reducer, ReadStateOptions { at: Some(index) })
        .await?;
    Ok(read
        .snapshot
        .filter(|snapshot| snapshot.index == index)
        .map(|snapshot| snapshot.state))
}
