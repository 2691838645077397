//! Messages on a unix stream socket, with file descriptors passed as
//! `SCM_RIGHTS` beside their bytes.
//!
//! A message is read whole before anything acts on it: its header, whose
//! size must lie between a header's and the limit the caller gives, then
//! exactly that many bytes. Descriptors that arrive with any of its bytes
//! are its own; more than [`MAX_FDS`] of them is an error (the kernel
//! closes those past the buffer).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use zerocopy::IntoBytes;

use crate::msg::{self, Header, HEADER_LEN, MAX_FDS};
use crate::Error;

/// A message read from the socket.
#[derive(Debug)]
pub struct Message {
    /// Its header.
    pub header: Header,
    /// The bytes after the header.
    pub payload: Vec<u8>,
    /// The descriptors that came with it.
    pub fds: Vec<OwnedFd>,
}

/// Bytes of a control buffer for [`MAX_FDS`] descriptors.
const CMSG_SPACE: usize = 16 + 4 * MAX_FDS;

/// A control-message buffer, aligned as `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; CMSG_SPACE]);

/// Sends `header` and `parts` as one message, with `fds` beside its first
/// byte.
pub fn send(
    stream: &UnixStream,
    header: &Header,
    parts: &[&[u8]],
    fds: &[RawFd],
) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors for one message",
        ));
    }
    let mut bufs: Vec<&[u8]> = Vec::with_capacity(1 + parts.len());
    bufs.push(header.as_bytes());
    bufs.extend_from_slice(parts);
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut sent = 0usize;
    let mut with_fds = fds;
    while sent < total {
        // The iovecs of what is left.
        let mut skip = sent;
        let mut iov = Vec::with_capacity(bufs.len());
        for b in &bufs {
            if skip >= b.len() {
                skip -= b.len();
                continue;
            }
            iov.push(libc::iovec {
                iov_base: b[skip..].as_ptr() as *mut libc::c_void,
                iov_len: b.len() - skip,
            });
            skip = 0;
        }
        let mut control = Control([0; CMSG_SPACE]);
        // SAFETY: an all-zero msghdr is a valid empty one.
        let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
        mh.msg_iov = iov.as_mut_ptr();
        mh.msg_iovlen = iov.len() as _;
        if !with_fds.is_empty() {
            let data_len = std::mem::size_of_val(with_fds) as u32;
            // SAFETY: CMSG_SPACE has no memory arguments.
            let space = unsafe { libc::CMSG_SPACE(data_len) } as usize;
            mh.msg_control = control.0.as_mut_ptr().cast();
            mh.msg_controllen = space as _;
            // SAFETY: `mh` points at `control`, which has room for one
            // header and MAX_FDS descriptors (checked above).
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&mh);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(data_len) as _;
                std::ptr::copy_nonoverlapping(
                    with_fds.as_ptr().cast::<u8>(),
                    libc::CMSG_DATA(c),
                    data_len as usize,
                );
            }
        }
        // SAFETY: `mh` points at live iovecs and control data.
        let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &mh, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        sent += n as usize;
        // The descriptors went with the first bytes.
        with_fds = &[];
    }
    Ok(())
}

