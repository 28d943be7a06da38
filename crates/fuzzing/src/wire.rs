//! The capnp → domain conversions (`xce_client::wire`) every side of every connection runs
//! on what it receives: the first byte picks the struct, the rest is a capnp message. Any
//! bytes are a value or an error, and a value written back reads back the same.

use capnp::message::{Builder, ReaderOptions};
use xce_client::wire;
use xce_proto::xce_capnp as w;

/// Reads the root as `$module`, converts it, writes it back and reads that again.
macro_rules! round_trip {
    ($msg:expr, $module:ident, $read:path, $write:path) => {{
        let Ok(root) = $msg.get_root::<w::$module::Reader<'_>>() else {
            return;
        };
        let Ok(value) = $read(root) else { return };
        let mut out = Builder::new_default();
        $write(out.init_root::<w::$module::Builder<'_>>(), &value);
        let Ok(back) = out.get_root_as_reader::<w::$module::Reader<'_>>() else {
            panic!("a message we built has no root");
        };
        match $read(back) {
            Ok(again) => assert_eq!(again, value, "{} reads back", stringify!($module)),
            Err(e) => panic!(
                "{} written from a value does not read: {e}",
                stringify!($module)
            ),
        }
    }};
}

/// Fuzzes the conversions of every struct that crosses a connection.
pub fn run(data: &[u8]) {
    let Some((&which, mut rest)) = data.split_first() else {
        return;
    };
    let options = ReaderOptions {
        traversal_limit_in_words: Some(1 << 16),
        nesting_limit: 16,
    };
    let Ok(msg) = capnp::serialize::read_message_from_flat_slice(&mut rest, options) else {
        return;
    };
    match which % 17 {
        0 => round_trip!(msg, job_spec, wire::read_spec, wire::write_spec),
        1 => round_trip!(msg, job, wire::read_job, wire::write_job),
        2 => round_trip!(msg, job_filter, wire::read_filter, wire::write_filter),
        3 => round_trip!(msg, queue, wire::read_queue, wire::write_queue),
        4 => round_trip!(msg, cluster_info, wire::read_cluster, wire::write_cluster),
        5 => round_trip!(
            msg,
            token_info,
            wire::read_token_info,
            wire::write_token_info
        ),
        6 => round_trip!(msg, placement, wire::read_placement, wire::write_placement),
        7 => round_trip!(msg, refusal, wire::read_refusal, wire::write_refusal),
        8 => round_trip!(msg, host, wire::read_host, wire::write_host),
        9 => round_trip!(msg, job_users, wire::read_job_users, wire::write_job_users),
        10 => round_trip!(
            msg,
            host_attributes,
            wire::read_attributes,
            wire::write_attributes
        ),
        11 => round_trip!(msg, job_end, wire::read_end, wire::write_end),
        12 => round_trip!(msg, job_order, wire::read_order, wire::write_order),
        13 => round_trip!(msg, held_job, wire::read_held, wire::write_held),
        14 => round_trip!(
            msg,
            event_filter,
            wire::read_event_filter,
            wire::write_event_filter
        ),
        15 => round_trip!(msg, event, wire::read_event, wire::write_event),
        _ => round_trip!(msg, reply_header, wire::read_header, wire::write_header),
    }
}
