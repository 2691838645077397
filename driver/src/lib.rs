//! The rnic userspace RDMA driver: device bring-up and the verbs API.
//!
//! The driver reaches the device only through [`rnic_queues::Hal`]: BAR
//! registers and doorbells by MMIO, everything else through DMA memory
//! (command queue, event queue, work queues, completion queues, doorbell
//! records). It runs unchanged over the kernel VFIO backend and over the
//! device model.
//!
//! The API follows libibverbs:
//!
//! ```no_run
//! use rnic_driver::{
//!     access, qp_attr, Context, Mtu, Payload, QpAttr, QpCap, QpInit, QpState, QpType,
//!     RecvWr, SendOp, SendWr, WorkCompletion, send_flags,
//! };
//!
//! fn ping<H: rnic_queues::Hal>(hal: H) -> Result<(), rnic_driver::Error> {
//!     let ctx = Context::open(hal)?;
//!     let pd = ctx.alloc_pd()?;
//!     let mr = pd.alloc_mr(4096, access::LOCAL_WRITE)?;
//!     let cq = ctx.create_cq(64)?;
//!     let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 64 };
//!     let qp = pd.create_qp(&QpInit {
//!         send_cq: &cq, recv_cq: &cq, srq: None, cap, qp_type: QpType::Rc, sq_sig_all: false,
//!     })?;
//!     qp.modify(
//!         &QpAttr { qp_state: QpState::Init, port_num: 1, ..QpAttr::default() },
//!         qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
//!     )?;
//!     let mut rtr = QpAttr { qp_state: QpState::Rtr, path_mtu: Some(Mtu::Mtu1024), ..QpAttr::default() };
//!     rtr.dest_qp_num = qp.qp_num(); // loopback to itself
//!     rtr.ah_attr.dgid = ctx.query_gid(1, 0)?;
//!     rtr.ah_attr.port_num = 1;
//!     rtr.ah_attr.is_global = true;
//!     qp.modify(&rtr, qp_attr::STATE | qp_attr::AV | qp_attr::PATH_MTU | qp_attr::DEST_QPN
//!         | qp_attr::RQ_PSN | qp_attr::MAX_DEST_RD_ATOMIC | qp_attr::MIN_RNR_TIMER)?;
//!     qp.modify(&QpAttr { qp_state: QpState::Rts, ..QpAttr::default() },
//!         qp_attr::STATE | qp_attr::SQ_PSN | qp_attr::TIMEOUT | qp_attr::RETRY_CNT
//!         | qp_attr::RNR_RETRY | qp_attr::MAX_QP_RD_ATOMIC)?;
//!
//!     qp.post_recv(&[RecvWr { wr_id: 1, sg_list: &[mr.sge(0, 2048)?] }])?;
//!     qp.post_send(&[SendWr {
//!         wr_id: 2,
//!         op: SendOp::Send,
//!         payload: Payload::Inline(b"hello"),
//!         flags: send_flags::SIGNALED,
//!     }])?;
//!     let mut wc = [WorkCompletion::default(); 4];
//!     let mut seen = 0;
//!     while seen < 2 {
//!         seen += cq.poll(&mut wc[seen..])?;
//!     }
//!     Ok(())
//! }
//! ```
//!
//! Objects hold reference-counted handles on what the device makes them
//! depend on (an MR or QP on its PD, a QP on its CQs, everything on the
//! context), so dropping in any order is safe; `destroy` reports the
//! device's answer and hands the object back if the device refused (a
//! destroy that timed out gives the object up instead: see
//! [`DestroyError`]).
//!
//! The data path (`post_send`, `post_recv`, `poll`) allocates nothing and
//! takes the spin lock of the queue it works on (the send queue, receive
//! queue or CQ), contended only by threads using the same queue; an SRQ's
//! `post_recv` also takes, once per call, its slot table's lock, which the
//! pollers of its QPs' CQs take for each receive completion they retire
//! from it. `poll` finds each completion's QP in its CQ's own table,
//! touching no context-wide state.
#![no_std]
#![deny(missing_docs)]

extern crate alloc;

mod ah;
mod attr;
mod bringup;
mod channel;
mod cmd;
mod context;
mod counters;
mod cq;
mod dma;
mod error;
mod event;
mod mr;
mod mw;
mod pd;
mod provider;
mod qp;
mod srq;
mod wc;
mod wqe;

#[cfg(test)]
mod tests;

pub use ah::{Ah, GRH_LEN};
pub use bringup::Config;
pub use channel::CompChannel;
pub use context::{Context, DeviceHandle, EventHook};
pub use counters::{counter, Counters};
pub use cq::Cq;
pub use error::{CmdFailure, DestroyError, Error, ErrorKind, PostError, Refusal, Result};
pub use event::AsyncEvent;
pub use mr::Mr;
pub use mw::Mw;
pub use pd::Pd;
pub use qp::Qp;
pub use rnic_verbs::provider::QpInit;
pub use srq::Srq;
pub use wc::syndrome;

pub use rnic_hw_regs::cmd::{CmdOpcode, CmdStatus};
pub use rnic_hw_regs::cqe::Syndrome;
pub use rnic_hw_regs::eqe::EventType;
pub use rnic_verbs::{
    access, qp_attr, send_flags, srq_mask, wc_flags, AhAttr, DeviceAttr, Gid, GidType, LinkLayer,
    Mtu, MwBind, MwType, Payload, PortAttr, PortState, QpAttr, QpCap, QpState, QpType, RecvWr,
    RemoteAddr, SendOp, SendWr, Sge, SrqAttr, UdDest, WcOpcode, WcStatus, WorkCompletion,
};
