//! Turning a database back into what an older build wrote, so tests can
//! check that opening it migrates it with its data intact.

/// Undoes migration 4 (retention): no incarnations, last activity,
/// counters or expiry index, and no incremental auto-vacuum (files of
/// version 3 were created without it), leaving a version 3 file.
pub fn undo_version_4(conn: &rusqlite::Connection) {
    conn.execute_batch(
        "DROP INDEX sessions_idle;
         DROP INDEX presence_expiry;
         ALTER TABLE sessions DROP COLUMN incarnation;
         ALTER TABLE sessions DROP COLUMN last_activity;
         DROP TABLE counters;
         PRAGMA user_version = 3;
         PRAGMA auto_vacuum = NONE;
         VACUUM;",
    )
    .unwrap();
}
