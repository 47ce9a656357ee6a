//! `PubSub` on real clusters (Redis 7 and Valkey 9), and on fake cluster
//! nodes for what real servers never send.

mod acl;
mod ask;
mod delivery;
mod faults;
mod lane_move;
mod lost_reply;
mod probe;
mod publish_failover;
mod raw_names;
mod redirects;
mod replicas;
mod resubscribe_fast;
