use std::sync::Arc;
use std::time::Duration;

use super::{lock, Admission, IdleSlots, Registration};

/// The registration of an admitted connection; panics when it was refused.
fn admitted(admission: Admission) -> Registration {
    match admission {
        Admission::Free(registration) | Admission::MadeRoom(registration) => registration,
        Admission::Full => panic!("refused"),
    }
}

fn holds(registration: &Registration) -> bool {
    lock(&registration.slot.tenure).holds
}

fn registered(slots: &IdleSlots, registration: &Registration) -> bool {
    slots.registry().open.contains_key(&registration.id)
}

#[tokio::test]
async fn the_connection_idle_longest_is_told_to_close_and_hands_its_slot_on() {
    let slots = Arc::new(IdleSlots::new(3));
    let mut open: Vec<Registration> = (0..3)
        .map(|_| match slots.admit() {
            Admission::Free(registration) => registration,
            _ => panic!("a free slot expected"),
        })
        .collect();
    // The first to arrive wrote since: the second is now idle longest.
    std::thread::sleep(Duration::from_millis(2));
    open[0].connection().touch();
    let Admission::MadeRoom(fourth) = slots.admit() else {
        panic!("room made expected")
    };
    let second = open.remove(1);
    tokio::time::timeout(Duration::from_secs(5), second.connection().evicted())
        .await
        .expect("the second was told");
    assert!(!holds(&fourth), "its slot comes once the second has ended");
    drop(second);
    // The slot went to the one that made room, not back to the free ones.
    tokio::time::timeout(Duration::from_secs(5), fourth.arrived())
        .await
        .expect("the slot handed on");
    assert_eq!(slots.registry().free, 0);

    // The third (never active since it arrived) goes next; the one that made room gave up
    // waiting (ended first), so the slot is freed. The first ends on its own before being
    // chosen: its slot is freed as well.
    let Admission::MadeRoom(gave_up) = slots.admit() else {
        panic!("room made expected")
    };
    drop(gave_up);
    let third = open.remove(1);
    drop(third);
    assert_eq!(slots.registry().free, 1);
    drop(open.remove(0));
    assert_eq!(slots.registry().free, 2);
    drop(fourth);
    assert_eq!(slots.registry().free, 3);
}

#[test]
fn a_connection_handling_a_request_is_never_chosen_and_trusted_ones_go_last() {
    let slots = Arc::new(IdleSlots::new(3));
    let [trusted, busy, fresh] = [(); 3].map(|()| admitted(slots.admit()));
    trusted.connection().handle().trust();
    let request = busy.connection().handle().busy();
    // The trusted one is the oldest, the busy one next: the newest goes first. (Each one
    // let in below handles a request at once, so it is not chosen itself.)
    let first = admitted(slots.admit());
    let _first_request = first.connection().handle().busy();
    assert!(!registered(&slots, &fresh));
    // Then the trusted one: the busy one is out of reach until its request ends.
    let second = admitted(slots.admit());
    let _second_request = second.connection().handle().busy();
    assert!(!registered(&slots, &trusted));
    assert!(
        matches!(slots.admit(), Admission::Full),
        "only busy ones left"
    );
    drop(request);
    let _third = admitted(slots.admit());
    assert!(!registered(&slots, &busy));
}

/// The race behind a refusal seen under load (issue 56 item 14): a connection ending left
/// the registry, and only afterwards, in a separate step, released its slot. A connection
/// arriving in between found no free slot and no connection to close, and was refused (an
/// HTTP client was answered 503 though no request was being handled). Ending is now one step
/// under the registry's lock: the moment a connection can no longer be chosen to make room,
/// its slot is free or on its way to the one that made room.
#[test]
fn a_connection_that_ends_frees_its_slot_in_the_same_step_as_it_leaves_the_registry() {
    let slots = Arc::new(IdleSlots::new(1));
    let only = admitted(slots.admit());
    drop(only);
    let next = match slots.admit() {
        Admission::Free(registration) => registration,
        Admission::MadeRoom(_) => panic!("the ended connection was still registered"),
        Admission::Full => panic!("refused: the ended connection's slot was not free"),
    };
    // And when one made room, the slot is its own as the closed one leaves.
    let waiting = admitted(slots.admit());
    assert!(!holds(&waiting));
    drop(next);
    assert!(holds(&waiting));
    assert!(registered(&slots, &waiting));
}
