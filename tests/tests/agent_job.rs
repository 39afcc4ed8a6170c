//! The Kubernetes Job for agent runs (`deploy/kubernetes/agent-job.yaml`),
//! its two containers run exactly as written: in bubblewrap as the pod's
//! user, on a read-only root, with the manifest's volumes at their mount
//! paths (read-only where it says so) and `$(VAR)` expanded from each
//! container's environment as the kubelet does, against the fake
//! OpenAI-compatible provider on loopback. Also the pod's hardening, which
//! the schema check cannot see.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use skillbox_e2e::Run;
use skillbox_e2e::fake_model::{FakeModel, openai_answer, openai_calls};

use crate::transactions::{TOOL, seeded, stager, tree};

const KEY: &str = "sk-job-test-7c41a0e2";
const MANIFEST: &str = "deploy/kubernetes/agent-job.yaml";

/// The manifest's documents, by kind.
fn manifest() -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(skillbox_e2e::repo().join(MANIFEST)).unwrap();
    text.split("\n---\n")
        .map(|doc| serde_norway::from_str::<Value>(doc).unwrap())
        .map(|doc| (doc["kind"].as_str().unwrap().to_owned(), doc))
        .collect()
}

/// `$(NAME)` replaced by NAME's value where `env` defines it, `$$` by `$`,
/// anything else kept: the kubelet's expansion of commands, arguments,
/// values and `subPathExpr`.
fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            rest = after;
            continue;
        }
        if let Some(after) = rest.strip_prefix("$(")
            && let Some(end) = after.find(')')
            && let Some(value) = env.get(&after[..end])
        {
            out.push_str(value);
            rest = &after[end + 1..];
            continue;
        }
        out.push('$');
        rest = &rest[1..];
    }
    out.push_str(rest);
    out
}

/// The pod as this test stands it up: the Job's index, the host folders
/// behind its volumes, and the provider the key is for.
struct Pod {
    job: Value,
    index: u32,
    volumes: BTreeMap<String, PathBuf>,
    base_url: String,
    _folders: Vec<tempfile::TempDir>,
}

impl Pod {
    fn spec(&self) -> &Value {
        &self.job["spec"]["template"]["spec"]
    }

    /// A container's environment: the image's (the Dockerfile's `ENV`),
    /// then its own entries resolved as the kubelet resolves them, with
    /// the provider's address pointed at the fake one.
    fn env(&self, container: &Value) -> BTreeMap<String, String> {
        let mut env: BTreeMap<String, String> = image_env();
        for entry in container["env"].as_array().into_iter().flatten() {
            let name = entry["name"].as_str().unwrap().to_owned();
            let from = &entry["valueFrom"];
            let value = if let Some(value) = entry["value"].as_str() {
                expand(value, &env)
            } else if let Some(path) = from["fieldRef"]["fieldPath"].as_str() {
                match path {
                    "metadata.annotations['batch.kubernetes.io/job-completion-index']" => {
                        self.index.to_string()
                    }
                    "metadata.labels['batch.kubernetes.io/job-name']" => {
                        self.job["metadata"]["name"].as_str().unwrap().to_owned()
                    }
                    other => panic!("the test does not know the field {other}"),
                }
            } else if from["secretKeyRef"]["name"] == "skillbox-model" {
                assert_eq!(from["secretKeyRef"]["key"], "api-key");
                KEY.to_owned()
            } else {
                panic!("the test does not know where {name} comes from: {entry}");
            };
            env.insert(name, value);
        }
        if env.contains_key("OPENAI_BASE_URL") {
            env.insert("OPENAI_BASE_URL".into(), self.base_url.clone());
        }
        // The test's repository is a local one; the manifest allows https
        // only (the_job_is_hardened checks it).
        if env.contains_key("GIT_ALLOW_PROTOCOL") {
            env.insert("GIT_ALLOW_PROTOCOL".into(), "file".into());
        }
        env
    }

