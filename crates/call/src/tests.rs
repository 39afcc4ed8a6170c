//! The authorize stage on its own: a real host, a real component (written
//! as text), and an `Ask` that answers as told and counts what it was
//! asked.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{
    Access, Answer, Ask, Asker, CallError, Caller, ConfirmPolicy, Host, HostOptions, Question,
    Target,
};
use crate::sandbox::Sandbox;
use crate::skill::SourceOptions;
use crate::skill::policy::{LimitOverrides, UserPolicy};

/// A component exporting `bump`, which does nothing but run.
const BUMP: &str = r#"
(component
  (core module $m (func (export "bump")))
  (core instance $i (instantiate $m))
  (func (export "bump") (canon lift (core func $i "bump")))
)"#;

const TOOL: &str = "counter__bump";

/// Answers every question with `answer`, or with `carried` before anyone
/// is asked, and keeps the questions.
struct Scripted {
    carried: Option<bool>,
    answer: Answer,
    asked: Mutex<Vec<Question>>,
    /// Times the call path said it would ask nothing more.
    released: AtomicUsize,
}

impl Ask for Scripted {
    fn carried<'a>(&'a self, _question: &'a Question) -> BoxFuture<'a, Option<bool>> {
        Box::pin(async move { self.carried })
    }

    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Answer> {
        self.asked.lock().unwrap().push(question.clone());
        Box::pin(async move { self.answer })
    }

    fn asks_nothing_more(&self) {
        self.released.fetch_add(1, Ordering::SeqCst);
    }
}

fn skill(root: &Path) {
    fixture(root, "counter", "write");
}

/// A skill `name` serving the `bump` component as `NAME__bump` with
/// `effect`.
fn fixture(root: &Path, name: &str, effect: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: Counts calls; a unit-test fixture, never for real work.\n---\nCall {name}__bump.\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("skillbox.yaml"),
        format!("tools:\n  - component: tools/bump.wasm\n    functions:\n      bump:\n        description: Counts one call. Test fixture.\n        effect: {effect}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("tools/bump.wasm"), wat::parse_str(BUMP).unwrap()).unwrap();
}

fn host(skills: &Path) -> Arc<Host> {
    let options = HostOptions {
        sources: SourceOptions {
            explicit: vec![skills.to_path_buf()],
            ..SourceOptions::default()
        },
        policy: UserPolicy::default(),
        overrides: LimitOverrides::default(),
        max_concurrency: 2,
        max_per_client: 2,
        read_only: false,
        confirm: ConfirmPolicy::Write,
        dry_run: false,
    };
    let sandbox = Arc::new(Sandbox::new().unwrap());
    Arc::new(Host::new(options, sandbox, None).unwrap())
}

fn model(asker: &Arc<Scripted>) -> Caller {
    Caller {
        access: Access::Model {
            require_loaded: false,
            loaded: Default::default(),
            user_invoked: Default::default(),
        },
        asker: Some(Asker(asker.clone())),
        ..Caller::default()
    }
}

fn scripted(carried: Option<bool>, answer: Answer) -> Arc<Scripted> {
    Arc::new(Scripted {
        carried,
        answer,
        asked: Mutex::new(Vec::new()),
        released: AtomicUsize::new(0),
    })
}

/// Calls recorded with `outcome`, as the metrics count them.
fn recorded(host: &Host, outcome: &str) -> usize {
    let wanted = format!("outcome=\"{outcome}\"");
    host.metrics_text()
        .lines()
        .filter(|l| l.starts_with("skillbox_calls_total") && l.contains(&wanted))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as usize)
        .sum()
}

async fn bump(host: &Arc<Host>, caller: &Caller) -> Result<(), CallError> {
    let target = Target::Tool {
        name: TOOL.into(),
        arguments: json!({}),
    };
    host.call(caller, target, &CancellationToken::new())
        .await
        .map(|_| ())
}

