//! Decoding what crosses the rnic device's boundary, with hw-regs'
//! layouts: register names and values, command entries, send and receive
//! WQEs, CQEs and EQEs. Each decoder takes bytes as they lie in BAR or DMA
//! memory and gives a one-line text and its fields.

use core::mem::size_of;

use rnic_hw_regs::bar0::{self, CmdqCtrl, Ctrl, DevCaps, EqCtrl, EqDoorbell, QueueCaps, Status};
use rnic_hw_regs::cmd::{
    CmdHeader, CmdOpcode, CmdStatus, CreateCqIn, CreateCqOut, CreateQpIn, CreateQpOut, ObjIn,
    CMD_IN_SIZE,
};
use rnic_hw_regs::cqe::Cqe;
use rnic_hw_regs::eqe::{Eqe, EventType};
use rnic_hw_regs::le32;
use rnic_hw_regs::uar::{self, CqDoorbell, EqArmDoorbell, WqDoorbell};
use rnic_hw_regs::wqe::{
    AtomicSeg, BindSeg, CtrlSeg, DataSeg, DatagramSeg, RaddrSeg, RecvWqeHdr, INLINE_MARK, SEG_SIZE,
};
use rnic_verbs::{QpType, WcOpcode, WcStatus, WrOpcode};

use crate::decode::{gid, hex, named, read, Decoded};

/// The name of BAR 0 register `offset`.
pub fn bar0_name(offset: usize) -> Option<&'static str> {
    use bar0::*;
    Some(match offset {
        ID => "ID",
        VERSION => "VERSION",
        CAP_DEV => "CAP_DEV",
        CAP_MAX_QP => "CAP_MAX_QP",
        CAP_MAX_CQ => "CAP_MAX_CQ",
        CAP_MAX_MR => "CAP_MAX_MR",
        CAP_MAX_PD => "CAP_MAX_PD",
        CAP_QUEUE => "CAP_QUEUE",
        CAP_UAR_PAGES => "CAP_UAR_PAGES",
        CAP_MAX_SRQ => "CAP_MAX_SRQ",
        CAP_MAX_EQ => "CAP_MAX_EQ",
        CAP_MSIX => "CAP_MSIX",
        CTRL => "CTRL",
        STATUS => "STATUS",
        FATAL_SYNDROME => "FATAL_SYNDROME",
        CMDQ_BASE_LO => "CMDQ_BASE_LO",
        CMDQ_BASE_HI => "CMDQ_BASE_HI",
        CMDQ_CTRL => "CMDQ_CTRL",
        CMDQ_DB => "CMDQ_DB",
        EQ_BASE_LO => "EQ_BASE_LO",
        EQ_BASE_HI => "EQ_BASE_HI",
        EQ_CTRL => "EQ_CTRL",
        EQ_DB => "EQ_DB",
        INTR_CAUSE => "INTR_CAUSE",
        INTR_MASK => "INTR_MASK",
        _ => return None,
    })
}

/// A 32-bit BAR 0 access: `MMIO BAR0+0x044 STATUS = 0x3 (ready enabled)`.
pub fn bar0_access(offset: usize, value: u32, write: bool) -> Decoded {
    let name = bar0_name(offset).unwrap_or("?");
    let v = le32::from_ne(value);
    let meaning = match offset {
        bar0::CTRL => format!("{:?}", Ctrl::from_bits(v)),
        bar0::STATUS => format!("{:?}", Status::from_bits(v)),
        bar0::CMDQ_CTRL => format!("{:?}", CmdqCtrl::from_bits(v)),
        bar0::EQ_CTRL => format!("{:?}", EqCtrl::from_bits(v)),
        bar0::EQ_DB => format!("{:?}", EqDoorbell::from_bits(v)),
        bar0::CAP_DEV => format!("{:?}", DevCaps::from_bits(v)),
        bar0::CAP_QUEUE => format!("{:?}", QueueCaps::from_bits(v)),
        bar0::ID if value == bar0::MAGIC => "\"RNIC\"".to_owned(),
        bar0::CMDQ_DB => format!("command producer index {value}"),
        _ => String::new(),
    };
    let arrow = if write { "<-" } else { "->" };
    let mut text = format!("MMIO BAR0+{offset:#05x} {name} {arrow} {value:#x}");
    if !meaning.is_empty() {
        text += &format!(" ({meaning})");
    }
    Decoded::new(text)
        .field("register", name)
        .field("value", format!("{value:#x}"))
}

