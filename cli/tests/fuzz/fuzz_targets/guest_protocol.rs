//! The guest protocol parser never panics, gives the same text and messages however
//! the guest's writes are cut, and never hands on a piece of text holding this
//! run's whole header (text pieces on either side of a message may, joined, spell
//! one: that is printed output, never parsed again).
#![no_main]

#[path = "../checks/guest_protocol.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
