//! QUERY_DEVICE, QUERY_PORT, QUERY_GID and SET_GID.

use rnic_hw_regs::cmd::*;
use rnic_hw_regs::counters::counter;
use rnic_hw_regs::{le16, le32, le64, pci};
use rnic_verbs::{GidType, LinkLayer, Mtu, PortState};

use super::{check, off, CmdResult};
use crate::iommu::{from_bytes, to_bytes};
use crate::state::{GidEntry, State};

/// `IBV_DEVICE_RC_RNR_NAK_GEN`: the device generates RNR NAKs.
const IBV_DEVICE_RC_RNR_NAK_GEN: u32 = 1 << 12;
/// `IBV_ATOMIC_HCA`: atomics are atomic with respect to this device.
const IBV_ATOMIC_HCA: u32 = 1;
/// `IBV_WIDTH_4X`.
const IBV_WIDTH_4X: u8 = 2;
/// `IBV_SPEED_EDR` (25 Gb/s per lane).
const IBV_SPEED_EDR: u8 = 32;
/// Physical port state LinkUp.
const PHYS_STATE_LINK_UP: u8 = 5;

pub(super) fn device(st: &mut State, out: &mut [u8; CMD_OUT_SIZE]) -> CmdResult {
    let c = &st.dev.cfg;
    let guid = c.node_guid();
    let o = QueryDeviceOut {
        fw_ver: le64::from_ne(1 << 32),
        node_guid: guid,
        sys_image_guid: guid,
        max_mr_size: le64::from_ne(c.max_mr_size),
        page_size_cap: le64::from_ne(rnic_hw_regs::PAGE_SIZE as u64),
        vendor_id: le32::from_ne(pci::VENDOR_ID as u32),
        vendor_part_id: le32::from_ne(pci::DEVICE_ID as u32),
        hw_ver: le32::from_ne(pci::REVISION as u32),
        max_qp: le32::from_ne(c.max_qp),
        max_qp_wr: le32::from_ne(1 << c.log_max_wq),
        device_cap_flags: le32::from_ne(IBV_DEVICE_RC_RNR_NAK_GEN),
        max_sge: le32::from_ne(c.max_sge as u32),
        max_sge_rd: le32::from_ne(c.max_sge as u32),
        max_cq: le32::from_ne(c.max_cq),
        max_cqe: le32::from_ne(1 << c.log_max_cqe),
        max_mr: le32::from_ne(c.max_mr),
        max_pd: le32::from_ne(c.max_pd),
        max_qp_rd_atom: le32::from_ne(c.max_rd_atomic as u32),
        max_qp_init_rd_atom: le32::from_ne(c.max_rd_atomic as u32),
        max_inline_data: le32::from_ne(c.max_inline),
        atomic_cap: le32::from_ne(IBV_ATOMIC_HCA),
        phys_port_cnt: le32::from_ne(1),
        max_msg_sz: le32::from_ne(c.max_msg() as u32),
        local_ca_ack_delay: le32::from_ne(15),
        max_srq: le32::from_ne(c.max_srq),
        max_srq_wr: le32::from_ne(if c.max_srq > 0 { 1 << c.log_max_wq } else { 0 }),
        max_srq_sge: le32::from_ne(if c.max_srq > 0 { c.max_sge as u32 } else { 0 }),
    };
    to_bytes(&o, out);
    Ok(())
}

fn check_port(port: le32, off: usize) -> CmdResult {
    check(port.to_ne() == 1, CmdStatus::BadParam, off)
}

pub(super) fn port(
    st: &mut State,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> CmdResult {
    let i: QueryPortIn = from_bytes(input);
    check_port(i.port, off!(QueryPortIn, port))?;
    let c = &st.dev.cfg;
    let o = QueryPortOut {
        state: if st.dev.port.link_up {
            PortState::Active
        } else {
            PortState::Down
        }
        .raw(),
        max_mtu: Mtu::Mtu4096.raw(),
        active_mtu: c.active_mtu.raw(),
        link_layer: LinkLayer::Ethernet.raw(),
        gid_tbl_len: le32::from_ne(c.gid_table_len),
        port_cap_flags: le32::from_ne(0),
        max_msg_sz: le32::from_ne(c.max_msg() as u32),
        // The IB port counters, from the port's own (saturating at 32
        // bits as IBA's do at their width).
        bad_pkey_cntr: le32::from_ne(sat32(st.dev.port.counters.0[counter::RX_BAD_PKEY])),
        qkey_viol_cntr: le32::from_ne(sat32(st.dev.port.counters.0[counter::RX_BAD_QKEY])),
        pkey_tbl_len: le16::from_ne(1),
        lid: le16::from_ne(0),
        sm_lid: le16::from_ne(0),
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        active_width: IBV_WIDTH_4X,
        active_speed: IBV_SPEED_EDR,
        phys_state: PHYS_STATE_LINK_UP,
        reserved0: [0; 3],
        mac: c.mac,
        reserved1: [0; 2],
    };
    to_bytes(&o, out);
    Ok(())
}

pub(super) fn gid(
    st: &mut State,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> CmdResult {
    let i: QueryGidIn = from_bytes(input);
    check_port(i.port, off!(QueryGidIn, port))?;
    let e = st.dev.gids.get(i.index.to_ne() as usize);
    let e = e.ok_or(super::fail(CmdStatus::BadParam, off!(QueryGidIn, index)))?;
    let o = QueryGidOut {
        gid: if e.valid { e.gid } else { [0; 16] },
        gid_type: if e.valid { e.ty.raw() } else { 0 },
        valid: e.valid as u8,
        reserved: [0; 2],
    };
    to_bytes(&o, out);
    Ok(())
}

pub(super) fn set_gid(st: &mut State, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    let i: SetGidIn = from_bytes(input);
    check_port(i.port, off!(SetGidIn, port))?;
    let index = i.index.to_ne() as usize;
    check(
        index < st.dev.gids.len(),
        CmdStatus::BadParam,
        off!(SetGidIn, index),
    )?;
    let clear = i.gid == [0; 16];
    // The link layer is Ethernet: only RoCE GIDs make sense.
    let ty = GidType::from_raw(i.gid_type).filter(|t| clear || *t != GidType::Ib);
    let ty = ty.ok_or(super::fail(CmdStatus::BadParam, off!(SetGidIn, gid_type)))?;
    check(
        i.reserved == [0; 3],
        CmdStatus::BadParam,
        off!(SetGidIn, reserved),
    )?;
    let entry = GidEntry {
        gid: i.gid,
        ty,
        valid: !clear,
    };
    let changed = st.dev.gids[index] != entry;
    st.dev.gids[index] = entry;
    if changed {
        crate::eq::post(&mut st.dev, rnic_hw_regs::eqe::EventType::GidChange, 1, 0);
    }
    Ok(())
}

fn sat32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}