/// Reads into `buf` with `recvmsg`, taking descriptors into `fds`; returns
/// the bytes read (0 at the end of the stream).
fn recv_some(stream: &UnixStream, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> Result<usize, Error> {
    loop {
        let mut control = Control([0; CMSG_SPACE]);
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: an all-zero msghdr is a valid empty one.
        let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
        mh.msg_iov = &mut iov;
        mh.msg_iovlen = 1;
        mh.msg_control = control.0.as_mut_ptr().cast();
        mh.msg_controllen = CMSG_SPACE as _;
        // SAFETY: `mh` points at `buf` and `control`, both live and as long
        // as it says.
        let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut mh, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                    return Err(Error::Protocol(
                        "the peer stalled: nothing came in time".into(),
                    ))
                }
                _ => return Err(Error::Io(e)),
            }
        }
        // SAFETY: walks the control messages the kernel wrote into
        // `control`, within `msg_controllen`.
        let mut c = unsafe { libc::CMSG_FIRSTHDR(&mh) };
        while !c.is_null() {
            // SAFETY: `c` is a header inside `control` (CMSG_FIRSTHDR /
            // CMSG_NXTHDR return only those).
            let (level, kind, len) = unsafe { ((*c).cmsg_level, (*c).cmsg_type, (*c).cmsg_len) };
            if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
                // SAFETY: CMSG_LEN has no memory arguments.
                let head = unsafe { libc::CMSG_LEN(0) } as usize;
                let count = len.saturating_sub(head) / 4;
                for i in 0..count {
                    // SAFETY: descriptor `i` of this SCM_RIGHTS message,
                    // inside it (count from its length); unaligned read.
                    let fd = unsafe { libc::CMSG_DATA(c).cast::<RawFd>().add(i).read_unaligned() };
                    // SAFETY: the kernel installed `fd` for us just now.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
            // SAFETY: as CMSG_FIRSTHDR.
            c = unsafe { libc::CMSG_NXTHDR(&mh, c) };
        }
        if mh.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(Error::Protocol(format!(
                "more than {MAX_FDS} descriptors in one message"
            )));
        }
        return Ok(n as usize);
    }
}

/// Fills `buf` from the stream, inside a message, collecting descriptors.
fn fill(stream: &UnixStream, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> Result<(), Error> {
    let mut got = 0;
    while got < buf.len() {
        let n = recv_some(stream, &mut buf[got..], fds)?;
        if n == 0 {
            return Err(Error::Protocol("the stream ended inside a message".into()));
        }
        got += n;
    }
    Ok(())
}

/// A read timeout on a socket while it is held, none after.
struct Stall<'a>(&'a UnixStream);

impl<'a> Stall<'a> {
    fn set(stream: &'a UnixStream, t: Duration) -> Result<Stall<'a>, Error> {
        stream.set_read_timeout(Some(t)).map_err(Error::Io)?;
        Ok(Stall(stream))
    }
}

impl Drop for Stall<'_> {
    fn drop(&mut self) {
        let _ = self.0.set_read_timeout(None);
    }
}

/// Reads the next message, of at most `max` bytes in all; `Ok(None)` if
/// the stream ended between messages. A header claiming fewer bytes than
/// itself or more than `max` is a protocol error: the stream cannot be
/// read on past it. With `stall`, the rest of a message whose first byte
/// came must come within that long of each earlier byte, or the stream is
/// given up (a peer that stops inside a message would otherwise hold the
/// reader for good); the wait for a message's first byte is the socket's
/// own (the caller's read timeout, if any).
pub fn recv(
    stream: &UnixStream,
    max: usize,
    stall: Option<Duration>,
) -> Result<Option<Message>, Error> {
    let mut fds = Vec::new();
    let mut h = [0u8; HEADER_LEN];
    let first = recv_some(stream, &mut h, &mut fds)?;
    if first == 0 {
        return Ok(None);
    }
    let _stall = stall.map(|t| Stall::set(stream, t)).transpose()?;
    fill(stream, &mut h[first..], &mut fds)?;
    let header = msg::read::<Header>(&h).expect("a whole header");
    let len = match header.payload_len() {
        Some(n) if header.size as usize <= max => n,
        _ => {
            return Err(Error::Protocol(format!(
                "a message of {} bytes (command {}): not between {HEADER_LEN} and {max}",
                header.size, header.command
            )))
        }
    };
    let mut payload = vec![0u8; len];
    fill(stream, &mut payload, &mut fds)?;
    if fds.len() > MAX_FDS {
        return Err(Error::Protocol(format!(
            "more than {MAX_FDS} descriptors in one message"
        )));
    }
    Ok(Some(Message {
        header,
        payload,
        fds,
    }))
}
