//! Plain-data types: the only types copied to and from DMA memory.
//!
//! The device (or a device model, or a faulty device) may leave any bytes
//! in DMA memory, and whatever the driver copies there is seen by the device
//! byte for byte. [`Pod`] marks the types for which both directions are
//! sound: every bit pattern is a valid value, and every byte of a value is
//! initialised.

use rnic_hw_regs::cmd::{
    AddressVector, AllocMwIn, AllocMwOut, AllocUctxIn, AllocUctxOut, CmdEntry, CmdHeader,
    CreateCqIn, CreateCqOut, CreateEqIn, CreateEqOut, CreatePdOut, CreateQpIn, CreateQpOut,
    CreateSrqIn, CreateSrqOut, ModifyQpIn, ModifySrqIn, ObjIn, QpAttrs, QueryDeviceOut, QueryGidIn,
    QueryGidOut, QueryPortIn, QueryPortOut, QuerySrqOut, RegMrIn, RegMrOut, ReregMrIn, ResizeCqIn,
    SetGidIn,
};
use rnic_hw_regs::counters::{CountersOut, QueryCountersIn};
use rnic_hw_regs::cqe::{Cqe, CqeFlags, CqeOwner};
use rnic_hw_regs::eqe::{Eqe, EqeOwner, EqeWord};
use rnic_hw_regs::uar::{CqDbRec, QpDbRec};
use rnic_hw_regs::wqe::{
    AtomicSeg, BindSeg, CtrlSeg, CtrlWord, DataSeg, DatagramSeg, InlineHdr, RaddrSeg, RecvWqeHdr,
};
use rnic_hw_regs::{le16, le32, le64};

/// A plain-data type: valid for every bit pattern, with no padding.
///
/// [`crate::DmaRegion::read`] and [`crate::DmaRegion::write`] (and the
/// command layer above them) accept only `Pod` types, because reading a
/// `bool`, an enum or a reference out of bytes a device wrote is undefined
/// behaviour, and so is viewing a value with padding bytes as bytes.
///
/// # Safety
///
/// An implementor must:
///
/// - have a defined layout: a primitive integer, an array of `Pod`, or a
///   `#[repr(C)]` / `#[repr(transparent)]` struct;
/// - have no padding: its size is the sum of its fields' sizes, so every byte
///   of every value is initialised;
/// - be valid for every bit pattern of its size: made only of integers and
///   other `Pod` types (no `bool`, `char`, enum, reference, pointer,
///   `NonZero*` or `UnsafeCell` anywhere inside).
pub unsafe trait Pod: Copy + 'static {}

macro_rules! pod_primitive {
    ($($t:ty),+ $(,)?) => { $(
        // SAFETY: a primitive integer (or the empty tuple): no padding, and
        // every bit pattern is a value.
        unsafe impl Pod for $t {}
    )+ };
}

pod_primitive!(
    (),
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize
);

// SAFETY: an array has no padding between its elements (a type's size is a
// multiple of its alignment) and is valid iff each element is.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

/// Size of the field `_field` selects, which must itself be [`Pod`].
const fn pod_field<S, F: Pod>(_field: fn(&S) -> &F) -> usize {
    core::mem::size_of::<F>()
}

/// Size of `T`, which must be [`Pod`].
const fn pod_size<T: Pod>() -> usize {
    core::mem::size_of::<T>()
}

/// Implements [`Pod`] for structs, given every field: a compile-time check
/// requires each field to be `Pod` and the fields' sizes to add up to the
/// struct's size (no padding; a forgotten field fails the check too).
macro_rules! pod_struct {
    ($($t:ty { $($f:tt),+ $(,)? })+) => { $(
        const _: () = assert!(
            core::mem::size_of::<$t>() == 0 $(+ pod_field(|s: &$t| &s.$f))+,
            concat!(stringify!($t), ": padding, or a field missing from the Pod list"),
        );
        // SAFETY: every field is `Pod` (the bound of `pod_field`) and they
        // fill the struct without padding (asserted above).
        unsafe impl Pod for $t {}
    )+ };
}

/// Implements [`Pod`] for `bitfield-struct` types, whose single field is
/// private: `#[bitfield(.., repr = R)]` declares `#[repr(transparent)] struct
/// Name(R)`. The size and alignment of `R` are checked at compile time.
macro_rules! pod_bitfield {
    ($($t:ty : $repr:ty),+ $(,)?) => { $(
        const _: () = assert!(
            core::mem::size_of::<$t>() == pod_size::<$repr>()
                && core::mem::align_of::<$t>() == core::mem::align_of::<$repr>(),
            concat!(stringify!($t), " is not a transparent ", stringify!($repr)),
        );
        // SAFETY: `repr(transparent)` over the `Pod` type `$repr` (generated
        // by bitfield-struct; `pod_size` requires `$repr: Pod`, and the
        // layout is checked above).
        unsafe impl Pod for $t {}
    )+ };
}

