//! Errors: an [`ErrorKind`] that maps to an errno, a message, and for device
//! command failures the command, its status and its syndrome.

use alloc::borrow::Cow;
use alloc::format;
use alloc::string::String;
use core::fmt;

use rnic_hw_regs::cmd::{CmdOpcode, CmdStatus};
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
        }
    }

    /// The kind a failed command status maps to.
    pub const fn from_cmd_status(status: CmdStatus) -> Self {
        match status {
            CmdStatus::BadOpcode => Self::NotSupported,
            CmdStatus::BadParam | CmdStatus::BadState | CmdStatus::BadResource => {
                Self::InvalidArgument
            }
            CmdStatus::Busy => Self::Busy,
            CmdStatus::NoResources => Self::NoMemory,
            CmdStatus::BadDma => Self::Fault,
            CmdStatus::Ok | CmdStatus::Internal => Self::Io,
        }
    }
}

/// A device command that completed with a failure status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdFailure {
    /// The command.
    pub opcode: CmdOpcode,
    /// Its completion status (an unknown status reads as
    /// [`CmdStatus::Internal`]).
    pub status: CmdStatus,
    /// The raw syndrome: offending input field offset + 1, 0 for none.
    pub syndrome: u32,
}

impl CmdFailure {
    /// Byte offset, in the command's input, of the field the device
    /// rejected, if it named one.
    pub const fn field_offset(&self) -> Option<u32> {
        self.syndrome.checked_sub(1)
    }
}

/// A driver error: a kind, a message naming what failed, and the command
/// failure if the device refused a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: Cow<'static, str>,
    command: Option<CmdFailure>,
    /// A command that was never given to the device.
    not_issued: bool,
}

impl Error {
    /// An error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            kind,
            message: message.into(),
            command: None,
            not_issued: false,
        }
    }

    /// An error of a command the driver did not give to the device (its
    /// command queue entry was still the device's).
    pub(crate) fn not_issued(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            not_issued: true,
            ..Self::new(kind, message)
        }
    }

    pub(crate) fn invalid(message: impl Into<Cow<'static, str>>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    pub(crate) fn command_failed(failure: CmdFailure, raw_status: u8) -> Self {
        let detail = match failure.field_offset() {
            Some(off) => format!("offending input field at byte offset {off}"),
            None => String::from("no syndrome"),
        };
        let status = if CmdStatus::from_raw(raw_status).is_some() {
            format!("{:?}", failure.status)
        } else {
            format!("unknown status {raw_status}")
        };
        Self {
            kind: ErrorKind::from_cmd_status(failure.status),
            message: Cow::Owned(format!(
                "command {:?} failed: {status} ({detail})",
                failure.opcode
            )),
            command: Some(failure),
            not_issued: false,
        }
    }

    pub(crate) fn hal(err: HalError, what: &str) -> Self {
        let kind = match err {
            HalError::NoMemory | HalError::NoIova => ErrorKind::NoMemory,
            HalError::NotMapped => ErrorKind::Fault,
            HalError::Unsupported => ErrorKind::NotSupported,
            HalError::Os(_) => ErrorKind::Io,
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

    /// The failed command, if the device refused one.
    pub fn command(&self) -> Option<&CmdFailure> {
        self.command.as_ref()
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
    pub(crate) fn outcome_unknown(&self) -> bool {
        self.command.is_none() && !self.not_issued
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
/// status, [`Error::command`]) or never got the command
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
    pub(crate) fn hand_back(object: T, result: Result<()>) -> Result<(), Self> {
        result.map_err(|error| Self {
            object: Some(object),
            error,
        })
    }

    /// A destroy whose outcome is unknown: the object is gone.
    pub(crate) fn gone(error: Error) -> Self {
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
    fn command_failure_message_names_command_status_and_field() {
        let f = CmdFailure {
            opcode: CmdOpcode::RegMr,
            status: CmdStatus::BadParam,
            syndrome: 5,
        };
        let e = Error::command_failed(f, CmdStatus::BadParam.raw());
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(e.command().unwrap().field_offset(), Some(4));
        let s = e.to_string();
        assert!(s.contains("RegMr"), "{s}");
        assert!(s.contains("BadParam"), "{s}");
        assert!(s.contains("byte offset 4"), "{s}");
        assert!(s.ends_with("(EINVAL)"), "{s}");
        let busy = CmdFailure {
            opcode: CmdOpcode::DestroyPd,
            status: CmdStatus::Busy,
            syndrome: 0,
        };
        assert_eq!(Error::command_failed(busy, 5).kind(), ErrorKind::Busy);
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
