use proptest::prelude::*;

use super::*;

fn ok(url: &str) -> ServerUrl {
    parse(url).unwrap_or_else(|e| panic!("{url}: {e}"))
}

fn refused(url: &str) -> String {
    match parse(url) {
        Err(e) => e,
        Ok(u) => panic!("{url} was accepted: {u:?}"),
    }
}

/// URL, address, user name, password, cluster.
type Accepted<'a> = (&'a str, &'a str, Option<&'a [u8]>, Option<&'a [u8]>, bool);

#[test]
fn accepted_forms() {
    let cases: &[Accepted<'_>] = &[
        (
            "redis://127.0.0.1:7000",
            "127.0.0.1:7000",
            None,
            None,
            false,
        ),
        ("redis://localhost", "localhost:6379", None, None, false),
        (
            "valkey://cache-1.internal:6380/",
            "cache-1.internal:6380",
            None,
            None,
            false,
        ),
        ("REDIS://h:1/0", "h:1", None, None, false),
        ("redis://[::1]:6379", "[::1]:6379", None, None, false),
        ("redis://[::1]", "[::1]:6379", None, None, false),
        (
            "redis://[fe80::1:2]:9/0",
            "[fe80::1:2]:9",
            None,
            None,
            false,
        ),
        ("redis://:s3cret@h:1", "h:1", None, Some(b"s3cret"), false),
        (
            "redis://app:s3cret@h:1",
            "h:1",
            Some(b"app"),
            Some(b"s3cret"),
            false,
        ),
        // Percent-decoded, any byte; '@' and ':' inside encoded.
        (
            "redis://a%40b:p%3Aw%40%25%00x@h",
            "h:6379",
            Some(b"a@b"),
            Some(b"p:w@%\0x"),
            false,
        ),
        // A colon in the password needs no encoding: the first one splits.
        ("redis://u:a:b@h", "h:6379", Some(b"u"), Some(b"a:b"), false),
        ("redis://h:1?cluster=true", "h:1", None, None, true),
        (
            "valkey://u:p@h:1/0?cluster=true",
            "h:1",
            Some(b"u"),
            Some(b"p"),
            true,
        ),
        ("redis://h:1?cluster=false", "h:1", None, None, false),
        (
            "redis://h?cluster=true&cluster=true",
            "h:6379",
            None,
            None,
            true,
        ),
        ("redis://h?", "h:6379", None, None, false),
        (
            "unix:///tmp/redis.sock",
            "unix:/tmp/redis.sock",
            None,
            None,
            false,
        ),
        (
            "redis+unix://u:p%40ss@/var/run/r%20s.sock?cluster=false",
            "unix:/var/run/r s.sock",
            Some(b"u"),
            Some(b"p@ss"),
            false,
        ),
        (
            "valkey+unix://:pw@/tmp/v.sock",
            "unix:/tmp/v.sock",
            None,
            Some(b"pw"),
            false,
        ),
    ];
    for &(url, addr, user, pass, cluster) in cases {
        let u = ok(url);
        assert_eq!(u.addr, addr, "{url}");
        assert_eq!(u.username.as_deref(), user, "{url}");
        assert_eq!(u.password.as_deref(), pass, "{url}");
        assert_eq!(u.cluster, cluster, "{url}");
    }
}

#[test]
fn refused_forms_say_why() {
    let cases: &[(&str, &str)] = &[
        ("http://h:1", "unknown scheme \"http\""),
        ("unix://tmp/redis.sock", "a host in a Unix socket URL"),
        ("unix://host/tmp/redis.sock", "a host in a Unix socket URL"),
        ("unix:///tmp/a%00b.sock", "a NUL byte"),
        (
            "unix:///tmp/r.sock?x=1",
            "a query option other than cluster=false",
        ),
        (
            "unix:///tmp/redis.sock?cluster=true",
            "a Unix socket is one server",
        ),
        ("unix://", "no socket path"),
        ("unix:///", "no socket path"),
        (
            "redis+unix://user@/tmp/r.sock",
            "a user name without a password",
        ),
        ("h:6379", "no scheme"),
        ("redis://", "no host"),
        ("redis://:7000", "no host"),
        ("redis://h:1/1", "database 1: only database 0"),
        ("redis://h:1/15", "database 15"),
        ("redis://h:1/x", "is not a database index"),
        ("redis://h:1/0/extra", "is not a database index"),
        ("redis://h:0", "port 0 is not in 1..=65535"),
        ("redis://h:65536", "port 65536 is not in 1..=65535"),
        ("redis://h:", "port \"\" is not a number"),
        ("redis://h:x1", "port \"x1\" is not a number"),
        ("redis://h:1?tls=true", "unknown option \"tls\""),
        ("redis://h:1?cluster=yes", "cluster=\"yes\""),
        ("redis://h:1?cluster", "cluster=\"\""),
        (
            "redis://h?cluster=true&cluster=false",
            "cluster given twice",
        ),
        ("redis://h:1#x", "fragment"),
        ("redis://app@h:1", "a user name without a password"),
        ("redis://app:@h:1", "an empty password"),
        ("redis://:p%4@h", "password: a '%' at byte 1"),
        ("redis://%zz:p@h", "user name: a '%'"),
        ("redis://:pa/ss@h", "percent-encode"),
        ("redis://:pa?ss@h", "percent-encode"),
        ("redis://[::1:6379", "without its closing ']'"),
        ("redis://[zz]:1", "[zz] is not an IPv6 address"),
        ("redis://[::1]6379", "after the IPv6 address"),
        ("redis://::1:6379", "no host"),
        ("redis://h%20x:1", "contains '%'"),
        ("redis://h :1", "contains ' '"),
    ];
    for &(url, want) in cases {
        let e = refused(url);
        assert!(e.contains(want), "{url}: {e:?} lacks {want:?}");
    }
    let long = format!("redis://{}:1", "h".repeat(5000));
    assert!(refused(&long).contains("longer than 4096 bytes"));
}

