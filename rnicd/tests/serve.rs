//! A vfio-user client against the server: the rnic device's identity,
//! registers, a command executed from memory the client shares, its
//! interrupt on the client's eventfd, the posted-write queue, bad requests
//! refused, and malformed messages that neither crash rnicd nor stop it
//! serving.

mod common;

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memmap2::{MmapOptions, MmapRaw};
use rnic_emu::{EmuConfig, EmuDevice, ExecMode};
use rnic_hw_regs::bar0::{self, CmdqCtrl, Ctrl, Status};
use rnic_hw_regs::cmd::*;
use rnic_hw_regs::pci;
use rnic_vfio_user::client::Client;
use rnic_vfio_user::msg::{
    self, Caps, Command, DmaMap, DmaUnmap, Header, IrqSet, RegionAccess, HEADER_LEN,
};
use rnic_vfio_user::server::{self, Device, Peer};
use rnic_vfio_user::{sock, Error};
use rnicd::Backend;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_BAR0_REGION_INDEX,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
};
use zerocopy::IntoBytes;

const IOVA: u64 = 0x4000_0000;

/// A server for one client of a fresh device, on a socket of its own.
fn serve(name: &str) -> (PathBuf, std::thread::JoinHandle<()>) {
    let path = common::socket(name);
    let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    let t = std::thread::spawn(move || {
        let dev = EmuDevice::new(EmuConfig::default(), ExecMode::Inline);
        let mut backend = Backend::new(&dev, None);
        let (stream, _) = listener.accept().expect("accept");
        let _ = server::serve(&stream, &mut backend);
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
    let mut c = Client::connect(&path, false).expect("connect");
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
    c.dma_map(0, IOVA, 4096, Some(file.as_raw_fd()))
        .expect("DMA_MAP");
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
    let refused = c.dma_unmap(IOVA, 4096);
    assert!(
        matches!(refused, Err(Error::Refused { errno, .. }) if errno == libc::EINVAL),
        "{refused:?}"
    );
    assert_eq!(
        read32(&mut c, bar0::ID),
        bar0::MAGIC,
        "the connection goes on"
    );
    drop(c);
    server.join().unwrap();
    let _ = std::fs::remove_file(&path);
}

fn map(offset: u64, address: u64, size: u64) -> DmaMap {
    DmaMap {
        argsz: size_of::<DmaMap>() as u32,
        flags: msg::DMA_READ | msg::DMA_WRITE,
        offset,
        address,
        size,
    }
}

fn unmap(address: u64, size: u64) -> DmaUnmap {
    DmaUnmap {
        argsz: size_of::<DmaUnmap>() as u32,
        flags: 0,
        address,
        size,
    }
}

fn irq_set(index: u32, start: u32, count: u32) -> IrqSet {
    IrqSet {
        argsz: size_of::<IrqSet>() as u32,
        flags: VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
        index,
        start,
        count,
    }
}

#[test]
fn bad_requests_get_errors_and_what_was_accepted_stays() {
    let dev = EmuDevice::new(EmuConfig::default(), ExecMode::Inline);
    let mut b = Backend::new(&dev, None);
    let me = Peer {
        pid: std::process::id() as i32,
        uid: 0,
        gid: 0,
    };
    assert_eq!(b.connected(&me, &Caps::default()), Ok(false));
    let (file, _mem) = memfd(8192);
    let fd = || Some(OwnedFd::from(file.try_clone().unwrap()));
    b.dma_map(&map(0, IOVA, 8192), fd()).expect("DMA_MAP");
    let far = IOVA + 0x10_0000;
    let refused = [
        ("overlapping", map(0, IOVA + 4096, 4096), fd()),
        (
            "no file, and no process memory asked for",
            map(0, far, 4096),
            None,
        ),
        ("unaligned", map(0, far + 1, 4096), fd()),
        ("empty", map(0, far, 0), fd()),
        ("past the file", map(4096, far, 1 << 40), fd()),
        ("past the file's end", map(4096, far, 8192), fd()),
        (
            "a file that may shrink",
            map(0, far, 4096),
            Some(OwnedFd::from(unsealed())),
        ),
    ];
    for (why, m, f) in refused {
        assert!(b.dma_map(&m, f).is_err(), "{why}");
    }
    assert!(
        b.dma_unmap(&unmap(IOVA, 4096)).is_err(),
        "part of a mapping"
    );
    assert!(
        b.dma_unmap(&unmap(IOVA + 8192, 4096)).is_err(),
        "nothing there"
    );
    let mut four = [0u8; 4];
    let bar0_end = pci::BAR_REGS_SIZE as u64;
    let r0 = VFIO_PCI_BAR0_REGION_INDEX;
    assert!(b.region_read(r0, bar0_end, &mut four).is_err());
    assert!(b.region_read(r0, 2, &mut four).is_err(), "unaligned");
    assert!(b.region_read(r0, u64::MAX - 1, &mut four).is_err());
    assert!(b.region_write(r0, 0, &[0; 3]).is_err());
    assert!(
        b.region_read(5, 0, &mut four).is_err(),
        "a region the device has not"
    );
    let vectors = u32::from(EmuConfig::default().msix_vectors);
    let msix = VFIO_PCI_MSIX_IRQ_INDEX;
    let one = || vec![OwnedFd::from(eventfd())];
    assert!(b.set_irqs(&irq_set(msix, vectors, 1), one()).is_err());
    assert!(b.set_irqs(&irq_set(0, 0, 1), one()).is_err(), "INTx");
    assert!(
        b.set_irqs(&irq_set(msix, 0, 2), one()).is_err(),
        "too few fds"
    );
    // What was accepted stays: the whole first mapping unmaps.
    b.dma_unmap(&unmap(IOVA, 8192))
        .expect("the first mapping is whole");
    assert!(b.region_read(r0, bar0::ID as u64, &mut four).is_ok());
    assert_eq!(u32::from_le_bytes(four), bar0::MAGIC);
}

/// A raw connection that has said `VERSION`.
fn raw(path: &Path) -> UnixStream {
    let s = UnixStream::connect(path).expect("connect");
    let mut data = msg::VERSION.as_bytes().to_vec();
    data.extend_from_slice(b"{}\0");
    let h = Header::command(0, Command::Version, HEADER_LEN + data.len());
    sock::send(&s, &h, &[&data], &[]).expect("send");
    let r = sock::recv(&s, msg::MAX_MESSAGE, None)
        .expect("reply")
        .expect("a reply");
    assert_eq!(r.header.flags, msg::flags::REPLY, "VERSION accepted");
    s
}

/// Sends a command of `command` with `payload` and `fds` and returns the
/// errno of its reply (0: success).
fn ask(s: &UnixStream, command: u16, payload: &[u8], fds: &[i32]) -> u32 {
    let h = Header {
        id: 9,
        command,
        size: (HEADER_LEN + payload.len()) as u32,
        flags: msg::flags::COMMAND,
        error: 0,
    };
    sock::send(s, &h, &[payload], fds).expect("send");
    let r = sock::recv(s, msg::MAX_MESSAGE, None)
        .expect("reply")
        .expect("a reply");
    assert_eq!((r.header.id, r.header.command), (9, command));
    if r.header.flags & msg::flags::ERROR != 0 {
        assert_ne!(r.header.error, 0, "an errno with every error");
        r.header.error
    } else {
        0
    }
}

/// Reads BAR 0's ID register over `s`: the connection still works.
fn still_serves(s: &UnixStream) {
    let a = RegionAccess {
        offset: bar0::ID as u64,
        region: VFIO_PCI_BAR0_REGION_INDEX,
        count: 4,
    };
    assert_eq!(ask(s, Command::RegionRead as u16, a.as_bytes(), &[]), 0);
}

/// Whether the server closed `s` (it reads end of stream).
fn closed(s: &mut UnixStream) -> bool {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// A malformed command: why, its number, payload and descriptors, and
/// the errno it gets.
type Case<'a> = (&'a str, u16, Vec<u8>, &'a [i32], i32);

#[test]
fn malformed_messages_get_errors_or_end_their_connection_and_rnicd_goes_on() {
    let (daemon, path) = common::daemon("malformed", 8, 1);
    let efd = eventfd();
    let fds = [efd.as_raw_fd(), efd.as_raw_fd()];
    let read = Command::RegionRead as u16;
    let write = Command::RegionWrite as u16;
    let big = RegionAccess {
        offset: 0,
        region: VFIO_PCI_BAR0_REGION_INDEX,
        count: u32::MAX,
    };
    let short_write = RegionAccess { count: 8, ..big };
    // Errors that leave the connection in step.
    let s = raw(&path);
    let cases: [Case; 9] = [
        (
            "an unknown command",
            77,
            vec![1, 2, 3],
            &[],
            libc::EOPNOTSUPP,
        ),
        ("a payload too short", read, vec![0; 5], &[], libc::EINVAL),
        (
            "a 4 GiB read",
            read,
            big.as_bytes().to_vec(),
            &[],
            libc::EINVAL,
        ),
        (
            "a write whose data is not its count",
            write,
            short_write.as_bytes().to_vec(),
            &[],
            libc::EINVAL,
        ),
        (
            "descriptors where none belong",
            read,
            vec![0; 16],
            &fds[..1],
            libc::EINVAL,
        ),
        (
            "DMA_MAP with two descriptors",
            Command::DmaMap as u16,
            map(0, IOVA, 4096).as_bytes().to_vec(),
            &fds,
            libc::EINVAL,
        ),
        (
            "a second VERSION",
            Command::Version as u16,
            msg::VERSION.as_bytes().to_vec(),
            &[],
            libc::EINVAL,
        ),
        (
            "DMA_READ, which only a server sends",
            Command::DmaRead as u16,
            vec![0; 16],
            &[],
            libc::EINVAL,
        ),
        (
            "DMA_UNMAP of nothing",
            Command::DmaUnmap as u16,
            unmap(IOVA, 4096).as_bytes().to_vec(),
            &[],
            libc::EINVAL,
        ),
    ];
    for (why, command, payload, fds, errno) in cases {
        assert_eq!(ask(&s, command, &payload, fds), errno as u32, "{why}");
        still_serves(&s);
    }
    drop(s);

    // What cannot be read past ends that connection only.
    let header = |size: u32, flags: u32| Header {
        id: 1,
        command: read,
        size,
        flags,
        error: 0,
    };
    let fatal: [(&str, Vec<u8>); 4] = [
        (
            "a size smaller than a header",
            header(3, 0).as_bytes().to_vec(),
        ),
        (
            "a size past the limit",
            header(u32::MAX, 0).as_bytes().to_vec(),
        ),
        (
            "a reply where a command belongs",
            [
                header(HEADER_LEN as u32 + 16, msg::flags::REPLY).as_bytes(),
                &[0; 16],
            ]
            .concat(),
        ),
        (
            "a stream that ends inside a message",
            header(HEADER_LEN as u32 + 16, 0).as_bytes()[..10].to_vec(),
        ),
    ];
    for (why, bytes) in fatal {
        let mut s = raw(&path);
        s.write_all(&bytes).expect("send");
        if why.contains("ends inside") {
            s.shutdown(std::net::Shutdown::Write).unwrap();
        }
        assert!(closed(&mut s), "{why}: the connection ends");
    }
    // Not VERSION first: the connection ends before anything is served.
    let mut s = UnixStream::connect(&path).expect("connect");
    let a = RegionAccess {
        offset: 0,
        region: 0,
        count: 4,
    };
    let h = Header::command(0, Command::RegionRead, HEADER_LEN + 16);
    sock::send(&s, &h, &[a.as_bytes()], &[]).unwrap();
    assert!(closed(&mut s), "a command before VERSION");
    // A bad VERSION: refused, and the connection ends.
    let s = UnixStream::connect(&path).expect("connect");
    let h = Header::command(0, Command::Version, HEADER_LEN + 2);
    sock::send(&s, &h, &[&[0, 0]], &[]).unwrap();
    let r = sock::recv(&s, msg::MAX_MESSAGE, None).unwrap().unwrap();
    assert_eq!(r.header.error, libc::EINVAL as u32, "a VERSION cut short");
    // The last client finds rnicd serving as before.
    let mut c = Client::connect(&path, false).expect("connect");
    assert_eq!(read32(&mut c, bar0::ID), bar0::MAGIC);
    drop(c);
    common::exits(daemon);
}

#[test]
fn the_daemon_serves_a_client_and_exits_after_the_count_it_was_given() {
    let (daemon, path) = common::daemon("daemon", 1, 1);
    let mut c = Client::connect(&path, true).expect("connect");
    assert!(c.caps().process_memory, "rnicd reaches its clients' memory");
    assert_eq!(read32(&mut c, bar0::ID), bar0::MAGIC);
    let posted = c
        .region_info(rnicd::backend::POSTED_REGION)
        .expect("region");
    assert!(posted.fd.is_some() && posted.kind.is_some(), "{posted:?}");
    let kick = c.io_fds(rnicd::backend::POSTED_REGION).expect("io fds");
    assert_eq!(kick.len(), 1);
    drop(c);
    common::exits(daemon);
    assert!(!path.exists(), "the socket is removed");
}

#[test]
fn clients_that_stall_are_given_up_and_others_served() {
    let (daemon, path) = common::daemon("stall", 3, 2);
    // One says nothing; the other stops inside its VERSION.
    let mut silent = UnixStream::connect(&path).expect("connect");
    let mut halting = UnixStream::connect(&path).expect("connect");
    let h = Header::command(0, Command::Version, HEADER_LEN + 4);
    halting.write_all(&h.as_bytes()[..10]).unwrap();
    let t = Instant::now();
    assert!(closed(&mut silent), "a silent client is given up");
    assert!(
        closed(&mut halting),
        "a client stopped inside a message is given up"
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    // Their slots serve again.
    let mut c = Client::connect(&path, false).expect("connect");
    assert_eq!(read32(&mut c, bar0::ID), bar0::MAGIC);
    drop(c);
    common::exits(daemon);
}
