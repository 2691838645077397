//! Copies between the kernel's uverbs structures and libibverbs' own
//! (`ibv_copy_qp_attr_from_kern`, `ibv_copy_ah_attr_from_kern`,
//! `ibv_copy_path_rec_from_kern`, `ibv_copy_path_rec_to_kern`):
//! librdmacm turns the kernel RDMA CM's answers into verbs structures
//! with them. The structures are laid out as `rdma/ib_user_verbs.h`,
//! `rdma/ib_user_sa.h` and `infiniband/sa.h` (the tests compare them).

use crate::abi::{IbvAhAttr, IbvGid, IbvQpAttr};

/// `struct ib_uverbs_global_route`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct KernGlobalRoute {
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Flow label.
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Reserved.
    pub reserved: u8,
}

/// `struct ib_uverbs_ah_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct KernAhAttr {
    /// The GRH.
    pub grh: KernGlobalRoute,
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// Whether the GRH is used.
    pub is_global: u8,
    /// Port.
    pub port_num: u8,
    /// Reserved.
    pub reserved: u8,
}

/// `struct ib_uverbs_qp_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)] // ibv_qp_attr's fields, documented there.
pub struct KernQpAttr {
    pub qp_attr_mask: u32,
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub ah_attr: KernAhAttr,
    pub alt_ah_attr: KernAhAttr,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 5],
}

/// The fields a path record has on both sides, in one order, so that
/// each copy names them once.
macro_rules! path_fields {
    ($m:ident) => {
        $m!(
            dlid,
            slid,
            raw_traffic,
            flow_label,
            hop_limit,
            traffic_class,
            reversible,
            numb_path,
            pkey,
            sl,
            mtu_selector,
            mtu,
            rate_selector,
            rate,
            packet_life_time,
            preference,
            packet_life_time_selector
        )
    };
}

/// `struct ib_user_path_rec`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)] // ibv_sa_path_rec's fields (IBA 15.2.5.16).
pub struct KernPathRec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: u32,
    pub flow_label: u32,
    pub reversible: u32,
    pub mtu: u32,
    pub pkey: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ibv_sa_path_rec` (`infiniband/sa.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)] // A path record's fields (IBA 15.2.5.16).
pub struct IbvSaPathRec {
    pub dgid: IbvGid,
    pub sgid: IbvGid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: i32,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: i32,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `dst`'s fields from `src`, field by field as libibverbs copies them
/// (what lies between them stays as it was).
fn ah_from_kern(d: &mut IbvAhAttr, s: &KernAhAttr) {
    d.grh.dgid.raw = s.grh.dgid;
    d.grh.flow_label = s.grh.flow_label;
    d.grh.sgid_index = s.grh.sgid_index;
    d.grh.hop_limit = s.grh.hop_limit;
    d.grh.traffic_class = s.grh.traffic_class;
    d.dlid = s.dlid;
    d.sl = s.sl;
    d.src_path_bits = s.src_path_bits;
    d.static_rate = s.static_rate;
    d.is_global = s.is_global;
    d.port_num = s.port_num;
}

/// `ibv_copy_ah_attr_from_kern`: `*dst` from the kernel's `*src`.
///
/// # Safety
///
/// `dst` and `src` point to a writable `struct ibv_ah_attr` and a
/// `struct ib_uverbs_ah_attr` (as in libibverbs, not checked for NULL:
/// the function has no way to fail).
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_ah_attr_from_kern(dst: *mut IbvAhAttr, src: *const KernAhAttr) {
    // SAFETY: the caller's promise.
    unsafe { ah_from_kern(&mut *dst, &*src) }
}

/// `ibv_copy_qp_attr_from_kern`: `*dst`'s fields from the kernel's
/// `*src`, all but `qp_state` (and `rate_limit`), which libibverbs leaves
/// as they were too.
///
/// # Safety
///
/// As for [`ibv_copy_ah_attr_from_kern`], for a `struct ibv_qp_attr` and
/// a `struct ib_uverbs_qp_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_qp_attr_from_kern(dst: *mut IbvQpAttr, src: *const KernQpAttr) {
    // SAFETY: the caller's promise.
    let (d, s) = unsafe { (&mut *dst, &*src) };
    d.cur_qp_state = s.cur_qp_state as i32;
    d.path_mtu = s.path_mtu as i32;
    d.path_mig_state = s.path_mig_state as i32;
    d.qkey = s.qkey;
    d.rq_psn = s.rq_psn;
    d.sq_psn = s.sq_psn;
    d.dest_qp_num = s.dest_qp_num;
    d.qp_access_flags = s.qp_access_flags;
    d.cap.max_send_wr = s.max_send_wr;
    d.cap.max_recv_wr = s.max_recv_wr;
    d.cap.max_send_sge = s.max_send_sge;
    d.cap.max_recv_sge = s.max_recv_sge;
    d.cap.max_inline_data = s.max_inline_data;
    ah_from_kern(&mut d.ah_attr, &s.ah_attr);
    ah_from_kern(&mut d.alt_ah_attr, &s.alt_ah_attr);
    d.pkey_index = s.pkey_index;
    d.alt_pkey_index = s.alt_pkey_index;
    d.en_sqd_async_notify = s.en_sqd_async_notify;
    d.sq_draining = s.sq_draining;
    d.max_rd_atomic = s.max_rd_atomic;
    d.max_dest_rd_atomic = s.max_dest_rd_atomic;
    d.min_rnr_timer = s.min_rnr_timer;
    d.port_num = s.port_num;
    d.timeout = s.timeout;
    d.retry_cnt = s.retry_cnt;
    d.rnr_retry = s.rnr_retry;
    d.alt_port_num = s.alt_port_num;
    d.alt_timeout = s.alt_timeout;
}

/// `ibv_copy_path_rec_from_kern`: `*dst` from the kernel's `*src`.
///
/// # Safety
///
/// As for [`ibv_copy_ah_attr_from_kern`], for a `struct ibv_sa_path_rec`
/// and a `struct ib_user_path_rec`.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_from_kern(
    dst: *mut IbvSaPathRec,
    src: *const KernPathRec,
) {
    // SAFETY: the caller's promise.
    let (d, s) = unsafe { (&mut *dst, &*src) };
    d.dgid.raw = s.dgid;
    d.sgid.raw = s.sgid;
    macro_rules! copy {
        ($($f:ident),*) => { $(d.$f = s.$f as _;)* };
    }
    path_fields!(copy);
}

/// `ibv_copy_path_rec_to_kern`: the kernel's `*dst` from `*src`.
///
/// # Safety
///
/// As for [`ibv_copy_path_rec_from_kern`], the other way.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_to_kern(
    dst: *mut KernPathRec,
    src: *const IbvSaPathRec,
) {
    // SAFETY: the caller's promise.
    let (d, s) = unsafe { (&mut *dst, &*src) };
    d.dgid = s.dgid.raw;
    d.sgid = s.sgid.raw;
    macro_rules! copy {
        ($($f:ident),*) => { $(d.$f = s.$f as _;)* };
    }
    path_fields!(copy);
}
