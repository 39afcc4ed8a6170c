//! Discovery, sources, trust, precedence, determinism and invocation.

use std::path::{Path, PathBuf};

use skillbox_skill::skill::invoke;
use skillbox_skill::skill::source::{Source, SourceKind, SourceOptions};
use skillbox_skill::skill::{Catalog, Diagnostic};

const DESC: &str =
    "Summarize things in a folder; use when a user asks for a summary of that folder.";

fn write_skill(root: &Path, folder: &str, extra_front: &str, body: &str) -> PathBuf {
    let dir = root.join(folder);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!("---\nname: {folder}\ndescription: {DESC}\n{extra_front}---\n{body}"),
    )
    .unwrap();
    dir
}

fn source(kind: SourceKind, root: &Path) -> Source {
    Source {
        kind,
        root: root.to_path_buf(),
        trusted: true,
    }
}

fn rules(diags: &[Diagnostic]) -> Vec<&'static str> {
    diags.iter().map(|d| d.rule).collect()
}

#[test]
fn higher_precedence_sources_win_collisions_with_a_warning() {
    let system = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    let explicit = tempfile::tempdir().unwrap();
    let sys_dir = write_skill(system.path(), "notes", "", "system body\n");
    write_skill(user.path(), "notes", "", "user body\n");
    let exp_dir = write_skill(explicit.path(), "notes", "", "explicit body\n");
    let catalog = Catalog::from_sources(&[
        source(SourceKind::Explicit, explicit.path()),
        source(SourceKind::System, system.path()),
        source(SourceKind::User, user.path()),
    ]);
    let skill = catalog.get("notes").unwrap();
    assert_eq!(skill.source, SourceKind::Explicit);
    assert_eq!(skill.body, "explicit body\n");
    let collisions: Vec<&Diagnostic> = catalog
        .diagnostics()
        .iter()
        .filter(|d| d.rule == "name-collision")
        .collect();
    assert_eq!(collisions.len(), 2, "{collisions:?}");
    assert!(
        collisions
            .iter()
            .any(|d| d.path == sys_dir && d.message.contains(&exp_dir.display().to_string()))
    );
}

#[test]
fn project_skills_load_only_when_trusted() {
    let project = tempfile::tempdir().unwrap();
    let skills = project.path().join(".agents/skills");
    write_skill(&skills, "proj", "", "x\n");
    let options = |trust| SourceOptions {
        project: Some(project.path().to_path_buf()),
        trust_project: trust,
        ..SourceOptions::default()
    };
    let untrusted = Catalog::build(&options(false));
    assert!(untrusted.get("proj").is_none());
    assert_eq!(untrusted.untrusted().len(), 1);
    assert!(rules(untrusted.diagnostics()).contains(&"untrusted-source"));

    let trusted = Catalog::build(&options(true));
    assert_eq!(trusted.get("proj").unwrap().source, SourceKind::Project);
}

#[test]
fn discovery_skips_hidden_vendor_and_escaping_symlinks() {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    write_skill(root.path(), "kept", "", "x\n");
    write_skill(&root.path().join("nested/deeper"), "deep", "", "x\n");
    write_skill(&root.path().join(".hidden"), "hidden", "", "x\n");
    write_skill(&root.path().join("node_modules"), "vendored", "", "x\n");
    write_skill(&root.path().join("target"), "built", "", "x\n");
    write_skill(outside.path(), "outsider", "", "x\n");
    std::os::unix::fs::symlink(
        outside.path().join("outsider"),
        root.path().join("outsider"),
    )
    .unwrap();
    std::os::unix::fs::symlink(root.path().join("kept"), root.path().join("alias")).unwrap();
    write_skill(&root.path().join(".store"), "linked", "", "x\n");
    std::os::unix::fs::symlink(
        root.path().join(".store/linked"),
        root.path().join("linked"),
    )
    .unwrap();
    let catalog = Catalog::from_sources(&[source(SourceKind::Explicit, root.path())]);
    let names: Vec<&str> = catalog.skills().map(|s| s.name()).collect();
    assert_eq!(names, ["deep", "kept", "linked"]);
    let escape = catalog
        .diagnostics()
        .iter()
        .find(|d| d.rule == "symlink-escape")
        .expect("warned");
    assert!(escape.path.ends_with("outsider"));
    // `alias` points at `kept`, which the walk reaches itself: no duplicate.
    assert_eq!(rules(catalog.diagnostics()), ["symlink-escape"]);
}

#[test]
fn an_invalid_skill_is_never_half_registered() {
    let root = tempfile::tempdir().unwrap();
    let dir = write_skill(root.path(), "broken-manifest", "", "x\n");
    std::fs::write(
        dir.join("skillbox.yaml"),
        "tools:\n  - component: tools/missing.wasm\n",
    )
    .unwrap();
    write_skill(root.path(), "fine", "", "x\n");
    let catalog = Catalog::from_sources(&[source(SourceKind::Explicit, root.path())]);
    assert!(catalog.get("broken-manifest").is_none());
    assert!(catalog.get("fine").is_some());
    assert!(rules(catalog.diagnostics()).contains(&"manifest-component-missing"));
}

