//! Prints skillbox's stable public API, one line per item, from rustdoc's
//! JSON output: every public path (except the unstable module), struct
//! fields, enum variants, and the signatures of inherent methods, plus the
//! traits each type implements. `scripts/check-library` diffs the output with
//! the committed `api-tests/public-api.txt`, so a change to the surface is
//! always a visible, reviewed change to that file.
//!
//! Usage: `api-snapshot target/doc/skillbox.json [target/doc/DEP.json…]`
//!
//! rustdoc's JSON does not copy an item another crate defines into the
//! crate that re-exports it; the JSON of each workspace crate given after
//! the first lets a re-export be followed into the crate that defines it,
//! so a type the sandbox crate defines is listed, fields and methods, as
//! `skillbox` exports it.

use std::collections::{BTreeSet, HashSet};

use serde_json::Value;

/// The part of the surface with no stability promise.
const UNSTABLE: &str = "unstable";

struct Doc {
    /// Each crate's rustdoc JSON, the one listed first.
    crates: Vec<Value>,
    /// The crate whose items are being read now.
    current: usize,
    lines: BTreeSet<String>,
    seen: HashSet<String>,
}

fn main() {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    assert!(
        !paths.is_empty(),
        "usage: api-snapshot target/doc/skillbox.json [target/doc/DEP.json…]"
    );
    let crates: Vec<Value> = paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("cannot read {path}: {e}; run scripts/check-library"));
            serde_json::from_str(&text).expect("rustdoc JSON")
        })
        .collect();
    let root = id_key(&crates[0]["root"]);
    let mut doc = Doc {
        crates,
        current: 0,
        lines: BTreeSet::new(),
        seen: HashSet::new(),
    };
    doc.module(&root, "skillbox");
    for line in doc.lines {
        println!("{line}");
    }
}

