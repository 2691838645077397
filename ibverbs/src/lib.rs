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
//! configuration ([`config`]). docs/ibverbs.md says what is served so
//! far.

pub mod abi;
mod ah;
mod channel;
pub mod config;
mod context;
mod cq;
mod device;
mod errno;
mod live;
mod pd;
mod qp;
mod srq;
mod sysfs;

pub use ah::{ibv_create_ah, ibv_destroy_ah};
pub use channel::{ibv_create_comp_channel, ibv_destroy_comp_channel, ibv_get_cq_event};
pub use context::{
    ibv_close_device, ibv_open_device, ibv_query_device, ibv_query_gid, ibv_query_gid_type,
    ibv_query_port,
};
pub use cq::{ibv_ack_cq_events, ibv_create_cq, ibv_destroy_cq, ibv_wc_status_str};
pub use device::{
    ibv_free_device_list, ibv_get_device_guid, ibv_get_device_list, ibv_get_device_name,
};
pub use pd::{ibv_alloc_pd, ibv_dealloc_pd, ibv_dereg_mr, ibv_reg_mr, ibv_reg_mr_iova2};
pub use qp::{ibv_create_qp, ibv_destroy_qp, ibv_modify_qp, ibv_qp_to_qp_ex, ibv_query_qp};
pub use srq::{ibv_create_srq, ibv_destroy_srq, ibv_modify_srq, ibv_query_srq};
pub use sysfs::ibv_read_sysfs_file;
