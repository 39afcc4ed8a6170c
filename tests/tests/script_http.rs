//! HTTP from Python scripts: `urllib.request`, `http.client`,
//! `requests` and httpx in the sandbox, which has no sockets and no `ssl`, reach a
//! real local server through the door, under the call's network grants
//! and caps, exactly as a component's `wasi:http` requests do. The door is
//! also attacked directly with forged and smuggling requests.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect};
use axum::routing::{any, get};
use serde_json::{Value, json};
use skillbox_e2e::web::LocalSite;
use skillbox_e2e::{Run, python_runtime, python_skill, run, run_script};

/// A web server on a free loopback port, which keeps the target of every
/// request it is sent.
struct Site {
    web: LocalSite,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Site {
    fn port(&self) -> u16 {
        self.web.port()
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// What `/echo` answers: what the server was sent.
async fn echo(method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let seen = json!({
        "method": method.as_str(),
        "target": uri.to_string(),
        "host": header("host"),
        "x-test": header("x-test"),
        "content-type": header("content-type"),
        "body": String::from_utf8_lossy(&body),
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        seen.to_string(),
    )
}

fn site() -> Site {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let web = LocalSite::serve(|port| {
        axum::Router::new()
            .route("/echo", any(echo))
            .route("/moved", get(|| async { Redirect::to("/echo?from=moved") }))
            .route(
                "/away",
                get(move || async move { Redirect::to(&format!("http://127.0.0.2:{port}/echo")) }),
            )
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                    "late"
                }),
            )
            .route(
                "/missing",
                get(|| async { (StatusCode::NOT_FOUND, "no such page") }),
            )
            .route(
                "/big",
                get(|| async { ([(header::CONTENT_TYPE, "text/plain")], "x".repeat(3 << 20)) }),
            )
            .layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let log = log.clone();
                    async move {
                        log.lock().unwrap().push(request.uri().to_string());
                        next.run(request).await
                    }
                },
            ))
    });
    Site { web, seen }
}

/// Runs a skill's script with the network grant `grant` (and `flags`), in
/// a state folder of its own: what it printed, and the requests its
/// call's audit record lists.
fn run_audited(
    skills: &std::path::Path,
    script: &str,
    grant: &str,
    args: &[&str],
) -> (Run, Vec<Value>) {
    run_audited_with(skills, script, &["--allow-net", grant], args)
}

fn run_audited_with(
    skills: &std::path::Path,
    script: &str,
    flags: &[&str],
    args: &[&str],
) -> (Run, Vec<Value>) {
    let state = tempfile::tempdir().unwrap();
    let out: Run = skillbox_e2e::skillbox()
        .env("SKILLBOX_STATE_DIR", state.path())
        .args(["run-script", "--skills"])
        .arg(skills)
        .args(["--script", script])
        .args(flags)
        .arg("--")
        .args(args)
        .output()
        .unwrap()
        .into();
    let audit = std::fs::read_to_string(state.path().join("audit.jsonl")).unwrap();
    let record: Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    let network = record["network"].as_array().cloned().unwrap_or_default();
    (out, network)
}

/// Prepares a skill named `name` with `requirements` (from PyPI) and
/// runs its `script` against the site with the site granted: what the
/// script printed as JSON, and the call's network record.
fn run_prepared(site: &Site, name: &str, requirements: &str, script: &str) -> (Value, Vec<Value>) {
    let skills = skill_for(
        name,
        site,
        &[
            ("requirements.txt", requirements),
            ("scripts/get.py", script),
        ],
    );
    let skills_arg = skills.path().to_str().unwrap();
    let prepared = run(&["prepare", name, "--skills", skills_arg]);
    assert_eq!(prepared.code, 0, "{prepared:?}");
    let base = format!("http://127.0.0.1:{}", site.port());
    let (out, network) = run_audited(
        skills.path(),
        &format!("{name}/scripts/get.py"),
        &granted(name, site),
        &[&base],
    );
    assert_eq!(out.code, 0, "{out:?}");
    (serde_json::from_str(out.stdout.trim()).unwrap(), network)
}

