//! The device-shared region (`struct pvrdma_device_shared_region`): one
//! page of driver memory the device reads at bring-up (when DSRHIGH is
//! written) and into which it writes its capabilities.
//!
//! It tells the device where the command and response slots are, the
//! async event and CQ-notification rings (each a page directory: see
//! [`PDIR_SHIFT`]) and the driver's UAR page.

use bitfield_struct::bitfield;
use endian_num::{le16, le32, le64};
use rnic_queues::wire_enum;
use static_assertions::{assert_eq_size, const_assert_eq};

/// Pages a page directory reaches: one directory page of 512 table
/// addresses, each table 512 page addresses (`PVRDMA_PAGE_DIR_MAX_PAGES`;
/// `rnic_queues::write_page_dir` writes them);
/// the device decodes page `i` of a region as directory entry
/// `(i >> PTABLE_SHIFT) & 0x1ff`, table entry `i & 0x1ff`.
pub const PDIR_MAX_PAGES: usize = 512 * 512;
/// Bits of a page index that select the directory (always 0: one page).
pub const PDIR_SHIFT: u32 = 18;
/// Bits of a page index that select the table within the directory.
pub const PTABLE_SHIFT: u32 = 9;
/// Page addresses in one table page (and table addresses in the directory).
pub const PDIR_ENTRIES: usize = 512;

wire_enum! {
    /// Device modes (`enum pvrdma_device_mode`): the driver supports RoCE.
    DeviceMode: u8 {
        /// RoCE.
        Roce = 0,
        /// iWARP.
        Iwarp = 1,
        /// InfiniBand.
        Ib = 2,
    }
}

/// `caps.gid_types` bit: RoCE v1 GIDs.
pub const GID_TYPE_ROCE_V1: u8 = 1 << 0;
/// `caps.gid_types` bit: RoCE v2 GIDs.
pub const GID_TYPE_ROCE_V2: u8 = 1 << 1;

/// The guest OS, as the driver reports it (`struct pvrdma_gos_info`'s
/// bit-fields).
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct GosWord {
    /// 1: 32-bit, 2: 64-bit (`enum pvrdma_gos_bits`).
    #[bits(2)]
    pub bits: u8,
    /// 1: Linux (`enum pvrdma_gos_type`).
    #[bits(4)]
    pub kind: u8,
    /// Guest OS version.
    #[bits(16)]
    pub version: u16,
    /// Other.
    #[bits(10)]
    pub misc: u16,
}

/// Guest OS information (`struct pvrdma_gos_info`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct GosInfo {
    /// The bit-fields.
    pub word: GosWord,
    /// Pad to 8 bytes.
    pub pad: le32,
}

/// The device's capabilities (`struct pvrdma_device_caps`), written by the
/// device into the shared region: the fields of `ibv_query_device`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)] // the fields of `struct ibv_device_attr`, named alike
pub struct DeviceCaps {
    pub fw_ver: le64,
    pub node_guid: le64,
    pub sys_image_guid: le64,
    pub max_mr_size: le64,
    pub page_size_cap: le64,
    pub atomic_arg_sizes: le64,
    pub ex_comp_mask: le32,
    pub device_cap_flags2: le32,
    pub max_fa_bit_boundary: le32,
    pub log_max_atomic_inline_arg: le32,
    pub vendor_id: le32,
    pub vendor_part_id: le32,
    pub hw_ver: le32,
    pub max_qp: le32,
    pub max_qp_wr: le32,
    pub device_cap_flags: le32,
    pub max_sge: le32,
    pub max_sge_rd: le32,
    pub max_cq: le32,
    pub max_cqe: le32,
    pub max_mr: le32,
    pub max_pd: le32,
    pub max_qp_rd_atom: le32,
    pub max_ee_rd_atom: le32,
    pub max_res_rd_atom: le32,
    pub max_qp_init_rd_atom: le32,
    pub max_ee_init_rd_atom: le32,
    pub max_ee: le32,
    pub max_rdd: le32,
    pub max_mw: le32,
    pub max_raw_ipv6_qp: le32,
    pub max_raw_ethy_qp: le32,
    pub max_mcast_grp: le32,
    pub max_mcast_qp_attach: le32,
    pub max_total_mcast_qp_attach: le32,
    pub max_ah: le32,
    pub max_fmr: le32,
    pub max_map_per_fmr: le32,
    pub max_srq: le32,
    pub max_srq_wr: le32,
    pub max_srq_sge: le32,
    pub max_uar: le32,
    pub gid_tbl_len: le32,
    pub max_pkeys: le16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
    /// A [`DeviceMode`] value.
    pub mode: u8,
    /// `PVRDMA_ATOMIC_OP_*` bits.
    pub atomic_ops: u8,
    /// `PVRDMA_BMME_FLAG_*` bits.
    pub bmme_flags: u8,
    /// [`GID_TYPE_ROCE_V1`] and [`GID_TYPE_ROCE_V2`] bits.
    pub gid_types: u8,
    pub max_fast_reg_page_list_len: le32,
}

