//! Decoding what crosses a PVRDMA device's boundary, with pvrdma-regs'
//! layouts: BAR 1 registers, UAR doorbells, requests in the command slot
//! and responses in the response slot, send and receive WQEs, CQEs, async
//! events and CQ notifications. Each decoder takes bytes as they lie in BAR
//! or DMA memory and gives a one-line text and its fields.

use core::mem::size_of;

use rnic_pvrdma_regs::bar1::{self, Ctl, IntrVector};
use rnic_pvrdma_regs::cmd::{
    CmdHdr, CmdOpcode, CreateBind, CreateCq, CreateCqResp, CreateMr, CreateMrResp, CreateQp,
    CreateQpResp, CreateQpRespV2, CreateSrq, CreateUc, HandleCmd, HandleResp, ModifyQp, QpState,
    QpType, QueryPort, ResizeCq, RespHdr, RESP_BIT,
};
use rnic_pvrdma_regs::cqe::{Cqe, Cqne, Eqe, EventType, WcOpcode, WcStatus};
use rnic_pvrdma_regs::uar::{
    CQ_ARM, CQ_ARM_SOL, CQ_DB, CQ_POLL, HANDLE_MASK, QP_DB, QP_RECV, QP_SEND, SRQ_DB, SRQ_RECV,
};
use rnic_pvrdma_regs::wqe::{
    send_flags, RdmaWr, RqWqeHdr, Sge, SqWqeCtrl, UdWr, WrOpcode, SQ_WQE_HDR_SIZE, SQ_WQE_WR_OFFSET,
};
use rnic_pvrdma_regs::{bar, PAGE_SIZE};

use crate::decode::{gid, hex, named, read, Decoded};

/// The name of BAR 1 register `offset`.
pub fn register_name(offset: usize) -> Option<&'static str> {
    Some(match offset {
        bar1::VERSION => "VERSION",
        bar1::DSRLOW => "DSRLOW",
        bar1::DSRHIGH => "DSRHIGH",
        bar1::CTL => "CTL",
        bar1::REQUEST => "REQUEST",
        bar1::ERR => "ERR",
        bar1::ICR => "ICR",
        bar1::IMR => "IMR",
        bar1::MACL => "MACL",
        bar1::MACH => "MACH",
        _ => return None,
    })
}

/// The interrupt vectors set in an `ICR` or `IMR` value.
fn vectors(v: u32) -> String {
    let names: Vec<String> = (0..bar1::MAX_INTERRUPTS)
        .filter(|i| v & 1 << i != 0)
        .map(|i| named(IntrVector::from_raw(i), i, "vector"))
        .collect();
    names.join("|")
}

/// A 32-bit BAR 1 access: `MMIO BAR1+0x0c CTL <- 0x0 (ACTIVATE)`.
pub fn register(offset: usize, value: u32, write: bool) -> Decoded {
    let name = register_name(offset).unwrap_or("?");
    let meaning = match offset {
        bar1::VERSION => match value {
            bar1::VERSION_ROCEV1 => "RoCE v1".to_owned(),
            bar1::VERSION_ROCEV2 => "RoCE v2".to_owned(),
            bar1::VERSION_PPN64 => "64-bit page frames".to_owned(),
            v if v >= bar1::VERSION_QPHANDLE => "QP handles".to_owned(),
            _ => String::new(),
        },
        bar1::CTL => named(Ctl::from_raw(value), value, "ctl"),
        bar1::REQUEST => "run the command in the slot".to_owned(),
        bar1::ERR if value == 0 => "no error".to_owned(),
        // QEMU leaves a failed command's -errno here.
        bar1::ERR if (value as i32) < 0 => format!("{}", value as i32),
        bar1::ICR => vectors(value),
        bar1::IMR if value == 0 => "every vector unmasked".to_owned(),
        bar1::IMR => format!("masked {}", vectors(value)),
        _ => String::new(),
    };
    let arrow = if write { "<-" } else { "->" };
    let mut text = format!("MMIO BAR1+{offset:#04x} {name} {arrow} {value:#x}");
    if !meaning.is_empty() {
        text += &format!(" ({meaning})");
    }
    Decoded::new(text)
        .field("register", name)
        .field("value", format!("{value:#x}"))
}

