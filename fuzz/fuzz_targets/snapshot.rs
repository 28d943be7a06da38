//! cargo-fuzz target `snapshot`: the body is `xce_fuzzing::snapshot::run`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xce_fuzzing::snapshot::run(data));
