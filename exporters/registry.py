"""The formats ``edgekit export --to`` makes: each registers itself here with one call.

An ``ExporterSpec`` tells ``edgekit.export`` and the CLI everything they would otherwise learn by
branching on the format's name: whether it builds from the model or from the FP32 ONNX artifact
(which ``export`` makes first, or takes as TARGET), the function that writes it, the CLI options
it honours and why it refuses some, and a check that fails in one line before any work. The
built-in formats (onnx, tensorrt, jetson-bundle, nir) register in ``edgekit.exporters.run``; a
plugin registers its own the same way (``edgekit.plugins``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekit.errors import UsageError
from edgekit.extensions import Registry
from edgekit.fileio import check_output

if TYPE_CHECKING:
    from edgekit.exporters.artifact import Artifact
    from edgekit.exporters.calibration import CalibrationSamples
    from edgekit.exporters.options import ExportOptions
    from edgekit.targets import ModelSource, Target


@dataclass(frozen=True, kw_only=True)
class ExportJob:
    """What an exporter is handed once TARGET is resolved and the options are checked."""

    to: str  # the format's name
    target: Target  # the resolved TARGET
    output: str | Path | None  # the folder asked for; None: the format's default (``folder``)
    options: ExportOptions
    echo: Callable[[str], None]  # progress lines (the CLI prints them)
    protected: tuple[Path, ...] = ()  # inputs no output may overwrite: TARGET's, --calib-data
    # from_onnx formats: the FP32 ONNX artifact, where it came from (for the manifest), and the
    # int8 calibration samples when --precision int8 asked for them.
    artifact: Artifact | None = None
    origin: str | None = None
    calibration: CalibrationSamples | None = None

    @property
    def stem(self) -> str:
        """The source model's name as a folder name: ``ds-cnn:wide`` -> ``ds-cnn-wide``."""
        name = self.artifact.source_name if self.artifact is not None else self.target.name
        return name.replace(":", "-")

    def folder(self, suffix: str | None = None) -> Path:
        """The output folder (default ``./STEM-SUFFIX``, suffix the format's name), refused in
        one line where it would overwrite an input or a folder edgekit did not write."""
        out = Path(self.output) if self.output is not None else \
            Path(f"{self.stem}-{suffix or self.to}")
        self.check_output(out)
        return out

    def check_output(self, out: str | Path) -> None:
        """Refuse ``out`` in one line where it would overwrite an input (``protected``) or a
        folder edgekit did not write (unless ``--force``): the one check every format makes."""
        check_output(out, inputs=self.protected, force=self.options.force)

    def model(self) -> ModelSource:
        """TARGET as a PyTorch model; an artifact or an ONNX file is refused in one line."""
        from edgekit.targets import ModelSource

        if not isinstance(self.target, ModelSource):
            raise UsageError(f"--to {self.to} exports a PyTorch model; {self.target.name} is not "
                             f"one", hint="give the model, its checkpoint or file.py:callable")
        return self.target


@dataclass(frozen=True, kw_only=True)
class ExporterSpec:
    name: str  # the --to value
    description: str  # one line: what it makes, for --help
    from_onnx: bool  # True: built from the FP32 ONNX artifact; False: from the PyTorch model
    # (job) -> a result with ``folder`` (and, where it has them, ``manifest`` and ``validation``,
    # a ValidationReport); raises ValidationFailed beyond tolerance.
    export: Callable[[ExportJob], Any]
    # The format's CLI options it honours, by parameter name ("precision", "workspace"); any
    # other format option given with it is an error naming the formats that take it.
    options: frozenset[str] = frozenset()
    # Options it refuses with a reason of its own: ((parameter names, "apply to ..."), ...).
    refusals: tuple[tuple[tuple[str, ...], str], ...] = ()
    # Fail in one line before any work (a library or GPU it needs is missing): (options) -> None.
    check: Callable[[ExportOptions], None] | None = None
    # Lines the CLI prints after the export (after the validation lines); None: none.
    summary: Callable[[Any], list[str]] | None = None


# edgekit.exporters.run registers the built-in formats.
_EXPORTERS: Registry[ExporterSpec] = Registry("export format", builtins=("edgekit.exporters.run",))


def register_exporter(spec: ExporterSpec) -> ExporterSpec:
    # the built-ins first, so they keep their places in --to and its messages
    _EXPORTERS.load_builtins()
    return _EXPORTERS.add(spec.name, spec)


def list_exporters() -> list[ExporterSpec]:
    """In registration order: the built-ins first (onnx, tensorrt, jetson-bundle, nir)."""
    return _EXPORTERS.entries()


def exporter_names() -> tuple[str, ...]:
    return tuple(_EXPORTERS.names())


def get_exporter(name: str) -> ExporterSpec:
    return _EXPORTERS.get(name)