/// A UAR doorbell write of BAR 2 at `offset`: `MMIO BAR2+0x1000 QP
/// doorbell handle 3 SEND`.
pub fn doorbell(offset: usize, value: u32) -> Decoded {
    let page = offset / PAGE_SIZE;
    let off = offset % PAGE_SIZE;
    let handle = value & HANDLE_MASK;
    let flags = |bits: &[(u32, &str)]| {
        let set: Vec<&str> = bits
            .iter()
            .filter(|b| value & b.0 != 0)
            .map(|b| b.1)
            .collect();
        if set.is_empty() {
            "nothing".to_owned()
        } else {
            set.join("|")
        }
    };
    let (which, what) = match off {
        QP_DB => ("QP", flags(&[(QP_SEND, "SEND"), (QP_RECV, "RECV")])),
        CQ_DB => (
            "CQ",
            flags(&[(CQ_ARM, "ARM"), (CQ_ARM_SOL, "ARM_SOL"), (CQ_POLL, "POLL")]),
        ),
        SRQ_DB => ("SRQ", flags(&[(SRQ_RECV, "RECV")])),
        _ => {
            return Decoded::new(format!(
                "MMIO BAR{}+{offset:#x} <- {value:#x} (no doorbell at +{off:#x})",
                bar::UAR
            ))
        }
    };
    Decoded::new(format!(
        "MMIO BAR{}+{offset:#x} {which} doorbell handle {handle} {what}",
        bar::UAR
    ))
    .field("doorbell", which)
    .field("handle", handle)
    .field("flags", what)
    .field("page", page)
}

/// A request as the driver wrote it to the command slot.
pub fn request(req: &[u8]) -> Decoded {
    let hdr: CmdHdr = read(req);
    let raw = hdr.cmd.to_ne();
    let op = CmdOpcode::from_raw(raw);
    let name = named(op, format!("{raw:#x}"), "cmd");
    let cookie = hdr.response.to_ne();
    let extra = match op {
        Some(CmdOpcode::QueryPort) => format!("port {}", read::<QueryPort>(req).port_num),
        Some(CmdOpcode::CreateUc) => format!("uar pfn {:#x}", read::<CreateUc>(req).pfn.to_ne()),
        Some(CmdOpcode::CreatePd) => format!("uc {}", read::<HandleCmd>(req).handle.to_ne()),
        Some(CmdOpcode::CreateMr) => {
            let r: CreateMr = read(req);
            format!(
                "start {:#x} length {} pd {} access {:#x} flags {:#x} pages {} pdir {:#x}",
                r.start.to_ne(),
                r.length.to_ne(),
                r.pd_handle.to_ne(),
                r.access_flags.to_ne(),
                r.flags.to_ne(),
                r.nchunks.to_ne(),
                r.pdir_dma.to_ne()
            )
        }
        Some(CmdOpcode::CreateCq) => {
            let r: CreateCq = read(req);
            format!(
                "uc {} cqe {} pages {} pdir {:#x}",
                r.ctx_handle.to_ne(),
                r.cqe.to_ne(),
                r.nchunks.to_ne(),
                r.pdir_dma.to_ne()
            )
        }
        Some(CmdOpcode::CreateQp) => {
            let r: CreateQp = read(req);
            format!(
                "{} pd {} send_cq {} recv_cq {} srq {} max_send_wr {} max_recv_wr {} \
                 max_send_sge {} max_recv_sge {} pages {} (send {}) pdir {:#x}",
                named(QpType::from_raw(r.qp_type), r.qp_type, "type"),
                r.pd_handle.to_ne(),
                r.send_cq_handle.to_ne(),
                r.recv_cq_handle.to_ne(),
                if r.is_srq == 0 {
                    "none".to_owned()
                } else {
                    r.srq_handle.to_ne().to_string()
                },
                r.max_send_wr.to_ne(),
                r.max_recv_wr.to_ne(),
                r.max_send_sge.to_ne(),
                r.max_recv_sge.to_ne(),
                r.total_chunks.to_ne(),
                r.send_chunks.to_ne(),
                r.pdir_dma.to_ne()
            )
        }
        Some(CmdOpcode::ModifyQp) => {
            let r: ModifyQp = read(req);
            let state = r.attrs.qp_state.to_ne();
            format!(
                "handle {} mask {:#x} state {}",
                r.qp_handle.to_ne(),
                r.attr_mask.to_ne(),
                named(QpState::from_raw(state), state, "state")
            )
        }
        Some(CmdOpcode::ResizeCq) => {
            let r: ResizeCq = read(req);
            format!("handle {} cqe {}", r.cq_handle.to_ne(), r.cqe.to_ne())
        }
        Some(CmdOpcode::CreateSrq) => {
            let r: CreateSrq = read(req);
            format!(
                "pd {} max_wr {} max_sge {} pages {} pdir {:#x}",
                r.pd_handle.to_ne(),
                r.attrs.max_wr.to_ne(),
                r.attrs.max_sge.to_ne(),
                r.nchunks.to_ne(),
                r.pdir_dma.to_ne()
            )
        }
        Some(CmdOpcode::CreateBind) => {
            let r: CreateBind = read(req);
            format!(
                "gid index {} {} type {:#x} mtu {}",
                r.index.to_ne(),
                gid(&r.new_gid),
                r.gid_type,
                r.mtu.to_ne()
            )
        }
        Some(
            CmdOpcode::DestroyPd
            | CmdOpcode::DestroyMr
            | CmdOpcode::DestroyCq
            | CmdOpcode::DestroyQp
            | CmdOpcode::DestroyUc
            | CmdOpcode::DestroySrq
            | CmdOpcode::QueryQp
            | CmdOpcode::QuerySrq,
        ) => format!("handle {}", read::<HandleCmd>(req).handle.to_ne()),
        _ => String::new(),
    };
    let mut text = format!("CMD {name} cookie {cookie}");
    if !extra.is_empty() {
        text += &format!(": {extra}");
    }
    let body = &req[size_of::<CmdHdr>().min(req.len())..];
    Decoded::new(text)
        .field("cmd", &name)
        .field("cookie", cookie)
        .field("request", hex(&body[..body.len().min(64)]))
}

