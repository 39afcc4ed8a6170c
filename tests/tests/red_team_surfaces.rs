//! The red team's attacks on the newest surfaces (the Python packages
//! `prepare` installs, which files of a skill run and which are served),
//! each performed for real against the built binary. The workspace race is
//! in `transactions.rs`, the update's permission diff in
//! `distribution.rs`, the hostile replay in `agent_memory.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use skillbox_e2e::mcp::{assert_tool_error, call, connect_stdio, text};
use skillbox_e2e::{Run, skillbox};

/// Builds wheels (and one source archive) into a folder with the host's
/// Python, so that pip can install them from it with no index.
const MAKE_WHEELS: &str = r#"
import base64, hashlib, io, json, os, sys, tarfile, zipfile
out, specs = sys.argv[1], json.loads(sys.argv[2])
for spec in specs:
    name, version = spec["name"], spec["version"]
    if spec.get("sdist"):
        data = spec["sdist"].encode()
        path = os.path.join(out, f"{name}-{version}.tar.gz")
        with tarfile.open(path, "w:gz") as tar:
            for rel, body in [("setup.py", data), ("PKG-INFO", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode())]:
                info = tarfile.TarInfo(f"{name}-{version}/{rel}")
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
        continue
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": spec.get("code", f"VERSION = '{version}'\n").encode()}
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    for req in spec.get("requires", []):
        meta += f"Requires-Dist: {req}\n"
    files[f"{dist}/METADATA"] = meta.encode()
    files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = ""
    for rel, body in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
        hashed = "" if spec.get("no_hash") and rel.endswith("__init__.py") else f"sha256={digest}"
        record += f"{rel},{hashed},{len(body) if hashed else ''}\n"
    record += f"{dist}/RECORD,,\n"
    files[f"{dist}/RECORD"] = record.encode()
    path = os.path.join(out, f"{name}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as whl:
        for rel, body in files.items():
            whl.writestr(rel, body)
"#;

fn make_wheels(dir: &Path, specs: serde_json::Value) {
    let status = Command::new("python3")
        .args(["-c", MAKE_WHEELS])
        .arg(dir)
        .arg(specs.to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// A skill with only instructions, to prepare packages for.
fn bare_skill(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: A skill for the red team's tests; use in tests only.\n---\nRun scripts/run.py.\n"),
    )
    .unwrap();
    std::fs::write(dir.join("scripts/run.py"), "print('ran')\n").unwrap();
    dir
}

/// `skillbox prepare` with pip reading only the folder `wheels`.
/// `prepare` of exactly `with` (`--replace`: nothing prepared before is
/// kept), from the local wheels only.
fn prepare(skills: &Path, data: &Path, wheels: &Path, with: &str) -> Run {
    skillbox()
        .args(["prepare", "pkgs", "--skills"])
        .arg(skills)
        .args(["--with", with, "--replace", "--json"])
        .env("SKILLBOX_DATA_DIR", data)
        .env("PIP_NO_INDEX", "1")
        .env("PIP_FIND_LINKS", wheels)
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("PIP_NO_CACHE_DIR", "1")
        .output()
        .unwrap()
        .into()
}

/// Red team 3 and 6: a pure wheel whose metadata names a dependency by
/// URL (a source archive to build, or a wheel from anywhere) makes pip
/// build or fetch it; dependencies float; a RECORD line without a hash is
/// taken on trust. `prepare` must run no package code, install nothing
/// the index does not serve, pin the whole set, and refuse unhashed files.
#[test]
fn prepare_runs_no_package_code_and_pins_the_whole_set() {
    if Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .map_or(true, |o| !o.status.success())
    {
        eprintln!("skipped: the host has no pip");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let skills = root.path().join("skills");
    bare_skill(&skills, "pkgs");
    let data = root.path().join("data");
    let wheels = root.path().join("wheels");
    let elsewhere = root.path().join("elsewhere");
    std::fs::create_dir_all(&wheels).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let marker = root.path().join("package-code-ran");
    // A local project whose build backend would write the marker, named
    // by a dependency's `===` version (arbitrary equality takes a path).
    let project = root.path().join("proj");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("pyproject.toml"),
        "[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n",
    )
    .unwrap();
    std::fs::write(
        project.join("backend.py"),
        format!(
            "open({:?}, 'w').write('ran')\n",
            marker.display().to_string()
        ),
    )
    .unwrap();
    let climb = "/..".repeat(40);
    make_wheels(
        &elsewhere,
        json!([
            {"name": "boom", "version": "1.0",
             "sdist": format!("open({:?}, 'w').write('ran')\nfrom setuptools import setup\nsetup(name='boom', version='1.0')\n", marker.display().to_string())},
            {"name": "stray", "version": "1.0"},
        ]),
    );
    let sdist = format!("file://{}/boom-1.0.tar.gz", elsewhere.display());
    let stray = format!("file://{}/stray-1.0-py3-none-any.whl", elsewhere.display());
    make_wheels(
        &wheels,
        json!([
            {"name": "builds", "version": "1.0", "requires": [format!("boom @ {sdist}")]},
            {"name": "fetches", "version": "1.0", "requires": [format!("stray @ {stray}")]},
            {"name": "app", "version": "1.0", "requires": ["dep>=1.0", "never ; sys_platform == 'win32'"]},
            {"name": "dep", "version": "1.0"},
            {"name": "unhashed", "version": "1.0", "no_hash": true},
            {"name": "arbitrary", "version": "1.0",
             "requires": [format!("x ==={climb}{}", project.display())]},
        ]),
    );

    for (with, url) in [("builds==1.0", &sdist), ("fetches==1.0", &stray)] {
        let refused = prepare(&skills, &data, &wheels, with);
        assert_eq!(refused.code, 1, "{refused:?}");
        refused.stderr_says(&[
            &format!(
                "needs `{}",
                url.split('/')
                    .next_back()
                    .unwrap()
                    .split('-')
                    .next()
                    .unwrap()
            ),
            url,
            "a package given by URL",
            "Nothing was installed",
        ]);
        assert!(
            !marker.exists(),
            "package code ran on the host: {refused:?}"
        );
    }

    let arbitrary = prepare(&skills, &data, &wheels, "arbitrary==1.0");
    assert_eq!(arbitrary.code, 1, "{arbitrary:?}");
    arbitrary.stderr_says(&["not a plain comparison", "Nothing was installed"]);
    assert!(
        !marker.exists(),
        "package code ran on the host: {arbitrary:?}"
    );

    // The whole set is pinned and recorded with its wheels' hashes.
    let first = prepare(&skills, &data, &wheels, "app==1.0");
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(first.json()["distributions"], json!(["app 1.0", "dep 1.0"]));
    let record = std::fs::read_dir(data.join("python"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("current/prepared.json"))
        .find(|p| p.exists())
        .unwrap();
    let recorded: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let pinned = recorded["pinned"].as_array().unwrap();
    assert_eq!(pinned.len(), 2, "{recorded}");
    assert!(
        pinned
            .iter()
            .all(|p| p["sha256"].as_str().unwrap().len() == 64)
    );

    // A newer dependency published since changes nothing.
    make_wheels(&wheels, json!([{"name": "dep", "version": "9.9"}]));
    let again = prepare(&skills, &data, &wheels, "app==1.0");
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(again.json()["distributions"], json!(["app 1.0", "dep 1.0"]));

    // Other bytes under the recorded version are refused, however the
    // requirement that leads to it is spelled.
    std::fs::remove_file(wheels.join("dep-9.9-py3-none-any.whl")).unwrap();
    make_wheels(
        &wheels,
        json!([{"name": "dep", "version": "1.0", "code": "EVIL = True\n"}]),
    );
    let changed = prepare(&skills, &data, &wheels, "app==1.0");
    assert_eq!(changed.code, 1, "{changed:?}");
    changed.stderr_says(&["the wheel of dep 1.0 is not the one prepared before"]);
    let respelled = prepare(&skills, &data, &wheels, "App==1.0.0");
    assert_eq!(respelled.code, 1, "{respelled:?}");
    respelled.stderr_says(&["the wheel of dep 1.0 is not the one prepared before"]);

    let unhashed = prepare(&skills, &data, &wheels, "unhashed==1.0");
    assert_eq!(unhashed.code, 1, "{unhashed:?}");
    unhashed.stderr_says(&["unhashed/__init__.py", "its RECORD line has no hash"]);
    assert!(!marker.exists());
}

/// Red team 5 and 8: `run_script` ran any served `.py` (a reference, a
/// `_module.py`, a package outside `scripts/`), and a link inside a skill
/// served its own hidden file.
#[tokio::test]
async fn only_scripts_run_and_a_link_serves_only_what_its_target_would() {
    let root = tempfile::tempdir().unwrap();
    let dir = bare_skill(root.path(), "pkgs");
    std::fs::create_dir_all(dir.join("references")).unwrap();
    std::fs::create_dir_all(dir.join("pkg")).unwrap();
    std::fs::write(dir.join("references/notes.py"), "print('not a script')\n").unwrap();
    std::fs::write(dir.join("scripts/_hidden.py"), "print('a module')\n").unwrap();
    std::fs::write(dir.join("pkg/__main__.py"), "print('a package')\n").unwrap();
    std::fs::write(dir.join(".secret"), "TOKEN=hunter2\n").unwrap();
    std::fs::write(dir.join("references/guide.md"), "# guide\n").unwrap();
    std::os::unix::fs::symlink("../.secret", dir.join("references/inner.md")).unwrap();
    std::fs::write(dir.join("scripts/Shout.PY"), "print('upper case')\n").unwrap();
    std::os::unix::fs::symlink("_hidden.py", dir.join("scripts/alias.py")).unwrap();

    let listed: Run = skillbox()
        .args(["skills", "list", "--json", "--skills"])
        .arg(root.path())
        .output()
        .unwrap()
        .into();
    assert_eq!(listed.code, 0, "{listed:?}");
    let shown = listed.stdout.clone();
    assert!(shown.contains("scripts/run.py"), "{shown}");
    assert!(
        shown.contains("scripts/Shout.PY"),
        "any case of .py is a script: {shown}"
    );
    for hidden in ["notes.py", "_hidden.py", "__main__.py"] {
        assert!(
            !shown.contains(hidden),
            "{hidden} listed as a script: {shown}"
        );
    }

    let (client, _) = connect_stdio(&[
        "--no-audit",
        "--tools",
        "all",
        "--skills",
        root.path().to_str().unwrap(),
    ])
    .await;
    for command in [
        "python3 references/notes.py",
        "python3 scripts/_hidden.py",
        "python3 -m pkg",
        "python3 scripts/alias.py",
    ] {
        let result = call(
            &client,
            "run_script",
            json!({"skill": "pkgs", "command": command}),
        )
        .await;
        assert_tool_error(&result, &["not one of its scripts", "scripts/run.py"]);
    }
    let result = call(
        &client,
        "read_skill_file",
        json!({"skill": "pkgs", "path": "references/inner.md"}),
    )
    .await;
    assert_tool_error(&result, &["not one of the skill's files"]);
    assert!(!text(&result).contains("hunter2"));
    let resource = client
        .peer()
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "skill://pkgs/references/inner.md",
        ))
        .await;
    assert!(
        format!("{resource:?}").find("hunter2").is_none(),
        "{resource:?}"
    );
    let served = call(
        &client,
        "read_skill_file",
        json!({"skill": "pkgs", "path": "references/guide.md"}),
    )
    .await;
    assert!(text(&served).contains("# guide"), "{served:?}");
    client.cancel().await.unwrap();
}
