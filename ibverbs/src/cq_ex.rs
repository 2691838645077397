//! The polling interface of `struct ibv_cq_ex`: `start_poll`,
//! `next_poll`, `end_poll` and the `read_*` entries that the header's
//! inline `ibv_start_poll`, `ibv_next_poll`, `ibv_end_poll` and
//! `ibv_wc_read_*` call. Every CQ has it; `ibv_create_cq_ex` is how a
//! program gets a pointer to it.

use rnic_verbs::provider::CompletionQueue;
use std::ffi::{c_int, c_void};

use rnic_verbs::WorkCompletion;

use crate::abi::{IbvCq, IbvCqEx, IbvWc};
use crate::cq::{convert, current, driver_cq};
use crate::errno;

/// The `struct ibv_cq_ex` of a CQ whose `struct ibv_cq` is `base`.
pub(crate) fn interface(base: IbvCq) -> IbvCqEx {
    IbvCqEx {
        cq: base,
        comp_mask: 0,
        status: 0,
        wr_id: 0,
        start_poll: start_poll as *mut c_void,
        next_poll: next_poll as *mut c_void,
        end_poll: end_poll as *mut c_void,
        read_opcode: read_opcode as *mut c_void,
        read_vendor_err: read_vendor_err as *mut c_void,
        read_byte_len: read_byte_len as *mut c_void,
        read_imm_data: read_imm_data as *mut c_void,
        read_qp_num: read_qp_num as *mut c_void,
        read_src_qp: read_src_qp as *mut c_void,
        read_wc_flags: read_wc_flags as *mut c_void,
        read_slid: read_slid as *mut c_void,
        read_sl: read_sl as *mut c_void,
        read_dlid_path_bits: read_dlid_path_bits as *mut c_void,
        read_completion_ts: read_zero_u64 as *mut c_void,
        read_cvlan: read_zero_u16 as *mut c_void,
        read_flow_tag: read_zero_u32 as *mut c_void,
        read_tm_info: read_tm_info as *mut c_void,
        read_completion_wallclock_ns: read_zero_u64 as *mut c_void,
    }
}

/// `start_poll`: makes the CQ's next completion current (its status and
/// `wr_id` in the structure's fields). 0; `ENOENT` when there is none;
/// `EINVAL` for attributes with flags (none is defined); the driver's
/// error (a CQ in error).
///
/// # Safety
///
/// `cq` is a CQ of this library (the inline caller has read the entry
/// through it); `attr` is NULL or points to a `struct ibv_poll_cq_attr`.
unsafe extern "C" fn start_poll(cq: *mut IbvCqEx, attr: *const u32) -> c_int {
    // SAFETY: non-NULL, and its comp_mask by the caller's promise.
    if !attr.is_null() && unsafe { *attr } != 0 {
        return libc::EINVAL;
    }
    // SAFETY: the caller's promise.
    unsafe { next_poll(cq) }
}

/// `next_poll`: as [`start_poll`], for the completion after the current
/// one.
///
/// # Safety
///
/// As for [`start_poll`].
unsafe extern "C" fn next_poll(cq: *mut IbvCqEx) -> c_int {
    // SAFETY: the caller's promise.
    let Some(driver) = (unsafe { driver_cq(cq) }) else {
        return libc::EINVAL;
    };
    let mut one = [WorkCompletion::default()];
    match driver.poll(&mut one) {
        Ok(0) => libc::ENOENT,
        Ok(_) => {
            let wc = convert(&one[0]);
            // SAFETY: the caller's promise: a live CQ, polled by this
            // thread alone through this interface.
            unsafe {
                (*cq).status = wc.status;
                (*cq).wr_id = wc.wr_id;
                current(cq).write(wc);
            }
            0
        }
        Err(e) => {
            errno::set(e.errno());
            e.errno()
        }
    }
}

/// `end_poll`: ends a polling pass. Nothing is held between the calls.
extern "C" fn end_poll(_cq: *mut IbvCqEx) {}

/// The current completion.
///
/// # Safety
///
/// `cq` is a CQ of this library with a current completion.
unsafe fn cur(cq: *mut IbvCqEx) -> IbvWc {
    // SAFETY: the caller's promise.
    unsafe { *current(cq) }
}

/// Defines `read_*` entries returning a field of the current completion.
macro_rules! readers {
    ($($name:ident: $ty:ty = |$w:ident| $e:expr;)*) => {$(
        #[doc = concat!("`", stringify!($name), "` of the current completion.")]
        ///
        /// # Safety
        ///
        /// `cq` is a CQ of this library, between a successful
        /// `start_poll` and `end_poll`.
        unsafe extern "C" fn $name(cq: *mut IbvCqEx) -> $ty {
            // SAFETY: the caller's promise.
            let $w = unsafe { cur(cq) };
            $e
        }
    )*};
}

readers! {
    read_opcode: c_int = |w| w.opcode;
    read_vendor_err: u32 = |w| w.vendor_err;
    read_byte_len: u32 = |w| w.byte_len;
    read_imm_data: u32 = |w| w.imm_data;
    read_qp_num: u32 = |w| w.qp_num;
    read_src_qp: u32 = |w| w.src_qp;
    read_wc_flags: u32 = |w| w.wc_flags;
    read_slid: u32 = |w| u32::from(w.slid);
    read_sl: u8 = |w| w.sl;
    read_dlid_path_bits: u8 = |w| w.dlid_path_bits;
}

/// Timestamps (`read_completion_ts`, `read_completion_wallclock_ns`): 0,
/// not kept (`ibv_create_cq_ex` refuses CQs that ask for them).
extern "C" fn read_zero_u64(_cq: *mut IbvCqEx) -> u64 {
    0
}

/// `read_cvlan`: 0, not kept.
extern "C" fn read_zero_u16(_cq: *mut IbvCqEx) -> u16 {
    0
}

/// `read_flow_tag`: 0, not kept.
extern "C" fn read_zero_u32(_cq: *mut IbvCqEx) -> u32 {
    0
}

/// `read_tm_info`: zeroed `struct ibv_wc_tm_info` (tag matching is not
/// served).
///
/// # Safety
///
/// `info` is NULL or points to a writable `struct ibv_wc_tm_info`.
unsafe extern "C" fn read_tm_info(_cq: *mut IbvCqEx, info: *mut [u64; 2]) {
    if !info.is_null() {
        // SAFETY: the caller's promise.
        unsafe { info.write([0; 2]) };
    }
}
