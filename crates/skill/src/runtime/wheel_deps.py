# What `skillbox prepare` asks of the host's Python while it resolves a
# skill's requirements. It reads downloaded wheels as zip files and parses
# their metadata with pip's own copy of `packaging`: it imports nothing of
# the packages being prepared, and runs none of their code.
#
# Input: a JSON file named by the one argument.
#   {"mode": "deps", "wheels": [{"path": "...", "extras": ["x"]}]}
#     -> {"dists": [{"path", "name", "version",
#                    "requires": [{"name", "extras", "specifier", "url",
#                                  "text"}]}]}
#        (only the dependencies whose markers hold in the sandbox)
#   {"mode": "check", "constraints": [{"name", "specifier", "version"}]}
#     -> {"unsatisfied": [index, ...]}
# Errors go to stderr as one line, with exit status 2.
import json
import sys
import zipfile

try:
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.utils import canonicalize_name
    from pip._vendor.packaging.version import Version
except ImportError:
    sys.stderr.write("pip's packaging module cannot be imported\n")
    sys.exit(2)

# The sandbox's Python: CPython 3.14 on WASI.
ENVIRONMENT = {
    "implementation_name": "cpython",
    "implementation_version": "3.14.0",
    "os_name": "posix",
    "platform_machine": "wasm32",
    "platform_python_implementation": "CPython",
    "platform_release": "",
    "platform_system": "WASI",
    "platform_version": "",
    "python_full_version": "3.14.0",
    "python_version": "3.14",
    "sys_platform": "wasi",
}


def metadata(path):
    with zipfile.ZipFile(path) as wheel:
        names = [
            n for n in wheel.namelist()
            if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
        ]
        if len(names) != 1:
            raise ValueError("it has no single .dist-info/METADATA")
        text = wheel.read(names[0]).decode("utf-8", "replace")
    headers, _, _ = text.partition("\n\n")
    fields = []
    for line in headers.splitlines():
        if line[:1] in (" ", "\t") and fields:
            fields[-1] = (fields[-1][0], fields[-1][1] + " " + line.strip())
        elif ":" in line:
            key, _, value = line.partition(":")
            fields.append((key.strip().lower(), value.strip()))
    return fields


def holds(requirement, extras):
    if requirement.marker is None:
        return True
    for extra in list(extras) or [""]:
        if requirement.marker.evaluate(dict(ENVIRONMENT, extra=extra)):
            return True
    return False


# Operators whose version must be a PEP 440 version. `===` (arbitrary
# equality) takes any text, paths included, which pip would read as a
# local project to build: it is never passed on.
PLAIN = ("==", "!=", "<=", ">=", "<", ">", "~=")


def plain_specifier(specifier):
    """The specifier rebuilt from parsed versions, or None if any clause is
    not a plain comparison with a PEP 440 version."""
    clauses = []
    for clause in specifier:
        version = clause.version
        if clause.operator not in PLAIN:
            return None
        if clause.operator in ("==", "!=") and version.endswith(".*"):
            version = version[:-2]
            star = ".*"
        else:
            star = ""
        try:
            parsed = Version(version)
        except Exception:
            return None
        clauses.append(f"{clause.operator}{parsed}{star}")
    return ",".join(sorted(clauses))


def deps(wheels):
    dists = []
    for item in wheels:
        path = item["path"]
        try:
            fields = metadata(path)
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            raise SystemExit(f"a downloaded wheel cannot be read ({e})")
        get = lambda key: next((v for k, v in fields if k == key), None)
        name, version = get("name"), get("version")
        if not name or not version:
            raise SystemExit("a downloaded wheel names no distribution or version")
        extras = [canonicalize_name(e) for e in item.get("extras", [])]
        requires = []
        for key, text in fields:
            if key != "requires-dist":
                continue
            try:
                req = Requirement(text)
            except Exception:
                raise SystemExit(f"{name} {version} has a requirement pip cannot read: {text}")
            if not holds(req, extras):
                continue
            requires.append({
                "name": canonicalize_name(req.name),
                "extras": sorted(req.extras),
                "specifier": plain_specifier(req.specifier),
                "url": req.url,
                "text": text,
            })
        dists.append({
            "path": path,
            "name": canonicalize_name(name),
            "version": str(Version(version)),
            "requires": requires,
        })
    return {"dists": dists}


def check(constraints):
    unsatisfied = []
    for i, c in enumerate(constraints):
        if not SpecifierSet(c["specifier"]).contains(c["version"], prereleases=True):
            unsatisfied.append(i)
    return {"unsatisfied": unsatisfied}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        request = json.load(f)
    if request["mode"] == "deps":
        answer = deps(request["wheels"])
    else:
        answer = check(request["constraints"])
    json.dump(answer, sys.stdout)


try:
    main()
except SystemExit as e:
    if isinstance(e.code, str):
        sys.stderr.write(e.code + "\n")
        sys.exit(2)
    raise
