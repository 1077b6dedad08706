"""The output folder: safe names, layout, atomic writes and the append-only journal. The one
package that writes files.

Every file is written under a temporary name in its final folder and renamed into place, so an
interrupted run never leaves a half-written PNG or manifest that looks complete; ledgers, logs
and resume states grow through one :class:`Journal`.
"""

from __future__ import annotations

from actviz.output.files import (
    TMP_MARK,
    UNDECODED,
    atomic_file,
    atomic_path,
    clear_outputs,
    discard_files,
    opened,
    prepare_out_dir,
    remove_made,
    remove_temporaries,
    remove_written,
    write_bytes,
    write_error,
    write_json,
    write_state,
    write_tensor,
)
from actviz.output.journal import Journal, whole
from actviz.output.names import REPORT_DIR, image_dirs, layer_filename, order_width, safe_name
from actviz.output.tables import ParquetParts, TextPart, naming

__all__ = [
    "REPORT_DIR",
    "TMP_MARK",
    "UNDECODED",
    "Journal",
    "ParquetParts",
    "TextPart",
    "atomic_file",
    "atomic_path",
    "clear_outputs",
    "discard_files",
    "image_dirs",
    "layer_filename",
    "order_width",
    "naming",
    "opened",
    "prepare_out_dir",
    "remove_made",
    "remove_temporaries",
    "remove_written",
    "safe_name",
    "whole",
    "write_bytes",
    "write_error",
    "write_json",
    "write_state",
    "write_tensor",
]
