//! The benchmark inputs, built deterministically.

use crate::Touch;

/// `CLUSTER SLOTS` of a 6-master / 6-replica Redis 7.0 cluster, RESP3, as
/// captured by `topology/tests/fixtures/capture_fixtures.py`.
pub const REDIS7_SLOTS_RESP3: &[u8] =
    include_bytes!("../../../topology/tests/fixtures/redis7_slots_resp3.bin");

/// The same from a Valkey 9.1 cluster.
pub const VALKEY9_SLOTS_RESP3: &[u8] =
    include_bytes!("../../../topology/tests/fixtures/valkey9_slots_resp3.bin");

/// One benchmark stream.
pub struct Stream {
    /// Short name for benchmark ids.
    pub name: &'static str,
    /// The wire bytes.
    pub bytes: Vec<u8>,
    /// Frames in `bytes`.
    pub frames: u64,
    /// How each frame is touched.
    pub touch: Touch,
}

fn bulk(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// `n` RESP3 `smessage` pushes with `payload_len`-byte payloads, on channel
/// names of varied length and content (as a sharded deployment would use).
pub fn smessage_pushes(n: usize, payload_len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * (payload_len + 64));
    // Deterministic: varied names and payload bytes, the same every run.
    let mut rng = testkit::Rng::new(0);
    for i in 0..n {
        let seed = rng.next_u64();
        let channel = match i % 4 {
            0 => format!("orders:{{{}}}", seed % 16384),
            1 => format!("user:{}:notifications", seed % 1_000_000),
            2 => format!("t{}", seed % 100),
            _ => format!("tenant-{:x}/room/{{{}}}/events", seed, i % 977),
        };
        let fill = b'a' + (seed % 26) as u8;
        let payload = vec![fill; payload_len];
        out.extend_from_slice(b">3\r\n");
        bulk(&mut out, b"smessage");
        bulk(&mut out, channel.as_bytes());
        bulk(&mut out, &payload);
    }
    out
}

/// A `*n` array of `len`-byte bulk strings.
pub fn bulk_array(n: usize, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * (len + 16) + 16);
    out.extend_from_slice(format!("*{n}\r\n").as_bytes());
    for i in 0..n {
        let b = b'A' + (i % 26) as u8;
        bulk(&mut out, &vec![b; len]);
    }
    out
}

/// The benchmark streams: the `smessage` push stream, the bulk array, and
/// the two `CLUSTER SLOTS` replies.
pub fn all() -> Vec<Stream> {
    vec![
        Stream {
            name: "push_10k_smessage_256B",
            bytes: smessage_pushes(10_000, 256),
            frames: 10_000,
            touch: Touch::Push,
        },
        Stream {
            name: "array_100x1KiB",
            bytes: bulk_array(100, 1024),
            frames: 1,
            touch: Touch::Tree,
        },
        Stream {
            name: "cluster_slots_redis7",
            bytes: REDIS7_SLOTS_RESP3.to_vec(),
            frames: 1,
            touch: Touch::Tree,
        },
        Stream {
            name: "cluster_slots_valkey9",
            bytes: VALKEY9_SLOTS_RESP3.to_vec(),
            frames: 1,
            touch: Touch::Tree,
        },
    ]
}
