//! Errors: an [`ErrorKind`] that maps to an errno, a message, and for a
//! command the device refused, the device's own numbers for it.

use alloc::borrow::Cow;
use alloc::format;
use core::fmt;

use rnic_queues::HalError;

/// `Result` with the driver's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// The class of an error, each mapping to the errno libibverbs would return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// `EINVAL`: an argument or attribute is out of range or inconsistent.
    InvalidArgument,
    /// `ENOMEM`: no memory, no free device object, or a full work queue.
    NoMemory,
    /// `EBUSY`: the object is still in use.
    Busy,
    /// `ENODEV`: no usable device (wrong ID, unsupported version).
    NoDevice,
    /// `ETIMEDOUT`: the device did not respond in time.
    TimedOut,
    /// `EIO`: the device failed or returned something malformed.
    Io,
    /// `EFAULT`: an address is not mapped for device access.
    Fault,
    /// `EOPNOTSUPP`: the device or platform does not implement this.
    NotSupported,
    /// `EINTR`: a signal handler ran while the call waited.
    Interrupted,
}

impl ErrorKind {
    /// The Linux errno value.
    pub const fn errno(self) -> i32 {
        match self {
            Self::InvalidArgument => 22,
            Self::NoMemory => 12,
            Self::Busy => 16,
            Self::NoDevice => 19,
            Self::TimedOut => 110,
            Self::Io => 5,
            Self::Fault => 14,
            Self::NotSupported => 95,
            Self::Interrupted => 4,
        }
    }

    /// The errno's symbolic name (`"EINVAL"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Self::InvalidArgument => "EINVAL",
            Self::NoMemory => "ENOMEM",
            Self::Busy => "EBUSY",
            Self::NoDevice => "ENODEV",
            Self::TimedOut => "ETIMEDOUT",
            Self::Io => "EIO",
            Self::Fault => "EFAULT",
            Self::NotSupported => "EOPNOTSUPP",
            Self::Interrupted => "EINTR",
        }
    }
}

/// A command the device refused, in the device's own numbers: which
/// command, the status it answered, and the detail it gave (rnic: the
/// syndrome; PVRDMA: the response's error byte). The device's driver
/// decodes them into its own types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The command's opcode.
    pub command: u32,
    /// The status the device answered.
    pub status: u32,
    /// The device's detail, 0 for none.
    pub detail: u32,
}

/// A driver error: a kind, a message naming what failed, and the device's
/// refusal if it refused a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: Cow<'static, str>,
    refusal: Option<Refusal>,
    /// A command that was never given to the device.
    not_issued: bool,
}

impl Error {
    /// An error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            kind,
            message: message.into(),
            refusal: None,
            not_issued: false,
        }
    }

    /// An error of a command the driver did not give to the device (its
    /// command queue entry was still the device's).
    pub fn not_issued(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            not_issued: true,
            ..Self::new(kind, message)
        }
    }

    /// An [`ErrorKind::InvalidArgument`] error with a message.
    pub fn invalid(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    /// The error of a command the device refused: `kind` as the device's
    /// driver maps the status, and a message naming the command and status.
    pub fn refused(
        kind: ErrorKind,
        message: impl Into<Cow<'static, str>>,
        refusal: Refusal,
    ) -> Self {
        Self {
            refusal: Some(refusal),
            ..Self::new(kind, message)
        }
    }

    /// The error of a platform operation: `what` failed with `err`.
    pub fn hal(err: HalError, what: &str) -> Self {
        let kind = match err {
            HalError::NoMemory | HalError::NoIova => ErrorKind::NoMemory,
            HalError::NotMapped => ErrorKind::Fault,
            HalError::Unsupported => ErrorKind::NotSupported,
            HalError::Os(_) => ErrorKind::Io,
            HalError::Interrupted => ErrorKind::Interrupted,
        };
        Self::new(kind, format!("{what}: {err}"))
    }

    /// The error's kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The errno value of the kind.
    pub fn errno(&self) -> i32 {
        self.kind.errno()
    }

    /// The message, without the errno name.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The device's refusal, if it refused a command: the object the
    /// command was about is as it was.
    pub fn refusal(&self) -> Option<&Refusal> {
        self.refusal.as_ref()
    }

    /// Whether the failed command never reached the device: the command
    /// queue entry it needed was still the device's (an earlier command
    /// timed out and the device has not finished it). The kind is
    /// [`ErrorKind::TimedOut`], but nothing happened on the device.
    pub fn is_not_issued(&self) -> bool {
        self.not_issued
    }

    /// For the error of a command: whether the device may have executed
    /// it, or may still, although the driver saw no answer (a timeout, a
    /// malformed answer). False when the device refused it or never got it.
    pub fn outcome_unknown(&self) -> bool {
        self.refusal.is_none() && !self.not_issued
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.kind.name())
    }
}

