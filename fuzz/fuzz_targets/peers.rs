//! cargo-fuzz target `peers`: the body is `xce_fuzzing::peers::run`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xce_fuzzing::peers::run(data));
