//! cargo-fuzz target `wire`: the body is `xce_fuzzing::wire::run`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xce_fuzzing::wire::run(data));
