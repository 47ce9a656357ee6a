//! The registry against the repository: names, targets, markers, budget.

use super::*;

#[test]
fn names_are_unique_and_selectable() {
    let all = all();
    for (i, e) in all.iter().enumerate() {
        assert!(
            all[i + 1..].iter().all(|o| o.name != e.name),
            "{} twice",
            e.name
        );
        assert!(!e.steps.is_empty(), "{} has no steps", e.name);
    }
    let two = select(Some("subscribe_cost, shardcore,shardcore")).unwrap();
    let names: Vec<&str> = two.iter().map(|e| e.name).collect();
    assert_eq!(names, ["subscribe_cost", "shardcore"]);
    assert!(select(Some("nope")).unwrap_err().contains("nope"));
    assert!(select(Some(",")).is_err());
    assert_eq!(select(None).unwrap().len(), all.len());
}

/// The value after `flag` in a command's arguments.
fn value<'a>(cmd: &'a Cmd, flag: &str) -> Option<&'a str> {
    let at = cmd.args.iter().position(|a| a == flag)?;
    cmd.args.get(at + 1).map(String::as_str)
}

#[test]
fn every_command_names_a_target_that_exists() {
    let root = crate::run::root();
    let exists = |paths: &[String]| paths.iter().any(|p| root.join(p).is_file());
    for e in all() {
        let cmds = e.build.iter().chain(e.steps.iter().map(|s| &s.cmd));
        for cmd in cmds {
            if let Some(name) = value(cmd, "--example") {
                assert!(
                    exists(&[
                        format!("examples/{name}.rs"),
                        format!("examples/{name}/main.rs")
                    ]),
                    "{}: {name}",
                    e.name
                );
            }
            if let Some(name) = value(cmd, "--bench") {
                let places = ["benches", "shardcore/benches", "benches/peers/benches"];
                let paths: Vec<String> = places.iter().map(|d| format!("{d}/{name}.rs")).collect();
                assert!(exists(&paths), "{}: bench {name}", e.name);
            }
            if let Some(name) = value(cmd, "--bin") {
                let dir = "benches/peers/src/bin";
                let paths = [format!("{dir}/{name}.rs"), format!("{dir}/{name}/main.rs")];
                assert!(exists(&paths), "{}: bin {name}", e.name);
            }
            if let Program::Target(path) | Program::Callgrind { binary: path, .. } = &cmd.program {
                let name = path.rsplit('/').next().unwrap_or(path);
                assert!(
                    e.build.iter().any(|b| value(b, "--example") == Some(name)),
                    "{}: {path} is not built by the entry",
                    e.name
                );
            }
            if let Program::Script(path) = &cmd.program {
                assert!(root.join(path).is_file(), "{}: {path}", e.name);
            }
        }
    }
}

#[test]
fn the_pages_mark_every_table_once_in_registry_order() {
    let names: Vec<&str> = all().iter().map(|e| e.name).collect();
    let mut marked: Vec<String> = Vec::new();
    for page in crate::bench::DOCS {
        let path = crate::run::root().join(page);
        let doc = std::fs::read_to_string(&path).unwrap();
        let regions = super::super::markers::regions(&doc, &names).unwrap();
        let here: Vec<String> = regions.into_iter().map(|r| r.name).collect();
        let order: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| here.iter().any(|h| h == n))
            .collect();
        assert_eq!(here, order, "{page}: order differs from the registry's");
        marked.extend(here);
    }
    marked.sort();
    let mut want: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    want.sort();
    assert_eq!(marked, want, "each table marked on exactly one page");
}

#[test]
fn the_whole_run_fits_in_the_budget() {
    // On the 2-core machines the docs are measured on; the subscriber grid
    // (issue 45) took it from about 36 to about 47 minutes.
    let total: u32 = all()
        .iter()
        .filter(|e| e.min_cpus <= 2)
        .map(|e| e.estimate_s)
        .sum::<u32>()
        + BUILDS_ESTIMATE_S;
    assert!(total <= 48 * 60, "estimates add up to {total} s");
}
