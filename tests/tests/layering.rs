//! Dependencies point one way, as docs/architecture.md draws them:
//! `sandbox <- skill <- call <- mcp <- agent`, with `distribute` beside
//! `call` and the `skillbox` facade (and its binary) on top. Each layer is
//! a crate of its own under `crates/`, so Cargo holds the order between
//! them. What Cargo cannot see is checked here: the order of the modules
//! inside the skill crate (skill below runtime and author, which name the
//! sandbox crate's modules by the same paths), that inside the call crate
//! only the embedding API (`embed/`) uses itself, and that in no crate do
//! the files form a circle.
//!
//! The check reads the crates' sources as text: every `crate::…` and
//! `super::…` path (in `use` items and inline), with `pub use` re-exports
//! followed to the file that defines the item. Comments and string
//! literals are blanked first, so prose that mentions a path never counts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The skill crate's top-level modules (and the sandbox crate's it names
/// by the same paths), lowest layer first. A module may use only modules
/// of a lower rank.
const LAYERS: &[(&str, u8)] = &[
    ("digest", 0),
    ("dirs", 0),
    ("text", 0),
    ("schema", 0),
    ("sandbox", 1),
    ("skill", 2),
    ("author", 3),
    ("runtime", 3),
];

#[test]
fn the_skill_crate_keeps_its_layers_and_forms_no_circle() {
    assert_layered(&skillbox_e2e::repo().join("crates/skill/src"), 50);
}

