//! Host methods.

use xce_client::wire;
use xce_proto::xce_capnp::controller;

use super::{header_of, ControllerService};
use crate::state::Command;

pub(super) async fn list(
    this: &ControllerService,
    _params: controller::ListHostsParams,
    mut results: controller::ListHostsResults,
) -> Result<(), capnp::Error> {
    let mut hosts = this.node.read(|s| s.hosts()).await;
    if let Ok(hosts) = &mut hosts {
        for h in hosts.iter_mut() {
            h.queues_starts = this.agents.queues_starts(&h.name);
        }
    }
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header_of(&hosts));
    if let Ok(hosts) = hosts {
        let mut list = r.init_hosts(hosts.len() as u32);
        for (i, h) in hosts.iter().enumerate() {
            wire::write_host(list.reborrow().get(i as u32), h);
        }
    }
    Ok(())
}

pub(super) async fn control(
    this: &ControllerService,
    params: controller::HostControlParams,
    mut results: controller::HostControlResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let cmd = Command::ControlHost {
        token: wire::read_token(p.get_token()?),
        name: p.get_name()?.to_str()?.to_string(),
        action: p.get_action()?.into(),
    };
    let header = this.write_for_header(cmd).await;
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}
