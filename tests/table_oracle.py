"""Reading ``stats.parquet`` back whole: the oracle the table tests compare against."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actviz.errors import OutputError, first_line
from actviz.stats.table import TABLE_FORMAT


def read_table_rows(path: Path) -> list[dict[str, Any]]:
    """Every row of a ``stats.parquet`` as a dict (null -> None).

    Raises:
        OutputError: If the file cannot be read or was not written by this format.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(str(path))
    except (OSError, pa.ArrowInvalid) as exc:
        raise OutputError(
            f"cannot read {path}: {first_line(exc)}; run the command again to write it"
        ) from None
    found = (table.schema.metadata or {}).get(b"actviz.format")
    if found != TABLE_FORMAT.encode():
        raise OutputError(
            f"{path} is not an actviz statistics table of format {TABLE_FORMAT} "
            f"(found {found!r}); run the command again to write it"
        )
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows
