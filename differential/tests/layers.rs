//! The differential test through both payload layers: the candidate is
//! `EncryptedStore` over `OffloadStore` (64-byte threshold, so every event
//! payload and snapshot state is offloaded as ciphertext; presence values
//! stay inline as envelopes) over SQLite and over PostgreSQL, compared call
//! by call with the plain memory reference. Payloads are compared as the
//! app reads them, decoded by the layers. The layers' factories are the
//! facade's test helpers (`store/tests/support`), not a copy.
//! `A2_DIFF_CASES`, `A2_DIFF_OPS` and `A2_DIFF_SEED` change the run (see the
//! README).

mod support;

#[path = "../../store/tests/support/encrypted.rs"]
mod encrypted;
#[path = "../../store/tests/support/offloaded.rs"]
mod offloaded;

use a2_conformance::{Layered, StoreFactory};
use a2_differential::{run_differential, Config};
use encrypted::{with_encryption, Encryption};
use offloaded::{with_offload, Offload};

/// Encryption over offload over `backend`.
fn layered<F: StoreFactory>(backend: F) -> Layered<Layered<F, Offload>, Encryption> {
    with_encryption(with_offload(backend))
}

async fn differential(factory: &dyn StoreFactory, cases: u32) {
    match run_differential(factory, Config::from_env(cases, 40)).await {
        Ok(summary) => println!("{}: {summary}", factory.name()),
        Err(divergence) => panic!("{divergence}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_through_the_payload_layers_matches_the_reference() {
    differential(&layered(support::SqliteMemory), 64).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_through_the_payload_layers_matches_the_reference() {
    let test = "postgres_through_the_payload_layers_matches_the_reference";
    let Some(factory) = support::Postgres::from_env(test) else {
        return;
    };
    differential(&layered(factory), 32).await;
}
