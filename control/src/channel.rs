//! [`Channel`]: a channel name in one shared allocation, behind a thin
//! pointer.
//!
//! A subscriber with a million channels holds each name in several places
//! at once: the registry's table, the control core's wanted set, the
//! commands in flight. `Arc<[u8]>` would cost 16 bytes per place (a fat
//! pointer) and 16 bytes of reference counts per name. A [`Channel`] is 8
//! bytes wherever it is held, and its allocation is a 9-byte header (a
//! 32-bit reference count, the 32-bit length and one byte of [`mark`]
//! for the table that made it) followed by the name:
//!
//! ```text
//!  Channel (8 B) ──> [ count: u32 | len: u32 | mark: u8 | name bytes … ]
//! ```
//!
//! This module is the crate's only unsafe code: the allocation's layout is
//! computed in one place ([`layout`]) and every block says why it holds.
//!
//! [`mark`]: Channel::mark

#![allow(unsafe_code)]

use alloc::alloc::{alloc, dealloc, handle_alloc_error};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::alloc::Layout;
use core::borrow::Borrow;
use core::hash::{Hash, Hasher};
use core::ops::Deref;
use core::ptr::NonNull;
use core::sync::atomic::{fence, AtomicU32, AtomicU8, Ordering};
use core::{fmt, mem, ptr, slice};

/// The allocation's first bytes; the name follows at [`NAME_AT`].
#[repr(C)]
struct Header {
    count: AtomicU32,
    len: u32,
    mark: AtomicU8,
}

/// Where the name starts: right after `mark`, inside `Header`'s trailing
/// padding when the name is short (the allocation is never smaller than a
/// `Header`, see [`layout`]).
const NAME_AT: usize = mem::offset_of!(Header, mark) + 1;

/// Clones beyond this many panic (the count is restored first), so the
/// 32-bit count can never wrap around to free a name still in use.
const MAX_COUNT: u32 = u32::MAX / 2;

/// The longest name a [`Channel`] holds: its length is stored in 32 bits,
/// and an allocation stays under `isize::MAX` bytes on 32-bit targets too.
/// (Redis and Valkey refuse a bulk string over 512 MiB by default.)
pub const MAX_CHANNEL_LEN: usize = {
    let limit = if usize::BITS > 32 {
        u32::MAX as usize
    } else {
        isize::MAX as usize
    };
    limit - NAME_AT - 8
};

/// The layout of the allocation for a name of `len` bytes.
fn layout(len: usize) -> Layout {
    let size = (NAME_AT + len).max(mem::size_of::<Header>());
    // `len` ≤ MAX_CHANNEL_LEN keeps `size` below isize::MAX (on every
    // target), and the alignment is a Header's, a power of two.
    Layout::from_size_align(size, mem::align_of::<Header>()).expect("a channel's layout")
}

/// A channel name: immutable bytes in one reference-counted allocation
/// shared by every clone (a clone is a count, not a copy), 8 bytes where it
/// is held. Compares, orders and hashes as its bytes (`Borrow<[u8]>`, so a
/// table of `Channel`s is looked up with a `&[u8]`).
///
/// Besides the name, each allocation carries one byte of [`mark`]: state
/// that the owner of the table which made the name may keep with it (the
/// engine's registry keeps its subscription flags there instead of in a
/// table slot of their own). Every clone sees the same byte; the core never
/// reads it.
///
/// # Panics
///
/// Making a `Channel` of more than [`MAX_CHANNEL_LEN`] bytes panics, as
/// does holding more than two billion clones of one name at once.
///
/// [`mark`]: Channel::mark
pub struct Channel {
    ptr: NonNull<Header>,
}

// SAFETY: the name's bytes never change after `new`, the count and the
// mark are atomics, and the allocation is freed by the last clone only
// (the count's release/acquire pair orders every other clone's last use
// before the free), as for `Arc<[u8]>`, which is `Send` and `Sync`.
unsafe impl Send for Channel {}
// SAFETY: as for `Send`: shared access only reads the immutable bytes and
// uses the atomics.
unsafe impl Sync for Channel {}

