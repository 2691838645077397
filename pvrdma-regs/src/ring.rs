//! The state page of PVRDMA's rings (`pvrdma_ring.h`).
//!
//! A queue's first page holds a [`RingState`]; its entries follow in the
//! pages after it. Each index runs modulo twice the ring's size, so a ring
//! of `n` entries (a power of two) is empty when `prod_tail == cons_head`
//! and full when `prod_tail == cons_head ^ n`; an index with bits above
//! `2n - 1` set is invalid (a faulty device or driver), and the entry of
//! index `i` is slot `i & (n - 1)`. This module gives the layout;
//! `rnic_queues::IndexRing` implements the protocol over it (a send queue's
//! ring is `IndexRing::new(TX_PROD_TAIL, TX_CONS_HEAD, log_size)`).

use endian_num::le32;
use static_assertions::{assert_eq_size, const_assert_eq};

/// One direction's indices.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Ring {
    /// Producer tail: the next index the producer writes.
    pub prod_tail: le32,
    /// Consumer head: the next index the consumer reads.
    pub cons_head: le32,
}

/// A queue's state page: a send ring and a receive ring. A QP uses both
/// (the driver produces on `tx` for its send queue and on `rx` for its
/// receive queue); a CQ only `rx`, which the device produces on; an SRQ
/// only `rx`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RingState {
    /// Send (or only) ring.
    pub tx: Ring,
    /// Receive ring.
    pub rx: Ring,
}

/// Offset of the send ring's producer tail in the state page.
pub const TX_PROD_TAIL: usize = 0;
/// Offset of the send ring's consumer head in the state page.
pub const TX_CONS_HEAD: usize = 4;
/// Offset of the receive ring's producer tail in the state page.
pub const RX_PROD_TAIL: usize = 8;
/// Offset of the receive ring's consumer head in the state page.
pub const RX_CONS_HEAD: usize = 12;

assert_eq_size!(Ring, [u8; 8]);
assert_eq_size!(RingState, [u8; 16]);
const_assert_eq!(core::mem::offset_of!(RingState, rx), RX_PROD_TAIL);
const_assert_eq!(core::mem::offset_of!(Ring, cons_head), TX_CONS_HEAD);

// Plain data for DMA memory: every field listed, so padding fails the build.
rnic_queues::pod_struct! {
    Ring { prod_tail, cons_head }
    RingState { tx, rx }
}