#[test]
fn catalog_is_the_same_whatever_the_creation_order() {
    let names = ["zeta", "alpha", "mid", "beta-two", "omega"];
    let build = |order: &[&str]| {
        let root = tempfile::tempdir().unwrap();
        for name in order {
            write_skill(root.path(), name, "", &format!("body of {name}\n"));
        }
        write_skill(root.path(), "Bad", "", "x\n");
        let catalog = Catalog::from_sources(&[source(SourceKind::Explicit, root.path())]);
        let skills: Vec<(String, String)> = catalog
            .skills()
            .map(|s| (s.name().to_string(), s.digest.clone()))
            .collect();
        let diags: Vec<(String, &'static str)> = catalog
            .diagnostics()
            .iter()
            .map(|d| {
                (
                    d.path
                        .strip_prefix(root.path())
                        .unwrap()
                        .display()
                        .to_string(),
                    d.rule,
                )
            })
            .collect();
        (skills, diags)
    };
    let mut reversed = names;
    reversed.reverse();
    let first = build(&names);
    assert_eq!(first, build(&reversed));
    assert_eq!(first.0.len(), 5);
    assert!(
        first.0.windows(2).all(|w| w[0].0 < w[1].0),
        "sorted by name"
    );
}

#[test]
fn visibility_follows_the_host_fields() {
    let root = tempfile::tempdir().unwrap();
    write_skill(root.path(), "both", "", "x\n");
    write_skill(
        root.path(),
        "user-only",
        "disable-model-invocation: true\n",
        "x\n",
    );
    write_skill(root.path(), "model-only", "user-invocable: false\n", "x\n");
    let catalog = Catalog::from_sources(&[source(SourceKind::Explicit, root.path())]);
    let model: Vec<&str> = catalog.model_visible().map(|s| s.name()).collect();
    let user: Vec<&str> = catalog.user_visible().map(|s| s.name()).collect();
    assert_eq!(model, ["both", "model-only"]);
    assert_eq!(user, ["both", "user-only"]);
}

#[test]
fn invocation_resolves_substitutes_and_wraps() {
    let root = tempfile::tempdir().unwrap();
    write_skill(
        root.path(),
        "greet",
        "",
        "Greet $1 from ${SKILL_DIR} about: $ARGUMENTS\n",
    );
    write_skill(root.path(), "hidden", "user-invocable: false\n", "x\n");
    let catalog = Catalog::from_sources(&[source(SourceKind::Explicit, root.path())]);

    let request = invoke::parse("/skill:greet \"Ada Lovelace\" engines").unwrap();
    let skill = invoke::resolve(&catalog, &request).unwrap();
    let prompt = invoke::render(skill, request.arguments, "/skill").unwrap();
    assert!(prompt.starts_with("<skill name=\"greet\" source=\"explicit\">\nGreet Ada Lovelace from /skill about: \"Ada Lovelace\" engines\n</skill>"), "{prompt}");
    assert!(
        prompt.contains("<user-request>\n\"Ada Lovelace\" engines\n</user-request>"),
        "{prompt}"
    );

    let short = invoke::parse("/greet").unwrap();
    assert_eq!(invoke::resolve(&catalog, &short).unwrap().name(), "greet");

    let err = invoke::resolve(&catalog, &invoke::parse("/hidden").unwrap()).unwrap_err();
    assert!(err.to_string().contains("not user-invocable"), "{err}");
    let err = invoke::resolve(&catalog, &invoke::parse("/nope").unwrap()).unwrap_err();
    assert!(
        err.to_string().contains("user-invocable skills: greet"),
        "{err}"
    );
}

#[test]
fn bundled_skills_load_with_their_references_and_digests() {
    let catalog = Catalog::from_sources(&[source(
        SourceKind::System,
        &skillbox_e2e::repo().join("skills"),
    )]);
    let names: Vec<&str> = catalog.skills().map(|s| s.name()).collect();
    assert_eq!(
        names,
        [
            "data-peek",
            "log-inspect",
            "release-check",
            "report-digest",
            "web-peek"
        ]
    );
    assert!(
        catalog.diagnostics().is_empty(),
        "{:?}",
        catalog.diagnostics()
    );
    let logs = catalog.get("log-inspect").unwrap();
    assert_eq!(logs.references, ["references/patterns.md"]);
    assert!(logs.digest.starts_with("sha256:"));
    assert_eq!(logs.components.len(), 2);
    assert_eq!(
        catalog.get("release-check").unwrap().script_names(),
        ["release-check"]
    );
}