impl Channel {
    /// A new allocation holding a copy of `name`, its mark 0.
    pub fn new(name: &[u8]) -> Channel {
        assert!(
            name.len() <= MAX_CHANNEL_LEN,
            "a channel name of {} bytes (at most {MAX_CHANNEL_LEN})",
            name.len()
        );
        let layout = layout(name.len());
        // SAFETY: `layout` has a non-zero size (at least a `Header`).
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(raw.cast::<Header>()) else {
            handle_alloc_error(layout)
        };
        // SAFETY: `raw` is valid for `layout.size()` bytes, aligned for a
        // `Header` and at least as large as one; the name's bytes go at
        // `NAME_AT`, and `NAME_AT + name.len() ≤ layout.size()`; `name`
        // cannot overlap a fresh allocation.
        unsafe {
            ptr.as_ptr().write(Header {
                count: AtomicU32::new(1),
                len: name.len() as u32,
                mark: AtomicU8::new(0),
            });
            ptr::copy_nonoverlapping(name.as_ptr(), raw.add(NAME_AT), name.len());
        }
        Channel { ptr }
    }

    fn header(&self) -> &Header {
        // SAFETY: `ptr` came from `new`, which wrote a whole `Header`, and
        // the allocation lives while this clone does (it holds a count).
        unsafe { self.ptr.as_ref() }
    }

    /// The name.
    pub fn as_bytes(&self) -> &[u8] {
        let len = self.header().len as usize;
        // SAFETY: `new` copied `len` bytes to `NAME_AT`, inside the
        // allocation, and nothing writes them again; they live as long
        // as `self`.
        unsafe { slice::from_raw_parts(self.ptr.as_ptr().cast::<u8>().add(NAME_AT), len) }
    }

    /// The byte of state the table that made this name keeps with it (0
    /// when made), shared by every clone. Whoever uses it decides what
    /// guards it (the engine's registry reads and writes it under its
    /// lane's lock only, so `Relaxed` is enough there).
    pub fn mark(&self) -> &AtomicU8 {
        &self.header().mark
    }

    /// Whether `a` and `b` are clones of one allocation.
    pub fn ptr_eq(a: &Channel, b: &Channel) -> bool {
        a.ptr == b.ptr
    }

    /// How many clones of this allocation exist now (for tests and
    /// accounting; another thread may change it at any time).
    pub fn count(this: &Channel) -> usize {
        this.header().count.load(Ordering::Relaxed) as usize
    }
}

impl Clone for Channel {
    fn clone(&self) -> Channel {
        // Relaxed as in `Arc::clone`: a new clone is made from an existing
        // one, which already keeps the allocation alive.
        let old = self.header().count.fetch_add(1, Ordering::Relaxed);
        if old >= MAX_COUNT {
            self.header().count.fetch_sub(1, Ordering::Relaxed);
            panic!("more than {MAX_COUNT} clones of one channel name");
        }
        Channel { ptr: self.ptr }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        if self.header().count.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Every other clone's uses happen before their release decrements;
        // this acquire makes them happen before the free, as in `Arc`.
        fence(Ordering::Acquire);
        let layout = layout(self.header().len as usize);
        // SAFETY: this was the last clone, so nothing else can reach the
        // allocation; it came from `alloc` with this same layout (the
        // length never changes).
        unsafe { dealloc(self.ptr.as_ptr().cast::<u8>(), layout) }
    }
}

