//! BAR 1: the device's 32-bit registers (`PVRDMA_REG_*`).
//!
//! Bring-up writes the device-shared region's address (DSRLOW, then
//! DSRHIGH: the high write makes the device read the region and fill in
//! its capabilities), unmasks interrupts, writes [`Ctl::Activate`] and
//! reads [`ERR`], which must then be 0. A command is run by writing 0 to
//! [`REQUEST`] once the command slot holds it.

use rnic_queues::wire_enum;

/// R: the device's interface version ([`VERSION_ROCEV1`] and later).
pub const VERSION: usize = 0x00;
/// W: low 32 bits of the device-shared region's DMA address.
pub const DSRLOW: usize = 0x04;
/// W: high 32 bits of the device-shared region's DMA address.
pub const DSRHIGH: usize = 0x08;
/// W: a [`Ctl`] value.
pub const CTL: usize = 0x0c;
/// W: run the command in the command slot.
pub const REQUEST: usize = 0x10;
/// R: the device's error: 0 once activated without error.
pub const ERR: usize = 0x14;
/// R: interrupt cause ([`IntrVector`] bits).
pub const ICR: usize = 0x18;
/// R/W: interrupt mask; 0 unmasks every vector.
pub const IMR: usize = 0x1c;
/// R/W: MAC address, low 32 bits.
pub const MACL: usize = 0x20;
/// R/W: MAC address, high 16 bits.
pub const MACH: usize = 0x24;
/// Bytes of the register BAR the registers above span.
pub const REGS_SIZE: usize = 0x28;

/// Version 17: RoCE v1 only.
pub const VERSION_ROCEV1: u32 = 17;
/// Version 18: RoCE v2 GIDs.
pub const VERSION_ROCEV2: u32 = 18;
/// Version 19: 64-bit page frame numbers (`uar_pfn64`, `pfn64`).
pub const VERSION_PPN64: u32 = 19;
/// Version 20: CREATE_QP answers a QP handle apart from the QP number.
pub const VERSION_QPHANDLE: u32 = 20;

/// MSI-X vectors the device raises.
pub const MAX_INTERRUPTS: u16 = 3;

wire_enum! {
    /// Values written to [`CTL`] (`enum pvrdma_device_ctl`).
    Ctl: u32 {
        /// Start the device.
        Activate = 0,
        /// Resume a quiesced device.
        Unquiesce = 1,
        /// Reset the device.
        Reset = 2,
    }
}

wire_enum! {
    /// MSI-X vectors (`enum pvrdma_intr_vector`); [`ICR`] has bit
    /// `1 << vector` for each cause.
    IntrVector: u16 {
        /// A command's response is in the response slot.
        Response = 0,
        /// The async event ring has entries.
        Async = 1,
        /// The CQ-notification ring has entries.
        Cq = 2,
    }
}
