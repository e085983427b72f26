//! The orderings results are returned in, so every backend sorts alike.

use std::cmp::Ordering;

use crate::types::{Cursor, CursorRef, Head, Pause, RedrivenHead};

/// Order of claimed and dead-lettered heads: index, consumer, lane (`None` first).
pub fn compare_heads(a: &Head, b: &Head) -> Ordering {
    a.event
        .index
        .cmp(&b.event.index)
        .then_with(|| a.consumer.cmp(&b.consumer))
        .then_with(|| a.lane.cmp(&b.lane))
}

/// Order of renew results and of the claims a renewal processes: index,
/// consumer, lane (`None` first).
pub fn compare_refs(a: &CursorRef, b: &CursorRef) -> Ordering {
    a.index
        .cmp(&b.index)
        .then_with(|| a.consumer.cmp(&b.consumer))
        .then_with(|| a.lane.cmp(&b.lane))
}

/// Order of `cursors()`: consumer, then lane cursors by lane name, then
/// laneless event cursors by head.
pub fn compare_cursors(a: &Cursor, b: &Cursor) -> Ordering {
    a.consumer
        .cmp(&b.consumer)
        .then_with(|| match (&a.lane, &b.lane) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => a.head.cmp(&b.head),
        })
}

/// The fairness order of work rows (see [`crate::work`]): the one ready
/// longest first (`ready_at`), then session id, then consumer. A
/// cross-session claim serves sessions by their earliest row in this order.
pub fn compare_work(a: (i64, &str, &str), b: (i64, &str, &str)) -> Ordering {
    a.cmp(&b)
}

/// Order of [`Store::redrive_all`](crate::Store::redrive_all)'s heads:
/// session id, then index, consumer, lane (`None` first).
pub fn compare_redriven(a: &RedrivenHead, b: &RedrivenHead) -> Ordering {
    a.session_id
        .cmp(&b.session_id)
        .then_with(|| compare_refs(&a.cursor, &b.cursor))
}

/// Order of [`Store::pauses`](crate::Store::pauses): consumer, then the
/// store-wide pause before the sessions' by session id.
pub fn compare_pauses(a: &Pause, b: &Pause) -> Ordering {
    a.consumer
        .cmp(&b.consumer)
        .then_with(|| a.session_id.cmp(&b.session_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_order_by_index_then_names() {
        let mut refs = vec![
            CursorRef::new("b", None, 2),
            CursorRef::new("a", Some("L"), 2),
            CursorRef::new("a", None, 2),
            CursorRef::new("z", None, 1),
        ];
        refs.sort_by(compare_refs);
        assert_eq!(
            refs,
            vec![
                CursorRef::new("z", None, 1),
                CursorRef::new("a", None, 2),
                CursorRef::new("a", Some("L"), 2),
                CursorRef::new("b", None, 2),
            ]
        );
    }
}
