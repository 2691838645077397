//! Plain-data types: the only types copied to and from DMA memory.
//!
//! The device (or a device model, or a faulty device) may leave any bytes
//! in DMA memory, and whatever the driver copies there is seen by the device
//! byte for byte. [`Pod`] marks the types for which both directions are
//! sound: every bit pattern is a valid value, and every byte of a value is
//! initialised.

use endian_num::{le16, le32, le64};

/// A plain-data type: valid for every bit pattern, with no padding.
///
/// [`crate::DmaRegion::read`] and [`crate::DmaRegion::write`] (and the
/// command layer above them) accept only `Pod` types, because reading a
/// `bool`, an enum or a reference out of bytes a device wrote is undefined
/// behaviour, and so is viewing a value with padding bytes as bytes.
///
/// # Safety
///
/// An implementor must:
///
/// - have a defined layout: a primitive integer, an array of `Pod`, or a
///   `#[repr(C)]` / `#[repr(transparent)]` struct;
/// - have no padding: its size is the sum of its fields' sizes, so every byte
///   of every value is initialised;
/// - be valid for every bit pattern of its size: made only of integers and
///   other `Pod` types (no `bool`, `char`, enum, reference, pointer,
///   `NonZero*` or `UnsafeCell` anywhere inside).
pub unsafe trait Pod: Copy + 'static {}

macro_rules! pod_primitive {
    ($($t:ty),+ $(,)?) => { $(
        // SAFETY: a primitive integer (or the empty tuple): no padding, and
        // every bit pattern is a value.
        unsafe impl Pod for $t {}
    )+ };
}

pod_primitive!(
    (),
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize
);

// SAFETY: an array has no padding between its elements (a type's size is a
// multiple of its alignment) and is valid iff each element is.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

/// Size of the field `_field` selects, which must itself be [`Pod`]: the
/// check behind [`pod_struct!`].
#[doc(hidden)]
pub const fn pod_field<S, F: Pod>(_field: fn(&S) -> &F) -> usize {
    core::mem::size_of::<F>()
}

/// Size of `T`, which must be [`Pod`]: the check behind [`pod_bitfield!`].
#[doc(hidden)]
pub const fn pod_size<T: Pod>() -> usize {
    core::mem::size_of::<T>()
}

/// Implements [`Pod`] for structs, given every field: a compile-time check
/// requires each field to be `Pod` and the fields' sizes to add up to the
/// struct's size (no padding; a forgotten field fails the check too). Each
/// device's layouts use it beside their struct definitions.
///
/// ```
/// #[repr(C)]
/// #[derive(Clone, Copy)]
/// struct Entry { addr: u64, len: u32, key: u32 }
/// rnic_queues::pod_struct! { Entry { addr, len, key } }
/// ```
#[macro_export]
macro_rules! pod_struct {
    ($($t:ty { $($f:tt),+ $(,)? })+) => { $(
        const _: () = assert!(
            core::mem::size_of::<$t>() == 0 $(+ $crate::pod_field(|s: &$t| &s.$f))+,
            concat!(stringify!($t), ": padding, or a field missing from the Pod list"),
        );
        // SAFETY: every field is `Pod` (the bound of `pod_field`) and they
        // fill the struct without padding (asserted above).
        unsafe impl $crate::Pod for $t {}
    )+ };
}

/// Implements [`Pod`] for `bitfield-struct` types, whose single field is
/// private: `#[bitfield(.., repr = R)]` declares `#[repr(transparent)] struct
/// Name(R)`. The size and alignment of `R` are checked at compile time.
#[macro_export]
macro_rules! pod_bitfield {
    ($($t:ty : $repr:ty),+ $(,)?) => { $(
        const _: () = assert!(
            core::mem::size_of::<$t>() == $crate::pod_size::<$repr>()
                && core::mem::align_of::<$t>() == core::mem::align_of::<$repr>(),
            concat!(stringify!($t), " is not a transparent ", stringify!($repr)),
        );
        // SAFETY: `repr(transparent)` over the `Pod` type `$repr` (generated
        // by bitfield-struct; `pod_size` requires `$repr: Pod`, and the
        // layout is checked above).
        unsafe impl $crate::Pod for $t {}
    )+ };
}

/// Defines a `#[repr($ty)]` enum of a device interface's values, with a
/// fallible decoder from the raw value (a device or a peer may send any
/// number) and the raw value back.
///
/// ```
/// rnic_queues::wire_enum! {
///     /// Doorbell kinds.
///     Kind: u8 {
///         /// Send.
///         Send = 1,
///         /// Receive.
///         Recv = 2,
///     }
/// }
/// assert_eq!(Kind::from_raw(2), Some(Kind::Recv));
/// assert_eq!(Kind::from_raw(3), None);
/// ```
#[macro_export]
macro_rules! wire_enum {
    ($(#[$m:meta])* $name:ident : $ty:ty { $($(#[$vm:meta])* $v:ident = $n:expr),+ $(,)? }) => {
        $(#[$m])*
        #[repr($ty)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $v = $n),+ }

        impl $name {
            /// Decodes a raw value; `None` if no variant has it.
            pub const fn from_raw(v: $ty) -> Option<Self> {
                match v { $($n => Some(Self::$v),)+ _ => None }
            }
            /// The raw value.
            pub const fn raw(self) -> $ty { self as $ty }
        }
    };
}

// Little-endian integers: the byte order of every device layout's fields.
pod_struct! {
    le16 { 0 }
    le32 { 0 }
    le64 { 0 }
}