fn id_key(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Doc {
    fn item(&self, id: &str) -> Option<&Value> {
        self.crates[self.current]["index"].get(id)
    }

    /// The crate and id that define the item `id` of the current crate
    /// names but another crate defines, when that crate's JSON was given.
    fn defined_elsewhere(&self, id: &str) -> Option<(usize, String)> {
        let here = &self.crates[self.current];
        let summary = here["paths"].get(id)?;
        let crate_id = id_key(&summary["crate_id"]);
        let name = here["external_crates"].get(&crate_id)?["name"].as_str()?;
        let path = &summary["path"];
        self.crates.iter().enumerate().find_map(|(n, other)| {
            let root = other["index"].get(id_key(&other["root"]))?;
            if root["name"].as_str() != Some(name) {
                return None;
            }
            other["paths"].as_object()?.iter().find_map(|(key, p)| {
                (p["crate_id"] == 0 && &p["path"] == path).then(|| (n, key.clone()))
            })
        })
    }

    fn module(&mut self, id: &str, path: &str) {
        let Some(module) = self.item(id) else { return };
        let items: Vec<String> = module["inner"]["module"]["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(id_key)
            .collect();
        for child in items {
            self.entry(&child, path);
        }
    }

    fn entry(&mut self, id: &str, parent: &str) {
        let Some(item) = self.item(id).cloned() else {
            return;
        };
        let (kind, inner) = match item["inner"].as_object().and_then(|o| o.iter().next()) {
            Some((kind, inner)) => (kind.clone(), inner.clone()),
            None => return,
        };
        if kind == "use" {
            // A re-export rustdoc did not inline: follow it under its new name.
            let name = inner["name"].as_str().unwrap_or_default();
            if inner["is_glob"].as_bool() == Some(true) || name == UNSTABLE {
                return;
            }
            if let Some(target) = inner.get("id").filter(|v| !v.is_null()) {
                let target = id_key(target);
                if self.item(&target).is_some() {
                    self.named(&target, &format!("{parent}::{name}"));
                } else if let Some((defining, target)) = self.defined_elsewhere(&target) {
                    let here = std::mem::replace(&mut self.current, defining);
                    self.named(&target, &format!("{parent}::{name}"));
                    self.current = here;
                } else {
                    self.lines
                        .insert(format!("pub use {parent}::{name} = {}", inner["source"]));
                }
            }
            return;
        }
        let Some(name) = item["name"].as_str() else {
            return;
        };
        if name == UNSTABLE {
            return;
        }
        self.named(id, &format!("{parent}::{name}"));
    }

    fn named(&mut self, id: &str, path: &str) {
        if !self.seen.insert(format!("{}:{id}@{path}", self.current)) {
            return;
        }
        let Some(item) = self.item(id).cloned() else {
            return;
        };
        let Some((kind, inner)) = item["inner"].as_object().and_then(|o| o.iter().next()) else {
            return;
        };
        match kind.as_str() {
            "module" => {
                self.lines.insert(format!("mod {path}"));
                self.module(id, path);
            }
            "struct" => {
                self.lines
                    .insert(format!("struct {path}{}", generics(&inner["generics"])));
                let fields = &inner["kind"]["plain"]["fields"];
                for field in fields.as_array().into_iter().flatten() {
                    if let Some(f) = self.item(&id_key(field)) {
                        self.lines.insert(format!(
                            "struct field {path}.{}: {}",
                            f["name"].as_str().unwrap_or("?"),
                            ty(&f["inner"]["struct_field"])
                        ));
                    }
                }
                if inner["kind"]["plain"]["has_stripped_fields"].as_bool() == Some(true) {
                    self.lines
                        .insert(format!("struct {path} has private fields"));
                }
                self.impls(&inner["impls"], path);
            }
            "enum" => {
                self.lines
                    .insert(format!("enum {path}{}", generics(&inner["generics"])));
                for variant in inner["variants"].as_array().into_iter().flatten() {
                    if let Some(v) = self.item(&id_key(variant)) {
                        let name = v["name"].as_str().unwrap_or("?");
                        let fields = self.variant_fields(&v["inner"]["variant"]["kind"]);
                        self.lines
                            .insert(format!("enum variant {path}::{name}{fields}"));
                    }
                }
                self.impls(&inner["impls"], path);
            }
            "trait" => {
                self.lines.insert(format!("trait {path}"));
                for member in inner["items"].as_array().into_iter().flatten() {
                    if let Some(m) = self.item(&id_key(member))
                        && let Some(sig) = m["inner"].get("function")
                    {
                        let name = m["name"].as_str().unwrap_or("?");
                        self.lines
                            .insert(format!("trait method {path}::{}", function(name, sig)));
                    }
                }
            }
            "function" => {
                let name = path.rsplit("::").next().unwrap_or(path);
                let parent = &path[..path.len() - name.len()];
                self.lines
                    .insert(format!("fn {parent}{}", function(name, inner)));
            }
            "constant" => {
                self.lines
                    .insert(format!("const {path}: {}", ty(&inner["type"])));
            }
            "type_alias" => {
                self.lines
                    .insert(format!("type {path} = {}", ty(&inner["type"])));
            }
            other => {
                self.lines.insert(format!("{other} {path}"));
            }
        }
    }

    fn variant_fields(&self, kind: &Value) -> String {
        if let Some(fields) = kind.get("struct").and_then(|s| s["fields"].as_array()) {
            let names: Vec<String> = fields
                .iter()
                .filter_map(|f| self.item(&id_key(f)))
                .map(|f| {
                    format!(
                        "{}: {}",
                        f["name"].as_str().unwrap_or("?"),
                        ty(&f["inner"]["struct_field"])
                    )
                })
                .collect();
            return format!(" {{ {} }}", names.join(", "));
        }
        if let Some(fields) = kind.get("tuple").and_then(|t| t.as_array()) {
            let types: Vec<String> = fields
                .iter()
                .map(|f| match self.item(&id_key(f)) {
                    Some(f) => ty(&f["inner"]["struct_field"]),
                    None => "_".into(),
                })
                .collect();
            return format!("({})", types.join(", "));
        }
        String::new()
    }

    /// Inherent methods with their signatures, and the names of traits
    /// implemented (auto traits and blanket impls left out: they follow
    /// from the fields and from other crates).
    fn impls(&mut self, impls: &Value, path: &str) {
        for imp in impls.as_array().into_iter().flatten() {
            let Some(item) = self.item(&id_key(imp)).cloned() else {
                continue;
            };
            let inner = &item["inner"]["impl"];
            if inner["is_synthetic"].as_bool() == Some(true) || !inner["blanket_impl"].is_null() {
                continue;
            }
            if let Some(name) = trait_name(&inner["trait"]) {
                self.lines.insert(format!("impl {name} for {path}"));
                continue;
            }
            for member in inner["items"].as_array().into_iter().flatten() {
                let Some(m) = self.item(&id_key(member)) else {
                    continue;
                };
                if m["visibility"] != "public" {
                    continue;
                }
                if let Some(sig) = m["inner"].get("function") {
                    let name = m["name"].as_str().unwrap_or("?");
                    self.lines
                        .insert(format!("method {path}::{}", function(name, sig)));
                }
            }
        }
    }
}

fn trait_name(path: &Value) -> Option<String> {
    if path.is_null() {
        return None;
    }
    let name = path["path"]
        .as_str()
        .or_else(|| path["name"].as_str())
        .unwrap_or("?");
    Some(format!("{name}{}", args(&path["args"])))
}

fn function(name: &str, f: &Value) -> String {
    let header = &f["header"];
    let asyncness = if header["is_async"].as_bool() == Some(true) {
        "async "
    } else {
        ""
    };
    let inputs: Vec<String> = f["sig"]["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|pair| {
            let arg = pair[0].as_str().unwrap_or("_");
            let t = ty(&pair[1]);
            if arg == "self" {
                t.replace("Self", "self")
            } else {
                format!("{arg}: {t}")
            }
        })
        .collect();
    let output = match &f["sig"]["output"] {
        Value::Null => String::new(),
        out => format!(" -> {}", ty(out)),
    };
    format!(
        "{asyncness}{name}{}({}){output}",
        generics(&f["generics"]),
        inputs.join(", ")
    )
}

fn generics(g: &Value) -> String {
    let names: Vec<String> = g["params"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["kind"].get("lifetime").is_none())
        .filter(|p| p["kind"]["type"]["is_synthetic"].as_bool() != Some(true))
        .filter_map(|p| p["name"].as_str().map(String::from))
        .collect();
    if names.is_empty() {
        String::new()
    } else {
        format!("<{}>", names.join(", "))
    }
}

fn args(a: &Value) -> String {
    let Some(list) = a["angle_bracketed"]["args"].as_array() else {
        return String::new();
    };
    let parts: Vec<String> = list
        .iter()
        .filter_map(|arg| arg.get("type").map(ty))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("<{}>", parts.join(", "))
    }
}

