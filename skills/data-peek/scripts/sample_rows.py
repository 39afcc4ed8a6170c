"""Prints the rows of a CSV file that match every --where filter, as JSON.

usage: python3 scripts/sample_rows.py FILE.csv [--where COLUMN=VALUE]... [--rows N]

FILE is relative to the workspace. Prints {"matched": M, "rows": [...]}:
the number of matching rows, then the first N of them (default 5).
"""

import argparse
import csv
import json
import sys


def main():
    parser = argparse.ArgumentParser(description="Matching rows of a CSV file, as JSON.")
    parser.add_argument("file", help="CSV file, relative to the workspace")
    parser.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE")
    parser.add_argument("--rows", type=int, default=5, help="rows to print (default 5)")
    args = parser.parse_args()

    filters = []
    for item in args.where:
        column, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--where {item!r}: use COLUMN=VALUE")
        filters.append((column, value))

    with open(args.file, newline="") as f:
        reader = csv.DictReader(f)
        unknown = [c for c, _ in filters if c not in (reader.fieldnames or [])]
        if unknown:
            print(f"no column {unknown[0]!r}; columns: {', '.join(reader.fieldnames or [])}", file=sys.stderr)
            return 2
        matched, shown = 0, []
        for row in reader:
            if all(row[c] == v for c, v in filters):
                matched += 1
                if len(shown) < args.rows:
                    shown.append(row)
    print(json.dumps({"matched": matched, "rows": shown}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
