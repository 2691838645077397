//! A CM message in a MAD: which one it is, read from its header, and the
//! whole 256 bytes written.

use crate::drep::DrepRepr;
use crate::dreq::DreqRepr;
use crate::mad::{attr, MadHdr, HEADER_LEN, METHOD_SEND};
use crate::mra::MraRepr;
use crate::rej::RejRepr;
use crate::rep::RepRepr;
use crate::req::ReqRepr;
use crate::rtu::RtuRepr;
use crate::sidr::{SidrRepRepr, SidrReqRepr};
use crate::{Error, MAD_LEN};

/// A CM message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A REQ.
    Req(ReqRepr),
    /// An MRA.
    Mra(MraRepr),
    /// A REJ.
    Rej(RejRepr),
    /// A REP.
    Rep(RepRepr),
    /// An RTU.
    Rtu(RtuRepr),
    /// A DREQ.
    Dreq(DreqRepr),
    /// A DREP.
    Drep(DrepRepr),
    /// A SIDR REQ.
    SidrReq(SidrReqRepr),
    /// A SIDR REP.
    SidrRep(SidrRepRepr),
}

impl Message {
    /// Its attribute ID.
    pub fn attr_id(&self) -> u16 {
        match self {
            Message::Req(_) => attr::REQ,
            Message::Mra(_) => attr::MRA,
            Message::Rej(_) => attr::REJ,
            Message::Rep(_) => attr::REP,
            Message::Rtu(_) => attr::RTU,
            Message::Dreq(_) => attr::DREQ,
            Message::Drep(_) => attr::DREP,
            Message::SidrReq(_) => attr::SIDR_REQ,
            Message::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// Reads a MAD: its header and, if it is a CM `Send` of a message
    /// this implementation knows, the message.
    pub fn parse(mad: &[u8]) -> Result<(MadHdr, Message), Error> {
        let hdr = MadHdr::parse(mad)?;
        if !hdr.is_cm() {
            return Err(Error::NotCm);
        }
        if mad.len() < MAD_LEN {
            return Err(Error::Truncated);
        }
        if hdr.method != METHOD_SEND {
            return Err(Error::Unknown);
        }
        let d = &mad[HEADER_LEN..MAD_LEN];
        let m = match hdr.attr_id {
            attr::REQ => Message::Req(ReqRepr::parse(d)?),
            attr::MRA => Message::Mra(MraRepr::parse(d)?),
            attr::REJ => Message::Rej(RejRepr::parse(d)?),
            attr::REP => Message::Rep(RepRepr::parse(d)?),
            attr::RTU => Message::Rtu(RtuRepr::parse(d)?),
            attr::DREQ => Message::Dreq(DreqRepr::parse(d)?),
            attr::DREP => Message::Drep(DrepRepr::parse(d)?),
            attr::SIDR_REQ => Message::SidrReq(SidrReqRepr::parse(d)?),
            attr::SIDR_REP => Message::SidrRep(SidrRepRepr::parse(d)?),
            _ => return Err(Error::Unknown),
        };
        Ok((hdr, m))
    }

    /// The MAD of this message with transaction ID `tid`.
    pub fn emit(&self, tid: u64) -> [u8; MAD_LEN] {
        let mut mad = [0u8; MAD_LEN];
        MadHdr::cm(self.attr_id(), tid).emit(&mut mad);
        let d = &mut mad[HEADER_LEN..];
        match self {
            Message::Req(m) => m.emit(d),
            Message::Mra(m) => m.emit(d),
            Message::Rej(m) => m.emit(d),
            Message::Rep(m) => m.emit(d),
            Message::Rtu(m) => m.emit(d),
            Message::Dreq(m) => m.emit(d),
            Message::Drep(m) => m.emit(d),
            Message::SidrReq(m) => m.emit(d),
            Message::SidrRep(m) => m.emit(d),
        }
        mad
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::CLASS_CM;

    #[test]
    fn a_mad_says_which_message_it_is() {
        let rtu = Message::Rtu(RtuRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: [0; crate::rtu::PRIVATE_DATA_LEN],
        });
        let mad = rtu.emit(0x42);
        let (hdr, back) = Message::parse(&mad).unwrap();
        assert_eq!((hdr.tid, hdr.attr_id, back), (0x42, attr::RTU, rtu));
        let mut other = mad;
        other[1] = CLASS_CM + 1;
        assert_eq!(Message::parse(&other), Err(Error::NotCm));
        let mut lap = mad;
        lap[17] = attr::LAP as u8;
        assert_eq!(Message::parse(&lap), Err(Error::Unknown));
        let mut get = mad;
        get[3] = 0x01;
        assert_eq!(Message::parse(&get), Err(Error::Unknown));
        assert_eq!(Message::parse(&mad[..255]), Err(Error::Truncated));
    }
}
