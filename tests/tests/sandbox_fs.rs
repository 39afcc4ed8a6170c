//! Filesystem and environment containment: a guest sees only what the
//! grants give it, `..` and symlinks included.

use std::sync::Arc;

use serde_json::{Value, json};
use skillbox_e2e::{component, workspace};
use skillbox_sandbox::{
    DiskCache, EngineOptions, Grants, Limits, LoadedComponent, Sandbox, SandboxError,
    WorkspaceGrant,
};

struct Bed {
    sandbox: Sandbox,
    testbed: Arc<LoadedComponent>,
}

fn bed() -> Bed {
    let cache = DiskCache::new(skillbox_e2e::repo().join("target/test-cache/components"));
    let sandbox = Sandbox::with_options(&EngineOptions::default(), Some(cache)).expect("engine");
    let testbed = sandbox.load_file(&component("testbed")).expect("testbed");
    Bed { sandbox, testbed }
}

impl Bed {
    async fn call(
        &self,
        function: &str,
        args: Value,
        grants: &Grants,
    ) -> Result<Value, SandboxError> {
        self.sandbox
            .call(&self.testbed, function, &args, grants, &Limits::default())
            .await
            .map(|o| o.value)
    }

    async fn read(&self, path: &str, grants: &Grants) -> Result<Value, SandboxError> {
        self.call("read-file", json!({ "path": path }), grants)
            .await
    }
}

fn ws_grant(dir: &std::path::Path, writable: bool) -> Grants {
    Grants {
        workspace: Some(WorkspaceGrant {
            host_dir: dir.to_path_buf(),
            writable,
        }),
        ..Grants::default()
    }
}

fn assert_tool_error(result: Result<Value, SandboxError>, what: &str) -> String {
    match result {
        Err(SandboxError::ToolError { message, .. }) => message,
        other => panic!("{what}: expected the guest's own I/O error, got {other:?}"),
    }
}

/// The layout: <root>/ws is the workspace; <root>/secret.txt is outside it.
fn outside_layout() -> (tempfile::TempDir, std::path::PathBuf) {
    let root = workspace(&[("secret.txt", "top secret"), ("ws/notes.txt", "hello")]);
    let ws = root.path().join("ws");
    std::os::unix::fs::symlink(root.path().join("secret.txt"), ws.join("link-to-secret")).unwrap();
    std::os::unix::fs::symlink(root.path(), ws.join("link-to-parent")).unwrap();
    std::os::unix::fs::symlink("../secret.txt", ws.join("relative-link")).unwrap();
    (root, ws)
}

#[tokio::test]
async fn the_workspace_is_readable_when_granted() {
    let bed = bed();
    let (_root, ws) = outside_layout();
    let grants = ws_grant(&ws, false);
    assert_eq!(
        bed.read("/workspace/notes.txt", &grants).await.unwrap(),
        json!("hello")
    );
}

#[tokio::test]
async fn no_grant_means_no_workspace() {
    let bed = bed();
    let msg = assert_tool_error(
        bed.read("/workspace/notes.txt", &Grants::default()).await,
        "no workspace",
    );
    assert!(msg.contains("NotFound"), "{msg}");
}

#[tokio::test]
async fn dot_dot_and_absolute_paths_cannot_leave_the_preopens() {
    let bed = bed();
    let (root, ws) = outside_layout();
    let grants = ws_grant(&ws, true);
    let secret = root.path().join("secret.txt");
    for path in [
        "/workspace/../secret.txt",
        "/workspace/../../../../etc/passwd",
        "../secret.txt",
        "/etc/passwd",
        secret.to_str().unwrap(),
        "/proc/self/environ",
        "/",
    ] {
        let result = bed.read(path, &grants).await;
        let msg = assert_tool_error(result, path);
        assert!(!msg.contains("top secret"), "{path} leaked: {msg}");
    }
    let listing = bed.call("list-dir", json!({"path": "/"}), &grants).await;
    assert!(
        !format!("{listing:?}").contains("etc"),
        "the guest's root shows the host's: {listing:?}"
    );
}

