//! Keys that hash to a chosen slot, for probe `GET`s.

use shardcore::crc16;

const PREFIX: &[u8; 6] = b"probe:";
/// Free characters after the prefix: each is `0x40 | b` for a 5-bit `b`
/// (`@`, `A`–`Z`, `[`, `\`, `]`, `^`, `_`): printable, never a brace.
const FREE: usize = 4;
const KEY_LEN: usize = PREFIX.len() + FREE;

/// A 10-byte key, `probe:` and four printable characters, whose hash slot is
/// `slot` (taken modulo 16384). A `GET` of it on any node provokes a `MOVED`
/// to the slot's owner when that node does not own the slot.
///
/// Computed, not searched: CRC16 is linear over GF(2), so the 20 free bits
/// of the last four characters are solved for the 14 slot bits directly.
///
/// ```
/// let key = topology::probe_key_for_slot(12182);
/// assert_eq!(shardcore::key_slot(&key), 12182);
/// assert!(key.starts_with(b"probe:"));
/// ```
pub fn probe_key_for_slot(slot: u16) -> [u8; KEY_LEN] {
    let target = slot & 0x3fff;
    let mut key = [0x40u8; KEY_LEN];
    key[..PREFIX.len()].copy_from_slice(PREFIX);
    let base = crc16(&key) & 0x3fff;
    // The slot bits contributed by flipping each free bit alone (linear:
    // with a zero initial value, crc(x ^ y) = crc(x) ^ crc(y) for equal lengths).
    let mut basis: [(u16, u32); 14] = [(0, 0); 14];
    for bit in 0..(FREE * 5) {
        let mut delta = [0u8; KEY_LEN];
        delta[PREFIX.len() + bit / 5] = 1 << (bit % 5);
        let mut v = (crc16(&delta) & 0x3fff, 1u32 << bit);
        // Gaussian elimination: keep a vector per leading bit.
        for lead in (0..14).rev() {
            if v.0 & (1 << lead) == 0 {
                continue;
            }
            if basis[lead].0 == 0 {
                basis[lead] = v;
                break;
            }
            v = (v.0 ^ basis[lead].0, v.1 ^ basis[lead].1);
        }
    }
    let mut want = target ^ base;
    let mut flips = 0u32;
    for lead in (0..14).rev() {
        if want & (1 << lead) != 0 && basis[lead].0 != 0 {
            want ^= basis[lead].0;
            flips ^= basis[lead].1;
        }
    }
    for bit in 0..(FREE * 5) {
        if flips & (1 << bit) != 0 {
            key[PREFIX.len() + bit / 5] ^= 1 << (bit % 5);
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_a_printable_probe_key() {
        for slot in 0..shardcore::SLOT_COUNT {
            let key = probe_key_for_slot(slot);
            assert_eq!(
                shardcore::key_slot(&key),
                slot,
                "{:?}",
                core::str::from_utf8(&key)
            );
            assert!(key[6..].iter().all(|&c| (0x40..0x60).contains(&c)));
        }
        assert_eq!(probe_key_for_slot(16384), probe_key_for_slot(0));
    }
}
