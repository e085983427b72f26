//! What the cycle examples (`cycles`, `bloat`) share: filling a session with
//! event heads, and the claim of one of them.

use a2_store_api::{AppendOptions, ClaimRequest, NewEvent, Store, Target};
use a2_store_postgres::PostgresStore;

/// Appends `heads` events targeted at consumer `agent`'s event cursor to
/// `session`, in batches of 100.
pub async fn append_jobs(
    store: &PostgresStore,
    session: &str,
    heads: usize,
) -> a2_store_api::Result<()> {
    let mut left = heads;
    while left > 0 {
        let batch = left.min(100);
        let events = (0..batch)
            .map(|_| {
                NewEvent::new("job", serde_json::json!({})).with_target(Target::event("agent"))
            })
            .collect();
        store
            .append(session, events, AppendOptions::default())
            .await?;
        left -= batch;
    }
    Ok(())
}

/// A claim of one head of `session` under a 60 s lease.
pub fn claim_one(session: &str) -> ClaimRequest {
    ClaimRequest::new(session, "w", std::time::Duration::from_secs(60)).with_limit(1)
}