#[tokio::test]
async fn symlinks_cannot_leave_the_workspace() {
    let bed = bed();
    let (_root, ws) = outside_layout();
    let grants = ws_grant(&ws, true);
    for path in [
        "/workspace/link-to-secret",
        "/workspace/link-to-parent/secret.txt",
        "/workspace/relative-link",
    ] {
        let msg = assert_tool_error(bed.read(path, &grants).await, path);
        assert!(!msg.contains("top secret"), "{path} leaked: {msg}");
    }
    // Writing through a link must not touch the outside file either.
    let write = bed
        .call(
            "write-file",
            json!({"path": "/workspace/link-to-parent/secret.txt", "contents": "pwned"}),
            &grants,
        )
        .await;
    assert!(write.is_err());
    assert_eq!(
        std::fs::read_to_string(ws.parent().unwrap().join("secret.txt")).unwrap(),
        "top secret"
    );
}

#[tokio::test]
async fn no_environment_variables_reach_the_guest() {
    // The test process has PATH, HOME, CARGO_* and more; none may leak.
    assert!(std::env::vars().count() > 0);
    let bed = bed();
    let vars = bed
        .call("env-vars", json!({}), &Grants::default())
        .await
        .unwrap();
    assert_eq!(vars, json!([]));
}

#[tokio::test]
async fn granted_environment_variables_do_reach_the_guest() {
    let bed = bed();
    let grants = Grants {
        env: vec![("REGION".into(), "eu-west".into())],
        ..Grants::default()
    };
    let vars = bed.call("env-vars", json!({}), &grants).await.unwrap();
    assert_eq!(vars, json!([["REGION", "eu-west"]]));
}

#[tokio::test]
async fn a_read_only_workspace_refuses_writes() {
    let bed = bed();
    let dir = workspace(&[("keep.txt", "original")]);
    let grants = ws_grant(dir.path(), false);
    for path in ["/workspace/new.txt", "/workspace/keep.txt"] {
        let result = bed
            .call(
                "write-file",
                json!({"path": path, "contents": "changed"}),
                &grants,
            )
            .await;
        assert_tool_error(result, path);
    }
    assert!(!dir.path().join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(),
        "original"
    );
}

#[tokio::test]
async fn a_writable_workspace_accepts_writes() {
    let bed = bed();
    let dir = workspace(&[]);
    let grants = ws_grant(dir.path(), true);
    bed.call(
        "write-file",
        json!({"path": "/workspace/out.txt", "contents": "written"}),
        &grants,
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "written"
    );
}

#[tokio::test]
async fn scratch_tmp_is_private_to_one_call() {
    let bed = bed();
    let grants = Grants::default();
    bed.call(
        "write-file",
        json!({"path": "/tmp/note", "contents": "x"}),
        &grants,
    )
    .await
    .expect("/tmp is writable");
    let next = bed.read("/tmp/note", &grants).await;
    let msg = assert_tool_error(next, "a second call sees a fresh /tmp");
    assert!(msg.contains("NotFound"), "{msg}");
}

/// Scratch folders a call leaves untouched are reused. A guest that sets
/// the folder's own time (a value the next call could read) must not reach
/// the next call, which gets a folder no earlier call has changed.
#[tokio::test]
async fn a_time_set_on_tmp_does_not_reach_the_next_call() {
    let bed = bed();
    let grants = Grants::default();
    // Warm the pool: this call's untouched folder waits for the next one.
    bed.call("noop", json!({}), &grants).await.unwrap();
    bed.call(
        "set-modified",
        json!({"path": "/tmp", "secs": 1234}),
        &grants,
    )
    .await
    .expect("the scratch folder is writable");
    for _ in 0..3 {
        let seen = bed
            .call("modified", json!({"path": "/tmp"}), &grants)
            .await
            .unwrap();
        assert_ne!(seen, json!(1234), "an earlier call's mark reached this one");
    }
}

#[tokio::test]
async fn the_skill_folder_is_read_only() {
    let bed = bed();
    let skill = workspace(&[("references/guide.md", "# Guide")]);
    let grants = Grants {
        skill_dir: Some(skillbox_sandbox::PinnedDir::open(skill.path()).unwrap()),
        ..Grants::default()
    };
    assert_eq!(
        bed.read("/skill/references/guide.md", &grants)
            .await
            .unwrap(),
        json!("# Guide")
    );
    let write = bed
        .call(
            "write-file",
            json!({"path": "/skill/references/guide.md", "contents": "x"}),
            &grants,
        )
        .await;
    assert_tool_error(write, "write into /skill");
    assert_eq!(
        std::fs::read_to_string(skill.path().join("references/guide.md")).unwrap(),
        "# Guide"
    );
}
