//! Grants that live with the user, not in a skill's folder: a public skill
//! installed from git, with no skillbox.yaml, writes once its user says so
//! with `skillbox grant`, and its lock still holds; `--grant` does the same
//! for one command, `--no-user-grants` ignores the file, a damaged file
//! is named.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use skillbox_e2e::{Run, python_runtime, skillbox};

/// A home of its own: grants written here reach no other test.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn grants_file(&self) -> PathBuf {
        self.path().join(".config/skillbox/grants.yaml")
    }

    fn run(&self, args: &[&str]) -> Run {
        skillbox()
            .current_dir(self.path())
            .env("HOME", self.path())
            .env("XDG_CONFIG_HOME", self.path().join(".config"))
            .env("XDG_STATE_HOME", self.path().join(".state"))
            .env("SKILLBOX_SYSTEM_SKILLS", "")
            .stdin(Stdio::null())
            .args(args)
            .output()
            .unwrap()
            .into()
    }
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.email=t@example.org", "-c", "user.name=t"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// A collection as public ones ship: a skill with no skillbox.yaml whose
/// script writes into the workspace.
fn public_collection(work: &Path) -> String {
    let checkout = work.join("checkout");
    let skill = checkout.join("commenter");
    std::fs::create_dir_all(skill.join("scripts")).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: commenter\ndescription: Adds a comment file to a folder. Use in tests only.\n---\n\
         Run scripts/comment.py TEXT.\n",
    )
    .unwrap();
    // A skill cannot grant itself: a grants file in its folder is just a
    // file.
    std::fs::write(
        skill.join("grants.yaml"),
        "skills:\n  commenter:\n    folder: /\n    workspace: write\n",
    )
    .unwrap();
    std::fs::write(
        skill.join("scripts/comment.py"),
        "import sys\nwith open('comment.txt', 'w') as f:\n    f.write(sys.argv[1])\nprint('commented')\n",
    )
    .unwrap();
    git(&checkout, &["init", "-q"]);
    git(&checkout, &["add", "."]);
    git(&checkout, &["commit", "-qm", "a public skill"]);
    format!("git+file://{}#path=commenter", checkout.display())
}

