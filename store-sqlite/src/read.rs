//! `read` and `sessions`: the log and the list of sessions.

use a2_store_api::log::read_bounds;
use a2_store_api::{ForkOrigin, ListSessions, ReadOptions, SessionInfo, StoreError, StoredEvent};
use rusqlite::Connection;

use crate::errors::SqlContext;
use crate::events::read_range;
use crate::session;
use crate::values::{SqlIndex, SqlLimit};

/// Stored rows with `after < index <= through` in order (reclaimed rows are gone).
pub(crate) fn read(
    tx: &Connection,
    session_id: &str,
    options: &ReadOptions,
) -> Result<Vec<StoredEvent>, StoreError> {
    let session = session::find(tx, session_id)?;
    let head = session.as_ref().map_or(0, |session| session.head);
    let (after, through) = read_bounds(options, head)?;
    let Some(session) = session else {
        return Ok(Vec::new());
    };
    if through <= after {
        return Ok(Vec::new());
    }
    read_range(tx, &session, after, through, options.limit)
}

/// Sessions with at least one appended row, by id, after `after`, at most `limit`.
pub(crate) fn sessions(
    tx: &Connection,
    options: &ListSessions,
) -> Result<Vec<SessionInfo>, StoreError> {
    let limit = SqlLimit(options.limit);
    type Raw = (
        String,
        SqlIndex,
        SqlIndex,
        SqlIndex,
        Option<String>,
        Option<SqlIndex>,
        SqlIndex,
    );
    let raws: Vec<Raw> = match &options.after {
        Some(after) => tx
            .prepare_cached(
                "SELECT name, head, clear_index, reclaimed_through, forked_from, forked_through, \
                 incarnation \
                 FROM (SELECT s.name AS name, \
                 COALESCE((SELECT MAX(e.idx) FROM events AS e WHERE e.sid = s.sid), 0) AS head, \
                 s.clear_index AS clear_index, s.reclaimed_through AS reclaimed_through, \
                 s.forked_from AS forked_from, s.forked_through AS forked_through, \
                 s.incarnation AS incarnation \
                 FROM sessions AS s WHERE s.name > ?1) \
                 WHERE head > 0 ORDER BY name LIMIT ?2",
            )
            .and_then(|mut stmt| {
                stmt.query_map((after, limit), |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                        row.get(5)?,
                        row.get(6)?,
                    ))
                })?
                .collect()
            }),
        None => tx
            .prepare_cached(
                "SELECT name, head, clear_index, reclaimed_through, forked_from, forked_through, \
                 incarnation \
                 FROM (SELECT s.name AS name, \
                 COALESCE((SELECT MAX(e.idx) FROM events AS e WHERE e.sid = s.sid), 0) AS head, \
                 s.clear_index AS clear_index, s.reclaimed_through AS reclaimed_through, \
                 s.forked_from AS forked_from, s.forked_through AS forked_through, \
                 s.incarnation AS incarnation \
                 FROM sessions AS s) \
                 WHERE head > 0 ORDER BY name LIMIT ?1",
            )
            .and_then(|mut stmt| {
                stmt.query_map([limit], |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                        row.get(5)?,
                        row.get(6)?,
                    ))
                })?
                .collect()
            }),
    }
    .ctx("listing sessions")?;
    Ok(raws
        .into_iter()
        .map(
            |(session_id, head, clear, reclaimed, origin, origin_index, incarnation)| {
                SessionInfo::new(session_id, head.get(), clear.get(), reclaimed.get())
                    .with_forked_from(
                        origin
                            .zip(origin_index)
                            .map(|(session_id, index)| ForkOrigin::new(session_id, index.get())),
                    )
                    .with_incarnation(incarnation.get())
            },
        )
        .collect())
}
