//! `rnicd`: the emulated rnic NIC served as a PCI device over vfio-user,
//! the protocol for a device emulated in another process.
//!
//! A client connects to the server's unix socket and sees the rnic
//! device's PCI regions and MSI-X vectors: BAR 0 (the registers) and BAR 2
//! (the doorbell pages) as region reads and writes, memory it shares
//! (`DMA_MAP` of a file descriptor at an IOVA it chooses) as the device's
//! IOMMU mappings, and its eventfds (`SET_IRQS`) signalled on every
//! interrupt. Each connection gets a device of its own (as a virtual
//! function of a real NIC): its own registers, command queue and IOMMU
//! address space, destroyed with every object in it when the client goes.

pub mod backend;

pub use backend::Backend;