/// A doorbell page access of BAR 2 at `offset` (its page's offset `off`)
/// writing `value`.
pub fn doorbell(offset: usize, value: u64) -> Decoded {
    let page = offset / uar::UAR_PAGE_SIZE;
    let off = offset % uar::UAR_PAGE_SIZE;
    let d = match off {
        uar::SQ_DB | uar::RQ_DB | uar::SRQ_DB => {
            let db = WqDoorbell::from_bits(value);
            let which = match off {
                uar::SQ_DB => "SQ",
                uar::RQ_DB => "RQ",
                _ => "SRQ",
            };
            let what = if off == uar::SRQ_DB { "srqn" } else { "qpn" };
            Decoded::new(format!(
                "{which} doorbell {what} {} pi {}",
                db.qpn(),
                db.pi()
            ))
            .field(what, db.qpn())
            .field("pi", db.pi())
        }
        uar::CQ_DB => {
            let db = CqDoorbell::from_bits(value);
            Decoded::new(format!(
                "CQ doorbell cqn {} arm cmd {} sn {} ci {}",
                db.cqn(),
                db.cmd(),
                db.sn(),
                db.ci()
            ))
            .field("cqn", db.cqn())
            .field("ci", db.ci())
        }
        uar::EQ_DB => {
            let db = EqArmDoorbell::from_bits(value);
            Decoded::new(format!(
                "EQ doorbell eqn {} ci {}{}",
                db.eqn(),
                db.ci(),
                if db.arm() { " arm" } else { "" }
            ))
            .field("eqn", db.eqn())
            .field("ci", db.ci())
        }
        _ => Decoded::new(format!("doorbell page write at +{off:#x} = {value:#x}")),
    };
    let text = format!("MMIO BAR2+{offset:#x} {}", d.text);
    Decoded { text, ..d }.field("page", page)
}

/// A command entry's header and input, as the driver handed it over.
pub fn command(entry: &[u8], index: u32) -> (Option<CmdOpcode>, Decoded) {
    let hdr: CmdHeader = read(entry);
    let raw = hdr.opcode.to_ne();
    let op = CmdOpcode::from_raw(raw);
    let input = &entry[size_of::<CmdHeader>()..];
    let name = named(op, format!("{raw:#x}"), "opcode");
    let mut d = Decoded::new(format!(
        "CMD {index} {name} token {} uid {}",
        hdr.token,
        hdr.uid.to_ne()
    ))
    .field("index", index)
    .field("opcode", &name)
    .field("token", hdr.token)
    .field("uid", hdr.uid.to_ne());
    let extra = match op {
        Some(CmdOpcode::CreateCq) => {
            let i: CreateCqIn = read(input);
            format!(
                "log_size {} eqn {} buf {:#x} dbrec {:#x}",
                i.log_size.to_ne(),
                i.eqn.to_ne(),
                i.buf_iova.to_ne(),
                i.dbrec_iova.to_ne()
            )
        }
        Some(CmdOpcode::CreateQp) => {
            let i: CreateQpIn = read(input);
            format!(
                "{} pd {} send_cq {} recv_cq {} srq {} log_sq_bbs {} log_rq_wqes {} sq {:#x} rq {:#x}",
                named(QpType::from_raw(i.qp_type), i.qp_type, "type"),
                i.pdn.to_ne(),
                i.send_cqn.to_ne(),
                i.recv_cqn.to_ne(),
                match i.srqn.to_ne() {
                    rnic_hw_regs::cmd::NONE => "none".to_owned(),
                    n => n.to_string(),
                },
                i.log_sq_bbs.to_ne(),
                i.log_rq_wqes.to_ne(),
                i.sq_iova.to_ne(),
                i.rq_iova.to_ne()
            )
        }
        Some(
            CmdOpcode::DestroyPd
            | CmdOpcode::DeregMr
            | CmdOpcode::DestroyCq
            | CmdOpcode::DestroyQp
            | CmdOpcode::QueryQp
            | CmdOpcode::DestroySrq,
        ) => {
            let i: ObjIn = read(input);
            format!("id {}", i.id.to_ne())
        }
        _ => String::new(),
    };
    if !extra.is_empty() {
        d.text += &format!(": {extra}");
    }
    d = d.field("input", hex(&input[..CMD_IN_SIZE.min(input.len()).min(64)]));
    (op, d)
}

