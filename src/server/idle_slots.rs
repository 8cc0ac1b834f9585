//! Who has been idle longest among a listener's open connections, so that at the connection
//! limit a new connection takes the slot of the one idle longest instead of being refused.
//!
//! Without it, the first `limit` connections to arrive kept their slots until their idle
//! timeout (5 minutes for Graphite, the 30 s header timeout for HTTP): 1,500 idle sockets
//! locked every real collector out for that long. A collector that writes is never the one
//! idle longest while idle sockets exist, so it keeps its slot; an attacker must now keep
//! every one of its sockets busier than the real writers to hold them.
//!
//! What counts as activity is the listener's: Graphite marks every read ([`SlotGuard::touch`]).
//! HTTP marks the end of each request and holds a connection whose request is being
//! handled out of reach ([`SlotHandle::busy`]); bytes of a head still arriving do not count,
//! so a client trickling one never looks busy. A connection whose request presented a token
//! the server accepted ([`SlotHandle::trust`]) is chosen only once no other is idle, so
//! clients without a token cannot push out the ones with one.
//!
//! The closed connection hands its slot (its semaphore permit) straight to the one that made
//! room: released into the semaphore instead, the permit could go to a connection accepted
//! in between, and the one that made room would find none.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit};

/// The end of a connection's slot handoff that the one that made room waits on.
pub(crate) type Successor = oneshot::Receiver<OwnedSemaphorePermit>;

/// The open connections of one listener, each with the time it last received something.
pub(crate) struct IdleSlots {
    /// Origin of the connections' activity times.
    epoch: Instant,
    /// The next connection's id (its accept order, which breaks ties in activity time).
    next_id: AtomicU64,
    /// Connections registered and not yet told to close, by id.
    open: Mutex<HashMap<u64, Arc<Slot>>>,
}

/// One connection's entry.
struct Slot {
    /// Nanoseconds since [`IdleSlots::epoch`] when the connection was last active (or was
    /// registered).
    last_active: AtomicU64,
    /// Requests being handled on the connection: while any is, it is not chosen.
    busy: AtomicUsize,
    /// A request on it presented a token the server accepted.
    trusted: AtomicBool,
    /// Notified once when the connection is chosen to make room.
    evict: Notify,
    /// Where the connection's permit goes when it closes, once it was chosen.
    successor: Mutex<Option<oneshot::Sender<OwnedSemaphorePermit>>>,
}

/// Hands a closed connection's permit to the connection that made room by closing it, if one
/// did ([`IdleSlots::evict_longest_idle`]); otherwise releases it.
pub(crate) struct Handoff(Arc<Slot>);

/// A connection's registration: it marks its activity through it and learns from it that it
/// must close. Dropping it unregisters the connection.
pub(crate) struct SlotGuard {
    slots: Arc<IdleSlots>,
    id: u64,
    slot: Arc<Slot>,
}

impl IdleSlots {
    /// No connections yet.
    pub(crate) fn new() -> IdleSlots {
        IdleSlots {
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Slot>>> {
        lock(&self.open)
    }

    /// Registers a connection, active now.
    pub(crate) fn register(self: &Arc<Self>) -> SlotGuard {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            last_active: AtomicU64::new(self.now()),
            busy: AtomicUsize::new(0),
            trusted: AtomicBool::new(false),
            evict: Notify::new(),
            successor: Mutex::new(None),
        });
        self.open().insert(id, Arc::clone(&slot));
        SlotGuard {
            slots: Arc::clone(self),
            id,
            slot,
        }
    }

    /// Tells the connection idle longest (untrusted ones first, the earliest accepted among
    /// equals) to close, and forgets it, so the next call picks another. Returns where its
    /// permit will arrive once it has closed; `None` when no connection can be chosen (every
    /// one was already told, or is handling a request).
    pub(crate) fn evict_longest_idle(&self) -> Option<Successor> {
        let mut open = self.open();
        let victim = open
            .iter()
            .filter(|(_, slot)| slot.busy.load(Ordering::Relaxed) == 0)
            .min_by_key(|(id, slot)| {
                (
                    slot.trusted.load(Ordering::Relaxed),
                    slot.last_active.load(Ordering::Relaxed),
                    **id,
                )
            })
            .map(|(id, _)| *id)?;
        let slot = open.remove(&victim)?;
        // Set while the map's lock is held: the victim unregisters (under that lock) before it
        // passes its permit on, so it finds the successor.
        let (give, take) = oneshot::channel();
        *lock(&slot.successor) = Some(give);
        // Stores a permit when the connection is not waiting right now.
        slot.evict.notify_one();
        Some(take)
    }
}

