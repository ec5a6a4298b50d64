"""The files of an incident bundle, as bundle.py found them (kind, stream, order).

Moved out of bundle.py so that the source parsers, which read :class:`InputFile`,
depend on this small module and not on the bundle walker (which depends on them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .workspace import Workspace


@dataclass(frozen=True)
class Found:
    """How the analysis that read a file found it, for an analysis of some of its files given by the
    paths read (an incident of a bundle of several, analysed on its own: render/each.py ``Unit``).
    That analysis reads each file as it was found: shown by the same name (``b.zip!vllm.log``,
    ``bundle/a/vllm.log``; never the private folder an archive was unpacked into, removed on exit),
    a file of a folder or an archive (``in_bundle``), standard input's copy (``is_stdin``), and it
    never writes into the same files of the user's (``originals``)."""

    display: str
    in_bundle: bool = False
    is_stdin: bool = False
    # the user's files it was read out of (never written): itself, or the archive that holds it
    originals: tuple[Path, ...] = ()
    # what reading it there said of it (a UTF-16 file read through a UTF-8 copy, a copy read once) and the
    # other names it was found by there: the path given is what was read, which says neither again
    warnings: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()


@dataclass
class InputFile:
    file_id: int
    path: Path  # what is read (may be a private temporary copy)
    display: str  # provenance name shown in outputs
    kind: str
    compression: str | None
    size: int
    mtime: float | None
    gzip_mtime: int | None
    stream: int = -1
    order: int = 0
    is_stdin: bool = False
    sniff_score: int = 0
    forced_kind: bool = False
    warnings: list[str] = field(default_factory=list)
    # The other names it was found by (a hard link, a symbolic link, a byte-for-byte copy elsewhere in
    # the bundle that carries the same time: read once, sources/copies.py): what a name says (a scrape
    # time in it) is read from them too when its own name says nothing.
    aliases: list[str] = field(default_factory=list)
    # What sniffing found damaged in its bytes (a cut last line, a hole of NULs), each "display: ...":
    # bundle warnings, said by bundle.collect for the files read only (a copy that is not read,
    # sources/copies.py, holds the same content: its damage is the file read's, said once).
    damage: list[str] = field(default_factory=list)
    in_bundle: bool = False  # found inside a folder or an archive (not named on the command line)
    # the user's files it was read out of (bundle.collect): itself, or the archive(s) that hold it
    read_out_of: tuple[Path, ...] = ()

    def found(self) -> Found:
        """How it was found, for an analysis given its path (:class:`Found`)."""
        return Found(
            self.display, self.in_bundle, self.is_stdin, self.read_out_of, tuple(self.warnings), tuple(self.aliases)
        )

    def names(self) -> list[str]:
        """Its display name, then the other names it was found by."""
        return [self.display, *self.aliases]

    def written_at(self) -> float | None:
        """When its content was last written, as the file says: a gzip file's header time (``gzip`` and
        ``gzip -c`` keep the original file's modification time there; the .gz's own is the moment it was
        compressed or copied), else its modification time (pipeline's ``written``, timebase's year)."""
        if self.compression == "gzip" and self.gzip_mtime:
            return float(self.gzip_mtime)
        return self.mtime

    def read_at(self) -> float | None:
        """Standard input: when preemptlog read it (epoch seconds), the modification time of its private
        copy, written as the input was read (``inputs.walk._spool_stdin``, or a later copy made from
        it): what the input holds was written no later. None for a named file (its own ``mtime`` says
        when it was written) or when the copy cannot be read."""
        if not self.is_stdin:
            return None
        try:
            return self.path.stat().st_mtime
        except OSError:
            return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.display,
            "kind": self.kind,
            "compression": self.compression,
            "size": self.size,
            "stream": self.stream,
            "order": self.order,
            "kind_forced": self.forced_kind,
            "warnings": list(self.warnings),
        }


@dataclass
class Bundle:
    files: list[InputFile]
    workdir: Workspace
    warnings: list[str] = field(default_factory=list)  # damage or skipped input: the run is PARTIAL
    originals: list[Path] = field(default_factory=list)  # every file and archive read as given (never written)
    _streams: dict[int, list[InputFile]] | None = field(default=None, repr=False, compare=False)

    def of_kind(self, kind: str) -> list[InputFile]:
        return [f for f in self.files if f.kind == kind]

    @property
    def unrecognised(self) -> list[InputFile]:
        return [f for f in self.files if f.kind in UNRECOGNISED]

    def streams(self) -> dict[int, list[InputFile]]:
        """Stream id -> its files, oldest first (cached: call refresh_streams() after reassigning)."""
        if self._streams is None:
            out: dict[int, list[InputFile]] = {}
            for f in sorted(self.files, key=lambda f: (f.stream, f.order)):
                if f.stream >= 0:
                    out.setdefault(f.stream, []).append(f)
            self._streams = out
        return self._streams

    def refresh_streams(self) -> None:
        self._streams = None

    def stream_name(self, stream: int) -> str:
        files = self.streams().get(stream, [])
        if not files:
            return f"stream {stream}"
        if len(files) == 1:
            return files[0].display
        return f"{files[-1].display} (+{len(files) - 1} rotated)"


UNRECOGNISED = ("unknown", "binary", "empty", "unreadable", "document")
