//! shardsub: Redis and Valkey Pub/Sub at scale (being written).