/// A response in the response slot to the request of opcode `op`; `qp_handles`
/// whether the device answers CREATE_QP with a handle (version 20 on).
pub fn response(resp: &[u8], op: Option<CmdOpcode>, qp_handles: bool) -> Decoded {
    let hdr: RespHdr = read(resp);
    let ack = hdr.ack.to_ne();
    let acked = CmdOpcode::from_raw(ack & !RESP_BIT).filter(|_| ack & RESP_BIT != 0);
    let name = named(acked, format!("{ack:#x}"), "ack");
    let mut text = format!("RESP {name} cookie {}", hdr.response.to_ne());
    if op.is_some() && acked != op {
        text += &format!(" (not the ack of {})", named(op, "", "cmd"));
    }
    if hdr.err != 0 {
        text += &format!(": err {}", hdr.err);
    } else {
        let extra = match acked {
            Some(CmdOpcode::CreateUc | CmdOpcode::CreatePd | CmdOpcode::CreateSrq) => {
                format!("handle {}", read::<HandleResp>(resp).handle.to_ne())
            }
            Some(CmdOpcode::CreateMr) => {
                let r: CreateMrResp = read(resp);
                format!(
                    "handle {} lkey {:#x} rkey {:#x}",
                    r.mr_handle.to_ne(),
                    r.lkey.to_ne(),
                    r.rkey.to_ne()
                )
            }
            Some(CmdOpcode::CreateCq) => {
                let r: CreateCqResp = read(resp);
                format!("handle {} cqe {}", r.cq_handle.to_ne(), r.cqe.to_ne())
            }
            Some(CmdOpcode::CreateQp) if qp_handles => {
                let r: CreateQpRespV2 = read(resp);
                format!(
                    "qpn {} handle {} max_send_wr {} max_recv_wr {}",
                    r.qpn.to_ne(),
                    r.qp_handle.to_ne(),
                    r.max_send_wr.to_ne(),
                    r.max_recv_wr.to_ne()
                )
            }
            Some(CmdOpcode::CreateQp) => {
                let r: CreateQpResp = read(resp);
                format!(
                    "qpn {} max_send_wr {} max_recv_wr {}",
                    r.qpn.to_ne(),
                    r.max_send_wr.to_ne(),
                    r.max_recv_wr.to_ne()
                )
            }
            _ => String::new(),
        };
        text += ": ok";
        if !extra.is_empty() {
            text += &format!(" {extra}");
        }
    }
    let body = &resp[size_of::<RespHdr>().min(resp.len())..];
    Decoded::new(text)
        .field("ack", name)
        .field("err", hdr.err)
        .field("response", hex(&body[..body.len().min(64)]))
}

/// An SGE list of `n` entries at the start of `bytes`.
fn sges(bytes: &[u8], n: usize) -> Vec<String> {
    (0..n.min(bytes.len() / size_of::<Sge>()))
        .map(|i| {
            let s: Sge = read(&bytes[i * size_of::<Sge>()..]);
            format!(
                "sge {:#x} len {} lkey {:#x}",
                s.addr.to_ne(),
                s.length.to_ne(),
                s.lkey.to_ne()
            )
        })
        .collect()
}

