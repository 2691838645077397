//! A vfio-user client (rust-vmm's) against the server: the rnic device's
//! identity, registers, a command executed from memory the client shares,
//! its interrupt on the client's eventfd, and bad requests refused.

mod common;

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use memmap2::{MmapOptions, MmapRaw};
use rnic_emu::{EmuConfig, EmuDevice, ExecMode};
use rnic_hw_regs::bar0::{self, CmdqCtrl, Ctrl, Status};
use rnic_hw_regs::cmd::*;
use rnic_hw_regs::pci;
use rnicd::Backend;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_BAR0_REGION_INDEX,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
};
use vfio_user::{Client, Server};

const IOVA: u64 = 0x4000_0000;

/// A server for one client of a fresh device, on a socket of its own.
fn serve(name: &str) -> (PathBuf, std::thread::JoinHandle<()>) {
    let path = common::socket(name);
    let dev = EmuDevice::new(EmuConfig::default(), ExecMode::Inline);
    let mut backend = Backend::new(&dev);
    let server = Server::new(&path, true, backend.irqs(), backend.regions()).expect("bind");
    let t = std::thread::spawn(move || {
        let _ = server.run(&mut backend);
    });
    (path, t)
}

fn read32(c: &mut Client, off: usize) -> u32 {
    let mut b = [0u8; 4];
    c.region_read(VFIO_PCI_BAR0_REGION_INDEX, off as u64, &mut b)
        .expect("region read");
    u32::from_le_bytes(b)
}

fn write32(c: &mut Client, off: usize, v: u32) {
    c.region_write(VFIO_PCI_BAR0_REGION_INDEX, off as u64, &v.to_le_bytes())
        .expect("region write");
}

/// `len` bytes of shared memory: the file and this process's mapping.
fn memfd(len: u64) -> (File, MmapRaw) {
    // SAFETY: a NUL-terminated name and no flags; a non-negative result is
    // a new descriptor nothing else owns.
    let fd = unsafe { libc::memfd_create(c"rnicd-test".as_ptr(), libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: `fd` is fresh and owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(len).expect("ftruncate");
    // SAFETY: F_ADD_SEALS with a seal mask, on a descriptor we own.
    let sealed = unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
    assert_eq!(sealed, 0, "F_SEAL_SHRINK");
    let map = MmapOptions::new().map_raw(&file).expect("mmap");
    (file, map)
}

/// A page of memory in a file that may still shrink.
fn unsealed() -> File {
    // SAFETY: as in `memfd`.
    let fd = unsafe { libc::memfd_create(c"rnicd-unsealed".as_ptr(), 0) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: fresh and owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(4096).expect("ftruncate");
    file
}

fn eventfd() -> File {
    // SAFETY: no memory arguments; a non-negative result is a fresh fd.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK) };
    assert!(fd >= 0);
    // SAFETY: fresh and owned by nothing else.
    unsafe { File::from_raw_fd(fd) }
}

fn readable(f: &File) -> bool {
    let mut p = libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, 1000) == 1 }
}

#[test]
fn a_client_brings_the_device_up_and_runs_a_command_from_its_memory() {
    let (path, server) = serve("command");
    let mut c = Client::new(&path).expect("connect");
    let mut cfg = [0u8; 4];
    c.region_read(VFIO_PCI_CONFIG_REGION_INDEX, 0, &mut cfg)
        .expect("config read");
    assert_eq!(u16::from_le_bytes([cfg[0], cfg[1]]), pci::VENDOR_ID);
    assert_eq!(u16::from_le_bytes([cfg[2], cfg[3]]), pci::DEVICE_ID);
    assert_eq!(read32(&mut c, bar0::ID), bar0::MAGIC);
    let irq = eventfd();
    let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, flags, 0, 1, &[irq.as_raw_fd()])
        .expect("SET_IRQS");

    // The command queue in the client's memory, at an IOVA it chose.
    let (file, mem) = memfd(4096);
    c.dma_map(0, IOVA, 4096, file.as_raw_fd()).expect("DMA_MAP");
    write32(&mut c, bar0::CMDQ_BASE_LO, IOVA as u32);
    write32(&mut c, bar0::CMDQ_BASE_HI, (IOVA >> 32) as u32);
    let log = CmdqCtrl::new().with_log_size(3).into_bits().to_ne();
    write32(&mut c, bar0::CMDQ_CTRL, log);
    write32(
        &mut c,
        bar0::CTRL,
        Ctrl::new().with_enable(true).into_bits().to_ne(),
    );
    let status = Status::from_bits(read32(&mut c, bar0::STATUS).into());
    assert!(status.enabled() && !status.fatal(), "{status:?}");

    let hdr = CmdHeader {
        opcode: CmdOpcode::QueryDevice.raw().into(),
        owner: OWNER_DEVICE,
        token: 7,
        ..CmdHeader::default()
    };
    // SAFETY: the first 16 bytes of the 4 KiB mapping; the device reads
    // them only after the doorbell below.
    unsafe { mem.as_mut_ptr().cast::<CmdHeader>().write_volatile(hdr) };
    write32(&mut c, bar0::CMDQ_DB, 1);
    let deadline = Instant::now() + Duration::from_secs(5);
    // SAFETY: the entry's owner byte, inside the mapping.
    let owner = || unsafe { mem.as_ptr().add(CMD_OWNER_OFFSET).read_volatile() };
    while owner() != 0 {
        assert!(Instant::now() < deadline, "the command never completed");
        std::thread::yield_now();
    }
    // SAFETY: the entry the device handed back, inside the mapping.
    let done = unsafe { mem.as_ptr().cast::<CmdEntry>().read_volatile() };
    assert_eq!((done.hdr.status, done.hdr.token), (CmdStatus::Ok.raw(), 7));
    let at = std::mem::offset_of!(QueryDeviceOut, vendor_id);
    let vendor = u32::from_le_bytes(done.output[at..at + 4].try_into().unwrap());
    assert_eq!(vendor, u32::from(pci::VENDOR_ID));
    assert!(
        readable(&irq),
        "the completion interrupt reached the client's eventfd"
    );

    c.dma_unmap(IOVA, 4096).expect("DMA_UNMAP");
    c.shutdown().expect("shutdown");
    drop(c);
    server.join().unwrap();
    let _ = std::fs::remove_file(&path);
}

