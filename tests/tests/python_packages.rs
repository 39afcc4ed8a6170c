//! Scripts that import compiled packages (numpy, pandas, lxml, Pillow,
//! PyYAML, matplotlib) run in the full Python runtime, chosen by what they
//! import, under the same grants and limits as any script; each output is
//! read back on the host. Scripts that need only the standard library stay
//! in the light runtime.

use std::path::Path;
use std::process::Command;

use serde_json::json;
use skillbox_e2e::mcp::{assert_says, call, connect_stdio};
use skillbox_e2e::{Run, python_full_runtime, python_skill, run, workspace};

fn run_script(skills: &Path, script: &str, ws: &Path, extra: &[&str], args: &[&str]) -> Run {
    let mut argv = vec![
        "run-script",
        "--skills",
        skills.to_str().unwrap(),
        "--script",
        script,
        "--workspace",
        ws.to_str().unwrap(),
    ];
    argv.extend(extra);
    argv.push("--");
    argv.extend(args);
    run(&argv)
}

/// Runs the host's Python on `code` with `args`; its stdout, trimmed. The
/// checks read the sandbox's output with libraries that are not the
/// sandbox's (the host's zipfile and XML parser).
fn host_python(code: &str, args: &[&Path]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(code)
        .args(args)
        .output()
        .expect("python3 on the host");
    assert!(out.status.success(), "host check failed: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A PNG's width and height, from its header.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(
        &bytes[..8],
        b"\x89PNG\r\n\x1a\n",
        "{} is not a PNG",
        path.display()
    );
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

const SALES: &str = "region,product,units,price\n\
north,pens,10,1.5\nsouth,pens,4,1.5\nnorth,ink,3,12.0\nwest,paper,20,4.25\nsouth,ink,1,12.0\n";

const SUMMARY: &str = r#"
import json, sys
import numpy as np
import pandas as pd

frame = pd.read_csv(sys.argv[1])
frame["revenue"] = frame["units"] * frame["price"]
summary = frame.groupby("region").agg(units=("units", "sum"), revenue=("revenue", "sum"))
summary.to_csv(sys.argv[2])
print(json.dumps({
    "mean_units": float(np.mean(frame["units"].to_numpy())),
    "python": list(sys.version_info[:2]),
}))
"#;

#[test]
fn numpy_and_pandas_summarize_a_csv_from_the_workspace_into_another() {
    if !python_full_runtime() {
        return;
    }
    let skills = python_skill(
        "sales",
        &[
            ("skillbox.yaml", "grants:\n  workspace: write\n"),
            ("scripts/summary.py", SUMMARY),
        ],
    );
    let ws = workspace(&[("sales.csv", SALES)]);
    let out = run_script(
        skills.path(),
        "sales/scripts/summary.py",
        ws.path(),
        &["--allow-write"],
        &["sales.csv", "by-region.csv"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let printed: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(printed["mean_units"], json!(7.6));
    assert_eq!(printed["python"], json!([3, 15]), "the full runtime ran it");
    // Read back with the host's csv module, not the sandbox's pandas.
    let rows = host_python(
        "import csv, sys\nfor r in csv.DictReader(open(sys.argv[1])):\n    \
         print(r['region'], r['units'], float(r['revenue']))",
        &[&ws.path().join("by-region.csv")],
    );
    assert_eq!(rows, "north 13 51.0\nsouth 5 18.0\nwest 20 85.0");
}

/// Replaces a word in a Word document's body with lxml, as the docx
/// skills' scripts edit `word/document.xml`.
const DOCX_EDIT: &str = r#"
import sys, zipfile
from lxml import etree

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
source, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(source) as zin:
    parts = {name: zin.read(name) for name in zin.namelist()}
body = etree.fromstring(parts["word/document.xml"])
changed = 0
for text in body.iter(W + "t"):
    if "DRAFT" in text.text:
        text.text = text.text.replace("DRAFT", "FINAL")
        changed += 1
parts["word/document.xml"] = etree.tostring(body, xml_declaration=True, encoding="UTF-8", standalone=True)
with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zout:
    for name, data in parts.items():
        zout.writestr(name, data)
print("changed", changed)
"#;

const MAKE_DOCX: &str = r#"
import sys, zipfile
W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
doc = (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="{W}"><w:body>'
       '<w:p><w:r><w:t>Status: DRAFT</w:t></w:r></w:p><w:p><w:r><w:t>Owner: Ada</w:t></w:r></w:p>'
       '<w:p><w:r><w:t>DRAFT again</w:t></w:r></w:p></w:body></w:document>')
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>')
    z.writestr("word/document.xml", doc)
"#;

const READ_DOCX: &str = r#"
import sys, zipfile
import xml.etree.ElementTree as ET
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
with zipfile.ZipFile(sys.argv[1]) as z:
    body = ET.fromstring(z.read("word/document.xml"))
print("|".join(t.text for t in body.iter(W + "t")))
"#;

#[test]
fn lxml_edits_a_word_document_the_host_reads_back() {
    if !python_full_runtime() {
        return;
    }
    let skills = python_skill(
        "docx-edit",
        &[
            ("skillbox.yaml", "grants:\n  workspace: write\n"),
            ("scripts/replace.py", DOCX_EDIT),
        ],
    );
    let ws = tempfile::tempdir().unwrap();
    host_python(MAKE_DOCX, &[&ws.path().join("in.docx")]);
    let out = run_script(
        skills.path(),
        "docx-edit/scripts/replace.py",
        ws.path(),
        &["--allow-write"],
        &["in.docx", "out.docx"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), "changed 2");
    assert_eq!(
        host_python(READ_DOCX, &[&ws.path().join("out.docx")]),
        "Status: FINAL|Owner: Ada|FINAL again"
    );
    assert_eq!(
        host_python(READ_DOCX, &[&ws.path().join("in.docx")]),
        "Status: DRAFT|Owner: Ada|DRAFT again",
        "the input is left as it was"
    );
}

const MAKE_PNG: &str = r#"
import struct, sys, zlib
width, height = 640, 480
rows = b"".join(
    b"\x00" + bytes(c for x in range(width) for c in (x % 256, y % 256, 128)) for y in range(height)
)
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
       + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
open(sys.argv[1], "wb").write(png)
"#;

/// Pillow makes a thumbnail and PyYAML reads the sizes it is asked for, as
/// an image skill's script would.
const THUMBNAIL: &str = r#"
import json, yaml
from PIL import Image

config = yaml.safe_load(open("thumbs.yaml"))
image = Image.open(config["source"])
for name, edge in config["sizes"].items():
    copy = image.copy()
    copy.thumbnail((edge, edge))
    copy.save(f"thumb-{name}.png")
print(yaml.safe_dump({"source": list(image.size), "mode": image.mode}, sort_keys=True).strip())
"#;

#[test]
fn pillow_makes_thumbnails_at_sizes_pyyaml_reads() {
    if !python_full_runtime() {
        return;
    }
    let skills = python_skill(
        "thumbs",
        &[
            ("skillbox.yaml", "grants:\n  workspace: write\n"),
            ("scripts/thumbs.py", THUMBNAIL),
        ],
    );
    let ws = workspace(&[(
        "thumbs.yaml",
        "source: photo.png\nsizes:\n  small: 64\n  medium: 200\n",
    )]);
    host_python(MAKE_PNG, &[&ws.path().join("photo.png")]);
    let out = run_script(
        skills.path(),
        "thumbs/scripts/thumbs.py",
        ws.path(),
        &["--allow-write"],
        &[],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), "mode: RGB\nsource:\n- 640\n- 480");
    assert_eq!(png_size(&ws.path().join("thumb-small.png")), (64, 48));
    assert_eq!(png_size(&ws.path().join("thumb-medium.png")), (200, 150));
}

const CHART: &str = r#"
import sys
import matplotlib.pyplot as plt

figure, axes = plt.subplots(figsize=(4, 3), dpi=50)
axes.bar(["north", "south", "west"], [51, 18, 85])
axes.set_title("Revenue by region")
figure.savefig(sys.argv[1])
print("saved", sys.argv[1])
"#;

#[test]
fn matplotlib_draws_a_chart_to_a_png_file() {
    if !python_full_runtime() {
        return;
    }
    let skills = python_skill(
        "charts",
        &[
            ("skillbox.yaml", "grants:\n  workspace: write\n"),
            ("scripts/chart.py", CHART),
        ],
    );
    let ws = tempfile::tempdir().unwrap();
    let out = run_script(
        skills.path(),
        "charts/scripts/chart.py",
        ws.path(),
        &["--allow-write"],
        &["chart.png"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let chart = ws.path().join("chart.png");
    assert_eq!(png_size(&chart), (200, 150));
    assert!(
        std::fs::metadata(&chart).unwrap().len() > 2_000,
        "an empty chart"
    );
}

#[test]
fn code_run_as_a_skill_reaches_its_helpers_compiled_imports_and_plain_code_stays_light() {
    if !python_full_runtime() {
        return;
    }
    // The code imports the skill's helper; the helper imports PIL.
    let skills = python_skill(
        "gif-maker",
        &[
            ("scripts/make.py", "print('unused')\n"),
            (
                "core/frames.py",
                "from PIL import Image\n\ndef frame(w, h):\n    return Image.new('RGB', (w, h), 'navy').size\n",
            ),
        ],
    );
    let skills_arg = skills.path().to_str().unwrap();
    let out = run(&[
        "run-code",
        "--skills",
        skills_arg,
        "--skill",
        "gif-maker",
        "from core.frames import frame\nimport sys\nprint(frame(48, 32), sys.version_info[:2])",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), "(48, 32) (3, 15)");

    // Code with nothing compiled in it runs in the light runtime.
    let light = run(&["run-code", "import sys, json\nprint(sys.version_info[:2])"]);
    assert_eq!(light.code, 0, "{light:?}");
    assert_eq!(light.stdout.trim(), "(3, 14)");
}

#[test]
fn prepare_leaves_a_compiled_dependency_to_the_full_runtime() {
    if !python_full_runtime() {
        return;
    }
    // python-docx is pure Python and needs lxml, which has only compiled
    // wheels: prepare installs the one and leaves the other to the runtime,
    // as it does numpy once the user pins the version the runtime has.
    let skills = python_skill(
        "report-docx",
        &[
            ("skillbox.yaml", "grants:\n  workspace: write\n"),
            ("requirements.txt", "python-docx==1.1.2\nnumpy==1.26.4\n"),
            (
                "scripts/report.py",
                "import docx\nd = docx.Document()\nd.add_heading('Quarterly report', 1)\n\
                 d.add_paragraph('Revenue rose.')\nd.save('report.docx')\nprint('written')\n",
            ),
        ],
    );
    let skills_arg = skills.path().to_str().unwrap();
    // The skill's numpy pin is a version no build here has: refused, with
    // the command that accepts the runtime's.
    let refused = run(&["prepare", "report-docx", "--skills", skills_arg]);
    assert_eq!(refused.code, 1, "{refused:?}");
    refused.stderr_says(&[
        "needs `numpy==1.26.4`",
        "it has numpy 2.5.2 built in",
        "--with numpy==2.5.2",
        "Nothing was installed",
    ]);
    let prepared = run(&[
        "prepare",
        "report-docx",
        "--skills",
        skills_arg,
        "--with",
        "numpy==2.5.2",
        "--json",
    ]);
    assert_eq!(prepared.code, 0, "{prepared:?}");
    prepared.stderr_says(&[
        "lxml>=3.1.0 has no pure-Python wheel",
        "the full Python runtime has lxml 6.1.3 built in",
    ]);
    let record = prepared.json();
    assert_eq!(
        record["built_in"],
        json!(["lxml 6.1.3", "numpy 2.5.2"]),
        "{record}"
    );
    let installed = record["distributions"].to_string();
    assert!(
        installed.contains("python_docx 1.1.2") && !installed.contains("lxml"),
        "{record}"
    );

    let ws = tempfile::tempdir().unwrap();
    let out = run_script(
        skills.path(),
        "report-docx/scripts/report.py",
        ws.path(),
        &["--allow-write"],
        &[],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        host_python(READ_DOCX, &[&ws.path().join("report.docx")]),
        "Quarterly report|Revenue rose."
    );

    let listed = run(&["prepare", "--built-in"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    listed.stdout_says(&[
        "numpy 2.5.2",
        "pandas 3.0.6",
        "pillow 13.0.0",
        "pyyaml 6.0.3",
    ]);
}

/// A public skill's requirements as they are published: unpinned lines on
/// packages the full runtime has, one the user pins, and one with no wheel
/// that runs here, which the scripts used do not import and the user
/// leaves out, for this run and the next.
#[test]
fn unpinned_built_in_requirements_are_the_runtimes_and_a_dead_one_is_left_out() {
    if !python_full_runtime() {
        return;
    }
    let skills = python_skill(
        "gif-maker",
        &[
            ("skillbox.yaml", "grants:\n  workspace: write\n"),
            (
                "requirements.txt",
                "pillow>=10.0.0\nimageio>=2.31.0\nimageio-ffmpeg>=0.4.9\nnumpy>=1.24.0\n",
            ),
        ],
    );
    let skills_arg = skills.path().to_str().unwrap();
    let prepare = |extra: &[&str]| {
        let mut argv = vec!["prepare", "gif-maker", "--skills", skills_arg, "--json"];
        argv.extend(extra);
        run(&argv)
    };
    let first = prepare(&[]);
    assert_eq!(first.code, 1, "{first:?}");
    first.stderr_says(&[
        "pillow>=10.0.0: the full Python runtime has pillow 13.0.0 built in",
        "`imageio>=2.31.0` is not pinned",
        "--without NAME",
    ]);

    let done = prepare(&["--with", "imageio==2.37.0", "--without", "imageio-ffmpeg"]);
    assert_eq!(done.code, 0, "{done:?}");
    let record = done.json();
    assert_eq!(
        record["built_in"],
        json!(["numpy 2.5.2", "pillow 13.0.0"]),
        "{record}"
    );
    assert_eq!(
        record["distributions"],
        json!(["imageio 2.37.0"]),
        "{record}"
    );
    assert_eq!(record["without"], json!(["imageio-ffmpeg"]), "{record}");
    // The next run remembers what was left out.
    let again = prepare(&[]);
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(again.json()["without"], json!(["imageio-ffmpeg"]));

    let ws = tempfile::tempdir().unwrap();
    let out = run(&[
        "run-code",
        "--skills",
        skills_arg,
        "--skill",
        "gif-maker",
        "--workspace",
        ws.path().to_str().unwrap(),
        "--allow-write",
        "import imageio.v2 as iio\nimport numpy as np\nfrom PIL import Image\n\
         frames = [np.full((16, 16, 3), i * 40, np.uint8) for i in range(5)]\n\
         iio.mimsave('wave.gif', frames, loop=0)\nprint(Image.open('wave.gif').n_frames)",
    ]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), "5");
    let gif = std::fs::read(ws.path().join("wave.gif")).unwrap();
    assert_eq!(&gif[..6], b"GIF89a");
}

/// Compiled code is held to the same limits: a numpy allocation past the
/// memory cap and a matrix product past the CPU budget are stopped, each
/// with its own error, and the server answers the next call.
#[tokio::test]
async fn compiled_code_over_its_limits_is_stopped_and_the_server_keeps_serving() {
    if !python_full_runtime() {
        return;
    }
    let hostile = [
        (
            "hog.py",
            "import numpy\nblocks = [numpy.ones(1 << 22) for _ in range(100)]\n",
            "memory limit",
        ),
        (
            "grind.py",
            "import numpy\nm = numpy.ones((1000, 1000))\nfor _ in range(100):\n    m = m @ m / 1000\n",
            "out of fuel",
        ),
        (
            "escape.py",
            "import pandas\nprint(pandas.read_csv('/etc/passwd'))\n",
            "outside what this script may see",
        ),
    ];
    let mut files: Vec<(&str, &str)> = Vec::new();
    let paths: Vec<String> = hostile
        .iter()
        .map(|(name, _, _)| format!("scripts/{name}"))
        .collect();
    for ((_, body, _), path) in hostile.iter().zip(&paths) {
        files.push((path, body));
    }
    files.push((
        "scripts/fine.py",
        "import numpy\nprint('sum', numpy.arange(5).sum())\n",
    ));
    let skills = python_skill("heavy", &files);
    let (client, _) = connect_stdio(&[
        "--skills",
        skills.path().to_str().unwrap(),
        "--tools",
        "all",
        "--memory-mib",
        "256",
        "--fuel",
        "8000000000",
    ])
    .await;
    for (name, _, says) in hostile {
        let result = call(
            &client,
            "run_script",
            json!({"skill": "heavy", "script": format!("scripts/{name}")}),
        )
        .await;
        assert_says(&result, &[says]);
        let text = serde_json::to_string(&result).unwrap();
        assert!(
            !text.contains(skills.path().to_str().unwrap()),
            "{name}: a host path leaked: {text}"
        );
    }
    let fine = call(
        &client,
        "run_script",
        json!({"skill": "heavy", "script": "scripts/fine.py"}),
    )
    .await;
    assert_says(&fine, &["sum 10"]);
    client.cancel().await.unwrap();
}

/// A script chooses the full runtime by its imports, so the runtime's
/// larger defaults stay within the ceilings the user set for skills.
#[test]
fn the_full_runtimes_defaults_stay_within_the_users_ceilings() {
    if !python_full_runtime() {
        return;
    }
    let skills = python_skill(
        "greedy",
        &[(
            "scripts/grab.py",
            "import numpy\nblocks = [numpy.ones(1 << 21) for _ in range(40)]\nprint('held')\n",
        )],
    );
    let ws = tempfile::tempdir().unwrap();
    let script = "greedy/scripts/grab.py";
    let capped = run_script(
        skills.path(),
        script,
        ws.path(),
        &["--ceiling-memory-mib", "96"],
        &[],
    );
    assert_ne!(capped.code, 0, "{capped:?}");
    capped.stderr_says(&["memory limit", "96 MiB"]);
    // 40 blocks of 16 MiB: within a 1 GiB ceiling, the runtime's own limit.
    let roomy = run_script(
        skills.path(),
        script,
        ws.path(),
        &["--ceiling-memory-mib", "1024"],
        &[],
    );
    assert_eq!(roomy.code, 0, "{roomy:?}");
    assert_eq!(roomy.stdout.trim(), "held");
}

/// A skill made of import lines (hundreds of modules, each importing a
/// thousand names) cannot make the host's choice of runtime slow or
/// large: the scan reads a bounded number of names and walks each file
/// once. The script still gets the runtime its own imports need.
#[test]
fn a_skill_of_a_million_import_lines_is_scanned_within_bounds() {
    if !python_full_runtime() {
        return;
    }
    let mut files: Vec<(String, String)> = (0..300)
        .map(|m| {
            let names: Vec<String> = (0..1000).map(|k| format!("x{m}_{k}")).collect();
            let lines: Vec<String> = names
                .chunks(200)
                .map(|c| format!("import {}", c.join(", ")))
                .collect();
            (format!("scripts/m{m}.py"), lines.join("\n"))
        })
        .collect();
    let imports: Vec<String> = (0..300).map(|m| format!("import m{m}")).collect();
    files.push((
        "scripts/run.py".into(),
        format!(
            "import numpy\nif False:\n    {}\nprint(numpy.arange(4).sum())\n",
            imports.join("\n    ")
        ),
    ));
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_str()))
        .collect();
    let skills = python_skill("wide", &files);
    let ws = tempfile::tempdir().unwrap();
    let out = run_script(skills.path(), "wide/scripts/run.py", ws.path(), &[], &[]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout.trim(), "6");
}

/// The list of modules the light runtime's hint knows the full runtime has
/// is the list the full runtime's build wrote.
#[test]
fn the_hints_list_of_built_in_modules_is_the_runtimes_own() {
    let dir = env!("SKILLBOX_E2E_PYTHON_FULL");
    if dir.is_empty() {
        return;
    }
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(Path::new(dir).join("packages.json")).unwrap())
            .unwrap();
    let built: Vec<&str> = record["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let runner =
        std::fs::read_to_string(skillbox_e2e::repo().join("runtimes/python/skillbox_run.py"))
            .unwrap();
    let start = runner.find("BUILT_INTO_FULL = {").unwrap();
    let literal = &runner[start..start + runner[start..].find('}').unwrap()];
    let listed: Vec<&str> = literal.split('"').skip(1).step_by(2).collect();
    assert_eq!(
        listed, built,
        "update BUILT_INTO_FULL in runtimes/python/skillbox_run.py"
    );
}

/// A runtime folder someone else could change, or one whose mounted
/// folders are links, is not used: its files would be mounted into calls.
#[test]
fn a_runtime_folder_others_could_change_or_linked_elsewhere_is_refused() {
    let dir = env!("SKILLBOX_E2E_PYTHON_FULL");
    if dir.is_empty() || !python_full_runtime() {
        return;
    }
    use std::os::unix::fs::{PermissionsExt, symlink};
    let real = Path::new(dir);
    let secret = tempfile::tempdir().unwrap();
    std::fs::write(secret.path().join("id_rsa"), "PRIVATE KEY").unwrap();
    let copy = tempfile::tempdir().unwrap();
    let runtime = copy.path().join("python-full");
    std::fs::create_dir(&runtime).unwrap();
    std::fs::create_dir(runtime.join("lib")).unwrap();
    std::fs::copy(real.join("packages.json"), runtime.join("packages.json")).unwrap();
    symlink(real.join("python.wasm"), runtime.join("python.wasm")).unwrap();
    // Copies: the sandbox follows no link out of a mounted folder.
    let zip = record_zip(real);
    std::fs::copy(real.join("lib").join(&zip), runtime.join("lib").join(&zip)).unwrap();
    std::fs::create_dir(runtime.join("lib/skillbox")).unwrap();
    for entry in std::fs::read_dir(real.join("lib/skillbox")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(
            entry.path(),
            runtime.join("lib/skillbox").join(entry.file_name()),
        )
        .unwrap();
    }
    symlink(secret.path(), runtime.join("mpl-data")).unwrap();
    let skills = python_skill(
        "peek",
        &[(
            "scripts/peek.py",
            "import numpy, os\nprint(os.listdir('/usr/local/lib/python315.zip/matplotlib/mpl-data'))\n",
        )],
    );
    let ws = tempfile::tempdir().unwrap();
    let peek = |runtime: &Path| {
        skillbox_e2e::skillbox()
            .args([
                "run-script",
                "--skills",
                skills.path().to_str().unwrap(),
                "--script",
                "peek/scripts/peek.py",
                "--workspace",
                ws.path().to_str().unwrap(),
            ])
            .env("SKILLBOX_PYTHON_FULL_RUNTIME", runtime)
            .output()
            .unwrap()
    };
    let linked = Run::from(peek(&runtime));
    assert!(!linked.stdout.contains("id_rsa"), "{linked:?}");
    linked.stderr_says(&["full Python runtime"]);

    // With its own folder in place it runs; made group-writable it is refused.
    std::fs::remove_file(runtime.join("mpl-data")).unwrap();
    std::fs::create_dir(runtime.join("mpl-data")).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let own = Run::from(peek(&runtime));
    assert_eq!(own.code, 0, "{own:?}");
    assert_eq!(own.stdout.trim(), "[]");
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o770)).unwrap();
    let shared = Run::from(peek(&runtime));
    assert_ne!(shared.code, 0, "{shared:?}");
    shared.stderr_says(&["full Python runtime"]);
}

/// The standard library zip's name, from the runtime's packages.json.
fn record_zip(runtime: &Path) -> String {
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(runtime.join("packages.json")).unwrap()).unwrap();
    record["zip"].as_str().unwrap().to_string()
}
