//! BTH opcodes (IBA table 38): what each opcode means and which extended
//! headers follow its BTH.
//!
//! An opcode is a transport (bits 7:5: RC 000, UC 001, RD 010, UD 011) and
//! an operation (bits 4:0). RD is not implemented: its opcodes are unknown
//! here, like the reserved ones.

/// The transport service of an opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

/// The operation of an opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// SEND (with immediate or invalidate when [`OpcodeInfo::imm`] or
    /// [`OpcodeInfo::inv`] say so).
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// ACKNOWLEDGE (also carries NAKs).
    Ack,
    /// ATOMIC ACKNOWLEDGE.
    AtomicAck,
    /// COMPARE SWAP.
    CompareSwap,
    /// FETCH ADD.
    FetchAdd,
}

/// Where a packet sits in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First of several.
    First,
    /// Neither first nor last.
    Middle,
    /// Last of several.
    Last,
    /// The whole message.
    Only,
}

impl Position {
    /// The packet starts a message.
    pub fn starts(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }

    /// The packet ends a message.
    pub fn ends(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }

    /// The position of packet `i` of `n` (`n >= 1`).
    pub fn of(i: u32, n: u32) -> Position {
        match (i == 0, i + 1 == n) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, true) => Position::Last,
            (false, false) => Position::Middle,
        }
    }
}

/// Extended headers after the BTH, as bits, in header order.
pub mod headers {
    /// Datagram ETH (UD).
    pub const DETH: u8 = 1 << 0;
    /// RDMA ETH.
    pub const RETH: u8 = 1 << 1;
    /// Atomic ETH.
    pub const ATOMIC_ETH: u8 = 1 << 2;
    /// ACK ETH.
    pub const AETH: u8 = 1 << 3;
    /// Atomic ACK ETH.
    pub const ATOMIC_ACK_ETH: u8 = 1 << 4;
    /// Immediate data.
    pub const IMMDT: u8 = 1 << 5;
    /// Invalidate ETH.
    pub const IETH: u8 = 1 << 6;
}

/// What an opcode means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpcodeInfo {
    /// The opcode value.
    pub code: u8,
    /// Transport service.
    pub transport: Transport,
    /// Operation.
    pub op: Op,
    /// Position in the message.
    pub pos: Position,
    /// Carries immediate data.
    pub imm: bool,
    /// Carries an R_Key to invalidate.
    pub inv: bool,
    /// [`headers`] bits of the extended headers that follow the BTH.
    pub headers: u8,
    /// Carries a payload (possibly empty).
    pub payload: bool,
    /// Short name, as Wireshark spells it.
    pub name: &'static str,
}