#[test]
fn errors_and_redaction_never_show_the_password() {
    for url in [
        "redis://:hunter2@h:1/3",
        "redis://app:hunter2@h:1?x=1",
        "redis://hunter2@h:1",
        "redis://:hun/ter2@h",
        "redis://:hun?ter2@h",
        "redis://:hunter2@h:99999",
        "redis://:hunter2@[zz]",
    ] {
        let e = refused(url);
        assert!(!e.contains("hunter2") && !e.contains("ter2"), "{url}: {e}");
        let shown = redacted(url);
        assert!(
            !shown.contains("hunter2") && !shown.contains("ter2"),
            "{shown}"
        );
    }
    assert_eq!(redacted("redis://app:pw@h:1/0"), "redis://app:***@h:1/0");
    assert_eq!(redacted("redis://h:1"), "redis://h:1");
    assert_eq!(redacted("pw@h:1"), "<6 bytes, no scheme>");
    let debug = format!("{:?}", ok("redis://app:hunter2@h"));
    assert!(
        debug.contains("\"app\"") && !debug.contains("hunter2"),
        "{debug}"
    );
    let debug = format!("{:?}", settings(&["redis://app:hunter2@h"]));
    assert!(!debug.contains("hunter2"), "{debug}");
}

proptest! {
    /// Any string: an answer, never a panic; an accepted URL's address
    /// always has a port and round-trips through the parser.
    #[test]
    fn never_panics(s in ".{0,80}") {
        if let Ok(u) = parse(&s) {
            prop_assert!(u.addr.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()));
            let again = ok(&format!("redis://{}", u.addr));
            prop_assert_eq!(again.addr, u.addr);
        }
        let _ = redacted(&s);
    }

    /// Strings shaped like URLs, so the parser gets past the scheme.
    #[test]
    fn url_shaped_input_never_panics(
        scheme in "(redis|valkey|rediss|x)",
        user in "[a-z%:@0-9]{0,6}",
        host in "(\\[[0-9a-f:]{0,8}\\]|[a-z0-9.:]{0,8})",
        port in "(:[0-9]{0,6})?",
        tail in "[/?#=&a-z0-9]{0,12}",
    ) {
        let url = format!("{scheme}://{user}@{host}{port}{tail}");
        let _ = parse(&url);
        let shown = redacted(&url);
        if let Some((_, pass)) = user.split_once(':') {
            if pass.len() > 2 && !pass.contains('@') {
                prop_assert!(!shown.contains(&format!(":{pass}@")), "{}", shown);
            }
        }
    }

    /// Percent-encoding any credentials round-trips.
    #[test]
    fn credentials_round_trip(user in proptest::collection::vec(any::<u8>(), 1..12),
                              pass in proptest::collection::vec(any::<u8>(), 1..12)) {
        let enc = |b: &[u8]| b.iter().map(|x| format!("%{x:02X}")).collect::<String>();
        let u = ok(&format!("redis://{}:{}@h:1", enc(&user), enc(&pass)));
        prop_assert_eq!(u.username, Some(user));
        prop_assert_eq!(u.password, Some(pass));
    }
}

fn settings(urls: &[&str]) -> UrlSettings {
    let mut s = UrlSettings::default();
    for u in urls {
        s.read(u);
    }
    s
}

type Merged = Result<(Option<Vec<u8>>, Option<Vec<u8>>), String>;

fn merged(urls: &[&str], user: Option<&[u8]>, pass: Option<&[u8]>) -> Merged {
    let (mut u, mut p) = (user.map(<[u8]>::to_vec), pass.map(<[u8]>::to_vec));
    settings(urls).merge("PubSubBuilder", &mut u, &mut p)?;
    Ok((u, p))
}