/// `mutex`'s guard; what it guards is one value set whole, which a panic cannot leave half
/// set.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl SlotGuard {
    /// Marks the connection active now.
    pub(crate) fn touch(&self) {
        self.slot
            .last_active
            .store(self.slots.now(), Ordering::Relaxed);
    }

    /// Completes when the connection has been chosen to make room for a new one.
    pub(crate) async fn evicted(&self) {
        self.slot.evict.notified().await;
    }

    /// What the connection's requests mark it through.
    pub(crate) fn handle(&self) -> SlotHandle {
        SlotHandle {
            slots: Arc::clone(&self.slots),
            slot: Arc::clone(&self.slot),
        }
    }

    /// What passes the connection's permit on once it has closed (after this guard is
    /// dropped).
    pub(crate) fn handoff(&self) -> Handoff {
        Handoff(Arc::clone(&self.slot))
    }
}

impl Handoff {
    /// Gives `permit` to the connection that made room by closing this one, or releases it.
    pub(crate) fn pass(self, permit: OwnedSemaphorePermit) {
        if let Some(successor) = lock(&self.0.successor).take() {
            // A successor that gave up waiting drops the permit here: released.
            let _ = successor.send(permit);
        }
    }
}

/// A connection's slot as its requests see it (an HTTP request carries one).
#[derive(Clone)]
pub(crate) struct SlotHandle {
    slots: Arc<IdleSlots>,
    slot: Arc<Slot>,
}

impl SlotHandle {
    /// A request is being handled: the connection is not chosen to close until the guard
    /// drops, and is then active as of that moment.
    pub(crate) fn busy(&self) -> Busy {
        self.slot.busy.fetch_add(1, Ordering::Relaxed);
        Busy(self.clone())
    }

    /// A request presented a token the server accepted: the connection is chosen only once
    /// no untrusted one is idle.
    pub(crate) fn trust(&self) {
        self.slot.trusted.store(true, Ordering::Relaxed);
    }
}

/// A request being handled ([`SlotHandle::busy`]).
pub(crate) struct Busy(SlotHandle);

impl Drop for Busy {
    fn drop(&mut self) {
        let SlotHandle { slots, slot } = &self.0;
        slot.last_active.store(slots.now(), Ordering::Relaxed);
        slot.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.slots.open().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::IdleSlots;

    #[tokio::test]
    async fn the_connection_idle_longest_is_told_to_close_and_hands_its_permit_on() {
        let permits = Arc::new(tokio::sync::Semaphore::new(3));
        let slots = Arc::new(IdleSlots::new());
        let mut open: Vec<_> = (0..3)
            .map(|_| {
                let permit = Arc::clone(&permits).try_acquire_owned().unwrap();
                (slots.register(), permit)
            })
            .collect();
        // The first to arrive wrote since: the second is now idle longest.
        std::thread::sleep(Duration::from_millis(2));
        open[0].0.touch();
        let successor = slots.evict_longest_idle().expect("one to close");
        let (second, permit) = open.remove(1);
        tokio::time::timeout(Duration::from_secs(5), second.evicted())
            .await
            .expect("the second was told");
        let handoff = second.handoff();
        drop(second);
        handoff.pass(permit);
        // The permit went to the successor, not back to the semaphore.
        assert_eq!(permits.available_permits(), 0);
        let _kept = successor.await.expect("the permit handed on");

        // The third (never active since it arrived) goes next; its successor gave up waiting
        // (dropped), so its permit is released. The first closes on its own before being
        // chosen: its permit is released as well.
        drop(slots.evict_longest_idle().expect("one to close"));
        let (third, permit) = open.remove(1);
        tokio::time::timeout(Duration::from_secs(5), third.evicted())
            .await
            .expect("the third was told");
        let handoff = third.handoff();
        drop(third);
        handoff.pass(permit);
        assert_eq!(permits.available_permits(), 1);
        let (first, permit) = open.remove(0);
        let handoff = first.handoff();
        drop(first);
        handoff.pass(permit);
        assert_eq!(permits.available_permits(), 2);
        assert!(
            slots.evict_longest_idle().is_none(),
            "nothing left to close"
        );
    }

    #[test]
    fn a_connection_handling_a_request_is_never_chosen_and_trusted_ones_go_last() {
        let slots = Arc::new(IdleSlots::new());
        let (trusted, busy, fresh) = (slots.register(), slots.register(), slots.register());
        trusted.handle().trust();
        let request = busy.handle().busy();
        // The trusted one is the oldest, the busy one next: the newest goes first.
        drop(slots.evict_longest_idle().expect("one to close"));
        assert!(!slots.open().contains_key(&fresh.id));
        // Then the trusted one: the busy one is out of reach until its request ends.
        drop(slots.evict_longest_idle().expect("one to close"));
        assert!(!slots.open().contains_key(&trusted.id));
        assert!(slots.evict_longest_idle().is_none(), "only a busy one left");
        drop(request);
        drop(slots.evict_longest_idle().expect("idle again"));
        assert!(!slots.open().contains_key(&busy.id));
    }
}
