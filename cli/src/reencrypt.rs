//! `reencrypt`: stored payloads moved to the current key
//! ([`EncryptedStore::reencrypt`]), so an old key can be retired.

use std::sync::Arc;

use a2_store::layer::codec::{Reencrypt, Reencrypted};
use a2_store::{json, EncryptedStore};

use crate::args::ReencryptArgs;
use crate::failure::Failure;
use crate::output;
use crate::target;

/// Runs `reencrypt` on every session, or on those named.
pub async fn run(args: &ReencryptArgs) -> Result<(), Failure> {
    let url = args.url.as_str();
    let (backend, layers) = target::open_existing_backend(url).await?;
    let store = target::offload_layer(backend, &layers, &args.payloads, false)?;
    let Some(keys) = target::load_keys(&layers, &args.payloads)? else {
        return Err(Failure::new(
            "reencrypt needs the keys: give --keys env:VAR or --keys file:PATH (or keys= in the URL) with every key rows still name, the current one last",
        ));
    };
    let Some(current) = keys.current_id() else {
        return Err(Failure::new(
            "the keys given hold no key: add the current key as the last entry (kid:<base64 of 32 bytes>)",
        ));
    };
    let layer = EncryptedStore::new(store, Arc::new(keys));
    let mut options = Reencrypt::default()
        .with_reducers(args.reducers.iter().cloned())
        .with_plaintext(!args.keep_plaintext);
    if let Some(page) = args.page {
        options = options.with_page(page);
    }
    let done = if args.sessions.is_empty() {
        layer
            .reencrypt_all(options)
            .await
            .map_err(|error| Failure::store(url, "re-encrypting every session", &error))?
    } else {
        let mut total = Reencrypted::default();
        for session in &args.sessions {
            target::require_session(&layer, url, session).await?;
            let done = layer
                .reencrypt(session, options.clone())
                .await
                .map_err(|error| {
                    Failure::store(
                        url,
                        &format!("re-encrypting session '{}'", output::escape(session)),
                        &error,
                    )
                })?;
            total.add(&done);
        }
        total
    };
    if args.json {
        return output::print_json(&json!({
            "key": current,
            "events": done.rewritten.events,
            "states": done.rewritten.states,
            "presence": done.rewritten.presence,
            "already_current": done.current,
            "pages": done.pages,
        }));
    }
    output::print(&format!(
        "re-encrypted {} event payload(s), {} snapshot state(s) and {} presence value(s) under key '{}' in {} page(s); {} row(s) were already under it\n",
        done.rewritten.events,
        done.rewritten.states,
        done.rewritten.presence,
        output::escape(&current),
        done.pages,
        done.current
    ))
}