#[tokio::test]
async fn the_question_is_asked_from_inside_the_call_and_the_answer_decides() {
    let skills = tempfile::tempdir().unwrap();
    skill(skills.path());
    let host = host(skills.path());

    let yes = scripted(None, Answer::Yes);
    bump(&host, &model(&yes)).await.unwrap();
    let asked = yes.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "asked once");
    assert_eq!(asked[0].what, TOOL);
    assert!(asked[0].changes.is_none(), "asked before it ran");
    assert_eq!(recorded(&host, "ok"), 1);
    assert_eq!(yes.released.load(Ordering::SeqCst), 1, "released to run");

    let no = scripted(None, Answer::No);
    let refused = bump(&host, &model(&no)).await.unwrap_err();
    assert!(matches!(refused, CallError::Declined { .. }), "{refused}");
    assert_eq!(recorded(&host, "ok"), 1, "a no runs nothing");
    assert_eq!(recorded(&host, refused.code()), 1, "and is audited");
    assert_eq!(no.released.load(Ordering::SeqCst), 0);

    // Deferred: the client asks and sends the call again; this request is
    // not the call's end, so it is not audited.
    let later = scripted(None, Answer::Deferred);
    let deferred = bump(&host, &model(&later)).await.unwrap_err();
    assert!(
        matches!(deferred, CallError::NeedsConfirmation { .. }),
        "{deferred}"
    );
    assert_eq!(recorded(&host, deferred.code()), 0);

    // The retry carries its answer: nobody is asked again.
    let retried = scripted(Some(true), Answer::No);
    bump(&host, &model(&retried)).await.unwrap();
    assert!(retried.asked.lock().unwrap().is_empty());
    assert_eq!(recorded(&host, "ok"), 2);
}

#[tokio::test]
async fn a_caller_no_one_can_ask_is_refused_with_the_question_and_the_user_is_never_asked() {
    let skills = tempfile::tempdir().unwrap();
    skill(skills.path());
    let host = host(skills.path());

    let caller = Caller {
        asker: None,
        ..model(&scripted(None, Answer::Yes))
    };
    let refused = bump(&host, &caller).await.unwrap_err();
    let CallError::NeedsConfirmation { question, .. } = &refused else {
        panic!("{refused}");
    };
    assert_eq!(question.what, TOOL);
    assert_eq!(recorded(&host, refused.code()), 1);

    // The user's own calls are never asked about.
    let asked = Arc::new(AtomicUsize::new(0));
    struct Counting(Arc<AtomicUsize>);
    impl Ask for Counting {
        fn ask<'a>(&'a self, _question: &'a Question) -> BoxFuture<'a, Answer> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Answer::No })
        }
    }
    let user = Caller {
        asker: Some(Asker(Arc::new(Counting(asked.clone())))),
        ..Caller::default()
    };
    bump(&host, &user).await.unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn only_the_user_names_a_component_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bump.wasm");
    std::fs::write(&file, wat::parse_str(BUMP).unwrap()).unwrap();
    let host = host(dir.path());
    let target = || Target::ComponentTool {
        path: file.clone(),
        function: "bump".into(),
        arguments: json!({}),
    };
    let cancel = CancellationToken::new();
    let refused = host
        .call(&model(&scripted(None, Answer::Yes)), target(), &cancel)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, CallError::UnknownTool { .. }),
        "{refused}"
    );
    host.call(&Caller::default(), target(), &cancel)
        .await
        .unwrap();
    assert_eq!(recorded(&host, "ok"), 1);
}

