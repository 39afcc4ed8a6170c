//! Call slots: at most `total` calls run at once, and at most `share` of
//! them for any one client, so that one busy (or hostile) client cannot
//! take every slot and starve the others. Calls past either limit wait.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub(super) struct CallSlots {
    total: Arc<Semaphore>,
    share: usize,
    clients: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// A held slot; dropping it frees the slot.
pub(crate) struct Slot {
    _client: Option<OwnedSemaphorePermit>,
    _total: OwnedSemaphorePermit,
}

/// The slots were closed: the host is shutting down.
#[derive(Debug)]
pub(super) struct Closed;

impl CallSlots {
    pub(super) fn new(total: usize, share: usize) -> Self {
        let total = total.max(1);
        CallSlots {
            total: Arc::new(Semaphore::new(total)),
            share: share.clamp(1, total),
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for a slot for `client` (`None`: a caller with no identity to
    /// share by, such as the one client of a stdio server).
    pub(super) async fn acquire(&self, client: Option<&str>) -> Result<Slot, Closed> {
        let client_permit = match client {
            None => None,
            Some(client) => {
                let semaphore = self.client_semaphore(client);
                Some(semaphore.acquire_owned().await.map_err(|_| Closed)?)
            }
        };
        let total = self
            .total
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Closed)?;
        Ok(Slot {
            _client: client_permit,
            _total: total,
        })
    }

    /// The client's semaphore; clients that hold and await nothing are
    /// forgotten as new ones arrive, so the map does not grow without bound.
    fn client_semaphore(&self, client: &str) -> Arc<Semaphore> {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(semaphore) = clients.get(client) {
            return semaphore.clone();
        }
        let share = self.share;
        clients.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < share);
        let semaphore = Arc::new(Semaphore::new(share));
        clients.insert(client.to_string(), semaphore.clone());
        semaphore
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_client_cannot_take_every_slot() {
        let slots = CallSlots::new(2, 1);
        let _a = slots.acquire(Some("a")).await.unwrap();
        let second_a = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            slots.acquire(Some("a")),
        )
        .await;
        assert!(second_a.is_err(), "a second slot for the same client");
        let _b = slots.acquire(Some("b")).await.unwrap();
    }

    #[tokio::test]
    async fn idle_clients_are_forgotten() {
        let slots = CallSlots::new(4, 2);
        for i in 0..100 {
            drop(slots.acquire(Some(&format!("c{i}"))).await.unwrap());
        }
        assert!(slots.clients.lock().unwrap().len() <= 2);
    }
}
