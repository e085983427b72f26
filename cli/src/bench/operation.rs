//! The store operations `bench` times, named and ordered as reports show them.

/// The timed store operations, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// `append` of a new batch.
    Append,
    /// `claim_available`.
    Claim,
    /// `complete_attempt`.
    Complete,
    /// `fail_attempt` with a retry delay of 0.
    Fail,
    /// `clear`.
    Clear,
    /// `reclaim` (one call, up to 256 rows).
    Reclaim,
}

impl Operation {
    /// Every operation, in report order.
    pub const ALL: [Operation; 6] = [
        Self::Append,
        Self::Claim,
        Self::Complete,
        Self::Fail,
        Self::Clear,
        Self::Reclaim,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Append => "append",
            Self::Claim => "claim",
            Self::Complete => "complete",
            Self::Fail => "fail",
            Self::Clear => "clear",
            Self::Reclaim => "reclaim",
        }
    }

    /// Its position in [`Operation::ALL`].
    pub fn position(self) -> usize {
        match self {
            Self::Append => 0,
            Self::Claim => 1,
            Self::Complete => 2,
            Self::Fail => 3,
            Self::Clear => 4,
            Self::Reclaim => 5,
        }
    }
}