/// A completed command entry: status and output.
pub fn command_done(entry: &[u8], index: u32, op: Option<CmdOpcode>) -> Decoded {
    use rnic_hw_regs::cmd::CMD_IN_SIZE;
    let hdr: CmdHeader = read(entry);
    let status = named(CmdStatus::from_raw(hdr.status), hdr.status, "status");
    let output = &entry[size_of::<CmdHeader>() + CMD_IN_SIZE..];
    let name = named(op, hdr.opcode.to_ne(), "opcode");
    let mut text = format!("CMD {index} {name} done: {status}");
    if hdr.syndrome.to_ne() != 0 {
        text += &format!(" (input byte {})", hdr.syndrome.to_ne() - 1);
    }
    if hdr.status == CmdStatus::Ok.raw() {
        match op {
            Some(CmdOpcode::CreateCq) => {
                text += &format!(" cqn {}", read::<CreateCqOut>(output).cqn.to_ne())
            }
            Some(CmdOpcode::CreateQp) => {
                text += &format!(" qpn {}", read::<CreateQpOut>(output).qpn.to_ne())
            }
            Some(CmdOpcode::CreatePd | CmdOpcode::CreateSrq | CmdOpcode::CreateEq) => {
                text += &format!(" number {}", read::<le32>(output).to_ne())
            }
            Some(CmdOpcode::RegMr | CmdOpcode::AllocMw) => {
                let keys: [le32; 2] = read(output);
                text += &format!(" keys {:#x} {:#x}", keys[0].to_ne(), keys[1].to_ne())
            }
            _ => {}
        }
    }
    Decoded::new(text)
        .field("index", index)
        .field("status", status)
        .field("output", hex(&output[..output.len().min(64)]))
}

/// The send WQE `wqe` (its bytes, in order, wrap undone) at producer
/// index `idx` of QP `qpn` of type `ty`.
pub fn send_wqe(qpn: u32, idx: u32, ty: Option<QpType>, wqe: &[u8]) -> Decoded {
    let ctrl: CtrlSeg = read(wqe);
    let w = ctrl.word;
    let op = WrOpcode::from_raw(w.opcode());
    let mut parts = vec![format!(
        "ctrl {}{}{}{}{} ds {}",
        named(op, w.opcode(), "opcode"),
        if w.signaled() { " signaled" } else { "" },
        if w.solicited() { " solicited" } else { "" },
        if w.fence() { " fence" } else { "" },
        if w.inline() { " inline" } else { "" },
        w.ds()
    )];
    let ds = usize::from(w.ds()).min(wqe.len() / SEG_SIZE);
    let mut at = SEG_SIZE;
    let seg = |at: usize| &wqe[at.min(wqe.len())..];
    if ty.is_some_and(QpType::is_datagram) {
        let d: DatagramSeg = read(seg(at));
        parts.push(format!(
            "dest qpn {} qkey {:#x} dgid {}",
            d.dest_qpn.to_ne() & 0xff_ffff,
            d.qkey.to_ne(),
            gid(&d.dgid)
        ));
        at += size_of::<DatagramSeg>();
    } else {
        match op {
            Some(
                WrOpcode::RdmaWrite
                | WrOpcode::RdmaWriteWithImm
                | WrOpcode::RdmaRead
                | WrOpcode::AtomicCmpAndSwp
                | WrOpcode::AtomicFetchAndAdd,
            ) => {
                let r: RaddrSeg = read(seg(at));
                parts.push(format!(
                    "raddr {:#x} rkey {:#x}",
                    r.raddr.to_ne(),
                    r.rkey.to_ne()
                ));
                at += SEG_SIZE;
            }
            Some(WrOpcode::BindMw) => {
                let b: BindSeg = read(seg(at));
                parts.push(format!(
                    "bind mw {:#x} -> {:#x} mr {:#x} va {:#x} len {}",
                    b.mw_rkey.to_ne(),
                    b.new_rkey.to_ne(),
                    b.mr_lkey.to_ne(),
                    b.va.to_ne(),
                    b.length.to_ne()
                ));
                at += size_of::<BindSeg>();
            }
            _ => {}
        }
        if matches!(
            op,
            Some(WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd)
        ) {
            let a: AtomicSeg = read(seg(at));
            parts.push(format!(
                "swap/add {:#x} compare {:#x}",
                a.swap_add.to_ne(),
                a.compare.to_ne()
            ));
            at += SEG_SIZE;
        }
    }
    if w.inline() {
        let n = read::<le32>(seg(at)).to_ne() & !INLINE_MARK;
        parts.push(format!("inline {n} B"));
    } else {
        while at + SEG_SIZE <= ds * SEG_SIZE {
            let d: DataSeg = read(seg(at));
            parts.push(format!(
                "sge {:#x} len {} lkey {:#x}",
                d.addr.to_ne(),
                d.byte_count.to_ne(),
                d.lkey.to_ne()
            ));
            at += SEG_SIZE;
        }
    }
    Decoded::new(format!("WQE qpn {qpn} idx {idx}: {}", parts.join(" | ")))
        .field("qpn", qpn)
        .field("idx", idx)
        .field("opcode", named(op, w.opcode(), "opcode"))
        .field("wr_id", ctrl.wr_id.to_ne())
        .field("ds", w.ds())
}