/// A ring the device reaches by page directory: its page count, the
/// state page included, and the directory's address.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RingPageInfo {
    /// Pages, the state page included.
    pub num_pages: le32,
    /// Reserved, zero.
    pub reserved: le32,
    /// DMA address of the page directory.
    pub pdir_dma: le64,
}

/// The device-shared region (`struct pvrdma_device_shared_region`, packed
/// in C, but every field is naturally aligned, so `repr(C)` matches it).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Dsr {
    /// W: the driver's interface version (a `bar1::VERSION_*`).
    pub driver_version: le32,
    /// Pad to 8 bytes.
    pub pad: le32,
    /// W: guest OS information.
    pub gos_info: GosInfo,
    /// W: DMA address of the command slot (one page).
    pub cmd_slot_dma: le64,
    /// W: DMA address of the response slot (one page).
    pub resp_slot_dma: le64,
    /// W: the async event ring.
    pub async_ring_pages: RingPageInfo,
    /// W: the CQ-notification ring.
    pub cq_ring_pages: RingPageInfo,
    /// W: page frame of the driver's UAR page in BAR 2 (32 bits before
    /// version 19, whose `uar_pfn64` shares the field).
    pub uar_pfn: le64,
    /// R: the device's capabilities.
    pub caps: DeviceCaps,
}

/// Size of the device-shared region.
pub const DSR_SIZE: usize = 280;
/// Offset of [`Dsr::caps`].
pub const DSR_CAPS_OFFSET: usize = 72;

assert_eq_size!(GosInfo, [u8; 8]);
assert_eq_size!(DeviceCaps, [u8; 208]);
assert_eq_size!(RingPageInfo, [u8; 16]);
assert_eq_size!(Dsr, [u8; DSR_SIZE]);
// The device's directories are the ones `rnic_queues::write_page_dir` writes.
const_assert_eq!(PDIR_ENTRIES, rnic_queues::PAGE_DIR_ENTRIES);
const_assert_eq!(PDIR_MAX_PAGES, PDIR_ENTRIES * PDIR_ENTRIES);
const_assert_eq!(core::mem::offset_of!(Dsr, cmd_slot_dma), 16);
const_assert_eq!(core::mem::offset_of!(Dsr, async_ring_pages), 32);
const_assert_eq!(core::mem::offset_of!(Dsr, cq_ring_pages), 48);
const_assert_eq!(core::mem::offset_of!(Dsr, uar_pfn), 64);
const_assert_eq!(core::mem::offset_of!(Dsr, caps), DSR_CAPS_OFFSET);
const_assert_eq!(core::mem::offset_of!(DeviceCaps, vendor_id), 64);
const_assert_eq!(core::mem::offset_of!(DeviceCaps, max_pkeys), 196);
const_assert_eq!(
    core::mem::offset_of!(DeviceCaps, max_fast_reg_page_list_len),
    204
);

// Plain data for DMA memory: every field listed, so padding fails the build.
rnic_queues::pod_bitfield!(GosWord: le32);
rnic_queues::pod_struct! {
    GosInfo { word, pad }
    DeviceCaps {
        fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, atomic_arg_sizes,
        ex_comp_mask, device_cap_flags2, max_fa_bit_boundary, log_max_atomic_inline_arg,
        vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge,
        max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom,
        max_res_rd_atom, max_qp_init_rd_atom, max_ee_init_rd_atom, max_ee, max_rdd, max_mw,
        max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
        max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
        max_srq_sge, max_uar, gid_tbl_len, max_pkeys, local_ca_ack_delay, phys_port_cnt, mode,
        atomic_ops, bmme_flags, gid_types, max_fast_reg_page_list_len,
    }
    RingPageInfo { num_pages, reserved, pdir_dma }
    Dsr {
        driver_version, pad, gos_info, cmd_slot_dma, resp_slot_dma, async_ring_pages,
        cq_ring_pages, uar_pfn, caps,
    }
}
