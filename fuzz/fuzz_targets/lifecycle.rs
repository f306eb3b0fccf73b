//! The request lifecycle (target/src/core/request.rs) driven by any sequence of
//! events, checked against its reference model (`model::replay`): released
//! once, never with work in flight, no response after the queue went away.
//! Input: a byte of arrival flags, then one byte per event.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nvmf_target::request::lifecycle::model::{replay, Ev};

fuzz_target!(|b: &[u8]| {
    let Some((&f, evs)) = b.split_first() else {
        return;
    };
    let evs: Vec<Ev> = evs.iter().map(|&e| Ev::from_byte(e)).collect();
    if let Err(e) = replay(f & 1 != 0, f & 2 != 0, f & 4 != 0, &evs) {
        panic!("{e}: flags {f:#x}, events {evs:?}");
    }
});