/// The send WQE `wqe` at index `idx` of `queue` (`qp 3 SQ`), a QP of type
/// `ty`.
pub fn send_wqe(queue: &str, idx: u32, ty: Option<QpType>, wqe: &[u8]) -> Decoded {
    let c: SqWqeCtrl = read(wqe);
    let raw = c.opcode.to_ne();
    let op = named(WrOpcode::from_raw(raw), raw, "opcode");
    let f = c.send_flags.to_ne();
    let flag_names = [
        (send_flags::FENCE, " fenced"),
        (send_flags::SIGNALED, " signaled"),
        (send_flags::SOLICITED, " solicited"),
        (send_flags::INLINE, " inline"),
    ];
    let flags: String = flag_names
        .iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, n)| *n)
        .collect();
    let mut parts = vec![format!(
        "{op}{flags} wr_id {} len {}",
        c.wr_id.to_ne(),
        c.total_len.to_ne()
    )];
    let wr = &wqe[SQ_WQE_WR_OFFSET.min(wqe.len())..];
    if matches!(ty, Some(QpType::Ud | QpType::Gsi)) {
        let u: UdWr = read(wr);
        parts.push(format!(
            "dest qpn {} qkey {:#x} dgid {} gid index {}",
            u.remote_qpn.to_ne(),
            u.remote_qkey.to_ne(),
            gid(&u.av.dgid),
            u.av.gid_index
        ));
    } else if matches!(
        WrOpcode::from_raw(raw),
        Some(WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead)
    ) {
        let r: RdmaWr = read(wr);
        parts.push(format!(
            "raddr {:#x} rkey {:#x}",
            r.remote_addr.to_ne(),
            r.rkey.to_ne()
        ));
    }
    let n = c.num_sge.to_ne() as usize;
    parts.extend(sges(&wqe[SQ_WQE_HDR_SIZE.min(wqe.len())..], n));
    Decoded::new(format!("WQE {queue} idx {idx}: {}", parts.join(" | ")))
        .field("queue", queue)
        .field("idx", idx)
        .field("opcode", op)
        .field("wr_id", c.wr_id.to_ne())
}

/// The receive WQE `wqe` at index `idx` of `queue` (`qp 3 RQ`, `srq 1`).
pub fn recv_wqe(queue: &str, idx: u32, wqe: &[u8]) -> Decoded {
    let h: RqWqeHdr = read(wqe);
    let n = h.num_sge.to_ne() as usize;
    let mut parts = vec![format!(
        "wr_id {} len {}",
        h.wr_id.to_ne(),
        h.total_len.to_ne()
    )];
    parts.extend(sges(&wqe[size_of::<RqWqeHdr>().min(wqe.len())..], n));
    Decoded::new(format!("RWQE {queue} idx {idx}: {}", parts.join(" | ")))
        .field("queue", queue)
        .field("idx", idx)
        .field("wr_id", h.wr_id.to_ne())
}

/// The CQE `cqe` at index `idx` of CQ `handle`: `CQE cq 1 idx 0: SEND
/// SUCCESS qp 3 len 4096 wr_id 7`.
pub fn cqe(handle: u32, idx: u32, bytes: &[u8]) -> Decoded {
    let c: Cqe = read(bytes);
    let op = named(
        WcOpcode::from_raw(c.opcode.to_ne()),
        c.opcode.to_ne(),
        "opcode",
    );
    let status = named(
        WcStatus::from_raw(c.status.to_ne()),
        c.status.to_ne(),
        "status",
    );
    Decoded::new(format!(
        "CQE cq {handle} idx {idx}: {op} {status} qp {} len {} wr_id {} src_qp {} flags {:#x}",
        c.qp.to_ne(),
        c.byte_len.to_ne(),
        c.wr_id.to_ne(),
        c.src_qp.to_ne(),
        c.wc_flags.to_ne()
    ))
    .field("cq", handle)
    .field("idx", idx)
    .field("opcode", op)
    .field("status", status)
    .field("qp", c.qp.to_ne())
    .field("wr_id", c.wr_id.to_ne())
}

/// The async event `bytes` at index `idx` of the async ring: `EQE idx 0:
/// PORT_ACTIVE info 1`, `info` being the QP, CQ or SRQ handle or the port.
pub fn async_event(idx: u32, bytes: &[u8]) -> Decoded {
    let e: Eqe = read(bytes);
    let kind = named(EventType::from_raw(e.kind.to_ne()), e.kind.to_ne(), "event");
    Decoded::new(format!("EQE idx {idx}: {kind} info {}", e.info.to_ne()))
        .field("idx", idx)
        .field("event", kind)
        .field("info", e.info.to_ne())
}