fn ty(t: &Value) -> String {
    if let Some(p) = t.get("resolved_path") {
        let name = p["path"]
            .as_str()
            .or_else(|| p["name"].as_str())
            .unwrap_or("?");
        let short = name.rsplit("::").next().unwrap_or(name);
        return format!("{short}{}", args(&p["args"]));
    }
    if let Some(p) = t.get("primitive").and_then(|p| p.as_str()) {
        return p.to_string();
    }
    if let Some(g) = t.get("generic").and_then(|g| g.as_str()) {
        return g.to_string();
    }
    if let Some(r) = t.get("borrowed_ref") {
        let mutable = if r["is_mutable"].as_bool() == Some(true) {
            "mut "
        } else {
            ""
        };
        return format!("&{mutable}{}", ty(&r["type"]));
    }
    if let Some(items) = t.get("tuple").and_then(|t| t.as_array()) {
        let parts: Vec<String> = items.iter().map(ty).collect();
        return format!("({})", parts.join(", "));
    }
    if let Some(inner) = t.get("slice") {
        return format!("[{}]", ty(inner));
    }
    if let Some(a) = t.get("array") {
        return format!("[{}; {}]", ty(&a["type"]), a["len"].as_str().unwrap_or("?"));
    }
    if let Some(bounds) = t.get("impl_trait").and_then(|b| b.as_array()) {
        let parts: Vec<String> = bounds
            .iter()
            .filter_map(|b| trait_name(&b["trait_bound"]["trait"]))
            .collect();
        return format!("impl {}", parts.join(" + "));
    }
    if let Some(d) = t.get("dyn_trait") {
        let parts: Vec<String> = d["traits"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|b| trait_name(&b["trait"]))
            .collect();
        return format!("dyn {}", parts.join(" + "));
    }
    if let Some(q) = t.get("qualified_path") {
        return format!(
            "{}::{}",
            ty(&q["self_type"]),
            q["name"].as_str().unwrap_or("?")
        );
    }
    "_".into()
}
