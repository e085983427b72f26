//! Noticing that the database file was moved or deleted while the store has
//! it open: SQLite keeps writing into the open file (unlinked, or at its new
//! name), so without this check such writes are acknowledged and lost.

use std::fmt;
use std::path::{Path, PathBuf};

use a2_store_api::StoreError;

/// The error (the source of a [`StoreError::Backend`]) of a write refused
/// because the database file the store opened is no longer at its path: the
/// file or its directory was deleted, moved or replaced. The write was
/// rolled back; no later write of the store is acknowledged until the file
/// is back at its path. Reopen the store to use whatever file the path
/// names now.
///
/// ```
/// # use a2_store_api::StoreError;
/// # use a2_store_sqlite::DatabaseMoved;
/// fn moved(error: &StoreError) -> Option<&DatabaseMoved> {
///     std::error::Error::source(error)?.downcast_ref::<DatabaseMoved>()
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseMoved {
    path: PathBuf,
    replaced: bool,
}

impl DatabaseMoved {
    /// The path the store opened (made absolute at open).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether another file is at the path now (`false`: nothing is).
    pub fn replaced(&self) -> bool {
        self.replaced
    }
}

impl fmt::Display for DatabaseMoved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let now = if self.replaced {
            "another file is at that path now"
        } else {
            "nothing is at that path now"
        };
        write!(
            f,
            "the database file '{}' was moved or deleted while the store had it open ({now})",
            self.path.display()
        )
    }
}

impl std::error::Error for DatabaseMoved {}

/// Which file a path named when the store opened it.
#[derive(Debug, Clone)]
pub(crate) struct FileIdentity {
    path: PathBuf,
    id: Id,
}

/// Device and inode: while the store holds the file open its inode cannot
/// be reused, so an equal pair is the same file.
#[cfg(unix)]
type Id = (u64, u64);

/// Without inodes only a missing file is noticed.
#[cfg(not(unix))]
type Id = ();

#[cfg(unix)]
fn id_of(meta: &std::fs::Metadata) -> Id {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn id_of(_meta: &std::fs::Metadata) -> Id {}

impl FileIdentity {
    /// The identity of the file at `path` now (just opened by the store).
    pub(crate) fn of(path: &Path) -> Result<Self, StoreError> {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let meta = std::fs::metadata(&path).map_err(|error| {
            StoreError::backend(
                format!(
                    "opening database '{}': the opened file cannot be found at its path",
                    path.display()
                ),
                error,
            )
        })?;
        Ok(Self {
            id: id_of(&meta),
            path,
        })
    }

    /// Whether both name the same file (device and inode).
    pub(crate) fn same_file(&self, other: &Self) -> bool {
        self.id == other.id
    }

    /// `Ok` while the path still names the file that was opened; one
    /// `stat` of the path.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        let replaced = match std::fs::metadata(&self.path) {
            Ok(meta) if id_of(&meta) == self.id => return Ok(()),
            Ok(_) => true,
            Err(_) => false,
        };
        let moved = DatabaseMoved {
            path: self.path.clone(),
            replaced,
        };
        Err(StoreError::Backend {
            message: format!(
                "{moved}; this write was rolled back and nothing was written: reopen the store on the file the path names now (writes through this store fail until the file is back at its path)"
            ),
            source: Some(Box::new(moved)),
        })
    }
}