    /// Runs `container` as the pod would: its command (else the image's
    /// entrypoint) and arguments, expanded, in a sandbox holding what the
    /// image and the manifest's volume mounts hold, as the pod's user.
    fn run(&self, container: &Value) -> Run {
        let env = self.env(container);
        let words = |key: &str| -> Vec<String> {
            container[key]
                .as_array()
                .into_iter()
                .flatten()
                .map(|word| expand(word.as_str().unwrap(), &env))
                .collect()
        };
        let mut argv = words("command");
        if argv.is_empty() {
            argv.push("skillbox".into());
        }
        argv.extend(words("args"));

        let user = self.spec()["securityContext"]["runAsUser"].to_string();
        let group = self.spec()["securityContext"]["runAsGroup"].to_string();
        let mut bwrap = Command::new("bwrap");
        bwrap.args(["--unshare-all", "--share-net", "--die-with-parent"]);
        bwrap.args(["--uid", &user, "--gid", &group, "--clearenv"]);
        for (name, value) in &env {
            bwrap.args(["--setenv", name, value]);
        }
        // The image's system: this host's, read-only. Its own files: the
        // binary, and the test's skills where the image keeps its bundled
        // ones, and an empty compiled-code cache (read-only, as the image's
        // is on a read-only root).
        bwrap.args(["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]);
        for top in ["bin", "sbin", "lib", "lib64"] {
            let path = Path::new("/").join(top);
            if let Ok(target) = std::fs::read_link(&path) {
                bwrap.arg("--symlink").arg(target).arg(&path);
            } else if path.is_dir() {
                bwrap.arg("--ro-bind").arg(&path).arg(&path);
            }
        }
        bwrap.args(["--proc", "/proc", "--dev", "/dev"]);
        bwrap
            .arg("--ro-bind")
            .arg(skillbox_e2e::skillbox_bin())
            .arg("/opt/skillbox/bin/skillbox");
        bwrap
            .arg("--ro-bind")
            .arg(&self.volumes["image-skills"])
            .arg("/opt/skillbox/skills");
        bwrap
            .arg("--ro-bind")
            .arg(&self.volumes["image-cache"])
            .arg("/opt/skillbox/cache");
        bwrap
            .arg("--ro-bind")
            .arg(&self.volumes["repository"])
            .arg("/srv/repository");
        for mount in container["volumeMounts"].as_array().unwrap() {
            let mut host = self.volumes[mount["name"].as_str().unwrap()].clone();
            if let Some(sub) = mount["subPathExpr"].as_str() {
                host = host.join(expand(sub, &env));
                std::fs::create_dir_all(&host).unwrap();
            }
            let read_only = mount["readOnly"] == true || self.is_config_map(mount);
            bwrap
                .arg(if read_only { "--ro-bind" } else { "--bind" })
                .arg(host)
                .arg(mount["mountPath"].as_str().unwrap());
        }
        // readOnlyRootFilesystem: nothing outside the volumes is writable.
        bwrap.args(["--remount-ro", "/", "--chdir", "/", "--"]);
        bwrap.args(&argv);
        bwrap.output().unwrap().into()
    }

    fn is_config_map(&self, mount: &Value) -> bool {
        self.spec()["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == mount["name"] && v["configMap"].is_object())
    }

    fn container(&self, list: &str, name: &str) -> Value {
        self.spec()[list]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("the Job has no {list} entry {name}"))
            .clone()
    }
}

/// The image's `ENV`, read from the Dockerfile's final stage, and the
/// PATH of a Debian image with the binary where the test binds it.
fn image_env() -> BTreeMap<String, String> {
    let dockerfile = std::fs::read_to_string(skillbox_e2e::repo().join("Dockerfile")).unwrap();
    let final_stage = dockerfile.rsplit("\nFROM ").next().unwrap();
    let block = final_stage
        .split("\nENV ")
        .nth(1)
        .expect("the image sets its environment");
    let mut env = BTreeMap::new();
    for line in block.lines() {
        let line = line.trim().trim_end_matches('\\').trim();
        let Some((name, value)) = line.split_once('=') else {
            break;
        };
        env.insert(name.to_owned(), value.to_owned());
    }
    assert!(env.contains_key("SKILLBOX_SYSTEM_SKILLS"), "{env:?}");
    env.insert(
        "PATH".into(),
        "/opt/skillbox/bin:/usr/local/bin:/usr/bin:/bin".into(),
    );
    env
}

/// A pod of the Job at `index`, with the manifest's work list in its
/// ConfigMap volume, except that entry 0's repository is a local one
/// holding `seeded()`'s files.
fn pod(index: u32, model: &FakeModel) -> Option<Pod> {
    if !skillbox_e2e::host_programs() {
        return None;
    }
    let documents = manifest();
    let mut folders = Vec::new();
    let mut folder = |name: &str, volumes: &mut BTreeMap<String, PathBuf>| {
        let dir = tempfile::tempdir().unwrap();
        volumes.insert(name.to_owned(), dir.path().to_owned());
        folders.push(dir);
    };
    let mut volumes = BTreeMap::new();
    for name in ["tasks", "workspace", "out", "tmp", "image-cache"] {
        folder(name, &mut volumes);
    }
    for (key, value) in documents["ConfigMap"]["data"].as_object().unwrap() {
        let value = match key.as_str() {
            "repository-0" => "file:///srv/repository\n",
            _ => value.as_str().unwrap(),
        };
        std::fs::write(volumes["tasks"].join(key), value).unwrap();
    }
    let repository = seeded();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(repository.path())
            .envs(skillbox_e2e::hermetic_env())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "seed"]);
    volumes.insert("repository".into(), repository.path().to_owned());
    folders.push(repository);
    let skills = stager();
    volumes.insert("image-skills".into(), skills.path().to_owned());
    folders.push(skills);
    Some(Pod {
        job: documents["Job"].clone(),
        index,
        volumes,
        base_url: format!("{}/v1", model.base),
        _folders: folders,
    })
}