#[test]
fn a_public_skill_writes_once_its_user_grants_it_and_its_lock_holds() {
    if !python_runtime() {
        return;
    }
    let home = Home::new();
    let url = public_collection(home.path());
    let added = home.run(&["add", &url, "--yes", "--allow-unsigned"]);
    assert_eq!(added.code, 0, "{added:?}");
    added.stderr_says(&["workspace: read"]);

    let ws = tempfile::tempdir().unwrap();
    let ws_arg = ws.path().to_str().unwrap();
    let comment = |extra: &[&str]| {
        let mut argv = vec![
            "run-script",
            "--script",
            "commenter/scripts/comment.py",
            "--workspace",
            ws_arg,
        ];
        argv.extend(extra);
        argv.extend(["--", "looks good"]);
        home.run(&argv)
    };

    // As shipped, the workspace is read-only, and both the note and the
    // script's error say how the user can change that.
    let refused = comment(&["--allow-write"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    refused.stderr_says(&["skillbox grant commenter --workspace write"]);
    assert!(!ws.path().join("comment.txt").exists());

    let granted = home.run(&["grant", "commenter", "--workspace", "write"]);
    assert_eq!(granted.code, 0, "{granted:?}");
    assert_eq!(granted.stdout.trim(), "commenter: workspace write");
    let wrote = comment(&[]);
    assert_eq!(wrote.code, 0, "{wrote:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("comment.txt")).unwrap(),
        "looks good"
    );
    std::fs::remove_file(ws.path().join("comment.txt")).unwrap();

    // The grant is the user's, so the installed folder and its lock are
    // untouched.
    let check = home.run(&["sync", "--check"]);
    assert_eq!(check.code, 0, "{check:?}");

    // A skill that only shares the name (here an explicit --skills folder,
    // which outranks installed skills) gets nothing of the grant.
    let shadow = tempfile::tempdir().unwrap();
    let shadow_skill = shadow.path().join("commenter");
    std::fs::create_dir_all(shadow_skill.join("scripts")).unwrap();
    for file in ["SKILL.md", "scripts/comment.py"] {
        std::fs::copy(
            home.path().join(".skillbox/skills/commenter").join(file),
            shadow_skill.join(file),
        )
        .unwrap();
    }
    let shadowed = comment(&["--skills", shadow.path().to_str().unwrap()]);
    assert_eq!(shadowed.code, 1, "{shadowed:?}");
    shadowed.stderr_says(&["grant for `commenter` is for a skill of that name in another folder"]);
    assert!(!ws.path().join("comment.txt").exists());
    // A grant by name for one command is for whichever skill of that name
    // loads: the user names it there and then.
    let named = comment(&[
        "--skills",
        shadow.path().to_str().unwrap(),
        "--grant",
        "commenter:workspace=write",
    ]);
    assert_eq!(named.code, 0, "{named:?}");
    std::fs::remove_file(ws.path().join("comment.txt")).unwrap();

    // A read-only server writes nothing, whatever the grant.
    let read_only = home.run(&[
        "run-code",
        "--skill",
        "commenter",
        "--workspace",
        ws_arg,
        "--read-only",
        "open('comment.txt', 'w').write('x')",
    ]);
    assert_eq!(read_only.code, 1, "{read_only:?}");
    read_only.stderr_says(&["/workspace is read-only for this call"]);
    assert!(!ws.path().join("comment.txt").exists());

    // Listed where a user looks.
    let list: Value =
        serde_json::from_str(&home.run(&["grant", "--list", "--json"]).stdout).unwrap();
    assert_eq!(list["skills"]["commenter"]["workspace"], "write");
    assert!(
        list["skills"]["commenter"]["folder"]
            .as_str()
            .unwrap()
            .ends_with(".skillbox/skills/commenter"),
        "{list}"
    );
    let skills: Value =
        serde_json::from_str(&home.run(&["skills", "list", "--json"]).stdout).unwrap();
    let listed = skills["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "commenter")
        .unwrap();
    assert_eq!(listed["granted"]["workspace"], "write", "{listed}");

    // One command may ignore the file; revoking takes it back.
    assert_eq!(comment(&["--no-user-grants"]).code, 1);
    let revoked = home.run(&["grant", "commenter", "--revoke"]);
    assert_eq!(revoked.code, 0, "{revoked:?}");
    assert!(revoked.stdout.contains("nothing granted"), "{revoked:?}");
    assert_eq!(comment(&[]).code, 1);

    let again = home.run(&["grant", "commenter", "--revoke"]);
    assert_eq!(again.code, 2, "{again:?}");
    again.stderr_says(&["nothing is granted to `commenter`"]);

    // The same grant for one command, as a flag.
    let flagged = comment(&["--grant", "commenter:workspace=write"]);
    assert_eq!(flagged.code, 0, "{flagged:?}");
    assert!(ws.path().join("comment.txt").exists());
    let file_says = || std::fs::read_to_string(home.grants_file()).unwrap();
    assert!(!file_says().contains("commenter"), "{}", file_says());

    // Removing the skill takes its grant with it, so nothing installed
    // there later under that name inherits it.
    assert_eq!(
        home.run(&["grant", "commenter", "--workspace", "write"])
            .code,
        0
    );
    let removed = home.run(&["remove", "commenter"]);
    assert_eq!(removed.code, 0, "{removed:?}");
    removed.stderr_says(&["and what you had granted `commenter`"]);
    assert!(!file_says().contains("commenter"), "{}", file_says());
}

#[test]
fn bad_grants_are_refused_with_what_to_fix_and_a_damaged_file_is_named() {
    let home = Home::new();
    let bad = home.run(&["grant", "commenter", "--workspace", "sometimes"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    bad.stderr_says(&["read, write, none"]);
    let star = home.run(&["grant", "commenter", "--net", "*"]);
    assert_eq!(star.code, 2, "{star:?}");
    star.stderr_says(&["name each host"]);
    let flag = home.run(&[
        "run-code",
        "--grant",
        "commenter:everything=yes",
        "print(1)",
    ]);
    assert_eq!(flag.code, 2, "{flag:?}");
    flag.stderr_says(&["SKILL:WHAT=VALUE"]);
    assert!(!home.grants_file().exists(), "nothing was written");

    // A grant is for a skill that exists: a typo grants nothing, loudly.
    let unknown = home.run(&["grant", "commenter", "--workspace", "write"]);
    assert_eq!(unknown.code, 2, "{unknown:?}");
    unknown.stderr_says(&["no skill named `commenter` is found"]);
    let typo = home.run(&[
        "run-code",
        "--grant",
        "comenter:workspace=write",
        "print(1)",
    ]);
    assert_eq!(typo.code, 2, "{typo:?}");
    typo.stderr_says(&["--grant comenter:", "no skill named `comenter` is loaded"]);
    assert!(!home.grants_file().exists(), "nothing was written");

    let skills = tempfile::tempdir().unwrap();
    let skill = skills.path().join("commenter");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: commenter\ndescription: Comments. Use in tests only.\n---\nComment.\n",
    )
    .unwrap();
    let dir = skills.path().to_str().unwrap();
    let given = home.run(&[
        "grant",
        "commenter",
        "--skills",
        dir,
        "--net",
        "API.example.com:443",
        "--env",
        "TOKEN",
    ]);
    assert_eq!(given.code, 0, "{given:?}");
    given.stderr_says(&["has no WebAssembly tools"]);
    let missing = home.run(&["grant", "commenter", "--revoke", "--env", "OTHER"]);
    assert_eq!(missing.code, 2, "{missing:?}");
    missing.stderr_says(&["none of the hosts, keys or programs named is granted"]);
    let dropped = home.run(&["grant", "commenter", "--revoke", "--env", "TOKEN"]);
    assert_eq!(
        dropped.stdout.trim(),
        "commenter: network api.example.com:443",
        "{dropped:?}"
    );

    // A skill's own write grant is held to the rule --allow-write is:
    // never over the host's own state, here the user's configuration,
    // where a skill could grant itself more.
    let config = home.path().join(".config");
    let over_config = home.run(&[
        "run-code",
        "--skills",
        dir,
        "--workspace",
        config.to_str().unwrap(),
        "--grant",
        "commenter:workspace=write",
        "print(1)",
    ]);
    assert_eq!(over_config.code, 2, "{over_config:?}");
    over_config.stderr_says(&[
        "write access refused",
        "a skill granted workspace write",
        "the configuration folder (your grants and trusted keys)",
    ]);

    std::fs::write(home.grants_file(), "skills: [not, a, map]\n").unwrap();
    for argv in [
        &["run-code", "print(1)"][..],
        &["grant", "--list"],
        &["skills", "list"],
    ] {
        let out = home.run(argv);
        assert_eq!(out.code, 2, "{argv:?}: {out:?}");
        out.stderr_says(&["grants file", "is not valid", "Fix it"]);
    }
    assert_eq!(
        std::fs::read_to_string(home.grants_file()).unwrap(),
        "skills: [not, a, map]\n",
        "a damaged file is never overwritten"
    );
}
