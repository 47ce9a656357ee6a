//! [`Channels`]: what [`PubSub::subscribe`](crate::PubSub::subscribe) and
//! [`PubSub::unsubscribe`](crate::PubSub::unsubscribe) take, one channel
//! or many.

use std::collections::{btree_set, hash_set, BTreeSet, HashSet, VecDeque};

/// One channel or several.
///
/// - One: a `&str`, a `String` or a `&String`.
/// - Several: an array, slice, `Vec`, `VecDeque`, `HashSet` or `BTreeSet`
///   (owned or borrowed) of anything that is bytes (`&str`, `String`,
///   `&[u8]`, `Vec<u8>`, `b"…"`), or the common iterators over them
///   (`iter()`, `map`, `filter`, `chain`, `take`, `skip`, `cloned`,
///   `copied`).
///
/// One channel given as bytes goes in an array: `subscribe([b"room:1"])`
/// (a `&[u8]` is a slice of bytes, read as several). Any other iterator
/// can be collected first (`.collect::<Vec<_>>()`).
///
/// ```no_run
/// # fn f(ps: &shardsub::PubSub) -> Result<(), shardsub::Error> {
/// ps.subscribe("room:1")?;
/// ps.subscribe(["room:2", "room:3"])?;
/// let rooms: Vec<String> = (4..100).map(|i| format!("room:{i}")).collect();
/// ps.subscribe(&rooms)?;
/// ps.subscribe(rooms.iter().filter(|r| r.ends_with('7')))?;
/// ps.subscribe([b"room:bytes"])?;
/// # Ok(()) }
/// ```
pub trait Channels {
    /// Each channel's name.
    type Item: AsRef<[u8]>;
    /// The channels, in order.
    type Iter: Iterator<Item = Self::Item>;
    /// The channels, in order.
    fn into_channels(self) -> Self::Iter;
}

impl<'a> Channels for &'a str {
    type Item = &'a str;
    type Iter = std::iter::Once<&'a str>;
    fn into_channels(self) -> Self::Iter {
        std::iter::once(self)
    }
}

impl Channels for String {
    type Item = String;
    type Iter = std::iter::Once<String>;
    fn into_channels(self) -> Self::Iter {
        std::iter::once(self)
    }
}

impl<'a> Channels for &'a String {
    type Item = &'a String;
    type Iter = std::iter::Once<&'a String>;
    fn into_channels(self) -> Self::Iter {
        std::iter::once(self)
    }
}

/// Collections and iterators whose items are the channels.
macro_rules! many {
    ($( [$($g:tt)*] $t:ty => $item:ty ),* $(,)?) => {$(
        impl<$($g)*> Channels for $t {
            type Item = $item;
            type Iter = <$t as IntoIterator>::IntoIter;
            fn into_channels(self) -> Self::Iter {
                self.into_iter()
            }
        }
    )*};
}

many! {
    ['a, T: AsRef<[u8]>] &'a [T] => &'a T,
    [T: AsRef<[u8]>, const N: usize] [T; N] => T,
    ['a, T: AsRef<[u8]>, const N: usize] &'a [T; N] => &'a T,
    [T: AsRef<[u8]>] Vec<T> => T,
    ['a, T: AsRef<[u8]>] &'a Vec<T> => &'a T,
    [T: AsRef<[u8]>] VecDeque<T> => T,
    ['a, T: AsRef<[u8]>] &'a VecDeque<T> => &'a T,
    [T: AsRef<[u8]>, S] HashSet<T, S> => T,
    ['a, T: AsRef<[u8]>, S] &'a HashSet<T, S> => &'a T,
    [T: AsRef<[u8]>] BTreeSet<T> => T,
    ['a, T: AsRef<[u8]>] &'a BTreeSet<T> => &'a T,
    ['a, T: AsRef<[u8]>] std::slice::Iter<'a, T> => &'a T,
    [T: AsRef<[u8]>] std::vec::IntoIter<T> => T,
    ['a, T: AsRef<[u8]>] hash_set::Iter<'a, T> => &'a T,
    ['a, T: AsRef<[u8]>] btree_set::Iter<'a, T> => &'a T,
}

/// Iterator adapters whose items are the channels.
macro_rules! adapters {
    ($( [$($g:tt)*] $t:ty ),* $(,)?) => {$(
        impl<$($g)*> Channels for $t
        where
            $t: Iterator,
            <$t as Iterator>::Item: AsRef<[u8]>,
        {
            type Item = <$t as Iterator>::Item;
            type Iter = $t;
            fn into_channels(self) -> Self::Iter {
                self
            }
        }
    )*};
}

adapters! {
    [I, F] std::iter::Map<I, F>,
    [I, P] std::iter::Filter<I, P>,
    [I, F] std::iter::FilterMap<I, F>,
    [A, B] std::iter::Chain<A, B>,
    [I] std::iter::Take<I>,
    [I] std::iter::Skip<I>,
    [I] std::iter::Cloned<I>,
    [I] std::iter::Copied<I>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names<C: Channels>(c: C) -> Vec<Vec<u8>> {
        c.into_channels().map(|n| n.as_ref().to_vec()).collect()
    }

    #[test]
    fn one_or_many_in_order() {
        assert_eq!(names("a"), [b"a".to_vec()]);
        assert_eq!(names(String::from("b")), [b"b".to_vec()]);
        assert_eq!(names(["a", "b"]), [b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(names([b"x"]), [b"x".to_vec()]);
        let v = vec![String::from("c"), String::from("d")];
        assert_eq!(names(&v), [b"c".to_vec(), b"d".to_vec()]);
        assert_eq!(names(v.iter().filter(|c| *c == "d")), [b"d".to_vec()]);
        assert_eq!(names((0..2).map(|i| format!("r{i}"))).len(), 2);
        let bytes: &[&[u8]] = &[b"e"];
        assert_eq!(names(bytes), [b"e".to_vec()]);
    }
}