/// A skill named `name` whose manifest requests the site, with `script`.
fn skill_for(name: &str, site: &Site, files: &[(&str, &str)]) -> tempfile::TempDir {
    let manifest = format!(
        "grants:\n  network:\n    - 127.0.0.1:{port}\n    - 127.0.0.2:{port}\n",
        port = site.port()
    );
    let mut all = vec![("skillbox.yaml", manifest.as_str())];
    all.extend_from_slice(files);
    python_skill(name, &all)
}

fn granted(name: &str, site: &Site) -> String {
    format!("{name}:127.0.0.1:{}", site.port())
}

const STDLIB: &str = r#"
import http.client, json, sys, urllib.error, urllib.request
base = sys.argv[1]
out = {}
request = urllib.request.Request(base + "/echo?q=1", headers={"X-Test": "urllib"})
out["get"] = json.load(urllib.request.urlopen(request))
out["post"] = json.load(urllib.request.urlopen(base + "/echo", data=b"a=1&b=2"))
out["moved"] = json.load(urllib.request.urlopen(base + "/moved"))["target"]
try:
    urllib.request.urlopen(base + "/missing")
except urllib.error.HTTPError as e:
    out["missing"] = [e.code, e.read().decode()]
host, port = base.split("//")[1].split(":")
conn = http.client.HTTPConnection(host, int(port))
conn.request("HEAD", "/big")
head = conn.getresponse()
out["head"] = [head.status, head.getheader("Content-Length"), head.read().decode()]
conn.request("PUT", "/echo", body=iter([b"chunk-", b"ed"]), encode_chunked=True,
             headers={"Transfer-Encoding": "chunked"})
out["chunked"] = json.load(conn.getresponse())["body"]
try:
    urllib.request.urlopen(base + "/away")
except urllib.error.URLError as e:
    out["away"] = str(e.reason)
print(json.dumps(out))
"#;

