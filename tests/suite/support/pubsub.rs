//! `PUBSUB NUMSUB` on a server and an ACL user, for the Pub/Sub tests. Delivery goes
//! through the accounting checker ([`super::accounted`]).

/// `PUBSUB NUMSUB` for `channels` on a server, as counts.
pub fn numsub(server: &testkit::Server, channels: &[Vec<u8>]) -> Vec<i64> {
    let mut args: Vec<&[u8]> = vec![b"PUBSUB", b"NUMSUB"];
    args.extend(channels.iter().map(|c| c.as_slice()));
    let reply = server.cmd(&args).expect("PUBSUB NUMSUB");
    let items = match reply {
        testkit::Value::Array(items) => items,
        testkit::Value::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        other => panic!("NUMSUB reply {other:?}"),
    };
    items
        .chunks(2)
        .map(|kv| match &kv[1] {
            testkit::Value::Integer(n) => *n,
            other => panic!("NUMSUB count {other:?}"),
        })
        .collect()
}

/// `ACL SETUSER app …` (password `secret`): user `app` may use the
/// library's service and probe channels (`__shardsub:*`) and the `extra`
/// channel patterns (`&ok:*`).
pub fn acl_app(server: &testkit::Server, extra: &[&[u8]]) {
    let mut args: Vec<&[u8]> = vec![
        b"ACL",
        b"SETUSER",
        b"app",
        b"on",
        b">secret",
        b"+@all",
        b"resetchannels",
        b"&__shardsub:*",
    ];
    args.extend_from_slice(extra);
    server.cmd(&args).unwrap();
}