/// The CQ notification `bytes` at index `idx` of its ring: `CQNE idx 0: cq 1`.
pub fn cq_notification(idx: u32, bytes: &[u8]) -> Decoded {
    let n: Cqne = read(bytes);
    Decoded::new(format!("CQNE idx {idx}: cq {}", n.info.to_ne()))
        .field("idx", idx)
        .field("cq", n.info.to_ne())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_pvrdma_regs::le32;

    #[test]
    fn registers_and_doorbells_decode_by_name() {
        assert_eq!(
            register(bar1::CTL, 0, true).text,
            "MMIO BAR1+0x0c CTL <- 0x0 (ACTIVATE)"
        );
        assert_eq!(
            register(bar1::ICR, 0b101, false).text,
            "MMIO BAR1+0x18 ICR -> 0x5 (RESPONSE|CQ)"
        );
        assert_eq!(
            doorbell(PAGE_SIZE + QP_DB, 3 | QP_SEND).text,
            "MMIO BAR2+0x1000 QP doorbell handle 3 SEND"
        );
        assert_eq!(
            doorbell(CQ_DB, 1 | CQ_ARM).text,
            "MMIO BAR2+0x4 CQ doorbell handle 1 ARM"
        );
    }

    #[test]
    fn a_request_and_its_response_decode() {
        let mut req = vec![0u8; 80];
        req[..8].copy_from_slice(&7u64.to_le_bytes());
        req[8..12].copy_from_slice(&CmdOpcode::CreateCq.raw().to_le_bytes());
        req[16..24].copy_from_slice(&0x5000u64.to_le_bytes());
        req[24..28].copy_from_slice(&1u32.to_le_bytes());
        req[28..32].copy_from_slice(&64u32.to_le_bytes());
        req[32..36].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(
            request(&req).text,
            "CMD CREATE_CQ cookie 7: uc 1 cqe 64 pages 2 pdir 0x5000"
        );
        let mut resp = vec![0u8; 24];
        resp[..8].copy_from_slice(&7u64.to_le_bytes());
        resp[8..12].copy_from_slice(&CmdOpcode::CreateCq.ack().to_le_bytes());
        resp[16..20].copy_from_slice(&4u32.to_le_bytes());
        resp[20..24].copy_from_slice(&64u32.to_le_bytes());
        let op = Some(CmdOpcode::CreateCq);
        assert_eq!(
            response(&resp, op, false).text,
            "RESP CREATE_CQ cookie 7: ok handle 4 cqe 64"
        );
        resp[8..12].copy_from_slice(&CmdOpcode::CreateQp.ack().to_le_bytes());
        resp[12] = 22;
        assert_eq!(
            response(&resp, op, false).text,
            "RESP CREATE_QP cookie 7 (not the ack of CREATE_CQ): err 22"
        );
    }

    #[test]
    fn a_send_wqe_and_a_cqe_decode() {
        let mut w = vec![0u8; 128];
        let ctrl = SqWqeCtrl {
            wr_id: 9u64.into(),
            num_sge: le32::from_ne(1),
            total_len: le32::from_ne(4096),
            opcode: le32::from_ne(WrOpcode::Send.raw()),
            send_flags: le32::from_ne(send_flags::SIGNALED),
            ..SqWqeCtrl::default()
        };
        // SAFETY: a plain struct, viewed as its bytes.
        let bytes =
            unsafe { core::slice::from_raw_parts((&ctrl as *const SqWqeCtrl).cast::<u8>(), 32) };
        w[..32].copy_from_slice(bytes);
        w[80..88].copy_from_slice(&0x7000u64.to_le_bytes());
        w[88..92].copy_from_slice(&4096u32.to_le_bytes());
        w[92..96].copy_from_slice(&0x11u32.to_le_bytes());
        assert_eq!(
            send_wqe("qp 3 SQ", 0, Some(QpType::Rc), &w).text,
            "WQE qp 3 SQ idx 0: SEND signaled wr_id 9 len 4096 | sge 0x7000 len 4096 lkey 0x11"
        );
        let mut c = vec![0u8; 64];
        c[..8].copy_from_slice(&9u64.to_le_bytes());
        c[8..16].copy_from_slice(&5u64.to_le_bytes());
        c[16..20].copy_from_slice(&WcOpcode::Recv.raw().to_le_bytes());
        c[24..28].copy_from_slice(&4096u32.to_le_bytes());
        assert_eq!(
            cqe(1, 2, &c).text,
            "CQE cq 1 idx 2: RECV SUCCESS qp 5 len 4096 wr_id 9 src_qp 0 flags 0x0"
        );
    }
}
