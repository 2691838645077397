//! Big-endian fields in a message's bytes, at IBA's byte and bit
//! positions. Callers have checked the buffer's length.

/// The `u16` at `at`.
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The `u32` at `at`.
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The `u64` at `at`.
pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(v)
}

/// The 24-bit number in the three bytes from `at`.
pub(crate) fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

/// Writes `v` at `at`.
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes `v` at `at`.
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Writes `v` at `at`.
pub(crate) fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Writes the low 24 bits of `v` in the three bytes from `at`.
pub(crate) fn put24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

/// The `width` bits of byte `v` whose most significant is bit `bit`
/// (IBA's numbering: bit 0 is the byte's most significant).
pub(crate) fn bits(v: u8, bit: u32, width: u32) -> u8 {
    (v >> (8 - bit - width)) & ((1u16 << width) - 1) as u8
}

/// Byte `v` with `width` bits from bit `bit` (as in [`bits`]) set to the
/// low bits of `x`.
pub(crate) fn with_bits(v: u8, bit: u32, width: u32, x: u8) -> u8 {
    let mask = (((1u16 << width) - 1) as u8) << (8 - bit - width);
    (v & !mask) | ((x << (8 - bit - width)) & mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_count_from_the_most_significant() {
        assert_eq!(bits(0b1011_0110, 0, 5), 0b10110);
        assert_eq!(bits(0b1011_0110, 5, 2), 0b11);
        assert_eq!(bits(0b1011_0110, 7, 1), 0);
        assert_eq!(with_bits(0, 0, 5, 0x1f), 0b1111_1000);
        assert_eq!(with_bits(0xff, 5, 2, 0), 0b1111_1001);
        assert_eq!(with_bits(0, 7, 1, 3), 1, "only the field's bits");
        let mut b = [0u8; 8];
        put24(&mut b, 1, 0x12_3456);
        assert_eq!((be24(&b, 1), b[0], b[4]), (0x12_3456, 0, 0));
    }
}
