//! Live subscribers of one session's log, fed through unbounded channels.

use a2_store_api::{EventStream, Result, StoreError, StoredEvent};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

#[derive(Debug)]
struct Subscriber {
    /// Only events above this index are delivered.
    after: u64,
    sender: UnboundedSender<Result<StoredEvent>>,
}

/// The subscribers of one session.
///
/// Guarantees: the backlog and the registration happen under the session's
/// lock, so each subscriber sees every event after its `after` exactly once,
/// in index order; subscribers whose stream was dropped are forgotten at the
/// next notification.
#[derive(Debug, Default)]
pub(crate) struct Subscribers {
    list: Vec<Subscriber>,
}

impl Subscribers {
    /// A stream yielding `backlog` (the stored rows after `after`), then
    /// every event later passed to [`Subscribers::notify`] above `after`.
    pub fn subscribe(&mut self, backlog: Vec<StoredEvent>, after: u64) -> EventStream {
        let (sender, mut receiver) = unbounded_channel();
        let mut alive = true;
        for event in backlog {
            alive &= sender.send(Ok(event)).is_ok();
        }
        if alive {
            self.list.push(Subscriber { after, sender });
        }
        Box::pin(futures::stream::poll_fn(move |cx| receiver.poll_recv(cx)))
    }

    /// Ends every subscriber's stream with the error `error` makes (the
    /// session was deleted).
    pub fn end(&mut self, error: impl Fn() -> StoreError) {
        for subscriber in self.list.drain(..) {
            let _ = subscriber.sender.send(Err(error()));
        }
    }

    /// Delivers freshly stored `events` (in index order) to every live subscriber.
    pub fn notify(&mut self, events: &[StoredEvent]) {
        if events.is_empty() {
            return;
        }
        self.list.retain(|subscriber| {
            events
                .iter()
                .filter(|event| event.index > subscriber.after)
                .all(|event| subscriber.sender.send(Ok(event.clone())).is_ok())
                && !subscriber.sender.is_closed()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2_store_api::Payload;
    use futures::StreamExt;

    fn event(index: u64) -> StoredEvent {
        StoredEvent::new(
            "s",
            index,
            format!("e{index}"),
            "msg",
            Payload::default(),
            0,
        )
    }

    #[tokio::test]
    async fn backlog_then_live_above_after_and_dead_subscribers_are_dropped() {
        let mut subscribers = Subscribers::default();
        let mut stream = subscribers.subscribe(vec![event(3)], 2);
        let dropped = subscribers.subscribe(Vec::new(), 0);
        assert_eq!(subscribers.list.len(), 2);
        drop(dropped);
        subscribers.notify(&[event(2), event(4)]);
        assert_eq!(subscribers.list.len(), 1, "the dropped stream is forgotten");
        let got: Vec<u64> = [
            stream.next().await.map(|e| e.map(|e| e.index).ok()),
            stream.next().await.map(|e| e.map(|e| e.index).ok()),
        ]
        .into_iter()
        .flatten()
        .flatten()
        .collect();
        assert_eq!(got, [3, 4], "index 2 is at or below `after`");
        drop(subscribers);
        assert!(stream.next().await.is_none(), "ends when the session goes");
    }
}
