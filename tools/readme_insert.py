#!/usr/bin/env python3
"""Put a real run's output into a README, under its marker comment.

  tools/readme_insert.py lessons/02-memory-types/README.md "H200-OUTPUT: lesson02" out.txt
  tools/readme_insert.py README.md "H200-BENCH: lesson05" table.md --raw

The marker is an HTML comment line that starts with "<!-- " + MARKER. What follows it up to the
next blank line after a fenced block (or the block the previous run inserted, which this script
wraps in <!-- begin/end --> comments) is replaced, so the script can be re-run after every new
measurement. Without --raw the text goes in a ```text fence; with --raw it is inserted as
markdown (a table from tools/plot_bench.py --table, an image link). When README.md has no such
marker and a RESULTS.md beside it has, the text goes into RESULTS.md (lessons whose full outputs
and tables live there; tools/bench_report.py relies on this).
"""
import argparse
import os
import re
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("readme")
    p.add_argument("marker", help='e.g. "H200-OUTPUT: lesson02"')
    p.add_argument("file", help="the text to insert ('-' for stdin)")
    p.add_argument("--raw", action="store_true", help="insert as markdown, not in a code fence")
    a = p.parse_args()

    text = sys.stdin.read() if a.file == "-" else open(a.file, encoding="utf-8").read()
    text = text.rstrip("\n")
    lines = open(a.readme, encoding="utf-8").read().split("\n")
    at = [i for i, l in enumerate(lines) if l.strip().startswith("<!-- " + a.marker)]
    # A lesson whose runs moved to RESULTS.md keeps the marker there, beside its README.
    results = os.path.join(os.path.dirname(a.readme), "RESULTS.md")
    if not at and os.path.basename(a.readme) == "README.md" and os.path.exists(results):
        a.readme = results
        lines = open(a.readme, encoding="utf-8").read().split("\n")
        at = [i for i, l in enumerate(lines) if l.strip().startswith("<!-- " + a.marker)]
    if len(at) != 1:
        sys.exit("%s: expected one marker '<!-- %s', found %d" % (a.readme, a.marker, len(at)))
    i = at[0] + 1
    # Drop what a previous run inserted, or a placeholder code fence right under the marker.
    if i < len(lines) and lines[i].strip() == "<!-- begin: inserted by tools/readme_insert.py -->":
        j = i
        while j < len(lines) and lines[j].strip() != "<!-- end: inserted by tools/readme_insert.py -->":
            j += 1
        del lines[i : j + 1]
    elif i < len(lines) and lines[i].startswith("```"):
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if re.search(r"to be filled|placeholder", "\n".join(lines[i : j + 1]), re.I):
            del lines[i : j + 1]
    body = text.split("\n") if a.raw else ["```text"] + text.split("\n") + ["```"]
    lines[i:i] = ["<!-- begin: inserted by tools/readme_insert.py -->"] + body + [
        "<!-- end: inserted by tools/readme_insert.py -->"
    ]
    open(a.readme, "w", encoding="utf-8").write("\n".join(lines))
    print("%s: inserted %d lines under '%s'" % (a.readme, len(body), a.marker))


if __name__ == "__main__":
    main()
