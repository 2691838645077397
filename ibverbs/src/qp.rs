//! Queue pairs: `ibv_create_qp`, `ibv_destroy_qp`.

use std::ffi::c_int;

use rnic_driver::{Qp as DriverQp, QpCap, QpInitAttr, QpType};
use rnic_emu::EmuHal;

use crate::abi::{IbvPd, IbvQp, IbvQpCap, IbvQpInitAttr};
use crate::cq::live_cq;
use crate::errno;
use crate::live::Live;
use crate::pd::live_pd;

/// A QP: the `struct ibv_qp` programs see, first.
#[repr(C)]
struct Qp {
    ibv: IbvQp,
    qp: Option<DriverQp<EmuHal>>,
}

static QPS: Live = Live::new();

/// `ibv_create_qp`: an RC, UC or UD QP in RESET, its capacities (at least
/// those asked) written back to `qp_init_attr->cap`. NULL with `errno`:
/// `EINVAL` for a PD or CQ that is not live, a NULL attribute pointer or
/// an unknown type; `EOPNOTSUPP` for an SRQ (not served yet) or an XRC or
/// raw packet QP; the driver's for capacities beyond the device's
/// (`EINVAL`) or no QP left (`ENOMEM`).
///
/// # Safety
///
/// `qp_init_attr` is NULL or points to a `struct ibv_qp_init_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut IbvPd,
    qp_init_attr: *mut IbvQpInitAttr,
) -> *mut IbvQp {
    let fail = |e| {
        errno::set(e);
        std::ptr::null_mut()
    };
    if qp_init_attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: non-NULL, and a struct ibv_qp_init_attr by the caller's
    // promise.
    let init = unsafe { &mut *qp_init_attr };
    let Some(p) = live_pd(pd) else {
        return fail(libc::EINVAL);
    };
    let (Some(scq), Some(rcq)) = (live_cq(init.send_cq), live_cq(init.recv_cq)) else {
        return fail(libc::EINVAL);
    };
    if !init.srq.is_null() {
        return fail(libc::EOPNOTSUPP);
    }
    let qp_type = match init.qp_type {
        2 => QpType::Rc,
        3 => QpType::Uc,
        4 => QpType::Ud,
        // Raw packet, XRC send and receive, driver-specific.
        8 | 9 | 10 | 0xff => return fail(libc::EOPNOTSUPP),
        _ => return fail(libc::EINVAL),
    };
    let (Some(driver_pd), Some(send_cq), Some(recv_cq)) = (p.pd.as_ref(), scq, rcq) else {
        return fail(libc::EINVAL);
    };
    let c = init.cap;
    let attr = QpInitAttr {
        send_cq,
        recv_cq,
        srq: None,
        cap: QpCap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        },
        qp_type,
        sq_sig_all: init.sq_sig_all != 0,
    };
    match driver_pd.create_qp(&attr) {
        Ok(qp) => {
            let got = qp.cap();
            init.cap = IbvQpCap {
                max_send_wr: got.max_send_wr,
                max_recv_wr: got.max_recv_wr,
                max_send_sge: got.max_send_sge,
                max_recv_sge: got.max_recv_sge,
                max_inline_data: got.max_inline_data,
            };
            let ibv = IbvQp {
                context: p.ibv.context,
                qp_context: init.qp_context,
                pd,
                send_cq: init.send_cq,
                recv_cq: init.recv_cq,
                srq: std::ptr::null_mut(),
                handle: qp.qp_num(),
                qp_num: qp.qp_num(),
                state: 0,
                qp_type: init.qp_type,
                // SAFETY: zeroed is PTHREAD_MUTEX_INITIALIZER and
                // PTHREAD_COND_INITIALIZER on glibc.
                mutex: unsafe { std::mem::zeroed() },
                // SAFETY: as above.
                cond: unsafe { std::mem::zeroed() },
                events_completed: 0,
            };
            let q = Box::into_raw(Box::new(Qp { ibv, qp: Some(qp) }));
            QPS.add(q);
            q.cast()
        }
        Err(e) => fail(e.errno()),
    }
}

/// `ibv_destroy_qp`: 0, or an `errno` value (`EINVAL` for a pointer that
/// is not a live QP; the driver's if the device refuses, and the QP
/// stays).
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is checked.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int {
    if !QPS.remove(qp) {
        return libc::EINVAL;
    }
    let q = qp.cast::<Qp>();
    // SAFETY: it was live, so it came from Box::into_raw, and it left the
    // list: this thread alone holds it.
    let outcome = match unsafe { (*q).qp.take() } {
        Some(d) => d.destroy(),
        None => Ok(()),
    };
    if let Err(e) = outcome {
        let code = e.error.errno();
        if let Some(back) = e.object {
            // SAFETY: as above.
            unsafe { (*q).qp = Some(back) };
            QPS.add(q);
            return code;
        }
        // SAFETY: as above; the driver's QP is gone.
        drop(unsafe { Box::from_raw(q) });
        return code;
    }
    // SAFETY: as above.
    drop(unsafe { Box::from_raw(q) });
    0
}
