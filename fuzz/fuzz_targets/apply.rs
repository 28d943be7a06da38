//! cargo-fuzz target `apply`: the body is `xce_fuzzing::apply::run`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xce_fuzzing::apply::run(data));