#[test]
fn the_jobs_containers_run_as_written_and_write_a_patch_without_touching_the_checkout() {
    let steps = serde_json::json!({ "steps": [
        "write /workspace/a.txt alpha\nedited by the agent\n",
        "write /workspace/notes.md - checked\n",
    ]})
    .to_string();
    let model = FakeModel::start(vec![
        openai_calls(&[("c0", "load_skill", r#"{"name": "stager"}"#)], (100, 10)),
        openai_calls(&[("c1", TOOL, &steps)], (120, 12)),
        openai_answer("Edited a.txt, wrote notes.md.", (150, 5)),
    ]);
    let Some(pod) = pod(0, &model) else { return };

    let checkout = pod.run(&pod.container("initContainers", "checkout"));
    assert_eq!(checkout.code, 0, "{checkout:?}");
    let workspace = pod.volumes["workspace"].clone();
    let cloned = tree(&workspace);
    assert_eq!(cloned, tree(&pod.volumes["repository"]));
    assert!(workspace.join(".git").is_dir());

    let agent = pod.run(&pod.container("containers", "agent"));
    assert_eq!(agent.code, 0, "{agent:?}");
    assert_eq!(agent.json()["answer"], "Edited a.txt, wrote notes.md.");
    assert_eq!(tree(&workspace), cloned, "the dry run touched the checkout");

    // The task is the work list's entry, read from the ConfigMap's file.
    let task = manifest()["ConfigMap"]["data"]["task-0"]
        .as_str()
        .unwrap()
        .trim()
        .to_owned();
    let requests = model.requests.lock().unwrap().clone();
    let task_as_json = serde_json::to_string(&task).unwrap();
    assert!(
        requests[0]
            .body
            .to_string()
            .contains(task_as_json.trim_matches('"')),
        "{:?}",
        requests[0].body
    );

    // The run's files are in the claim, under the Job's name and index,
    // and the patch applies to the checkout.
    let out = pod.volumes["out"].join("skillbox-agent/0");
    for file in ["changes.patch", "trace.jsonl", "audit.jsonl"] {
        assert!(out.join(file).is_file(), "no {file} in {}", out.display());
    }
    let apply = Command::new("git")
        .args(["apply"])
        .arg(out.join("changes.patch"))
        .current_dir(&workspace)
        .output()
        .unwrap();
    assert!(apply.status.success(), "{apply:?}");
    assert_eq!(
        tree(&workspace)["a.txt"],
        Some(b"alpha\nedited by the agent\n".to_vec())
    );

    // The key went to the provider and nowhere the run wrote.
    for request in &requests {
        assert_eq!(
            request.headers.get("authorization").map(String::as_str),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
    assert!(!agent.stdout.contains(KEY) && !agent.stderr.contains(KEY));
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        assert!(!text.contains(KEY), "the key is in {}", path.display());
    }
}

/// An index past the work list fails in the checkout, saying what to fix,
/// before the agent (and its key) starts.
#[test]
fn an_index_past_the_work_list_stops_at_the_checkout_and_says_so() {
    let model = FakeModel::start(Vec::new());
    let Some(pod) = pod(7, &model) else { return };
    let checkout = pod.run(&pod.container("initContainers", "checkout"));
    assert_eq!(checkout.code, 2, "{checkout:?}");
    checkout.stderr_says(&["the work list has no /tasks/repository-7", "completions"]);
    assert!(model.requests.lock().unwrap().is_empty());
}

/// What the schema cannot check: the pod runs as a non-root user on a
/// read-only root with no token, no privilege and limits on every
/// container, the checkout cannot be changed by the agent, and only the
/// agent's container sees the model's key.
#[test]
fn the_job_is_hardened() {
    let job = &manifest()["Job"];
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["enableServiceLinks"], false);
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_ne!(pod["securityContext"]["runAsUser"], 0);
    assert!(job["spec"]["activeDeadlineSeconds"].is_u64());
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .flat_map(|list| pod[*list].as_array().unwrap())
        .collect();
    for container in &containers {
        let name = &container["name"];
        let security = &container["securityContext"];
        assert_eq!(security["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(security["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(security["capabilities"]["drop"][0], "ALL", "{name}");
        for limit in ["cpu", "memory"] {
            assert!(
                container["resources"]["limits"][limit].is_string(),
                "{name} has no {limit} limit"
            );
        }
        let secrets: Vec<&Value> = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["valueFrom"]["secretKeyRef"].is_object())
            .collect();
        if container["name"] == "checkout" {
            let allowed = container["env"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == "GIT_ALLOW_PROTOCOL");
            assert_eq!(allowed.unwrap()["value"], "https", "{name}");
        }
        if container["name"] == "agent" {
            assert_eq!(secrets.len(), 1);
            assert_eq!(secrets[0]["name"], "OPENAI_API_KEY");
            let workspace = container["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["mountPath"] == "/workspace")
                .unwrap();
            assert_eq!(workspace["readOnly"], true);
            let args: Vec<&str> = container["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            assert!(args.contains(&"--dry-run") && args.contains(&"--patch"));
        } else {
            assert!(secrets.is_empty(), "{name} sees a secret");
        }
    }
}

/// `--task-file`: the task from a file or standard input; a file that
/// cannot be a task is refused (exit 2) before the model is called.
#[test]
fn a_task_file_is_read_and_one_that_cannot_be_a_task_is_refused() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let empty = write("empty.md", b" \n\n");
    let binary = write("binary.md", &[0xff, 0xfe, 0x00]);
    let huge = write("huge.md", &vec![b'a'; 300 * 1024]);
    let missing = dir.path().join("missing.md").to_str().unwrap().to_owned();
    let model = FakeModel::start(Vec::new());
    for (file, says) in [
        (&empty, "is empty"),
        (&binary, "is not UTF-8"),
        (&huge, "is larger than 256 KiB"),
        (&missing, "cannot open"),
    ] {
        let (mut cmd, _state) = crate::agent::command(Some(&model), &["--task-file", file]);
        let run: Run = cmd.output().unwrap().into();
        assert_eq!(run.code, 2, "{file}: {run:?}");
        run.stderr_says(&["--task-file", says]);
    }
    let (mut cmd, _state) = crate::agent::command(Some(&model), &["a task", "--task-file", &empty]);
    let run: Run = cmd.output().unwrap().into();
    assert_eq!(run.code, 2, "{run:?}");
    run.stderr_says(&["cannot be used with"]);
    assert!(model.requests.lock().unwrap().is_empty());

    let model = FakeModel::start(vec![openai_answer("read it", (10, 2))]);
    let (mut cmd, _state) = crate::agent::command(Some(&model), &["--task-file", "-"]);
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let task = "Summarize the\nchanges since the last tag.\n";
    child
        .stdin
        .take()
        .unwrap()
        .write_all(task.as_bytes())
        .unwrap();
    let run: Run = child.wait_with_output().unwrap().into();
    assert_eq!(run.code, 0, "{run:?}");
    let body = model.requests.lock().unwrap()[0].body.to_string();
    assert!(
        body.contains("Summarize the\\nchanges since the last tag."),
        "{body}"
    );
}
