//! Queue methods.

use xce_client::wire;
use xce_proto::xce_capnp::controller;

use super::{header_of, ControllerService};
use crate::state::Command;

pub(super) async fn list(
    this: &ControllerService,
    _params: controller::ListQueuesParams,
    mut results: controller::ListQueuesResults,
) -> Result<(), capnp::Error> {
    let mut queues = this.node.read(|s| s.queues()).await;
    // A queue's time rules are this controller's configuration, as it judges submits.
    if let Ok(queues) = &mut queues {
        for q in queues.iter_mut() {
            let time = this.node.job_rules.queue_time(&q.name);
            q.default_time_s = time.default_s;
            q.max_time_s = time.max_s;
        }
    }
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header_of(&queues));
    if let Ok(queues) = queues {
        let mut list = r.init_queues(queues.len() as u32);
        for (i, q) in queues.iter().enumerate() {
            wire::write_queue(list.reborrow().get(i as u32), q);
        }
    }
    Ok(())
}

pub(super) async fn control(
    this: &ControllerService,
    params: controller::QueueControlParams,
    mut results: controller::QueueControlResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let cmd = Command::ControlQueue {
        token: wire::read_token(p.get_token()?),
        name: p.get_name()?.to_str()?.to_string(),
        action: p.get_action()?.into(),
    };
    let header = this.write_for_header(cmd).await;
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}