/// Fails naming every import from a layer to one of the same or a higher
/// rank, then every circle of files.
fn assert_layered(dir: &Path, at_least: usize) {
    let sources = Sources::read(dir);
    let edges = sources.edges();
    assert!(
        edges.len() > at_least,
        "the scan found only {} imports; is it reading the sources?",
        edges.len()
    );

    let mut upward = Vec::new();
    for edge in &edges {
        let (Some(from), Some(to)) = (rank(&edge.from), rank(&edge.to)) else {
            continue;
        };
        if top(&edge.from) != top(&edge.to) && from <= to {
            upward.push(format!(
                "{}:{} uses `{}` ({} may use only lower layers)",
                edge.from,
                edge.line,
                edge.to,
                top(&edge.from)
            ));
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the layering:\n{}",
        upward.join("\n")
    );

    assert_no_circles(edges);
}

#[test]
fn in_the_call_crate_only_the_embedding_api_uses_itself_and_no_files_form_a_circle() {
    let edges = scanned("crates/call/src", 50);
    let upward: Vec<String> = edges
        .iter()
        .filter(|e| top(&e.to) == "embed" && top(&e.from) != "embed")
        .map(|e| format!("{}:{} uses `{}`", e.from, e.line, e.to))
        .collect();
    assert!(
        upward.is_empty(),
        "the call path uses the embedding API built on it:\n{}",
        upward.join("\n")
    );
    assert_no_circles(edges);
}

#[test]
fn the_other_crates_files_form_no_circle() {
    for (dir, at_least) in [
        ("crates/sandbox/src", 50),
        ("crates/distribute/src", 20),
        ("crates/mcp/src", 50),
        ("crates/agent/src", 30),
    ] {
        assert_no_circles(scanned(dir, at_least));
    }
}

/// The imports of the crate sources under `dir`, checked to be more than
/// `at_least` so a scanner that reads nothing cannot pass.
fn scanned(dir: &str, at_least: usize) -> Vec<Edge> {
    let edges = Sources::read(&skillbox_e2e::repo().join(dir)).edges();
    assert!(
        edges.len() > at_least,
        "the scan of {dir} found only {} imports; is it reading the sources?",
        edges.len()
    );
    edges
}

/// Fails naming every circle of files. The crate root only declares
/// modules and re-exports them (and lists `unstable`): it is a facade, not
/// a layer, and is left out.
fn assert_no_circles(edges: Vec<Edge>) {
    let inner: Vec<Edge> = edges
        .into_iter()
        .filter(|e| !e.from.is_empty() && !e.to.is_empty())
        .collect();
    let circles = circles(&inner);
    assert!(
        circles.is_empty(),
        "files that depend on each other (break the circle: move the shared item down):\n{}",
        circles
            .iter()
            .map(|c| c.join(" <-> "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The self-test of the scanner: braces, aliases, `super`, comments,
/// strings and re-exports.
#[test]
fn the_import_scanner_reads_paths_as_rustc_would() {
    let mut sources = Sources::default();
    sources.insert(
        "a",
        "mod b; mod c;\npub use c::{Widget as Gadget, Other};\n",
    );
    sources.insert(
        "a/b",
        "use super::Gadget;\n// use crate::z::Nope;\nconst S: &str = \"crate::z::Nope\";\nfn f() { let c = 'x'; crate::y::call(c); }\n",
    );
    sources.insert("a/c", "use crate::{y::{self, Q}, z as zed};\n");
    sources.insert("y", "");
    sources.insert("z", "");
    let found: BTreeSet<(String, String)> = sources
        .edges()
        .into_iter()
        .map(|e| (e.from, e.to))
        .collect();
    let expected: BTreeSet<(String, String)> =
        [("a/b", "a/c"), ("a/b", "y"), ("a/c", "y"), ("a/c", "z")]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
    assert_eq!(found, expected);
}

fn top(module: &str) -> &str {
    module.split('/').next().unwrap_or(module)
}

fn rank(module: &str) -> Option<u8> {
    LAYERS
        .iter()
        .find(|(name, _)| *name == top(module))
        .map(|(_, r)| *r)
}

/// One import: `from` (a module, as its path under `src/` without `.rs`
/// or `/mod`) uses something defined in `to`.
#[derive(Debug)]
struct Edge {
    from: String,
    to: String,
    line: usize,
}

/// The library's modules, each with its source text, comments and string
/// literals blanked.
#[derive(Default)]
struct Sources {
    modules: BTreeMap<String, String>,
}

impl Sources {
    fn read(src: &Path) -> Sources {
        let mut sources = Sources::default();
        let mut stack = vec![src.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                let rel = path
                    .strip_prefix(src)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                // The binary is a crate of its own, held to the public API.
                if rel == "bin" {
                    continue;
                }
                if path.is_dir() {
                    stack.push(path);
                } else if let Some(module) = rel.strip_suffix(".rs") {
                    let module = module.strip_suffix("/mod").unwrap_or(module);
                    let module = if module == "lib" { "" } else { module };
                    sources.insert(module, &std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        sources
    }

    fn insert(&mut self, module: &str, text: &str) {
        let text = blank_test_modules(&blank_comments_and_strings(text));
        self.modules.insert(module.to_string(), text);
    }

    /// Every import, re-exports followed, self-imports dropped.
    fn edges(&self) -> Vec<Edge> {
        let reexports = self.reexports();
        let mut edges = Vec::new();
        for (module, text) in &self.modules {
            let here: Vec<&str> = if module.is_empty() {
                Vec::new()
            } else {
                module.split('/').collect()
            };
            for path in paths(text) {
                // A facade's `pub use child::Item` is not a use by its code.
                if path.in_pub_use && self.child_named(module, &path.segments).is_some() {
                    continue;
                }
                let Some(target) = self.resolve(&here, &path.segments, &reexports) else {
                    continue;
                };
                if &target != module {
                    edges.push(Edge {
                        from: module.clone(),
                        to: target,
                        line: text[..path.at].matches('\n').count() + 1,
                    });
                }
            }
        }
        edges
    }

    /// The child module of `module` that `segments` start with, as in
    /// `use child::Item` (or `self::child::Item`).
    fn child_named(&self, module: &str, segments: &[String]) -> Option<String> {
        let mut segments = segments;
        if segments.first().map(String::as_str) == Some("self") {
            segments = &segments[1..];
        }
        let first = segments.first()?;
        let child = if module.is_empty() {
            first.clone()
        } else {
            format!("{module}/{first}")
        };
        self.modules.contains_key(&child).then_some(child)
    }

    /// `pub use child::{A, B as C}` in a folder's module: the items the
    /// folder's module calls `A` and `C` are defined in `child`.
    fn reexports(&self) -> BTreeMap<(String, String), String> {
        let mut map = BTreeMap::new();
        for (module, text) in &self.modules {
            for path in paths(text) {
                if !path.in_pub_use || path.segments.len() < 2 {
                    continue;
                }
                let Some(child) = self.child_named(module, &path.segments) else {
                    continue;
                };
                let name = path
                    .alias
                    .unwrap_or_else(|| path.segments.last().unwrap().clone());
                map.insert((module.clone(), name), child);
            }
        }
        map
    }

    /// The module that defines what `path` names, seen from `here`.
    fn resolve(
        &self,
        here: &[&str],
        path: &[String],
        reexports: &BTreeMap<(String, String), String>,
    ) -> Option<String> {
        let mut segments: Vec<String> = match path.first().map(String::as_str) {
            Some("crate") => Vec::new(),
            Some("self") | Some(_) if self.child_named(&here.join("/"), path).is_some() => {
                let mut base: Vec<String> = here.iter().map(|s| s.to_string()).collect();
                let rest = if path[0] == "self" { &path[1..] } else { path };
                base.extend(rest.iter().cloned());
                return self.longest_module(&base, reexports);
            }
            Some("super") => {
                let mut base: Vec<String> = here.iter().map(|s| s.to_string()).collect();
                base.pop();
                let mut rest = &path[1..];
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
                base.extend(rest.iter().cloned());
                return self.longest_module(&base, reexports);
            }
            _ => return None,
        };
        segments.extend(path[1..].iter().cloned());
        self.longest_module(&segments, reexports)
    }

    /// The deepest module the segments lead into, with a re-exported name
    /// just past it followed to its defining child.
    fn longest_module(
        &self,
        segments: &[String],
        reexports: &BTreeMap<(String, String), String>,
    ) -> Option<String> {
        for len in (0..=segments.len()).rev() {
            let module = segments[..len].join("/");
            if !self.modules.contains_key(&module) {
                continue;
            }
            if let Some(next) = segments.get(len)
                && let Some(child) = reexports.get(&(module.clone(), next.clone()))
            {
                return Some(child.clone());
            }
            return Some(module);
        }
        None
    }
}

/// One path a module names: where it starts, its segments (a `use`
/// relative to the module starts with the child's name), the name it is
/// imported as, and whether it is a `pub use` (a re-export).
struct NamedPath {
    at: usize,
    segments: Vec<String>,
    alias: Option<String>,
    in_pub_use: bool,
}

/// Every `use` tree in `text`, and every inline path that starts with
/// `crate::` or `super::`, with brace groups expanded.
fn paths(text: &str) -> Vec<NamedPath> {
    let mut out = Vec::new();
    let mut in_use = Vec::new();
    for at in words(text, "use") {
        if !text[at + 3..].starts_with(char::is_whitespace) {
            continue;
        }
        let in_pub_use = statement_start(text, at).starts_with("pub");
        let mut cursor = Cursor { text, at: at + 3 };
        let mut found = Vec::new();
        cursor.eat("::");
        if let Some(first) = cursor.ident() {
            cursor.tree(vec![first], &mut found);
        }
        in_use.push(at..cursor.at);
        out.extend(found.into_iter().map(|(segments, alias)| NamedPath {
            at,
            segments,
            alias,
            in_pub_use,
        }));
    }
    for keyword in ["crate", "super"] {
        for at in words(text, keyword) {
            if in_use.iter().any(|r| r.contains(&at))
                || !text[at + keyword.len()..].trim_start().starts_with("::")
            {
                continue;
            }
            let mut cursor = Cursor {
                text,
                at: at + keyword.len(),
            };
            let mut found = Vec::new();
            cursor.tree(vec![keyword.to_string()], &mut found);
            out.extend(found.into_iter().map(|(segments, alias)| NamedPath {
                at,
                segments,
                alias,
                in_pub_use: false,
            }));
        }
    }
    out
}

/// Offsets where `word` stands as a whole word (not after `::`).
fn words<'a>(text: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    let bytes = text.as_bytes();
    text.match_indices(word)
        .map(|(at, _)| at)
        .filter(move |&at| {
            let before_ok = at == 0 || !is_ident(bytes[at - 1]) && bytes[at - 1] != b':';
            let after_ok = bytes.get(at + word.len()).is_none_or(|b| !is_ident(*b));
            before_ok && after_ok
        })
}

/// The text of the statement that holds offset `at`, from its start.
fn statement_start(text: &str, at: usize) -> &str {
    let start = text[..at].rfind([';', '{', '}']).map_or(0, |p| p + 1);
    text[start..at].trim_start()
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl Cursor<'_> {
    fn skip_space(&mut self) {
        while self.text[self.at..].starts_with(char::is_whitespace) {
            self.at += 1;
        }
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        if self.text[self.at..].starts_with(token) {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> Option<String> {
        self.skip_space();
        let len = self.text.as_bytes()[self.at..]
            .iter()
            .take_while(|b| is_ident(**b))
            .count();
        if len == 0 {
            return None;
        }
        let word = self.text[self.at..self.at + len].to_string();
        self.at += len;
        Some(word)
    }

    /// After the path so far, reads `::segment…`, a brace group of
    /// subtrees, or `::*`, then an optional ` as name`.
    fn tree(&mut self, prefix: Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
        let mut path = prefix;
        while self.eat("::") {
            if self.eat("{") {
                loop {
                    if self.eat("}") {
                        return;
                    }
                    let Some(first) = self.ident() else { return };
                    let mut branch = path.clone();
                    if first != "self" {
                        branch.push(first);
                    }
                    self.tree(branch, out);
                    if !self.eat(",") {
                        self.eat("}");
                        return;
                    }
                }
            }
            if self.eat("*") {
                out.push((path, None));
                return;
            }
            match self.ident() {
                Some(segment) => path.push(segment),
                None => break,
            }
        }
        let alias = self.alias();
        out.push((path, alias));
    }

    /// ` as name`, if it follows.
    fn alias(&mut self) -> Option<String> {
        let before = self.at;
        if self.ident().as_deref() == Some("as") {
            return self.ident();
        }
        self.at = before;
        None
    }
}

/// The text with every `#[cfg(test)]` item blanked: a module's unit
/// tests are not part of its dependencies (and their `use super::*` names
/// the file itself, which the scanner would take for its parent).
fn blank_test_modules(text: &str) -> String {
    let mut out = text.to_string();
    let mut from = 0;
    while let Some(found) = out[from..].find("#[cfg(test)]") {
        let start = from + found;
        let Some(open) = out[start..].find(['{', ';']).map(|p| start + p) else {
            break;
        };
        let mut end = open + 1;
        if out.as_bytes()[open] == b'{' {
            let mut depth = 0usize;
            for (i, b) in out.as_bytes()[open..].iter().enumerate() {
                match b {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
        }
        let blanked: String = out[start..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(start..end, &blanked);
        from = end;
    }
    out
}

/// The text with comments, string literals and char literals replaced by
/// spaces (newlines kept, so offsets still give line numbers).
fn blank_comments_and_strings(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !prev_is_ident(&chars, i)
        {
            let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let body_start = i + 2 + hashes;
            let rest: String = chars[body_start..].iter().collect();
            let body_len = rest
                .find(&close)
                .map_or(rest.len(), |p| rest[..p].chars().count());
            for ch in &chars[i..(body_start + body_len + close.len()).min(chars.len())] {
                out.push(blank(*ch));
            }
            i = body_start + body_len + close.len();
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}'), not a lifetime.
            let len = if next == Some('\\') {
                chars[i + 2..]
                    .iter()
                    .position(|c| *c == '\'')
                    .map(|p| p + 3)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(3)
            } else {
                None
            };
            match len {
                Some(len) => {
                    out.extend(std::iter::repeat_n(' ', len));
                    i += len;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_is_ident(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// The groups of modules that depend on each other (Tarjan's strongly
/// connected components of more than one module).
fn circles(edges: &[Edge]) -> Vec<Vec<String>> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in edges {
        graph.entry(&e.from).or_default().insert(&e.to);
        graph.entry(&e.to).or_default();
    }
    struct Walk<'a> {
        graph: &'a BTreeMap<&'a str, BTreeSet<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for &w in &self.graph[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph: &graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for &v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}