macro_rules! opcodes {
    ($($name:ident = $code:literal, $t:ident, $op:ident, $pos:ident, $imm:literal, $inv:literal,
       [$($h:ident)|*], $pay:literal;)*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`.")]
            pub const $name: u8 = $code;
        )*
        const TABLE: &[OpcodeInfo] = &[$(OpcodeInfo {
            code: $code,
            transport: Transport::$t,
            op: Op::$op,
            pos: Position::$pos,
            imm: $imm,
            inv: $inv,
            headers: 0 $(| headers::$h)*,
            payload: $pay,
            name: stringify!($name),
        },)*];
    };
}

opcodes! {
    RC_SEND_FIRST = 0x00, Rc, Send, First, false, false, [], true;
    RC_SEND_MIDDLE = 0x01, Rc, Send, Middle, false, false, [], true;
    RC_SEND_LAST = 0x02, Rc, Send, Last, false, false, [], true;
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03, Rc, Send, Last, true, false, [IMMDT], true;
    RC_SEND_ONLY = 0x04, Rc, Send, Only, false, false, [], true;
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05, Rc, Send, Only, true, false, [IMMDT], true;
    RC_RDMA_WRITE_FIRST = 0x06, Rc, Write, First, false, false, [RETH], true;
    RC_RDMA_WRITE_MIDDLE = 0x07, Rc, Write, Middle, false, false, [], true;
    RC_RDMA_WRITE_LAST = 0x08, Rc, Write, Last, false, false, [], true;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09, Rc, Write, Last, true, false, [IMMDT], true;
    RC_RDMA_WRITE_ONLY = 0x0a, Rc, Write, Only, false, false, [RETH], true;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b, Rc, Write, Only, true, false, [RETH | IMMDT], true;
    RC_RDMA_READ_REQUEST = 0x0c, Rc, ReadRequest, Only, false, false, [RETH], false;
    RC_RDMA_READ_RESPONSE_FIRST = 0x0d, Rc, ReadResponse, First, false, false, [AETH], true;
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e, Rc, ReadResponse, Middle, false, false, [], true;
    RC_RDMA_READ_RESPONSE_LAST = 0x0f, Rc, ReadResponse, Last, false, false, [AETH], true;
    RC_RDMA_READ_RESPONSE_ONLY = 0x10, Rc, ReadResponse, Only, false, false, [AETH], true;
    RC_ACKNOWLEDGE = 0x11, Rc, Ack, Only, false, false, [AETH], false;
    RC_ATOMIC_ACKNOWLEDGE = 0x12, Rc, AtomicAck, Only, false, false, [AETH | ATOMIC_ACK_ETH], false;
    RC_COMPARE_SWAP = 0x13, Rc, CompareSwap, Only, false, false, [ATOMIC_ETH], false;
    RC_FETCH_ADD = 0x14, Rc, FetchAdd, Only, false, false, [ATOMIC_ETH], false;
    RC_SEND_LAST_WITH_INVALIDATE = 0x16, Rc, Send, Last, false, true, [IETH], true;
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17, Rc, Send, Only, false, true, [IETH], true;
    UC_SEND_FIRST = 0x20, Uc, Send, First, false, false, [], true;
    UC_SEND_MIDDLE = 0x21, Uc, Send, Middle, false, false, [], true;
    UC_SEND_LAST = 0x22, Uc, Send, Last, false, false, [], true;
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23, Uc, Send, Last, true, false, [IMMDT], true;
    UC_SEND_ONLY = 0x24, Uc, Send, Only, false, false, [], true;
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25, Uc, Send, Only, true, false, [IMMDT], true;
    UC_RDMA_WRITE_FIRST = 0x26, Uc, Write, First, false, false, [RETH], true;
    UC_RDMA_WRITE_MIDDLE = 0x27, Uc, Write, Middle, false, false, [], true;
    UC_RDMA_WRITE_LAST = 0x28, Uc, Write, Last, false, false, [], true;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29, Uc, Write, Last, true, false, [IMMDT], true;
    UC_RDMA_WRITE_ONLY = 0x2a, Uc, Write, Only, false, false, [RETH], true;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b, Uc, Write, Only, true, false, [RETH | IMMDT], true;
    UD_SEND_ONLY = 0x64, Ud, Send, Only, false, false, [DETH], true;
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65, Ud, Send, Only, true, false, [DETH | IMMDT], true;
}

/// What opcode `code` means, or `None` for a reserved, RD or vendor
/// opcode.
pub fn info(code: u8) -> Option<&'static OpcodeInfo> {
    // Every packet is classified by it: a direct index, not a search.
    TABLE.get(BY_CODE[code as usize] as usize)
}

/// The opcode of operation `op` at position `pos` on `transport`, with
/// immediate data or an invalidate as asked; `None` if there is none (an
/// immediate on a FIRST packet, a READ on UD, ...).
pub fn find(transport: Transport, op: Op, pos: Position, imm: bool, inv: bool) -> Option<u8> {
    // Every packet sent is named by it: a direct index, not a search.
    let i = BY_KIND[kind(transport, op, pos, imm, inv)];
    TABLE.get(i as usize).map(|i| i.code)
}

/// Table entries: at most 254, so that `u8::MAX` can mean "none".
const NONE: u8 = u8::MAX;
const _: () = assert!(TABLE.len() < NONE as usize);

/// `TABLE` index of each opcode (`NONE`: reserved).
static BY_CODE: [u8; 256] = {
    let mut by = [NONE; 256];
    let mut i = 0;
    while i < TABLE.len() {
        by[TABLE[i].code as usize] = i as u8;
        i += 1;
    }
    by
};

/// Kinds of packet: transport × operation × position × immediate ×
/// invalidate.
const KINDS: usize = 3 * 8 * 4 * 2 * 2;

const fn kind(transport: Transport, op: Op, pos: Position, imm: bool, inv: bool) -> usize {
    (((transport as usize * 8 + op as usize) * 4 + pos as usize) * 2 + imm as usize) * 2
        + inv as usize
}

/// `TABLE` index of each kind of packet (`NONE`: no such opcode).
static BY_KIND: [u8; KINDS] = {
    let mut by = [NONE; KINDS];
    let mut i = 0;
    while i < TABLE.len() {
        let e = &TABLE[i];
        by[kind(e.transport, e.op, e.pos, e.imm, e.inv)] = i as u8;
        i += 1;
    }
    by
};

/// Total length of the extended headers in `headers` bits.
pub fn headers_len(h: u8) -> usize {
    use super::*;
    let mut n = 0;
    for (bit, len) in [
        (headers::DETH, deth::HEADER_LEN),
        (headers::RETH, reth::HEADER_LEN),
        (headers::ATOMIC_ETH, atomic_eth::HEADER_LEN),
        (headers::AETH, aeth::HEADER_LEN),
        (headers::ATOMIC_ACK_ETH, atomic_ack_eth::HEADER_LEN),
        (headers::IMMDT, immdt::HEADER_LEN),
        (headers::IETH, ieth::HEADER_LEN),
    ] {
        if h & bit != 0 {
            n += len;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_consistent() {
        for w in TABLE.windows(2) {
            assert!(w[0].code < w[1].code, "{:#x}", w[1].code);
        }
        for i in TABLE {
            let t = match i.transport {
                Transport::Rc => 0,
                Transport::Uc => 1,
                Transport::Ud => 3,
            };
            assert_eq!(i.code >> 5, t, "{}", i.name);
            assert_eq!(i.imm, i.headers & headers::IMMDT != 0, "{}", i.name);
            assert_eq!(i.inv, i.headers & headers::IETH != 0, "{}", i.name);
            // A RETH exactly where a WRITE or READ starts.
            let reth = matches!(i.op, Op::Write | Op::ReadRequest) && i.pos.starts();
            assert_eq!(reth, i.headers & headers::RETH != 0, "{}", i.name);
            assert_eq!(find(i.transport, i.op, i.pos, i.imm, i.inv), Some(i.code));
        }
    }

    #[test]
    fn indexes_agree_with_the_table() {
        for c in 0..=255u8 {
            assert_eq!(info(c), TABLE.iter().find(|i| i.code == c), "{c:#x}");
        }
        use Position::*;
        for t in [Transport::Rc, Transport::Uc, Transport::Ud] {
            for op in [
                Op::Send,
                Op::Write,
                Op::ReadRequest,
                Op::ReadResponse,
                Op::Ack,
                Op::AtomicAck,
                Op::CompareSwap,
                Op::FetchAdd,
            ] {
                for pos in [First, Middle, Last, Only] {
                    for (imm, inv) in [(false, false), (true, false), (false, true), (true, true)] {
                        let linear = TABLE
                            .iter()
                            .find(|i| {
                                (i.transport, i.op, i.pos, i.imm, i.inv) == (t, op, pos, imm, inv)
                            })
                            .map(|i| i.code);
                        assert_eq!(find(t, op, pos, imm, inv), linear);
                    }
                }
            }
        }
    }

    #[test]
    fn lookups() {
        let i = info(RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE).unwrap();
        assert_eq!((i.op, i.pos, i.imm), (Op::Write, Position::Only, true));
        assert_eq!(headers_len(i.headers), 20);
        assert_eq!(info(0x15), None);
        assert_eq!(info(0x40), None, "RD");
        assert_eq!(info(0x81), None, "CNP");
        assert_eq!(
            find(Transport::Rc, Op::Send, Position::First, true, false),
            None
        );
        assert_eq!(Position::of(0, 1), Position::Only);
        assert_eq!(Position::of(0, 3), Position::First);
        assert_eq!(Position::of(1, 3), Position::Middle);
        assert_eq!(Position::of(2, 3), Position::Last);
    }
}
