//! The verbs core's errors (`rnic-verbs`), and what the rnic device's
//! refusal of a command means: [`CmdFailure`], decoded from an error's
//! [`Refusal`].

use alloc::format;
use alloc::string::String;

pub use rnic_verbs::{DestroyError, Error, ErrorKind, PostError, Refusal, Result};

use rnic_hw_regs::cmd::{CmdOpcode, CmdStatus};

/// An rnic command that completed with a failure status.
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
    /// The rnic command failure behind `error`, if the rnic device refused
    /// a command.
    pub fn of(error: &Error) -> Option<Self> {
        let r = error.refusal()?;
        Some(Self {
            opcode: CmdOpcode::from_raw(u16::try_from(r.command).ok()?)?,
            status: u8::try_from(r.status)
                .ok()
                .and_then(CmdStatus::from_raw)
                .unwrap_or(CmdStatus::Internal),
            syndrome: r.detail,
        })
    }

    /// Byte offset, in the command's input, of the field the device
    /// rejected, if it named one.
    pub const fn field_offset(&self) -> Option<u32> {
        self.syndrome.checked_sub(1)
    }
}

/// The kind a failed command status maps to.
pub(crate) const fn kind_of(status: CmdStatus) -> ErrorKind {
    match status {
        CmdStatus::BadOpcode => ErrorKind::NotSupported,
        CmdStatus::BadParam | CmdStatus::BadState | CmdStatus::BadResource => {
            ErrorKind::InvalidArgument
        }
        CmdStatus::Busy => ErrorKind::Busy,
        CmdStatus::NoResources => ErrorKind::NoMemory,
        CmdStatus::BadDma => ErrorKind::Fault,
        CmdStatus::Ok | CmdStatus::Internal => ErrorKind::Io,
    }
}

/// The error of command `op`, which the device answered with the raw
/// status `raw_status` and syndrome `syndrome`.
pub(crate) fn command_failed(op: CmdOpcode, raw_status: u8, syndrome: u32) -> Error {
    let known = CmdStatus::from_raw(raw_status);
    let status = known.unwrap_or(CmdStatus::Internal);
    let detail = match syndrome.checked_sub(1) {
        Some(off) => format!("offending input field at byte offset {off}"),
        None => String::from("no syndrome"),
    };
    let named = match known {
        Some(s) => format!("{s:?}"),
        None => format!("unknown status {raw_status}"),
    };
    Error::refused(
        kind_of(status),
        format!("command {op:?} failed: {named} ({detail})"),
        Refusal {
            command: op.raw() as u32,
            status: raw_status as u32,
            detail: syndrome,
        },
    )
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;

    use super::*;

    #[test]
    fn command_failure_message_names_command_status_and_field() {
        let e = command_failed(CmdOpcode::RegMr, CmdStatus::BadParam.raw(), 5);
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        let f = CmdFailure::of(&e).expect("an rnic refusal");
        assert_eq!(
            (f.opcode, f.status),
            (CmdOpcode::RegMr, CmdStatus::BadParam)
        );
        assert_eq!(f.field_offset(), Some(4));
        let s = e.to_string();
        assert!(s.contains("RegMr"), "{s}");
        assert!(s.contains("BadParam"), "{s}");
        assert!(s.contains("byte offset 4"), "{s}");
        assert!(s.ends_with("(EINVAL)"), "{s}");
        let busy = command_failed(CmdOpcode::DestroyPd, CmdStatus::Busy.raw(), 0);
        assert_eq!(busy.kind(), ErrorKind::Busy);
        let odd = command_failed(CmdOpcode::DestroyPd, 200, 0);
        assert!(odd.to_string().contains("unknown status 200"), "{odd}");
        assert_eq!(CmdFailure::of(&odd).unwrap().status, CmdStatus::Internal);
        assert_eq!(CmdFailure::of(&Error::invalid("not a command")), None);
    }
}
