//! What every device's decoding shares: a decoded item, enumeration
//! names in the spec's spelling, plain structures read from bytes, hex.
//! Each device's decoders are its boundary's ([`crate::rnic::decode`],
//! [`crate::pvrdma::decode`]).

use core::mem::size_of;

use rnic_queues::Pod;

/// A decoded item: its line and its fields, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decoded {
    /// The one-line text, e.g. `SQ doorbell qpn 2 pi 5`.
    pub text: String,
    /// `(name, value)` pairs.
    pub fields: Vec<(String, String)>,
}

impl Decoded {
    /// A line with no fields yet.
    pub fn new(text: impl Into<String>) -> Self {
        Decoded {
            text: text.into(),
            fields: Vec::new(),
        }
    }

    /// Adds a field.
    pub fn field(mut self, name: &str, value: impl ToString) -> Self {
        self.fields.push((name.to_owned(), value.to_string()));
        self
    }
}

/// `CreateQp` as `CREATE_QP`: the spec's spelling of a Rust name.
pub fn screaming(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// The name of an enumeration value, or `name?` with the raw number.
pub(crate) fn named<T: core::fmt::Debug>(
    v: Option<T>,
    raw: impl core::fmt::Display,
    what: &str,
) -> String {
    match v {
        Some(v) => screaming(&format!("{v:?}")),
        None => format!("{what}?{raw}"),
    }
}

/// Reads a plain structure from `bytes` (zero-filled if short).
pub(crate) fn read<T: Pod>(bytes: &[u8]) -> T {
    let mut buf = vec![0u8; size_of::<T>()];
    let n = bytes.len().min(buf.len());
    buf[..n].copy_from_slice(&bytes[..n]);
    // SAFETY: `buf` holds size_of::<T>() bytes, and a `Pod` type is valid
    // for any bytes.
    unsafe { buf.as_ptr().cast::<T>().read_unaligned() }
}

/// A GID, as IPv6 text groups.
pub(crate) fn gid(g: &[u8; 16]) -> String {
    g.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// Bytes as hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_spec_s() {
        assert_eq!(screaming("CreateQp"), "CREATE_QP");
        assert_eq!(screaming("RdmaWriteWithImm"), "RDMA_WRITE_WITH_IMM");
    }
}