pod_struct! {
    le16 { 0 }
    le32 { 0 }
    le64 { 0 }
}

pod_bitfield!(
    CqeFlags: le32,
    CqeOwner: le32,
    EqeWord: le32,
    EqeOwner: le32,
    CtrlWord: le32,
);

// Completion and event queue entries.
pod_struct! {
    Cqe {
        wr_id, byte_len, imm, qpn, src_qp, wqe_counter, opcode, status, vendor_err, flags,
        pkey_index, slid, sl, reserved0, reserved, owner,
    }
    Eqe { word, obj, syndrome, reserved, owner }
}

// Work queue segments.
pod_struct! {
    CtrlSeg { word, imm, wr_id }
    RaddrSeg { raddr, rkey, reserved }
    AtomicSeg { swap_add, compare }
    DataSeg { byte_count, lkey, addr }
    BindSeg { mw_rkey, new_rkey, mr_lkey, access, va, length }
    InlineHdr { byte_count }
    RecvWqeHdr { wr_id, sge_count, reserved }
    DatagramSeg {
        dest_qpn, qkey, dgid, dmac, sgid_index, hop_limit, traffic_class, sl, reserved0,
        flow_label, reserved1,
    }
}

// Doorbell records.
pod_struct! {
    QpDbRec { rq_pi, sq_pi }
    CqDbRec { ci, reserved }
}

// The command queue entry and every command's input and output.
pod_struct! {
    CmdHeader { opcode, op_mod, status, token, reserved0, owner, syndrome, uid }
    CmdEntry { hdr, input, output }
    ObjIn { id }
    QueryDeviceOut {
        fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
        vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
        max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_qp_init_rd_atom, max_inline_data,
        atomic_cap, phys_port_cnt, max_msg_sz, local_ca_ack_delay, max_srq, max_srq_wr, max_srq_sge,
    }
    QueryPortIn { port }
    QueryPortOut {
        state, max_mtu, active_mtu, link_layer, gid_tbl_len, port_cap_flags, max_msg_sz,
        bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl,
        subnet_timeout, active_width, active_speed, phys_state, reserved0, mac, reserved1,
    }
    QueryGidIn { port, index }
    QueryGidOut { gid, gid_type, valid, reserved }
    SetGidIn { port, index, gid, gid_type, reserved }
    CreatePdOut { pdn }
    RegMrIn { pdn, access, va, length, iova }
    RegMrOut { lkey, rkey }
    ReregMrIn { lkey, flags, pdn, access, va, length, iova }
    AllocMwIn { pdn, mw_type }
    AllocMwOut { rkey }
    CreateCqIn { log_size, uar_page, eqn, reserved, buf_iova, dbrec_iova }
    CreateCqOut { cqn }
    ResizeCqIn { cqn, log_size, buf_iova, dbrec_iova }
    CreateQpIn {
        qp_type, sq_sig_all, log_rq_stride, reserved0, pdn, send_cqn, recv_cqn, srqn,
        log_sq_bbs, log_rq_wqes, max_inline, uar_page, reserved1, sq_iova, rq_iova, dbrec_iova,
    }
    CreateQpOut { qpn }
    AddressVector {
        dgid, flow_label, sgid_index, hop_limit, traffic_class, sl, dmac, port_num, is_global,
    }
    QpAttrs {
        qp_state, cur_qp_state, path_mtu, port_num, qp_access_flags, pkey_index, min_rnr_timer,
        timeout, retry_cnt, rnr_retry, max_rd_atomic, max_dest_rd_atomic, sq_psn, rq_psn,
        dest_qp_num, qkey, ah, en_sqd_async_notify, sq_draining, reserved,
    }
    ModifyQpIn { qpn, attr_mask, attrs }
    CreateSrqIn {
        pdn, log_wqes, log_stride, srq_limit, uar_page, reserved, buf_iova, dbrec_iova,
    }
    CreateSrqOut { srqn }
    ModifySrqIn { srqn, attr_mask, log_wqes, srq_limit, buf_iova }
    QuerySrqOut { max_wr, max_sge, srq_limit, reserved }
    CreateEqIn { log_size, vector, uar_page, reserved, buf_iova }
    CreateEqOut { eqn }
    AllocUctxIn { uar_pages }
    AllocUctxOut { uid, uar_first, uar_count }
    QueryCountersIn { scope, id, first }
    CountersOut { values }
}
