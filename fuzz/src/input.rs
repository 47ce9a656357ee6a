//! A reader that turns fuzz input into choices. Reading past the end gives
//! zeros, so every input is a valid schedule and a short one ends soon.

/// Fuzz bytes read front to back.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// Reads `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    /// True once every byte was read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from(self.u8()) | u16::from(self.u8()) << 8
    }

    /// A number below `n` (at least 1): one byte, two when `n` is over 256.
    pub fn below(&mut self, n: usize) -> usize {
        let raw = if n > 256 {
            usize::from(self.u16())
        } else {
            usize::from(self.u8())
        };
        raw % n.max(1)
    }

    /// One entry of `table` (not empty).
    pub fn pick<T: Copy>(&mut self, table: &[T]) -> T {
        table[self.below(table.len())]
    }

    /// Up to `n` bytes (fewer at the end).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}
