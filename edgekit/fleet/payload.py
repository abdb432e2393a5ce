"""An artifact packed for the wire: exported once on the client, hashed, unpacked on a device.

ONNX is portable, so the client exports each model once and Dask ships the bytes to every device
kind that profiles it. Every file carries its SHA-256, checked on the device before anything is
written or run; the artifact's own manifest hashes are checked again when the profiler loads it.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import UsageError


@dataclass(frozen=True)
class Payload:
    name: str  # what the user called it: registry name, checkpoint or artifact folder
    files: dict[str, bytes]  # file name (no folders) -> contents
    sha256: dict[str, str]  # file name -> hex digest
    folder: bool  # an artifact folder (True) or a single .onnx file

    @property
    def digest(self) -> str:
        """One hash over the files: the same export is the same payload."""
        joined = "".join(f"{n}:{h};" for n, h in sorted(self.sha256.items()))
        return hashlib.sha256(joined.encode()).hexdigest()

    @property
    def size_bytes(self) -> int:
        return sum(len(data) for data in self.files.values())

    def unpack(self, into: Path) -> Path:
        """The artifact folder (or .onnx file) written under ``into``, after checking hashes."""
        for file_name, data in self.files.items():
            if Path(file_name).name != file_name or file_name in ("", ".", ".."):
                raise UsageError(f"payload of {self.name}: file name {file_name!r} is not plain")
            if hashlib.sha256(data).hexdigest() != self.sha256.get(file_name):
                raise UsageError(f"payload of {self.name}: {file_name} arrived corrupt (SHA-256 "
                                 f"does not match)")
        folder = into / "artifact"
        folder.mkdir(parents=True)
        for file_name, data in self.files.items():
            (folder / file_name).write_bytes(data)
        return folder if self.folder else folder / next(iter(self.files))


def pack(name: str, path: str | Path) -> Payload:
    """An artifact folder's files (or one .onnx file) as a payload."""
    from edgekit.exporters import is_artifact

    path = Path(path)
    if path.is_dir():
        if not is_artifact(path):
            raise UsageError(f"{path} is a folder but not an edgekit artifact (no manifest.json)")
        nested = [p.name for p in path.iterdir() if not p.is_file()]
        if nested:
            raise UsageError(f"{path}: the fleet ships flat artifact folders, this one holds "
                             f"{', '.join(sorted(nested))}")
        files = {p.name: p.read_bytes() for p in sorted(path.iterdir())}
    elif path.suffix == ".onnx" and path.is_file():
        files = {path.name: path.read_bytes()}
    else:
        raise UsageError(f"{path} is neither an artifact folder nor an .onnx file")
    return Payload(name=name, files=files, folder=path.is_dir(),
                   sha256={n: hashlib.sha256(d).hexdigest() for n, d in files.items()})
