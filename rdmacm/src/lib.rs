//! `rnic-rdmacm`: a drop-in `librdmacm.so.1`, so that unmodified programs
//! that connect through the RDMA connection manager (`rping`,
//! `ucmatose`, applications written against librdmacm) run over rnic,
//! with no kernel `rdma_cm`.
//!
//! Where rdma-core's librdmacm asks the kernel (`/dev/infiniband/rdma_cm`)
//! to speak the InfiniBand CM, this library speaks it itself: each device
//! port's CM ([`port`]) owns the device's general services QP, made
//! through the drop-in libibverbs' `rnic_create_gsi_qp`, and runs
//! `rnic_cm`'s protocol on it; a thread ([`cm`]) takes the MADs and
//! timers as they come, and the program's IDs ([`id`]) and event channels
//! ([`channel`]) are what librdmacm's are. `ibverbs/build.sh` links this
//! crate's static library into `target/ibverbs/librdmacm.so.1` with
//! librdmacm's symbol versions (`rdmacm/librdmacm.map`), against the
//! drop-in `libibverbs.so.1`. docs/rdmacm.md says what is served.

pub mod abi;
mod channel;
mod cm;
mod ep;
mod errno;
mod id;
mod misc;
mod port;
mod verbs;

pub use channel::{
    rdma_ack_cm_event, rdma_create_event_channel, rdma_destroy_event_channel, rdma_get_cm_event,
};
pub use ep::{rdma_create_ep, rdma_destroy_ep, rdma_get_request};
pub use id::{
    rdma_accept, rdma_bind_addr, rdma_connect, rdma_create_id, rdma_create_qp, rdma_destroy_id,
    rdma_destroy_qp, rdma_disconnect, rdma_establish, rdma_get_dst_port, rdma_get_src_port,
    rdma_init_qp_attr, rdma_listen, rdma_reject, rdma_resolve_addr, rdma_resolve_route,
};
pub use misc::*;
