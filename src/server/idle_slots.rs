//! Who has been idle longest among a listener's open connections, so that at the connection
//! limit a new connection takes the slot of the one idle longest instead of being refused.
//!
//! Without it, the first `limit` connections to arrive kept their slots until their idle
//! timeout (5 minutes for Graphite, the 30 s header timeout for HTTP): 1,500 idle sockets
//! locked every real collector out for that long. A collector that writes is never the one
//! idle longest while idle sockets exist, so it keeps its slot; an attacker must now keep
//! every one of its sockets busier than the real writers to hold them.
//!
//! What counts as activity is the listener's: Graphite marks every read
//! ([`ConnectionSlot::touch`]). HTTP marks the end of each request and holds a connection
//! whose request is being handled out of reach ([`SlotHandle::busy`]); bytes of a head still
//! arriving do not count, so a client trickling one never looks busy. A connection whose
//! request presented a token the server accepted ([`SlotHandle::trust`]) is chosen only once
//! no other is idle, so clients without a token cannot push out the ones with one.
//!
//! The registry also owns the slots themselves, and every change to who holds one happens
//! under its one lock: admitting a connection ([`IdleSlots::admit`]: a free slot, else the one
//! idle longest told to close, else refused) and a connection's end ([`Registration`]'s drop:
//! unregistered, and its slot passed on or freed, in one step). With the two steps apart, a
//! connection arriving between them found the closing one neither in the registry nor its
//! slot free, and was refused although no connection was busy. The closed connection hands
//! its slot straight to the one that made room: freed instead, the slot could go to a
//! connection accepted in between, and the one that made room would find none.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::Notify;

/// The open connections of one listener and its slots (its connection limit).
pub(crate) struct IdleSlots {
    /// Origin of the connections' activity times.
    epoch: Instant,
    /// Who holds which slot; every change to it happens under this one lock.
    registry: Mutex<Registry>,
}

/// What [`IdleSlots::registry`] guards.
struct Registry {
    /// Slots no connection holds.
    free: usize,
    /// The next connection's id (its accept order, which breaks ties in activity time).
    next_id: u64,
    /// Connections registered and not yet told to close, by id.
    open: HashMap<u64, Arc<Slot>>,
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
    /// Notified when the slot the connection waits for has come to it.
    arrived: Notify,
    /// Whether it holds a slot and where that goes; locked only under the registry's lock
    /// (or alone, to read).
    tenure: Mutex<Tenure>,
}

/// A connection's hold on a slot.
#[derive(Default)]
struct Tenure {
    /// The connection holds one of the listener's slots.
    holds: bool,
    /// The connection has ended (its [`Registration`] dropped).
    ended: bool,
    /// The connection that made room by closing this one: the slot goes to it.
    successor: Option<Arc<Slot>>,
}

/// How [`IdleSlots::admit`] let a new connection in.
pub(crate) enum Admission {
    /// A slot was free: the connection holds it.
    Free(Registration),
    /// The connection idle longest was told to close; its slot comes to this one once it has
    /// ([`Registration::arrived`]).
    MadeRoom(Registration),
    /// No connection can be chosen (every one is handling a request, or already closing to
    /// make room for another): the new one is refused.
    Full,
}

/// A connection's place in the registry, held by whoever runs the connection until it has
/// ended. Dropping it unregisters the connection and, in the same step, passes its slot to
/// the connection that made room by closing it, or frees the slot.
pub(crate) struct Registration {
    slots: Arc<IdleSlots>,
    id: u64,
    slot: Arc<Slot>,
}

/// What a connection marks its activity through and learns from that it must close.
pub(crate) struct ConnectionSlot {
    slots: Arc<IdleSlots>,
    slot: Arc<Slot>,
}

impl IdleSlots {
    /// No connections yet, `limit` slots free.
    pub(crate) fn new(limit: usize) -> IdleSlots {
        IdleSlots {
            epoch: Instant::now(),
            registry: Mutex::new(Registry {
                free: limit,
                next_id: 0,
                open: HashMap::new(),
            }),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        lock(&self.registry)
    }

    /// Lets a new connection in: into a free slot; else into the slot of the connection idle
    /// longest (untrusted ones first, the earliest accepted among equals), which is told to
    /// close and forgotten, so the next call picks another; else not at all
    /// ([`Admission::Full`]). The new connection is registered after the choice, so it never
    /// makes room by closing itself.
    pub(crate) fn admit(self: &Arc<Self>) -> Admission {
        let mut registry = self.registry();
        if registry.free > 0 {
            registry.free -= 1;
            return Admission::Free(self.register(&mut registry, true));
        }
        let victim = registry
            .open
            .iter()
            .filter(|(_, slot)| slot.busy.load(Ordering::Relaxed) == 0)
            .min_by_key(|(id, slot)| {
                (
                    slot.trusted.load(Ordering::Relaxed),
                    slot.last_active.load(Ordering::Relaxed),
                    **id,
                )
            })
            .map(|(id, _)| *id);
        let Some(victim) = victim.and_then(|id| registry.open.remove(&id)) else {
            return Admission::Full;
        };
        let registration = self.register(&mut registry, false);
        lock(&victim.tenure).successor = Some(Arc::clone(&registration.slot));
        // Stores a permit when the connection is not waiting right now.
        victim.evict.notify_one();
        Admission::MadeRoom(registration)
    }

    /// Registers a connection, active now, holding a slot or waiting for one.
    fn register(self: &Arc<Self>, registry: &mut Registry, holds: bool) -> Registration {
        let id = registry.next_id;
        registry.next_id += 1;
        let slot = Arc::new(Slot {
            last_active: AtomicU64::new(self.now()),
            busy: AtomicUsize::new(0),
            trusted: AtomicBool::new(false),
            evict: Notify::new(),
            arrived: Notify::new(),
            tenure: Mutex::new(Tenure {
                holds,
                ..Tenure::default()
            }),
        });
        registry.open.insert(id, Arc::clone(&slot));
        Registration {
            slots: Arc::clone(self),
            id,
            slot,
        }
    }
}

/// `mutex`'s guard; what it guards is changed in steps that a panic cannot leave half done.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Registration {
    /// Completes once the connection holds its slot: at once when one was free, else when
    /// the connection closed to make room for it has ended.
    pub(crate) async fn arrived(&self) {
        while !lock(&self.slot.tenure).holds {
            self.slot.arrived.notified().await;
        }
    }

    /// What the connection itself marks its activity through.
    pub(crate) fn connection(&self) -> ConnectionSlot {
        ConnectionSlot {
            slots: Arc::clone(&self.slots),
            slot: Arc::clone(&self.slot),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut registry = self.slots.registry();
        registry.open.remove(&self.id);
        let mut tenure = lock(&self.slot.tenure);
        tenure.ended = true;
        if !std::mem::take(&mut tenure.holds) {
            // Gave up waiting: the slot it waited for goes past it when it comes.
            return;
        }
        // To the connection that made room by closing this one; past those that gave up
        // waiting, to the one that made room by closing them.
        let mut next = tenure.successor.take();
        drop(tenure);
        while let Some(slot) = next {
            let mut tenure = lock(&slot.tenure);
            if !tenure.ended {
                tenure.holds = true;
                drop(tenure);
                slot.arrived.notify_one();
                return;
            }
            next = tenure.successor.clone();
        }
        registry.free += 1;
    }
}

impl ConnectionSlot {
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

#[cfg(test)]
mod tests;
