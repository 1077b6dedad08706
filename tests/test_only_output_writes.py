"""Only actviz.output writes files: no other module opens a file for writing, renames, syncs,
truncates or removes one, or creates a folder. (The import-linter contract "only-output-writes"
keeps tempfile and shutil inside output; it cannot say this.)"""

from __future__ import annotations

import re
from pathlib import Path

import actviz

LIBRARY = Path(actviz.__file__).parent
OUTPUT = LIBRARY / "output"

# What writes a file in its own way, and the words that say so in the failure.
RAW_WRITES = {
    r"""\bopen\([^)]*?["'][rbt]*[wax+][rwabxt+]*["']""": "opens a file for writing",
    r"\bos\.(replace|rename|renames|fsync|remove|unlink|rmdir|removedirs|mkdir|makedirs)\(": (
        "renames, syncs, removes or creates through os"
    ),
    r"(?<!output)\.write_(bytes|text)\(": "writes a file with pathlib",
    r"\.(unlink|rmdir|mkdir|touch|truncate|symlink_to|hardlink_to)\(": (
        "creates or removes with pathlib"
    ),
    r"\bpyarrow\.parquet\b|\bParquetWriter\b": "writes Parquet",
    r"\b(tempfile|shutil)\b": "uses tempfile or shutil",
}


def test_only_output_writes_files() -> None:
    found = []
    for path in sorted(LIBRARY.rglob("*.py")):
        if OUTPUT in path.parents:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            for pattern, what in RAW_WRITES.items():
                if re.search(pattern, code):
                    rel = path.relative_to(LIBRARY.parent)
                    found.append(f"{rel}:{number} {what}: {line.strip()}")
    assert not found, "write files through actviz.output:\n" + "\n".join(found)