impl Deref for Channel {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for Channel {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Borrow<[u8]> for Channel {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for Channel {
    fn eq(&self, other: &Channel) -> bool {
        Channel::ptr_eq(self, other) || self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Channel {}

impl PartialEq<[u8]> for Channel {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_bytes() == other
    }
}

impl PartialOrd for Channel {
    fn partial_cmp(&self, other: &Channel) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Channel {
    fn cmp(&self, other: &Channel) -> core::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl Hash for Channel {
    /// As `[u8]` hashes, so that `Borrow<[u8]>` lookups find it.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state)
    }
}

impl fmt::Debug for Channel {
    /// As `[u8]` prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_bytes(), f)
    }
}

impl From<&[u8]> for Channel {
    fn from(name: &[u8]) -> Channel {
        Channel::new(name)
    }
}

impl<const N: usize> From<&[u8; N]> for Channel {
    fn from(name: &[u8; N]) -> Channel {
        Channel::new(name)
    }
}

impl<const N: usize> From<[u8; N]> for Channel {
    fn from(name: [u8; N]) -> Channel {
        Channel::new(&name)
    }
}

impl From<Vec<u8>> for Channel {
    fn from(name: Vec<u8>) -> Channel {
        Channel::new(&name)
    }
}

impl From<&Vec<u8>> for Channel {
    fn from(name: &Vec<u8>) -> Channel {
        Channel::new(name)
    }
}

impl From<Box<[u8]>> for Channel {
    fn from(name: Box<[u8]>) -> Channel {
        Channel::new(&name)
    }
}

impl From<&str> for Channel {
    fn from(name: &str) -> Channel {
        Channel::new(name.as_bytes())
    }
}

impl From<String> for Channel {
    fn from(name: String) -> Channel {
        Channel::new(name.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::{BTreeSet, VecDeque};
    use alloc::vec;

    #[test]
    fn a_channel_is_a_thin_pointer() {
        assert_eq!(mem::size_of::<Channel>(), mem::size_of::<usize>());
        assert_eq!(mem::size_of::<Option<Channel>>(), mem::size_of::<usize>());
        assert_eq!(NAME_AT, 9);
        assert_eq!(layout(18).size(), 27);
        assert_eq!(layout(0).size(), mem::size_of::<Header>());
    }

    #[test]
    fn bytes_round_trip_for_every_short_length() {
        let all: Vec<u8> = (0..=255).collect();
        for len in 0..all.len() {
            let c = Channel::new(&all[..len]);
            assert_eq!(c.as_bytes(), &all[..len]);
            assert_eq!(c.len(), len);
            assert_eq!(c.mark().load(Ordering::Relaxed), 0);
        }
    }

    #[test]
    fn clones_share_the_name_and_the_mark_and_the_last_frees() {
        let a = Channel::from("news:1");
        let b = a.clone();
        assert!(Channel::ptr_eq(&a, &b));
        assert_eq!(Channel::count(&a), 2);
        b.mark().store(5, Ordering::Relaxed);
        assert_eq!(a.mark().load(Ordering::Relaxed), 5);
        drop(a);
        assert_eq!(Channel::count(&b), 1);
        assert_eq!(&*b, b"news:1");
        // A second allocation of the same name is equal, not shared.
        let c = Channel::from(b"news:1");
        assert_eq!(b, c);
        assert!(!Channel::ptr_eq(&b, &c));
        assert_eq!(c.mark().load(Ordering::Relaxed), 0);
    }

    #[test]
    fn compares_orders_and_hashes_as_its_bytes() {
        use core::hash::BuildHasher;
        let names: Vec<&[u8]> = vec![b"b", b"", b"a", b"ab", b"\xff", b"a\x00"];
        let set: BTreeSet<Channel> = names.iter().map(|n| Channel::new(n)).collect();
        let mut sorted = names.clone();
        sorted.sort();
        let got: Vec<&[u8]> = set.iter().map(|c| c.as_bytes()).collect();
        assert_eq!(got, sorted);
        let s = std::hash::RandomState::new();
        for n in &names {
            assert_eq!(s.hash_one(Channel::new(n)), s.hash_one::<&[u8]>(n));
            assert!(set.contains(*n), "Borrow<[u8]> lookup of {n:?}");
            assert!(Channel::new(n) == **n);
        }
        assert_eq!(format!("{:?}", Channel::from("ab")), format!("{:?}", b"ab"));
    }

    #[test]
    fn clones_moved_between_threads_free_once() {
        let names: Vec<Channel> = (0..64).map(|i| Channel::from(format!("c:{i}"))).collect();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let mine: VecDeque<Channel> = names.iter().cloned().collect();
                std::thread::spawn(move || {
                    let more: Vec<Channel> = mine.iter().cloned().collect();
                    drop(mine);
                    more.iter().map(|c| c.len()).sum::<usize>()
                })
            })
            .collect();
        let total: usize = names.iter().map(|c| c.len()).sum();
        for t in threads {
            assert_eq!(t.join().expect("thread"), total);
        }
        assert!(names.iter().all(|c| Channel::count(c) == 1));
    }

    #[test]
    fn too_many_clones_panic_and_leave_the_count_as_it_was() {
        let a = Channel::from("x");
        a.header().count.store(MAX_COUNT, Ordering::Relaxed);
        let r = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| a.clone()));
        assert!(r.is_err());
        assert_eq!(Channel::count(&a), MAX_COUNT as usize);
        a.header().count.store(1, Ordering::Relaxed);
    }
}
