//! Real skill collections: the shapes published skills take, loaded
//! leniently for serving (the Agent Skills client guide's rules) and still
//! reported strictly by `skills check`; and a collection of thousands.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use skillbox_e2e::run;

fn write_skill(root: &Path, folder: &str, skill_md: &str) {
    let dir = root.join(folder);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), skill_md).unwrap();
}

fn skill_md(name: &str, description: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n# Steps\nDo the thing.\n")
}

/// `skills list --json` over `dirs`, as (skills by name, diagnostics).
fn list(dirs: &[&Path]) -> (BTreeMap<String, Value>, Vec<Value>) {
    let mut args = vec!["skills", "list", "--json"];
    for dir in dirs {
        args.extend(["--skills", dir.to_str().unwrap()]);
    }
    let out = run(&args);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let json: Value = serde_json::from_str(&out.stdout).unwrap();
    let skills = json["skills"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["source"] == "explicit")
        .map(|s| (s["name"].as_str().unwrap().to_string(), s.clone()))
        .collect();
    (skills, json["diagnostics"].as_array().unwrap().clone())
}

/// The rule ids reported about files under `folder`, with their severity.
fn rules_for(diagnostics: &[Value], folder: &Path) -> Vec<String> {
    let mut rules: Vec<String> = diagnostics
        .iter()
        .filter(|d| Path::new(d["path"].as_str().unwrap()).starts_with(folder))
        .map(|d| {
            format!(
                "{}:{}",
                d["severity"].as_str().unwrap(),
                d["rule"].as_str().unwrap()
            )
        })
        .collect();
    rules.sort();
    rules.dedup();
    rules
}

#[test]
fn published_shapes_load_leniently_and_check_strictly() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let root = a.path();
    write_skill(
        root,
        "build-sql",
        &skill_md(
            "Build SQL and vector retrieval context layers with TiDB",
            "Builds retrieval context from SQL and vectors.",
        ),
    );
    write_skill(root, "log-helper", &skill_md("log-tool", "Reads logs."));
    write_skill(
        root,
        "long-name",
        &skill_md(&"a".repeat(70), "A long name."),
    );
    let long_folder = "use-this-skill-when-a-slug-was-generated-from-a-very-long-display-title";
    write_skill(root, long_folder, &skill_md(long_folder, "A long slug."));
    let long = "Summarizes release notes in depth. ".repeat(40);
    write_skill(root, "long-desc", &skill_md("long-desc", &long));
    write_skill(
        root,
        "colon",
        &skill_md("colon", "Use when: the deploy fails"),
    );
    write_skill(root, "no-frontmatter", "# Just a title\nSome steps.\n");
    write_skill(root, "empty-desc", &skill_md("empty-desc", "\"\""));
    write_skill(
        root,
        "Bad Folder",
        &skill_md("Also Bad", "Has no usable name."),
    );
    write_skill(
        root,
        "extra-field",
        "---\nname: extra-field\ndescription: Has a version.\nversion: 2\n---\nbody\n",
    );
    // The same name in two sources of equal precedence: the first found wins.
    write_skill(root, "dup", &skill_md("dup", "The first copy."));
    write_skill(b.path(), "dup", &skill_md("dup", "The second copy."));

    let (skills, diagnostics) = list(&[root, b.path()]);
    let names: Vec<&str> = skills.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "build-sql",
            "colon",
            "dup",
            "extra-field",
            "log-helper",
            "long-desc",
            "long-name",
            long_folder,
        ],
        "exactly these load"
    );
    assert_eq!(
        skills["build-sql"]["title"],
        "Build SQL and vector retrieval context layers with TiDB"
    );
    assert_eq!(skills["log-helper"]["title"], "log-tool");
    assert_eq!(skills["colon"]["description"], "Use when: the deploy fails");
    assert_eq!(skills["dup"]["description"], "The first copy.");
    let cut = skills["long-desc"]["description"].as_str().unwrap();
    assert!(cut.chars().count() <= 1024 && cut.ends_with('…'), "{cut}");

    let expect = |folder: &str, rules: &[&str]| {
        assert_eq!(
            rules_for(&diagnostics, &root.join(folder)),
            rules.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
            "{folder}"
        );
    };
    expect(
        "build-sql",
        &["warning:name-folder-mismatch", "warning:name-format"],
    );
    expect("log-helper", &["warning:name-folder-mismatch"]);
    expect(
        "long-name",
        &["warning:name-folder-mismatch", "warning:name-length"],
    );
    expect("long-desc", &["warning:description-length"]);
    expect(long_folder, &["warning:name-length"]);
    expect("colon", &["warning:yaml-syntax"]);
    expect("no-frontmatter", &["error:frontmatter-missing"]);
    expect("empty-desc", &["error:description-empty"]);
    expect(
        "Bad Folder",
        &["error:name-folder-mismatch", "error:name-format"],
    );
    expect("extra-field", &["warning:unknown-field"]);
    assert_eq!(
        rules_for(&diagnostics, &b.path().join("dup")),
        ["warning:name-collision"]
    );

    // `skills check` is as strict as ever: each relaxation is an error there.
    let out = run(&["skills", "check", root.to_str().unwrap()]);
    assert_eq!(out.code, 1);
    for (folder, rule) in [
        ("build-sql", "name-format"),
        ("log-helper", "name-folder-mismatch"),
        ("long-name", "name-length"),
        ("long-desc", "description-length"),
        ("colon", "yaml-syntax"),
        ("no-frontmatter", "frontmatter-missing"),
        ("empty-desc", "description-empty"),
    ] {
        let reported = out.stdout.lines().any(|l| {
            l.contains(&format!("/{folder}/SKILL.md")) && l.contains(&format!("error: {rule}"))
        });
        assert!(reported, "check misses {rule} in {folder}:\n{}", out.stdout);
    }
}