#[tokio::test]
async fn a_call_is_known_never_to_ask_only_from_what_the_host_already_knows() {
    let skills = tempfile::tempdir().unwrap();
    skill(skills.path());
    // The same component, declared as only reading.
    fixture(skills.path(), "reader", "read");
    let host = host(skills.path());
    let model = model(&scripted(None, Answer::Yes));
    let tool = |name: &str| Target::Tool {
        name: name.into(),
        arguments: json!({}),
    };

    // Before the tools are resolved nothing is known: authorize decides.
    assert!(!host.never_asks(&model, &tool("reader__bump")));
    assert!(host.never_asks(&Caller::default(), &tool("counter__bump")));

    let catalog = host.catalog();
    for name in ["reader", "counter"] {
        host.tools_of(catalog.get(name).unwrap());
    }
    assert!(host.never_asks(&model, &tool("reader__bump")));
    assert!(!host.never_asks(&model, &tool("counter__bump")));
    assert!(!host.never_asks(&model, &tool("reader__missing")));
    let script = Target::Script {
        skill: "reader".into(),
        script: "scripts/x.py".into(),
        args: Vec::new(),
        stdin: Vec::new(),
    };
    assert!(
        !host.never_asks(&model, &script),
        "scripts are confirmed under `write`"
    );
}

/// Code a model runs with `run_code` is its own, not the skill's: it never
/// gets the secrets the user gave a skill, nor, without a skill or on a
/// read-only server, any network; a component file the user names keeps
/// what the user granted.
#[tokio::test]
async fn code_gets_no_secrets_and_no_network_beyond_its_skills_own() {
    use super::prepare::{Prepared, Runs};
    use crate::sandbox::{PendingComponent, SideEffect};

    let root = tempfile::tempdir().unwrap();
    skill(root.path());
    // PATH is set in every test process: a value the grant can read.
    std::fs::write(
        root.path().join("counter/skillbox.yaml"),
        "grants:\n  env: [PATH]\n  network: [\"127.0.0.1:8080\"]\n",
    )
    .unwrap();
    let mut host = host(root.path());
    let options = &mut Arc::get_mut(&mut host).unwrap().options;
    options.policy.allow_net = vec!["counter:127.0.0.1:8080".parse().unwrap()];
    options.policy.allow_env = vec!["PATH".parse().unwrap()];
    let counter = host.catalog().get("counter").unwrap().clone();
    let loaded = host
        .sandbox
        .load_file(&root.path().join("counter/tools/bump.wasm"))
        .unwrap();
    let prepared = |skill: bool, runs| Prepared {
        skill: skill.then(|| counter.clone()),
        tool: None,
        component: Arc::new(PendingComponent::ready(loaded.clone())),
        component_path: "<code>".into(),
        effect: None,
        class: SideEffect::Script,
        runs,
        full_python: None,
    };
    let granted = |host: &Host, skill, runs| {
        let resolved = host.grants_of(&prepared(skill, runs));
        (
            resolved.grants.env.len(),
            resolved.grants.network.len(),
            resolved.notes.join(" "),
        )
    };

    // The skill's own script gets both; code run as the skill keeps its
    // network but not its secret, and is told why.
    let script = Runs::Python {
        script: "scripts/x.py".into(),
    };
    assert_eq!(granted(&host, true, script.clone()).0, 1);
    assert_eq!(granted(&host, true, script).1, 1);
    let (env, network, notes) = granted(&host, true, Runs::PythonCode);
    assert_eq!((env, network), (0, 1));
    assert!(
        notes.contains("does not pass environment variables (PATH)"),
        "{notes}"
    );

    // Without a skill: nothing, whatever the user granted.
    assert_eq!(granted(&host, false, Runs::PythonCode).0, 0);
    assert_eq!(granted(&host, false, Runs::PythonCode).1, 0);
    assert_eq!(granted(&host, false, Runs::Component).0, 1);
    assert_eq!(granted(&host, false, Runs::Component).1, 1);

    // A read-only server: no network for code even as the skill.
    Arc::get_mut(&mut host).unwrap().options.read_only = true;
    let (env, network, notes) = granted(&host, true, Runs::PythonCode);
    assert_eq!((env, network), (0, 0));
    assert!(
        notes.contains("no network on a read-only server"),
        "{notes}"
    );
}