#[test]
fn bad_requests_get_errors_and_what_was_accepted_stays() {
    use vfio_user::{DmaMapFlags, DmaUnmapFlags, ServerBackend};
    let dev = EmuDevice::new(EmuConfig::default(), ExecMode::Inline);
    let mut b = Backend::new(&dev);
    let rw = DmaMapFlags::READ_WRITE;
    let (file, _mem) = memfd(8192);
    let fd = || Some(file.try_clone().unwrap());
    b.dma_map(rw, 0, IOVA, 8192, fd()).expect("DMA_MAP");
    let refused = [
        ("overlapping", 0, IOVA + 4096, 4096, fd()),
        ("no file", 0, IOVA + 0x10_0000, 4096, None),
        ("unaligned", 0, IOVA + 0x10_0001, 4096, fd()),
        ("empty", 0, IOVA + 0x10_0000, 0, fd()),
        ("past the file", 4096, IOVA + 0x10_0000, 1 << 40, fd()),
        ("past the file's end", 4096, IOVA + 0x10_0000, 8192, fd()),
        (
            "a file that may shrink",
            0,
            IOVA + 0x10_0000,
            4096,
            Some(unsealed()),
        ),
    ];
    for (why, off, iova, size, f) in refused {
        assert!(b.dma_map(rw, off, iova, size, f).is_err(), "{why}");
    }
    let none = DmaUnmapFlags::empty();
    assert!(b.dma_unmap(none, IOVA, 4096).is_err(), "part of a mapping");
    assert!(
        b.dma_unmap(none, IOVA + 8192, 4096).is_err(),
        "nothing there"
    );
    let mut four = [0u8; 4];
    let bar0_end = pci::BAR_REGS_SIZE as u64;
    assert!(b
        .region_read(VFIO_PCI_BAR0_REGION_INDEX, bar0_end, &mut four)
        .is_err());
    assert!(
        b.region_read(VFIO_PCI_BAR0_REGION_INDEX, 2, &mut four)
            .is_err(),
        "unaligned"
    );
    assert!(b
        .region_read(VFIO_PCI_BAR0_REGION_INDEX, u64::MAX - 1, &mut four)
        .is_err());
    assert!(b
        .region_write(VFIO_PCI_BAR0_REGION_INDEX, 0, &[0; 3])
        .is_err());
    assert!(
        b.region_read(5, 0, &mut four).is_err(),
        "a region the device has not"
    );
    let vectors = u32::from(EmuConfig::default().msix_vectors);
    let irq = eventfd();
    assert!(b
        .set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, 0, vectors, 1, vec![irq])
        .is_err());
    assert!(b.set_irqs(0, 0, 0, 1, vec![eventfd()]).is_err(), "INTx");
    // What was accepted stays: the whole first mapping unmaps.
    b.dma_unmap(none, IOVA, 8192)
        .expect("the first mapping is whole");
    assert!(b
        .region_read(VFIO_PCI_BAR0_REGION_INDEX, bar0::ID as u64, &mut four)
        .is_ok());
    assert_eq!(u32::from_le_bytes(four), bar0::MAGIC);
}

#[test]
fn the_daemon_serves_a_client_and_exits_after_the_count_it_was_given() {
    let (daemon, path) = common::daemon("daemon", 1, 1);
    let mut c = Client::new(&path).expect("connect");
    assert_eq!(read32(&mut c, bar0::ID), bar0::MAGIC);
    drop(c);
    common::exits(daemon);
    assert!(!path.exists(), "the socket is removed");
}