#[test]
fn a_collection_of_thousands_loads_whole() {
    let root = tempfile::tempdir().unwrap();
    for i in 0..3_000 {
        write_skill(
            root.path(),
            &format!("skill-{i:04}"),
            &skill_md(
                &format!("Skill Number {i}"),
                &format!("Handles task family {i} with care."),
            ),
        );
    }
    let (skills, diagnostics) = list(&[root.path()]);
    assert_eq!(skills.len(), 3_000);
    assert!(
        !diagnostics.iter().any(|d| d["rule"] == "source-limit"),
        "the default limits cut the collection"
    );
    let out = run(&[
        "skills",
        "list",
        "--json",
        "--max-skills",
        "100",
        "--skills",
        root.path().to_str().unwrap(),
    ]);
    assert!(
        out.stdout.contains("raise --max-skills"),
        "the cap names its flag"
    );
}

const NOUNS: [&str; 61] = [
    "invoice", "ledger", "sensor", "glacier", "orchard", "harbor", "meteor", "quartz", "tundra",
    "violin", "walnut", "yacht", "zephyr", "anchor", "beacon", "canyon", "dynamo", "ember",
    "falcon", "geyser", "hazel", "igloo", "jasper", "kettle", "lantern", "magnet", "nectar",
    "oyster", "pepper", "quiver", "raven", "saddle", "tablet", "umbra", "velvet", "willow",
    "xenon", "yonder", "zinnia", "acorn", "bramble", "cobalt", "dune", "elm", "fjord", "granite",
    "heron", "iris", "juniper", "kelp", "lotus", "maple", "nimbus", "onyx", "pebble", "quill",
    "reef", "spruce", "thistle", "urchin", "vortex",
];
const FORMATS: [&str; 53] = [
    "spreadsheet",
    "diagram",
    "podcast",
    "manifest",
    "brochure",
    "almanac",
    "atlas",
    "ballad",
    "blueprint",
    "bulletin",
    "calendar",
    "catalogue",
    "chronicle",
    "codex",
    "compendium",
    "digest",
    "dossier",
    "epistle",
    "fable",
    "folio",
    "gazette",
    "glossary",
    "handbook",
    "hymnal",
    "itinerary",
    "journal",
    "lexicon",
    "limerick",
    "logbook",
    "memoir",
    "missive",
    "monograph",
    "newsletter",
    "notebook",
    "pamphlet",
    "parable",
    "portfolio",
    "primer",
    "quarterly",
    "register",
    "roster",
    "saga",
    "scroll",
    "sonnet",
    "syllabus",
    "tabloid",
    "thesaurus",
    "timetable",
    "treatise",
    "almanack",
    "yearbook",
    "ledgerbook",
    "zine",
];

/// The description of generated skill `i`: a unique pair of rare words.
fn generated_description(i: usize) -> String {
    format!(
        "Converts {} records into a {} for the team.",
        NOUNS[i % NOUNS.len()],
        FORMATS[i / NOUNS.len() % FORMATS.len()]
    )
}

#[tokio::test]
async fn thousands_of_skills_fit_a_budget_and_are_found_by_search() {
    let root = tempfile::tempdir().unwrap();
    for i in 0..3_000 {
        write_skill(
            root.path(),
            &format!("skill-{i:04}"),
            &skill_md(&format!("skill-{i:04}"), &generated_description(i)),
        );
    }
    let (client, _) = skillbox_e2e::mcp::connect_stdio(&[
        "--no-audit",
        "--skills",
        root.path().to_str().unwrap(),
        "--catalog-budget",
        "4000",
    ])
    .await;
    let tools = client.peer().list_all_tools().await.unwrap();
    let load = tools.iter().find(|t| t.name == "load_skill").unwrap();
    let description = load.description.as_deref().unwrap();
    let catalog_tokens = skillbox_skill::skill::tokens::count(description);
    assert!(catalog_tokens <= 4_100, "{catalog_tokens} tokens");
    assert!(
        description.contains("more skills not listed") && description.contains("find_skills"),
        "the catalog says what it left out"
    );
    assert!(
        load.input_schema["properties"]["name"]
            .get("enum")
            .is_none(),
        "no enum when skills are left out"
    );
    assert!(!description.contains("skill-2999"), "skill-2999 is listed");

    // Two words of its description find it; load_skill loads it.
    let target = generated_description(2999);
    let words: Vec<&str> = target.split(' ').collect();
    let query = format!("{} {}", words[1], words[5]);
    let found = skillbox_e2e::mcp::call(
        &client,
        "find_skills",
        serde_json::json!({ "query": query, "limit": 3 }),
    )
    .await;
    let first = found.structured_content.as_ref().unwrap()["skills"][0]["name"].clone();
    assert_eq!(
        first,
        "skill-2999",
        "{query}: {}",
        skillbox_e2e::mcp::text(&found)
    );
    let loaded = skillbox_e2e::mcp::call(
        &client,
        "load_skill",
        serde_json::json!({"name": "skill-2999"}),
    )
    .await;
    assert_ne!(
        loaded.is_error,
        Some(true),
        "{}",
        skillbox_e2e::mcp::text(&loaded)
    );
    assert!(skillbox_e2e::mcp::text(&loaded).contains("# Skill: skill-2999"));
    client.cancel().await.unwrap();
}