impl core::error::Error for Error {}

/// A post that stopped at a bad work request (libibverbs' `bad_wr`): the
/// requests before `index` were posted, the one at `index` and those after
/// it were not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostError {
    /// Index in the caller's slice of the first request not posted.
    pub index: usize,
    /// Why it was refused.
    pub error: Error,
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "work request {} not posted: {}", self.index, self.error)
    }
}

impl core::error::Error for PostError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// A failed `destroy`.
///
/// If the device refused to destroy the object (it answered with a failure
/// status, [`Error::refusal`]) or never got the command
/// ([`Error::is_not_issued`]), the object is still alive and is handed
/// back in `object`: the caller may keep using it, or destroy or drop it
/// later.
///
/// If the outcome is unknown (the command timed out: the device may have
/// destroyed the object, or may yet), `object` is `None`: the object is
/// gone. Asking again could destroy another object, since the device gives
/// a destroyed object's number to the next one created; instead the driver
/// keeps the object's memory until the device is reset when the context is
/// closed (retiring the IOVAs of a registered user buffer at once where
/// the platform can, see [`crate::Pd::reg_mr`]).
pub struct DestroyError<T> {
    /// The object, still alive, if the device certainly did not destroy
    /// it; `None` if it is gone.
    pub object: Option<T>,
    /// Why it could not be destroyed.
    pub error: Error,
}

impl<T> DestroyError<T> {
    /// The outcome of destroying `object`: on failure, the object is handed
    /// back with the error.
    pub fn hand_back(object: T, result: Result<()>) -> Result<(), Self> {
        result.map_err(|error| Self {
            object: Some(object),
            error,
        })
    }

    /// A destroy whose outcome is unknown: the object is gone.
    pub fn gone(error: Error) -> Self {
        Self {
            object: None,
            error,
        }
    }
}

impl<T> fmt::Debug for DestroyError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DestroyError")
            .field("handed_back", &self.object.is_some())
            .field("error", &self.error)
            .finish()
    }
}

impl<T> fmt::Display for DestroyError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)?;
        if self.object.is_none() {
            f.write_str("; the object is gone (the device may have destroyed it)")?;
        }
        Ok(())
    }
}

impl<T> core::error::Error for DestroyError<T> {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<T> From<DestroyError<T>> for Error {
    fn from(e: DestroyError<T>) -> Self {
        e.error
    }
}

impl From<PostError> for Error {
    fn from(e: PostError) -> Self {
        e.error
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;

    use super::*;

    #[test]
    fn errno_values() {
        assert_eq!(ErrorKind::InvalidArgument.errno(), 22);
        assert_eq!(ErrorKind::NoMemory.errno(), 12);
        assert_eq!(ErrorKind::Busy.errno(), 16);
        assert_eq!(ErrorKind::NoDevice.errno(), 19);
        assert_eq!(ErrorKind::TimedOut.errno(), 110);
        assert_eq!(ErrorKind::Io.errno(), 5);
        assert_eq!(ErrorKind::Fault.errno(), 14);
        assert_eq!(ErrorKind::NotSupported.errno(), 95);
    }

    #[test]
    fn a_refusal_is_neither_unknown_nor_unissued() {
        let r = Refusal {
            command: 7,
            status: 3,
            detail: 5,
        };
        let e = Error::refused(ErrorKind::InvalidArgument, "command 7 refused", r);
        assert_eq!(e.refusal(), Some(&r));
        assert!(!e.outcome_unknown() && !e.is_not_issued());
        assert_eq!(e.to_string(), "command 7 refused (EINVAL)");
        let lost = Error::new(ErrorKind::TimedOut, "no answer");
        assert!(lost.outcome_unknown(), "a timed-out command may yet run");
        let queued = Error::not_issued(ErrorKind::TimedOut, "slot busy");
        assert!(!queued.outcome_unknown() && queued.is_not_issued());
    }

    #[test]
    fn post_error_display() {
        let e = PostError {
            index: 3,
            error: Error::new(ErrorKind::NoMemory, "send queue full"),
        };
        assert_eq!(
            e.to_string(),
            "work request 3 not posted: send queue full (ENOMEM)"
        );
    }
}
