//! cargo-fuzz target `raft`: the body is `xce_fuzzing::raft::run`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xce_fuzzing::raft::run(data));
