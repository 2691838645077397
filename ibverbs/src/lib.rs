//! `rnic-ibverbs`: a drop-in `libibverbs.so.1`, so that unmodified RDMA
//! programs (rdma-core's utilities, perftest, applications written
//! against libibverbs) run over rnic with `LD_LIBRARY_PATH`, without
//! rdma-core, a kernel module or a provider.
//!
//! `ibverbs/build.sh` links this crate's static library into
//! `target/ibverbs/libibverbs.so.1` with libibverbs' symbol versions
//! (`ibverbs/libibverbs.map`). The structures programs see are laid out
//! exactly as rdma-core 44's `infiniband/verbs.h` ([`abi`], checked
//! against the header by the tests). The devices come from a
//! configuration ([`config`]). docs/ibverbs.md says what is served.

pub use rnic_verbs_abi as abi;
mod ah;
mod any;
mod async_fd;
mod channel;
pub mod config;
mod context;
mod cq;
mod cq_ex;
mod device;
mod errno;
mod event;
mod fork;
mod live;
pub mod marshall;
mod mw;
mod names;
mod pd;
mod platform;
mod post;
mod provider;
mod qp;
mod qp_ex;
mod rate;
mod srq;
mod sysfs;

pub use ah::{ibv_create_ah, ibv_create_ah_from_wc, ibv_destroy_ah, ibv_init_ah_from_wc};
pub use channel::{ibv_create_comp_channel, ibv_destroy_comp_channel, ibv_get_cq_event};
pub use context::{
    _ibv_query_gid_ex, _ibv_query_gid_table, ibv_close_device, ibv_get_pkey_index, ibv_open_device,
    ibv_query_device, ibv_query_gid, ibv_query_gid_type, ibv_query_pkey, ibv_query_port,
    ibv_resolve_eth_l2_from_gid,
};
pub use cq::{ibv_ack_cq_events, ibv_create_cq, ibv_destroy_cq, ibv_resize_cq};
pub use device::{
    ibv_free_device_list, ibv_get_device_guid, ibv_get_device_index, ibv_get_device_list,
    ibv_get_device_name, ibv_get_sysfs_path, ibv_import_device,
};
pub use event::{ibv_ack_async_event, ibv_get_async_event};
pub use fork::{ibv_dofork_range, ibv_dontfork_range, ibv_fork_init, ibv_is_fork_initialized};
pub use names::{ibv_event_type_str, ibv_node_type_str, ibv_port_state_str, ibv_wc_status_str};
pub use pd::{
    ibv_alloc_pd, ibv_dealloc_pd, ibv_dereg_mr, ibv_import_dm, ibv_import_mr, ibv_import_pd,
    ibv_reg_dmabuf_mr, ibv_reg_mr, ibv_reg_mr_iova, ibv_reg_mr_iova2, ibv_rereg_mr,
    ibv_unimport_dm, ibv_unimport_mr, ibv_unimport_pd,
};
pub use provider::*;
pub use qp::{
    ibv_attach_mcast, ibv_create_qp, ibv_destroy_qp, ibv_detach_mcast, ibv_modify_qp,
    ibv_qp_to_qp_ex, ibv_query_ece, ibv_query_qp, ibv_query_qp_data_in_order, ibv_set_ece,
};
pub use rate::{ibv_rate_to_mbps, ibv_rate_to_mult, mbps_to_ibv_rate, mult_to_ibv_rate};
pub use srq::{ibv_create_srq, ibv_destroy_srq, ibv_modify_srq, ibv_query_srq};
pub use sysfs::ibv_read_sysfs_file;
