//! A snapshot's bytes, as a peer sends them or the store holds them: decoded as a
//! `StateRecord` and judged by `State::try_from_record`. Bytes that pass are a state that
//! keeps its invariants, encodes back to a state equal to it, and keeps them under the
//! commands that follow (the rest of the input, as in the `apply` target).

use xce_controller::state::{decode_state, State};

/// Fuzzes snapshot decoding and the checks a snapshot passes before it replaces anything.
pub fn run(data: &[u8]) {
    // The snapshot is first, its length in the first two bytes; the commands follow.
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let len = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    let (snapshot, commands) = rest.split_at(len);
    let Ok(record) = decode_state(snapshot) else {
        return;
    };
    let Ok(state) = State::try_from_record(record) else {
        return;
    };
    if let Err(e) = state.check_invariants() {
        panic!("an accepted snapshot breaks a rule: {e}");
    }
    let Ok(bytes) = state.snapshot_bytes() else {
        panic!("an accepted state does not encode");
    };
    match decode_state(&bytes).map(State::try_from_record) {
        Ok(Ok(again)) => assert_eq!(again, state, "a snapshot reads back the same"),
        other => panic!("an accepted state's snapshot is refused: {other:?}"),
    }
    crate::apply::apply_all(state, commands);
}
