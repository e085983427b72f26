//! Presence: last writer wins per field.

/// Whether a presence write at `at` beats the stored entry (`None`: no entry;
/// `Some((at, expires_at))` otherwise) at `now_ms`. Later `at` wins, an
/// equal `at` lets the newer call win, and an expired entry never blocks a
/// write.
pub fn write_wins(existing: Option<(i64, i64)>, at: i64, now_ms: i64) -> bool {
    match existing {
        None => true,
        Some((existing_at, expires_at)) => expires_at <= now_ms || existing_at <= at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_last_writer_wins() {
        assert!(write_wins(None, 1, 0));
        assert!(write_wins(Some((5, 100)), 5, 0));
        assert!(!write_wins(Some((6, 100)), 5, 0));
        assert!(write_wins(Some((6, 100)), 5, 100));
    }
}
