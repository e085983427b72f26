//! The small alphabets generated operations draw from.
//!
//! Few sessions, consumers, lanes, types and ids, so random sequences
//! actually collide: replays, duplicate ids, lane conflicts and stale
//! attempts happen in most cases instead of almost never.

use a2_store_api::ConsumerDeclaration;

/// Logical session names (the runner prefixes them per case), in id
/// order; `sf` is where forks go (rarely written otherwise, so a fork into
/// it works once).
pub const SESSIONS: [&str; 4] = ["s0", "s1", "s2", "sf"];
/// Claim holders.
pub const HOLDERS: [&str; 2] = ["w0", "w1"];
/// Consumers targets name; `audit` is also a log consumer, so lane conflicts happen.
pub const TARGET_CONSUMERS: [&str; 3] = ["agent", "worker", "audit"];
/// Target lanes; `log` (and `L1`) are lanes log consumers use.
pub const LANES: [&str; 3] = ["L1", "L2", "log"];
/// Event types.
pub const TYPES: [&str; 3] = ["msg", "tool", "note"];
/// Caller-supplied ids of appended events.
pub const EVENT_IDS: [&str; 4] = ["e0", "e1", "e2", "e3"];
/// Caller-supplied ids of events returned by completions.
pub const REPLY_IDS: [&str; 3] = ["r0", "r1", "r2"];
/// Log consumer names.
pub const LOG_CONSUMERS: [&str; 2] = ["audit", "tap"];
/// Every consumer name (targeted and log), as `list_work` and the state capture name them.
pub const WORK_CONSUMERS: [&str; 4] = ["agent", "worker", "audit", "tap"];
/// Log consumer lanes (`L1` collides with target lanes).
pub const LOG_LANES: [&str; 2] = ["log", "L1"];
/// Reducer names.
pub const REDUCERS: [&str; 2] = ["fold", "count"];
/// Presence participants.
pub const PARTICIPANTS: [&str; 2] = ["p0", "p1"];
/// Presence fields.
pub const FIELDS: [&str; 2] = ["typing", "cursor"];
/// The clock every store of a case starts at, ms.
pub const START_MS: i64 = 1_000_000;
/// The prefix of generated ids (equal on every store, so ids match).
pub const ID_PREFIX: &str = "id-";

/// Picks `items[n % len]`; every alphabet is non-empty.
pub fn pick<'a>(items: &[&'a str], n: u8) -> &'a str {
    items
        .get(usize::from(n) % items.len().max(1))
        .copied()
        .unwrap_or("")
}

/// The type lists a log declaration may take: all types, `msg` only, `msg` and `tool`.
pub fn log_types(n: u8) -> Option<Vec<String>> {
    match n % 3 {
        0 => None,
        1 => Some(vec!["msg".to_owned()]),
        _ => Some(vec!["msg".to_owned(), "tool".to_owned()]),
    }
}

/// Input patterns the generator leaves out, so a run can go on finding new
/// divergences while a known backend bug is open (each known bug also has
/// a test of its own that fails until it is fixed), or because the
/// factory's stores share one database (`unlisted_work_claims`). All
/// `false` by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Avoid {
    /// Declare each log consumer with one fixed type list, so no call ever
    /// changes a log cursor's types.
    pub log_type_changes: bool,
    /// Never target a lane that a log consumer uses (`log`, `L1`), so no
    /// batch is refused for a target-lane conflict.
    pub target_lane_conflicts: bool,
    /// Never redrive a `(consumer, index)` that names two dead letters (on
    /// two lanes, or a lane and an event cursor).
    pub ambiguous_redrives: bool,
    /// Name the case's sessions in every `claim_work` (no claim of "every
    /// session"), name a session in every `redrive_all`, and pause only in
    /// one session, and run no `prune` (it examines every session): needed
    /// when the factory's stores share one database, where a claim, bulk
    /// redrive, pause or prune of "every session" would reach other cases'
    /// sessions.
    pub unlisted_work_claims: bool,
}

/// A consumer declaration in symbolic form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeclSpec {
    /// A consumer of targeted work only.
    Targeted(u8),
    /// A log consumer.
    Log {
        /// Index into [`LOG_CONSUMERS`].
        consumer: u8,
        /// Index into [`LOG_LANES`].
        lane: u8,
        /// See [`log_types`].
        types: u8,
        /// Start from the last clear.
        backfill: bool,
    },
}

impl DeclSpec {
    /// The concrete declaration, leaving out what `avoid` asks.
    pub fn declaration(self, avoid: Avoid) -> ConsumerDeclaration {
        match self {
            Self::Targeted(n) => ConsumerDeclaration::targeted(pick(&TARGET_CONSUMERS, n)),
            Self::Log {
                consumer,
                lane,
                types,
                backfill,
            } => ConsumerDeclaration::log(
                pick(&LOG_CONSUMERS, consumer),
                pick(
                    &LOG_LANES,
                    if avoid.target_lane_conflicts { 0 } else { lane },
                ),
                log_types(if avoid.log_type_changes {
                    consumer
                } else {
                    types
                }),
                backfill,
            ),
        }
    }
}

/// Concrete declarations of a non-empty symbolic list, as [`declarations`]
/// makes them (an empty list stays empty).
pub fn declaration_list(specs: &[DeclSpec], avoid: Avoid) -> Vec<ConsumerDeclaration> {
    declarations(&Some(specs.to_vec()), avoid).unwrap_or_default()
}

/// Concrete declarations of a symbolic list (`None` stays `None`: serve
/// every cursor). A consumer named twice keeps its first declaration: the
/// contract does not say which of two declarations of one name wins, and
/// the backends differ (see the README).
pub fn declarations(
    specs: &Option<Vec<DeclSpec>>,
    avoid: Avoid,
) -> Option<Vec<ConsumerDeclaration>> {
    specs.as_ref().map(|specs| {
        let mut list: Vec<ConsumerDeclaration> = Vec::new();
        for declaration in specs.iter().map(|spec| spec.declaration(avoid)) {
            if !list.iter().any(|d| d.name == declaration.name) {
                list.push(declaration);
            }
        }
        list
    })
}