#[test]
fn credentials_merge_with_the_setters_and_conflicts_name_both() {
    let some = |b: &[u8]| Some(b.to_vec());
    // A URL without credentials takes the others'.
    let got = merged(&["redis://a:1", "redis://app:pw@b:1"], None, None).unwrap();
    assert_eq!(got, (some(b"app"), some(b"pw")));
    // The same credentials twice, or from a setter and a URL: fine.
    let got = merged(&["redis://:pw@a", "redis://:pw@b"], None, Some(b"pw")).unwrap();
    assert_eq!(got, (None, some(b"pw")));
    let got = merged(&["redis://:pw@a"], Some(b"app"), None).unwrap();
    assert_eq!(got, (some(b"app"), some(b"pw")));
    // Different: an error naming both sources, without the secret.
    let e = merged(&["redis://:one@a"], None, Some(b"two")).unwrap_err();
    assert_eq!(
        e,
        "the password of URL redis://:***@a differs from the one of \
         PubSubBuilder::password (one set of credentials serves every connection)"
    );
    let e = merged(&["redis://:one@a", "redis://:two@b"], None, None).unwrap_err();
    assert!(
        e.starts_with(
            "the password of URL redis://:***@b differs from the one of URL redis://:***@a"
        ),
        "{e}"
    );
    let e = merged(&["redis://x:pw@a"], Some(b"y"), None).unwrap_err();
    assert!(
        e.starts_with(
            "the user name of URL redis://x:***@a differs from the one of PubSubBuilder::username"
        ),
        "{e}"
    );
    // A URL that could not be read is the first error.
    let e = merged(&["redis://a", "http://:pw@b"], None, None).unwrap_err();
    assert!(
        e.starts_with("URL http://:***@b: unknown scheme \"http\""),
        "{e}"
    );
}

#[cfg(not(feature = "tls"))]
#[test]
fn tls_urls_say_to_enable_the_feature() {
    for (url, scheme) in [("rediss://h:1", "rediss"), ("VALKEYS://h:1", "VALKEYS")] {
        let e = refused(url);
        assert_eq!(
            e,
            format!(
                "{scheme}:// asks for TLS, which this build leaves out: enable \
                 shardsub's `tls` cargo feature (or use redis:// or valkey://)"
            ),
            "{url}"
        );
    }
}

#[cfg(feature = "tls")]
#[test]
fn tls_urls_select_tls() {
    for url in [
        "rediss://h:1",
        "valkeys://:pw@h:1",
        "RedisS://h:1?cluster=true",
    ] {
        let u = ok(url);
        assert!(u.tls, "{url}");
        assert_eq!(u.addr, "h:1", "{url}");
    }
    assert!(!ok("redis://h:1").tls);
    let mut urls = UrlSettings::default();
    urls.read("rediss://a:1");
    urls.read("valkeys://b:1");
    assert_eq!(urls.wants_tls(), Ok(true));
    urls.read("redis://:pw@c:1");
    assert_eq!(
        urls.wants_tls().unwrap_err(),
        "URL rediss://a:1 asks for TLS and URL redis://:***@c:1 does not (TLS is one \
         setting for every connection of a builder)"
    );
}

#[test]
fn sentinel_urls_name_the_master_and_its_sentinels() {
    let u = ok("redis+sentinel://:pw@10.0.0.1:26380,sentinel-2/mymaster");
    assert_eq!(u.addr, "sentinel:mymaster");
    assert_eq!(u.sentinels, ["10.0.0.1:26380", "sentinel-2:26379"]);
    assert_eq!(u.password.as_deref(), Some(&b"pw"[..]));
    let u = ok("valkey+sentinel://[::1]:5000/cache");
    assert_eq!(u.sentinels, ["[::1]:5000"]);
    // No error repeats a password's bytes.
    for url in [
        "redis+sentinel://:pa/ss@h:26379/m",
        "redis+sentinel://:pa/ss@h",
        "unix://:pa/ss@/s",
        "unix://:pa?ss@/s",
    ] {
        let e = crate::url::parse(url).unwrap_err();
        assert!(
            !e.contains("ss@") && !e.contains("pa/") && !e.contains("pa?"),
            "{url}: {e}"
        );
    }
    for (url, why) in [
        ("redis+sentinel://h:26379", "no master name"),
        ("redis+sentinel://h:26379/", "master name \"\""),
        ("redis+sentinel://h/m?cluster=true", "no query options"),
        ("redis+sentinel://h:x/m", "Sentinel \"h:x\""),
        ("redis+sentinel://:pa/ss@h:26379/m", "before the '@'"),
    ] {
        let e = crate::url::parse(url).unwrap_err();
        assert!(e.contains(why), "{url}: {e:?} lacks {why:?}");
    }
}
