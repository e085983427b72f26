//! Shared criterion benchmark bodies, generic over a [`StoreFactory`](crate::StoreFactory).
//!
//! Each body registers one benchmark in a criterion group the caller opens.
//! The group names the operation and the function id names the backend (the
//! factory's [`name`](crate::StoreFactory::name)), so criterion's HTML report
//! puts every backend side by side. A backend author benches a new backend by
//! calling these bodies with its factory; `a2-benches` runs them for every
//! backend of this workspace next to bare baselines.
//!
//! Every body runs on a [`ManualClock`](a2_store_api::ManualClock) (leases never
//! expire unless the body moves time) and time-ordered random ids. Setup work
//! (appending the events a claim needs, building a session) is never timed:
//! bodies use `iter_custom` and time only the operation they name. Sessions
//! and stores are rotated while a benchmark runs so a session never grows
//! past a bound, whatever number of iterations criterion asks for.
//!
//! A backend's own criterion target needs only its factory (`MyFactory`
//! below stands for it):
//!
//! ```text
//! use a2_conformance::bench;
//! let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
//! let mut c = criterion::Criterion::default().configure_from_args();
//! let mut group = c.benchmark_group("claim_complete");
//! bench::claim_complete(&mut group, &rt, &MyFactory, bench::CursorKindBench::Lane);
//! group.finish();
//! ```
//!
//! A store call that fails aborts the benchmark with a panic naming the step:
//! criterion has no error channel, and a figure measured over failing calls
//! would be meaningless.

mod concurrency;
mod dispatch;
mod fixture;
mod reads;
mod retention;
mod scaling;
mod schedule;
mod session_state;
mod work;
mod writes;

pub use concurrency::concurrent_claim_complete;
pub use dispatch::{claim_complete, claim_fail_reclaim, renew_claims, CursorKindBench};
pub use fixture::{payload, work_events, BenchSettings, LEASE_MS, PAYLOAD_BYTES, START_MS};
pub use reads::{read_rows, subscribe_latency};
pub use retention::{delete_session_events, PruneScaling, PRUNE_PAGE};
pub use scaling::{ScalingOp, ScalingSeries, ScalingShape};
pub use schedule::{scheduled_claim, ScheduledOp, SCHEDULE_SPAN_MS};
pub use session_state::{presence, state_with_pins};
pub use work::{
    work_fairness, WorkScaling, WorkScalingOp, WorkSettings, FAIRNESS_HANDLING,
    FAIRNESS_SMALL_SESSIONS, FAIRNESS_WORKERS,
};
pub use writes::{append_batch, append_with_targets, clear_reclaim, TargetKind};
