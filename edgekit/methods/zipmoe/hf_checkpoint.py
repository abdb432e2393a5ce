"""Reading a Hugging Face MoE checkpoint: ``config.json`` plus safetensors (one file or shards).

Tensors are read one at a time through ``safetensors.safe_open`` (memory-mapped, never unpickled),
so a checkpoint larger than memory can still be compressed tensor by tensor.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open

from edgekit.errors import UsageError
from edgekit.fileio import read_json_object
from edgekit.methods.zipmoe.config import PROJECTIONS, MoEConfig, parse_config
from edgekit.schema import STR, MapOf, Object, check

INDEX_FILE = "model.safetensors.index.json"
INDEX_FIELDS = Object({"weight_map": MapOf(STR)})
# the dtypes the model computes in (the codec's splits), as safetensors names them
_DTYPES = ("BF16", "F16", "F32")


class Checkpoint:
    """A checkpoint folder: its config, and its tensors by Hugging Face name."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise UsageError(f"{self.folder} is not a folder",
                             hint="give a Hugging Face checkpoint folder (config.json + "
                                  "*.safetensors)")
        config_path = self.folder / "config.json"
        if not config_path.is_file():
            raise UsageError(f"{self.folder}: no config.json")
        self.config_dict = read_json_object(config_path)
        self.weight_map = self._weight_map()
        has_bias = any(name.endswith("self_attn.q_proj.bias") for name in self.weight_map)
        self.config: MoEConfig = parse_config(self.config_dict, str(config_path),
                                              attention_bias=has_bias)
        self._handles: dict[Path, object] = {}

    def _weight_map(self) -> dict[str, Path]:
        index = self.folder / INDEX_FILE
        if index.is_file():
            mapping = check(read_json_object(index), INDEX_FIELDS, str(index))["weight_map"]
            return {name: self.folder / file for name, file in mapping.items()}
        files = sorted(self.folder.glob("*.safetensors"))
        if not files:
            raise UsageError(f"{self.folder}: no *.safetensors files",
                             hint="edgekit reads safetensors only (never pickled .bin files)")
        out: dict[str, Path] = {}
        for file in files:
            with self._open(file) as handle:
                out.update({name: file for name in handle.keys()})
        return out

    @staticmethod
    def _open(file: Path):  # noqa: ANN205 - safetensors' handle type is private
        try:
            return safe_open(str(file), framework="pt")
        except Exception as exc:  # safetensors raises its own error types
            raise UsageError(f"{file}: not a readable safetensors file ({exc})") from exc

    def names(self) -> list[str]:
        return list(self.weight_map)

    def get(self, name: str) -> torch.Tensor:
        file = self.weight_map.get(name)
        if file is None:
            raise UsageError(f"{self.folder}: tensor '{name}' is missing",
                             hint=f"a {self.config.family} checkpoint needs it")
        if not file.is_file():
            raise UsageError(f"{file}: missing shard (holds '{name}')")
        handle = self._handles.get(file)
        if handle is None:
            handle = self._handles[file] = self._open(file).__enter__()
        return handle.get_tensor(name)

    def check_complete(self) -> None:
        """Every tensor the family needs is present with the shape its config implies and a
        floating dtype the model computes in (checked before compress writes anything)."""
        for name, shape in self.config.tensor_shapes().items():
            if name not in self.weight_map:
                raise UsageError(f"{self.folder}: tensor '{name}' is missing",
                                 hint=f"expected in a {self.config.family} checkpoint")
            handle = self._handles.get(self.weight_map[name])
            if handle is None:
                handle = self._handles[self.weight_map[name]] = \
                    self._open(self.weight_map[name]).__enter__()
            got = tuple(handle.get_slice(name).get_shape())
            if got != shape:
                raise UsageError(f"{self.folder}: tensor '{name}' has shape {list(got)}, "
                                 f"config.json implies {list(shape)}")
            dtype = handle.get_slice(name).get_dtype()
            if dtype not in _DTYPES:
                raise UsageError(f"{self.folder}: tensor '{name}' has dtype {dtype}, the model "
                                 f"needs one of {', '.join(_DTYPES)}")

    def expert_names(self) -> Iterator[tuple[int, int, str, str]]:
        """``(layer, expert, projection, name)`` for every routed expert matrix."""
        cfg = self.config
        for layer in cfg.moe_layers:
            for expert in range(cfg.num_experts):
                for proj in PROJECTIONS:
                    yield layer, expert, proj, cfg.expert_tensor_name(layer, expert, proj)

    def close(self) -> None:
        for handle in self._handles.values():
            handle.__exit__(None, None, None)
        self._handles.clear()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