/// The receive WQE `wqe` at index `idx` of queue `name` (`qpn 3`, `srqn 1`).
pub fn recv_wqe(name: &str, idx: u32, wqe: &[u8]) -> Decoded {
    let h: RecvWqeHdr = read(wqe);
    let n = (h.sge_count.to_ne() as usize).min(wqe.len() / SEG_SIZE - 1);
    let sges: Vec<String> = (0..n)
        .map(|i| {
            let d: DataSeg = read(&wqe[(i + 1) * SEG_SIZE..]);
            format!(
                "sge {:#x} len {} lkey {:#x}",
                d.addr.to_ne(),
                d.byte_count.to_ne(),
                d.lkey.to_ne()
            )
        })
        .collect();
    Decoded::new(format!(
        "RWQE {name} idx {idx}: wr_id {} | {}",
        h.wr_id.to_ne(),
        sges.join(" | ")
    ))
    .field("idx", idx)
    .field("wr_id", h.wr_id.to_ne())
}

/// The CQE `cqe` at index `idx` of CQ `cqn`: `CQE cqn 1 idx 3 owner 1:
/// REQ RDMA_WRITE wqe 4 SUCCESS`, where `wqe` is the CQE's `wqe_counter`,
/// the queue's consumer index past the completed WQE.
pub fn cqe(cqn: u32, idx: u32, bytes: &[u8]) -> Decoded {
    let c: Cqe = read(bytes);
    let op = named(WcOpcode::from_raw(c.opcode), c.opcode, "opcode");
    let status = named(WcStatus::from_raw(c.status), c.status, "status");
    let side = if c.flags.is_send() { "REQ" } else { "RESP" };
    Decoded::new(format!(
        "CQE cqn {cqn} idx {idx} owner {}: {side} {op} wqe {} {status} qpn {} len {}",
        u8::from(c.owner.owner()),
        c.wqe_counter.to_ne(),
        c.qpn.to_ne() & 0xff_ffff,
        c.byte_len.to_ne()
    ))
    .field("cqn", cqn)
    .field("idx", idx)
    .field("opcode", op)
    .field("status", status)
    .field("wr_id", c.wr_id.to_ne())
    .field("wqe_counter", c.wqe_counter.to_ne())
}

/// The EQE `eqe` at index `idx` of EQ `eqn`: `EQE eqn 1 idx 0 owner 1:
/// COMPLETION obj 2 syndrome 0`, `obj` being the CQN, QPN, SRQN or port
/// the event is about.
pub fn eqe(eqn: u32, idx: u32, bytes: &[u8]) -> Decoded {
    let e: Eqe = read(bytes);
    let raw = e.word.event_type();
    let event = named(EventType::from_raw(raw), raw, "event");
    Decoded::new(format!(
        "EQE eqn {eqn} idx {idx} owner {}: {event} obj {} syndrome {}",
        u8::from(e.owner.owner()),
        e.obj.to_ne(),
        e.syndrome.to_ne()
    ))
    .field("eqn", eqn)
    .field("idx", idx)
    .field("event", event)
    .field("obj", e.obj.to_ne())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doorbells_decode() {
        let db = WqDoorbell::new().with_qpn(2).with_pi(5).into_bits();
        assert_eq!(
            doorbell(0x1000 + uar::SQ_DB, db).text,
            "MMIO BAR2+0x1000 SQ doorbell qpn 2 pi 5"
        );
    }

    #[test]
    fn a_write_wqe_decodes() {
        use rnic_hw_regs::wqe::CtrlWord;
        let mut w = [0u8; 48];
        let word = CtrlWord::new()
            .with_opcode(WrOpcode::RdmaWrite.raw())
            .with_signaled(true)
            .with_inline(true)
            .with_ds(3);
        w[..4].copy_from_slice(&word.into_bits().to_ne().to_ne_bytes());
        w[16..24].copy_from_slice(&0x1000u64.to_le_bytes());
        w[24..28].copy_from_slice(&0x42u32.to_le_bytes());
        w[32..36].copy_from_slice(&(8 | INLINE_MARK).to_le_bytes());
        assert_eq!(
            send_wqe(2, 4, Some(QpType::Rc), &w).text,
            "WQE qpn 2 idx 4: ctrl RDMA_WRITE signaled inline ds 3 | raddr 0x1000 rkey 0x42 | inline 8 B"
        );
    }
}
