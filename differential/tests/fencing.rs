//! A lease that expires while a slow handler runs is fenced when the handler
//! finally reports, on every backend (event, lane and log cursors).

mod support;

use a2_differential::check_lease_fencing;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_fences_expired_leases() {
    check_lease_fencing(&support::Memory).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_memory_fences_expired_leases() {
    check_lease_fencing(&support::SqliteMemory).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_file_fences_expired_leases() {
    check_lease_fencing(&support::SqliteFile::new())
        .await
        .unwrap();
}

#[cfg_attr(
    a2_postgres_unset,
    ignore = "needs a PostgreSQL server: set A2_POSTGRES_URL"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fences_expired_leases() {
    let Some(factory) = support::Postgres::from_env("postgres_fences_expired_leases") else {
        return;
    };
    check_lease_fencing(&factory).await.unwrap();
}
