"""The machinery every artifact shares: versioned schemas, atomic writes, strict reads.

An artifact is one Parquet file. Its schema is declared once (an
``ArtifactSchema``) and its name and version are stored in the Parquet
key-value metadata, so a reader can tell which contract a file was written
under. The rules:

- A write is atomic: a temp file in the same folder, fsynced, then renamed.
  A crash never leaves a half-written artifact under the final name.
- A write fills absent nullable columns with nulls and refuses rows that leave
  a required (non-nullable) column empty.
- A read checks every declared column (present, compatible type) and the
  version (a newer *major* version is refused), and reports every problem in
  one ``SchemaMismatch`` naming the file.
- Unknown extra columns are kept as they are, on read and on write, so a newer
  writer's additions survive an older stage's read/modify/write.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from termrl.errors import ArtifactError, SchemaMismatch

__all__ = [
    "ArtifactSchema",
    "Rows",
    "artifact_info",
    "read_artifact",
    "read_artifact_with_added",
    "write_artifact",
]

NAME_KEY = b"termrl.artifact"
VERSION_KEY = b"termrl.schema_version"

Rows = pa.Table | Iterable[Mapping[str, Any]]


@dataclass(frozen=True)
class ArtifactSchema:
    """One artifact's contract: its name, ``major.minor`` version and columns."""

    name: str
    version: str
    schema: pa.Schema

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def column_names(self) -> list[str]:
        return self.schema.names


def _normalize(t: pa.DataType) -> pa.DataType:
    """Map representation variants (large_string, large_list) to their plain form."""
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        return pa.list_(_normalize(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _normalize(f.type)) for f in t])
    return t


def _compatible(found: pa.DataType, expected: pa.DataType) -> bool:
    """Whether a column of type ``found`` can be read losslessly as ``expected``."""
    found, expected = _normalize(found), _normalize(expected)
    if found.equals(expected) or pa.types.is_null(found):
        return True
    if pa.types.is_integer(found) and pa.types.is_integer(expected):
        return True  # checked value-by-value by the safe cast
    if pa.types.is_floating(expected) and (
        pa.types.is_floating(found) or pa.types.is_integer(found)
    ):
        return True
    if pa.types.is_list(found) and pa.types.is_list(expected):
        return _compatible(found.value_type, expected.value_type)
    if pa.types.is_struct(found) and pa.types.is_struct(expected):
        names = {f.name: f.type for f in found}
        return all(f.name in names and _compatible(names[f.name], f.type) for f in expected)
    return False


def _conform(table: pa.Table, spec: ArtifactSchema, where: str, *, fill_missing: bool) -> pa.Table:
    """Cast declared columns to their declared types; keep extra columns after them."""
    problems: list[str] = []
    columns: list[pa.Array] = []
    fields: list[pa.Field] = []
    for field in spec.schema:
        if field.name not in table.column_names:
            if fill_missing and field.nullable:
                columns.append(pa.nulls(table.num_rows, field.type))
                fields.append(field)
            else:
                problems.append(f"column '{field.name}' is missing (expected {field.type})")
            continue
        column = table.column(field.name)
        if not _compatible(column.type, field.type):
            problems.append(f"column '{field.name}' has type {column.type}, expected {field.type}")
            continue
        try:
            column = column.cast(field.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            problems.append(f"column '{field.name}' cannot be read as {field.type}: {exc}")
            continue
        if not field.nullable and column.null_count:
            problems.append(
                f"column '{field.name}' has {column.null_count} empty value(s) but is required"
            )
            continue
        columns.append(column)
        fields.append(field)
    if problems:
        raise SchemaMismatch(
            f"{where}: not a valid '{spec.name}' artifact (schema {spec.version}):\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
    for name in table.column_names:
        if name not in spec.schema.names:
            columns.append(table.column(name))
            fields.append(table.schema.field(name))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _to_table(rows: Rows, spec: ArtifactSchema) -> pa.Table:
    if isinstance(rows, pa.Table):
        return rows
    rows = list(rows)
    if not rows:
        return spec.schema.empty_table()
    present = {key for row in rows for key in row}
    names = [n for n in spec.schema.names if n in present]
    names += sorted(present - set(spec.schema.names))
    data: dict[str, pa.Array] = {}
    for name in names:
        field_type = spec.schema.field(name).type if name in spec.schema.names else None
        try:
            data[name] = pa.array([row.get(name) for row in rows], type=field_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise SchemaMismatch(
                f"'{spec.name}' rows: column '{name}' does not fit {field_type}: {exc}"
            ) from exc
    return pa.table(data)


def write_artifact(path: str | os.PathLike, rows: Rows, spec: ArtifactSchema) -> Path:
    """Validate ``rows`` against ``spec`` and write them atomically to ``path``."""
    path = Path(path)
    table = _conform(_to_table(rows, spec), spec, f"writing {path}", fill_missing=True)
    metadata = dict(table.schema.metadata or {})
    metadata[NAME_KEY] = spec.name.encode()
    metadata[VERSION_KEY] = spec.version.encode()
    table = table.replace_schema_metadata(metadata)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            pq.write_table(table, handle, compression="zstd")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def artifact_info(path: str | os.PathLike) -> tuple[str | None, str | None]:
    """The (artifact name, schema version) stored in a Parquet file's metadata."""
    try:
        metadata = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowInvalid) as exc:
        raise ArtifactError(f"{path}: cannot read Parquet file: {exc}") from exc
    name, version = metadata.get(NAME_KEY), metadata.get(VERSION_KEY)
    return (name.decode() if name else None, version.decode() if version else None)


def read_artifact(path: str | os.PathLike, spec: ArtifactSchema) -> pa.Table:
    """Read ``path`` and check it against ``spec``; extra columns are kept."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"{path}: no such artifact file")
    name, version = artifact_info(path)
    if name is not None and name != spec.name:
        raise SchemaMismatch(f"{path}: is a '{name}' artifact, expected '{spec.name}'")
    if version is not None:
        try:
            major = int(version.split(".")[0])
        except ValueError as exc:
            raise SchemaMismatch(f"{path}: unreadable schema version {version!r}") from exc
        if major > spec.major:
            raise SchemaMismatch(
                f"{path}: '{spec.name}' schema version {version} is newer than this termrl "
                f"understands ({spec.version}); upgrade termrl to read it"
            )
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise ArtifactError(f"{path}: cannot read Parquet file: {exc}") from exc
    table = _conform(table, spec, str(path), fill_missing=False)
    return table.replace_schema_metadata(None)


def read_artifact_with_added(
    path: str | os.PathLike, spec: ArtifactSchema, added: Iterable[str]
) -> pa.Table:
    """``read_artifact`` for a schema that gained the columns ``added`` in later versions: a file
    written before them reads with those columns as nulls. Unknown extra columns are kept, last."""
    added = list(added)
    try:
        present = set(pq.read_schema(path).names)
    except (OSError, pa.ArrowInvalid):
        present = set(added)  # let read_artifact report the unreadable file
    missing = [spec.schema.field(name) for name in added if name not in present]
    if not missing:
        return read_artifact(path, spec)
    older = pa.schema([f for f in spec.schema if f not in missing])
    table = read_artifact(path, ArtifactSchema(spec.name, spec.version, older))
    for column in missing:
        table = table.append_column(column, pa.nulls(table.num_rows, column.type))
    extra = [name for name in table.column_names if name not in spec.column_names]
    return table.select(spec.column_names + extra)
