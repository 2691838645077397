//! Another process's memory as the device reaches it: the memory a
//! vfio-user client registers without sharing it (a `malloc`ed buffer),
//! read and written through the kernel with `process_vm_readv` and
//! `process_vm_writev`, as UCX's CMA transport does.
//!
//! Each access checks ptrace access to the process (the same user and a
//! dumpable process, or `CAP_SYS_PTRACE`; under Yama's `ptrace_scope` 1
//! the client names the server with `PR_SET_PTRACER`). The calls name the
//! process by its pid, so the device also holds a pidfd of it, and before
//! an access, unless it did within the last [`ALIVE_FOR`], checks that the
//! process has not exited: a pid is reused only after its process has
//! exited, been reaped and the kernel has handed out every other pid, which
//! takes far longer than that. An access to a process that has exited, or
//! to an address it does not map, is a DMA fault.
//!
//! Each call costs a system call with its access checks (about 1.5 µs
//! here), more than copying a 4 KiB packet, so the device batches them:
//!
//! - **Reads ahead.** A read fills a buffer with up to [`READ_AHEAD`]
//!   bytes from its address on (within the mapping), and later reads in
//!   it are copies: a message's packets, built one by one, cost one call.
//!   The buffer holds for one device step ([`ProcessMemory::new_step`]):
//!   a program may change its buffer once the WQE that sends it has
//!   completed, which it learns in a later step; and it is dropped when
//!   the device writes over it.
//! - **Writes behind.** The data a packet brings (an RDMA WRITE's, a
//!   SEND's, a READ response's) is queued while the next packet continues
//!   it or writes over it (the same QP, an address in or right after what
//!   is queued: a message's packets, or a stream of small WRITEs to one
//!   buffer) and written in one call: at the last packet of a message
//!   that completes, before its completion ([`ProcessMemory::flush`]);
//!   before anything else is read or written in the process's memory;
//!   before a command runs or a mapping goes; and at the end of every
//!   step, before the step's frames (their ACKs) leave. A write that
//!   fails after its packet was taken marks its QP, whose next packet, or
//!   the flush at its message's last, is refused as a DMA fault (a plain
//!   WRITE's own ACK may have left by then); the mark goes with the QP.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rnic_hw_regs::cqe::Syndrome;

/// How long a check that the process lives holds.
pub(crate) const ALIVE_FOR: Duration = Duration::from_millis(1);

/// The most pieces one call copies (the kernel's `UIO_MAXIOV`).
const MAX_IOV: usize = 1024;

/// Bytes a read fetches at most, from what it asked for on to the end of
/// what its caller will want (a message's bytes).
pub(crate) const READ_AHEAD: usize = 1 << 20;

/// Bytes of writes queued at most before they are written.
const WRITE_BEHIND: usize = 1 << 20;

/// What the device holds of the process's memory between calls.
#[derive(Debug, Default)]
struct Batch {
    /// Bytes read ahead from `ahead_at` on: the first `ahead_len` of the
    /// buffer (which only grows, so that it is not zeroed again).
    ahead: Vec<u8>,
    ahead_len: usize,
    ahead_at: u64,
    /// Bytes to write at `behind_at`, for QP `behind_qpn`.
    behind: Vec<u8>,
    behind_at: u64,
    behind_qpn: u32,
    /// QPs whose queued writes failed.
    faulted: Vec<u32>,
}

/// Whether `a .. a + alen` and `b .. b + blen` share a byte.
fn overlap(a: u64, alen: usize, b: u64, blen: usize) -> bool {
    alen != 0 && blen != 0 && a < b.saturating_add(blen as u64) && b < a.saturating_add(alen as u64)
}

/// A process's memory, open for the device.
#[derive(Debug)]
pub struct ProcessMemory {
    pid: i32,
    pidfd: OwnedFd,
    epoch: Instant,
    /// When the process was last seen alive (ns since `epoch`, plus one;
    /// 0: never).
    seen: AtomicU64,
    batch: Mutex<Batch>,
}

impl ProcessMemory {
    /// Opens the memory of process `pid`: refused if it cannot be reached
    /// (`EPERM`: no ptrace access; `ESRCH`: no such process).
    pub fn open(pid: i32) -> std::io::Result<ProcessMemory> {
        // SAFETY: pidfd_open takes a pid and flags; no memory arguments.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let mem = ProcessMemory {
            pid,
            pidfd,
            epoch: Instant::now(),
            seen: AtomicU64::new(0),
            batch: Mutex::new(Batch::default()),
        };
        // A byte at address 0 is never mapped: EFAULT says the process may
        // be reached, EPERM that it may not.
        let mut b = [0u8; 1];
        let v = libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: 1,
        };
        match mem.copy(false, 0, &[v]) {
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => Ok(mem),
            Err(e) => Err(e),
            Ok(()) => Ok(mem),
        }
    }

    /// The process's ID.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the process has not exited, checked at most every
    /// [`ALIVE_FOR`].
    fn alive(&self) -> bool {
        let now = self.epoch.elapsed().as_nanos() as u64 + 1;
        let seen = self.seen.load(Ordering::Relaxed);
        if seen != 0 && now - seen < ALIVE_FOR.as_nanos() as u64 {
            return true;
        }
        let mut p = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait. A pidfd is readable once its
        // process has exited.
        let exited = unsafe { libc::poll(&mut p, 1, 0) } != 0;
        if !exited {
            self.seen.store(now, Ordering::Relaxed);
        }
        !exited
    }

    /// Copies between `local` (our buffers, in order) and the process's
    /// bytes from `addr` on, as many as `local` holds: into ours if
    /// `!write`.
    fn copy(&self, write: bool, addr: u64, local: &[libc::iovec]) -> std::io::Result<()> {
        let mut at = addr;
        for chunk in local.chunks(MAX_IOV) {
            let total: usize = chunk.iter().map(|v| v.iov_len).sum();
            let remote = libc::iovec {
                iov_base: at as usize as *mut libc::c_void,
                iov_len: total,
            };
            // SAFETY: `chunk` describes our own buffers, alive and as long
            // as said for the call (written only by a read, whose buffers
            // the caller lent mutably); `remote` names the other process's
            // addresses, which the kernel checks.
            let n = unsafe {
                let f = if write {
                    libc::process_vm_writev
                } else {
                    libc::process_vm_readv
                };
                f(
                    self.pid,
                    chunk.as_ptr(),
                    chunk.len() as libc::c_ulong,
                    &remote,
                    1,
                    0,
                )
            };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if n as usize != total {
                // A partial copy: the process does not map the rest.
                return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
            }
            at = at.wrapping_add(total as u64);
        }
        Ok(())
    }

    fn access(&self, write: bool, addr: u64, local: &[libc::iovec]) -> Result<(), Syndrome> {
        if !self.alive() {
            log::debug!("process {} has exited: its memory is gone", self.pid);
            return Err(Syndrome::DmaFault);
        }
        self.copy(write, addr, local).map_err(|e| {
            let what = if write { "write" } else { "read" };
            log::debug!("{what} of process {} at {addr:#x}: {e}", self.pid);
            Syndrome::DmaFault
        })
    }

    fn batch(&self) -> MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads `buf.len()` bytes at virtual address `addr`: from what was
    /// read ahead, or reading ahead up to `limit` (the caller will want the
    /// bytes up to there, and the mapping holds them).
    pub(crate) fn read(&self, addr: u64, buf: &mut [u8], limit: u64) -> Result<(), Syndrome> {
        let mut b = self.batch();
        let len = buf.len();
        if overlap(b.behind_at, b.behind.len(), addr, len) {
            self.write_behind(&mut b);
        }
        let off = addr.wrapping_sub(b.ahead_at);
        if addr >= b.ahead_at && off + len as u64 <= b.ahead_len as u64 {
            buf.copy_from_slice(&b.ahead[off as usize..off as usize + len]);
            return Ok(());
        }
        let want = (limit.saturating_sub(addr) as usize).clamp(len, READ_AHEAD.max(len));
        if want > len {
            if b.ahead.len() < want {
                b.ahead.resize(want, 0);
            }
            let v = libc::iovec {
                iov_base: b.ahead.as_mut_ptr().cast(),
                iov_len: want,
            };
            b.ahead_len = 0;
            if self.access(false, addr, &[v]).is_ok() {
                buf.copy_from_slice(&b.ahead[..len]);
                b.ahead_len = want;
                b.ahead_at = addr;
                return Ok(());
            }
            // The process may not map all of it: the exact bytes.
        }
        let v = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: len,
        };
        self.access(false, addr, &[v])
    }

    /// Writes `src` at virtual address `addr` now, after the writes queued
    /// before it.
    pub(crate) fn write(&self, addr: u64, src: &[u8]) -> Result<(), Syndrome> {
        let mut b = self.batch();
        self.write_behind(&mut b);
        Self::drop_ahead(&mut b, addr, src.len());
        let v = libc::iovec {
            // The kernel only reads the local side of a write.
            iov_base: src.as_ptr().cast_mut().cast(),
            iov_len: src.len(),
        };
        self.access(true, addr, &[v])
    }

    /// Queues `src` for `addr`, a packet's data for QP `qpn`:
    /// written with the packets that continue it or write over it (the
    /// later bytes win, as they would landing one after the other).
    /// Refused if an earlier queued write of the QP failed.
    pub(crate) fn write_later(&self, qpn: u32, addr: u64, src: &[u8]) -> Result<(), Syndrome> {
        let mut b = self.batch();
        if let Some(i) = b.faulted.iter().position(|&q| q == qpn) {
            b.faulted.swap_remove(i);
            return Err(Syndrome::DmaFault);
        }
        Self::drop_ahead(&mut b, addr, src.len());
        let off = addr.wrapping_sub(b.behind_at);
        let joins = !b.behind.is_empty()
            && b.behind_qpn == qpn
            && addr >= b.behind_at
            && off <= b.behind.len() as u64
            && off as usize + src.len() <= WRITE_BEHIND;
        if !joins {
            self.write_behind(&mut b);
            b.behind_at = addr;
            b.behind_qpn = qpn;
        }
        let off = addr.wrapping_sub(b.behind_at) as usize;
        let end = off + src.len();
        if b.behind.len() < end {
            b.behind.resize(end, 0);
        }
        b.behind[off..end].copy_from_slice(src);
        Ok(())
    }

    /// Writes what is queued, at the last packet of a message of QP
    /// `qpn`: a failure of any of the QP's queued writes is that
    /// message's.
    pub(crate) fn flush(&self, qpn: u32) -> Result<(), Syndrome> {
        let mut b = self.batch();
        self.write_behind(&mut b);
        match b.faulted.iter().position(|&q| q == qpn) {
            Some(i) => {
                b.faulted.swap_remove(i);
                Err(Syndrome::DmaFault)
            }
            None => Ok(()),
        }
    }

    /// QP `qpn` is destroyed: a fault its queued writes left goes with it.
    pub(crate) fn forget(&self, qpn: u32) {
        self.batch().faulted.retain(|&q| q != qpn);
    }

    /// A device step begins: what was read ahead may be stale.
    pub(crate) fn new_step(&self) {
        self.batch().ahead_len = 0;
    }

    /// Writes what is queued, whoever's it is (a step ends, a command
    /// runs, a mapping goes); a failure marks the QP.
    pub(crate) fn settle(&self) {
        let mut b = self.batch();
        self.write_behind(&mut b);
    }

    fn drop_ahead(b: &mut Batch, addr: u64, len: usize) {
        if overlap(b.ahead_at, b.ahead_len, addr, len) {
            b.ahead_len = 0;
        }
    }

    /// Writes the queued bytes; a failure marks their QP.
    fn write_behind(&self, b: &mut Batch) {
        if b.behind.is_empty() {
            return;
        }
        let v = libc::iovec {
            iov_base: b.behind.as_mut_ptr().cast(),
            iov_len: b.behind.len(),
        };
        if self.access(true, b.behind_at, &[v]).is_err() && !b.faulted.contains(&b.behind_qpn) {
            let q = b.behind_qpn;
            b.faulted.push(q);
        }
        b.behind.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_reach_the_process_and_an_unmapped_address_faults() {
        let mem = ProcessMemory::open(std::process::id() as i32).unwrap();
        let mut buf = vec![7u8; 10_000];
        let addr = buf.as_ptr() as u64;
        let end = addr + buf.len() as u64;
        mem.write(addr + 3, b"hello").unwrap();
        let mut back = [0u8; 8];
        mem.read(addr + 2, &mut back, end).unwrap();
        assert_eq!(&back, b"\x07hello\x07\x07");
        buf[0] = 1;
        assert_eq!(buf[3], b'h');
        let mut x = [0u8; 8];
        assert_eq!(mem.read(8, &mut x, 16), Err(Syndrome::DmaFault));
        assert_eq!(mem.write(8, &x), Err(Syndrome::DmaFault));
    }

    #[test]
    fn a_process_that_exited_is_never_reached() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let mem = ProcessMemory::open(child.id() as i32);
        child.wait().unwrap();
        if let Ok(mem) = mem {
            std::thread::sleep(ALIVE_FOR);
            let mut x = [0u8; 8];
            assert_eq!(mem.read(0x1000, &mut x, 0x2000), Err(Syndrome::DmaFault));
        }
        assert!(ProcessMemory::open(child.id() as i32).is_err(), "reaped");
    }

    #[test]
    fn reads_come_from_what_was_read_ahead_until_a_step_or_a_write_ends_it() {
        let mem = ProcessMemory::open(std::process::id() as i32).unwrap();
        let buf = vec![1u8; 8192];
        let (addr, end) = (buf.as_ptr() as u64, buf.as_ptr() as u64 + 8192);
        let mut x = [0u8; 4];
        mem.read(addr, &mut x, end).unwrap();
        // SAFETY: a byte of `buf`, written behind the model's back as the
        // program whose memory it is would.
        unsafe { buf.as_ptr().cast_mut().add(100).write_volatile(9) };
        mem.read(addr + 100, &mut x, end).unwrap();
        assert_eq!(x, [1; 4], "within a step: what was read ahead");
        mem.new_step();
        mem.read(addr + 100, &mut x, end).unwrap();
        assert_eq!(x, [9, 1, 1, 1], "a new step reads again");
        mem.write(addr + 101, &[7]).unwrap();
        mem.read(addr + 100, &mut x, end).unwrap();
        assert_eq!(x, [9, 7, 1, 1], "the device's own write is seen");
        // A read past what the process maps falls back to the exact bytes.
        mem.read(end - 4, &mut x, end + (1 << 30)).unwrap();
        assert_eq!(x, [1; 4]);
    }

    #[test]
    fn queued_writes_land_together_and_a_failed_one_marks_its_qp() {
        let mem = ProcessMemory::open(std::process::id() as i32).unwrap();
        let buf = Vec::from([0u8; 64]);
        let addr = buf.as_ptr() as u64;
        mem.write_later(5, addr, b"abc").unwrap();
        mem.write_later(5, addr + 3, b"def").unwrap();
        assert_eq!(buf[..6], [0; 6], "queued, not yet written");
        let mut x = [0u8; 6];
        mem.read(addr, &mut x, addr + 64).unwrap();
        assert_eq!(&x, b"abcdef", "a read of them writes them first");
        mem.write_later(6, 8, b"zz").unwrap();
        mem.write_later(5, addr + 6, b"x").unwrap();
        mem.write_later(5, addr + 6, b"g").unwrap();
        mem.write_later(5, addr + 2, b"C").unwrap();
        // QP 6's write to nowhere failed when QP 5's came: its next
        // packet is refused, once.
        assert_eq!(mem.write_later(6, 8, b"zz"), Err(Syndrome::DmaFault));
        mem.write_later(6, 8, b"zz").unwrap();
        assert_eq!(mem.flush(6), Err(Syndrome::DmaFault), "at its last packet");
        assert_eq!(mem.flush(6), Ok(()));
        assert_eq!(&buf[..7], b"abCdefg", "later bytes win");
    }

    #[test]
    fn a_destroyed_qps_fault_is_not_its_successors() {
        let mem = ProcessMemory::open(std::process::id() as i32).unwrap();
        let buf = Vec::from([0u8; 8]);
        mem.write_later(9, 8, b"lost").unwrap();
        mem.settle();
        mem.forget(9);
        let addr = buf.as_ptr() as u64;
        assert_eq!(mem.write_later(9, addr, b"new"), Ok(()), "a new QP 9");
        assert_eq!(mem.flush(9), Ok(()));
        // SAFETY: the Vec's bytes, read volatile: the kernel wrote them.
        let got: Vec<u8> = (0..3)
            .map(|i| unsafe { std::ptr::read_volatile(buf.as_ptr().add(i)) })
            .collect();
        assert_eq!(got, b"new");
    }
}