/// The standard library's clients, in the light runtime: GET with
/// headers, POST, a redirect followed, an error status, HEAD, a chunked
/// upload; a redirect to a host the user did not grant is refused in
/// words that name the flag, and each request is in the audit record.
#[test]
fn the_standard_library_s_http_clients_reach_a_granted_host() {
    if !python_runtime() {
        return;
    }
    let site = site();
    let skills = skill_for("fetcher", &site, &[("scripts/fetch.py", STDLIB)]);
    let base = format!("http://127.0.0.1:{}", site.port());
    let (out, network) = run_audited(
        skills.path(),
        "fetcher/scripts/fetch.py",
        &granted("fetcher", &site),
        &[&base],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let seen: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let host = format!("127.0.0.1:{}", site.port());
    assert_eq!(seen["get"]["target"], "/echo?q=1", "{seen}");
    assert_eq!(seen["get"]["x-test"], "urllib");
    assert_eq!(seen["get"]["host"], host.as_str());
    assert_eq!(seen["post"]["method"], "POST");
    assert_eq!(seen["post"]["body"], "a=1&b=2");
    assert_eq!(
        seen["post"]["content-type"],
        "application/x-www-form-urlencoded"
    );
    assert_eq!(seen["moved"], "/echo?from=moved");
    assert_eq!(seen["missing"], json!([404, "no such page"]));
    assert_eq!(
        seen["head"],
        json!([200, (3 << 20).to_string(), ""]),
        "HEAD keeps the server's length"
    );
    assert_eq!(seen["chunked"], "chunk-ed");
    let away = seen["away"].as_str().unwrap();
    assert!(
        away.contains("network access to 127.0.0.2") && away.contains("--allow-net fetcher:"),
        "{away}"
    );
    assert!(
        !site.seen().iter().any(|t| t.contains("127.0.0.2")),
        "{:?}",
        site.seen()
    );

    let outcomes: Vec<(String, Value)> = network
        .iter()
        .map(|r| {
            (
                r["outcome"].as_str().unwrap().to_string(),
                r["status"].clone(),
            )
        })
        .collect();
    assert_eq!(outcomes.len(), 9, "{network:?}");
    assert_eq!(outcomes[0], ("ok".to_string(), json!(200)));
    assert_eq!(outcomes[2], ("ok".to_string(), json!(303)), "{network:?}");
    assert_eq!(outcomes[8].0, "denied", "{network:?}");
}

const REQUESTS: &str = r#"
import json, sys, requests
base = sys.argv[1]
out = {}
session = requests.Session()
out["get"] = [session.get(base + "/echo", headers={"X-Test": "requests"}, timeout=10).json()
              for _ in range(3)]
out["json"] = requests.post(base + "/echo", json={"n": 1}).json()
out["stream"] = requests.put(base + "/echo", data=(part for part in [b"gen", b"erated"])).json()
try:
    requests.get(base + "/away")
except requests.exceptions.ConnectionError as e:
    out["away"] = str(e)
try:
    requests.get(base + "/slow", timeout=1)
except requests.exceptions.ReadTimeout as e:
    out["slow"] = "ReadTimeout"
import urllib3
try:
    urllib3.request("GET", base.replace("127.0.0.1", "localhost") + "/echo")
except urllib3.exceptions.MaxRetryError as e:
    out["retried"] = str(e.reason)
print(json.dumps(out))
"#;

/// `requests` (pure Python, installed by `prepare`) reaches the granted
/// host through the door: a session's repeated requests, JSON, a
/// generator upload; a redirect away is refused with the grant's words,
/// and urllib3 retrying a refused request gets the refusal again without
/// spending the call's request cap.
#[test]
fn requests_reaches_a_granted_host_and_no_other() {
    if !python_runtime() {
        return;
    }
    let site = site();
    let (seen, network) = run_prepared(&site, "requester", "requests==2.32.3\n", REQUESTS);
    for get in seen["get"].as_array().unwrap() {
        assert_eq!(get["x-test"], "requests", "{seen}");
    }
    assert_eq!(seen["json"]["body"], r#"{"n": 1}"#);
    assert_eq!(seen["json"]["content-type"], "application/json");
    assert_eq!(seen["stream"]["body"], "generated");
    let away = seen["away"].as_str().unwrap();
    assert!(
        away.contains("network access to 127.0.0.2") && away.contains("--allow-net requester:"),
        "{away}"
    );
    assert!(
        seen["retried"]
            .as_str()
            .unwrap()
            .contains("--allow-net requester:localhost"),
        "{seen}"
    );
    let refused: Vec<&Value> = network
        .iter()
        .filter(|r| r["host"] == "localhost")
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "urllib3's retries of a refused request are answered without asking the host again: \
         {network:?}"
    );
}

const HTTPX: &str = r#"
import json, sys, httpx
base = sys.argv[1]
out = {}
out["get"] = httpx.get(base + "/echo?via=httpx", headers={"X-Test": "httpx"}).json()
with httpx.Client(timeout=10) as client:
    out["session"] = [client.get(base + "/echo").status_code for _ in range(3)]
    out["post"] = client.post(base + "/echo", json={"n": 2}).json()
    out["moved"] = client.get(base + "/moved", follow_redirects=True).json()["target"]
try:
    httpx.get(base + "/slow", timeout=1)
except httpx.ReadTimeout:
    out["slow"] = "ReadTimeout"
try:
    httpx.get(base.replace("127.0.0.1", "localhost") + "/echo")
except httpx.ConnectError as e:
    out["refused"] = str(e)
# The stand-in for `ssl` that httpx was given is not the script's, and
# requests, which probes for `ssl`, still works beside it.
try:
    import ssl
    out["ssl"] = "imported"
except ImportError:
    out["ssl"] = "absent"
import asyncio
out["asyncio"] = asyncio.sslproto.ssl is None
import requests
out["requests"] = requests.get(base + "/echo").status_code
print(json.dumps(out))
"#;

/// httpx's `Client` (over httpcore, which opens sockets itself and
/// imports `ssl`) reaches the granted host through the door, follows a
/// redirect, and gets the grant's words for a host it may not reach.
#[test]
fn httpx_reaches_a_granted_host_beside_requests() {
    if !python_runtime() {
        return;
    }
    let site = site();
    let (seen, network) =
        run_prepared(&site, "httpxer", "httpx==0.28.1\nrequests==2.32.3\n", HTTPX);
    assert_eq!(seen["get"]["target"], "/echo?via=httpx", "{seen}");
    assert_eq!(seen["get"]["x-test"], "httpx");
    assert_eq!(seen["session"], json!([200, 200, 200]));
    assert_eq!(seen["post"]["body"], r#"{"n":2}"#);
    assert_eq!(seen["moved"], "/echo?from=moved");
    let refused = seen["refused"].as_str().unwrap();
    assert!(
        refused.contains("--allow-net httpxer:localhost"),
        "{refused}"
    );
    assert_eq!(seen["slow"], "ReadTimeout", "{seen}");
    assert_eq!(seen["ssl"], "absent");
    assert_eq!(seen["asyncio"], true, "asyncio did not see the stand-in");
    assert_eq!(seen["requests"], 200);
    assert_eq!(network.len(), 10, "{network:?}");
}

const UNCAUGHT: &str = r#"
import sys, urllib.request
for url in sys.argv[1:]:
    print(len(urllib.request.urlopen(url).read()))
"#;

/// What the call is not granted, and its caps on requests and response
/// bytes, hold for a script's HTTP: the script fails, and the call's
/// error says which flag would allow it.
#[test]
fn a_script_s_http_is_held_to_the_call_s_grants_and_caps() {
    if !python_runtime() {
        return;
    }
    let site = site();
    let skills = skill_for("capped", &site, &[("scripts/get.py", UNCAUGHT)]);
    let echo = format!("http://127.0.0.1:{}/echo", site.port());
    let big = format!("http://127.0.0.1:{}/big", site.port());
    let grant = granted("capped", &site);

    let out = run_script(skills.path(), "capped/scripts/get.py", &[], &[&echo]);
    assert_eq!(out.code, 1, "{out:?}");
    out.stderr_says(&[
        "network access to 127.0.0.1",
        &format!("--allow-net capped:127.0.0.1:{}", site.port()),
    ]);

    let out = run_script(
        skills.path(),
        "capped/scripts/get.py",
        &["--allow-net", &grant, "--net-max-response-mib", "1"],
        &[&big],
    );
    assert_eq!(out.code, 1, "{out:?}");
    out.stderr_says(&["--net-max-response-mib"]);

    let out = run_script(
        skills.path(),
        "capped/scripts/get.py",
        &["--allow-net", &grant, "--net-max-requests", "1"],
        &[&echo, &echo],
    );
    assert_eq!(out.code, 1, "{out:?}");
    out.stderr_says(&["more than 1 HTTP requests"]);
    assert!(
        out.stdout.starts_with(|c: char| c.is_ascii_digit()),
        "{out:?}"
    );

    // A script that keeps asking the door past the cap is refused each
    // time, and the record does not grow: one entry counts the attempts
    // after it.
    let skills = skill_for("insistent", &site, &[("scripts/retry.py", RETRY)]);
    let (out, network) = run_audited_with(
        skills.path(),
        "insistent/scripts/retry.py",
        &[
            "--allow-net",
            &granted("insistent", &site),
            "--net-max-requests",
            "3",
        ],
        &[&site.port().to_string()],
    );
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout_says(&["ok 3 refused 37"]);
    let outcomes: Vec<&str> = network
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["ok", "ok", "ok", "request-cap"], "{network:?}");
    assert_eq!(network[3]["unrecorded_after"], 36, "{network:?}");
}

const RETRY: &str = r#"
import base64, json, sys
port = int(sys.argv[1])
raw = base64.b64encode(b"GET /echo HTTP/1.1\r\n\r\n").decode()
kinds = []
for n in range(2000, 2040):
    with open(f"/run/skillbox/{n}.request", "w") as f:
        json.dump({"http": {"scheme": "http", "host": "127.0.0.1", "port": port, "request": raw}}, f)
    with open(f"/run/skillbox/{n}.reply", "rb") as f:
        reply = f.read()
    kinds.append("ok" if reply.startswith(b"HTTP/") else json.loads(reply)["kind"])
print("ok", kinds.count("ok"), "refused", kinds.count("refused"))
"#;

const FORGED: &str = r#"
import base64, json, sys
port = int(sys.argv[1])
def ask(number, scheme, host, raw, port=port):
    request = {"http": {"scheme": scheme, "host": host, "port": port,
                        "request": base64.b64encode(raw).decode()}}
    with open(f"/run/skillbox/{number}.request", "w") as f:
        json.dump(request, f)
    with open(f"/run/skillbox/{number}.reply", "rb") as f:
        reply = f.read()
    if reply.startswith(b"HTTP/"):
        head, _, body = reply.partition(b"\r\n\r\n")
        return {"status": head.split()[1].decode(), "body": body.decode()}
    return json.loads(reply)
print(json.dumps([
    ask(1001, "gopher", "127.0.0.1", b"GET /echo HTTP/1.1\r\n\r\n"),
    ask(1002, "http", "127.0.0.1", b"\x00\x01 not http"),
    ask(1003, "http", "127.0.0.1", b"GET http://10.0.0.1/ HTTP/1.1\r\n\r\n"),
    ask(1004, "http", "127.0.0.1", b"CONNECT 10.0.0.1:22 HTTP/1.1\r\n\r\n"),
    ask(1005, "http", "10.0.0.1@127.0.0.1", b"GET /echo HTTP/1.1\r\n\r\n"),
    ask(1006, "http", "127.0.0.1",
        b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"ffffffffffffffff\r\nx\r\n0\r\n\r\n"),
    ask(1007, "http", "localhost", b"GET /echo HTTP/1.1\r\n\r\n"),
    ask(1008, "http", "127.0.0.1", b"GET /echo HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n"),
    ask(1009, "http", "127.0.0.1",
        b"GET /echo HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
        b"GET /smuggled HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
]))
"#;

/// The door's HTTP requests, forged by a script: a scheme the host does
/// not send, bytes that are not HTTP, a proxy's absolute target, CONNECT,
/// a host with user info in front of a granted one, a chunk size that
/// overflows, a name the grant does not cover, and a request carrying a
/// second one after its body. Each gets a refusal in words, and the server
/// sees only the one valid request, with a Host header of its own, sent
/// to where the script connected.
#[test]
fn the_door_s_http_answers_forged_requests_with_refusals() {
    if !python_runtime() {
        return;
    }
    let site = site();
    let skills = skill_for("forger", &site, &[("scripts/forge.py", FORGED)]);
    let grant = granted("forger", &site);
    let port = site.port().to_string();
    let (out, network) = run_audited(skills.path(), "forger/scripts/forge.py", &grant, &[&port]);
    assert_eq!(out.code, 0, "{out:?}");
    let replies: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let kinds: Vec<&str> = replies.as_array().unwrap()[..7]
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        kinds,
        [
            "invalid", "invalid", "invalid", "invalid", "invalid", "invalid", "refused"
        ],
        "{replies}"
    );
    assert!(
        replies[0]["error"].as_str().unwrap().contains("gopher"),
        "{replies}"
    );
    assert!(
        replies[6]["error"]
            .as_str()
            .unwrap()
            .contains("--allow-net forger:localhost"),
        "{replies}"
    );
    assert_eq!(replies[8]["kind"], "invalid", "{replies}");
    assert!(
        replies[8]["error"]
            .as_str()
            .unwrap()
            .contains("after its body"),
        "{replies}"
    );
    assert_eq!(replies[7]["status"], "200", "{replies}");
    let echoed: Value = serde_json::from_str(replies[7]["body"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["host"], format!("127.0.0.1:{port}"));
    assert_eq!(
        site.seen(),
        ["/echo"],
        "only the one request reached the server"
    );
    let outcomes: Vec<&str> = network
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        [
            "invalid", "invalid", "invalid", "invalid", "invalid", "invalid", "denied", "ok",
            "invalid"
        ],
        "every attempt is in the audit record: {network:?}"
    );
}
