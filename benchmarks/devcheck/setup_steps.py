"""The steps that say what the run measures on: the carried install, the environment, the device
profile edgekit detects."""
from __future__ import annotations

from pathlib import Path

from devcheck.base import ROOT, Context, edgekit


def install_commands(ctx: Context, folder: Path) -> list[list[str]]:
    pip = [ctx.python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
           "--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade",
           "--target", str(ctx.site)]
    # carried wheels first (setuptools among them: edgekit builds with the newer one), then
    # edgekit itself from this working tree, so the code measured is the code in the tree
    return [[*pip, *map(str, sorted(ctx.wheels.glob("*.whl")))],
            [*pip, "--no-build-isolation", str(ROOT)]]


def environment_commands(ctx: Context, folder: Path) -> list[list[str]]:
    code = (
        "import importlib.metadata as m, json, platform, shutil, subprocess, sys\n"
        "names = ['torch', 'triton', 'onnx', 'onnxruntime', 'onnxruntime-gpu', 'tensorrt',"
        " 'nvidia-ml-py', 'numpy', 'spikingjelly', 'edgekit']\n"
        "v = {}\n"
        "for n in names:\n"
        "    try: v[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: v[n] = None\n"
        "smi = shutil.which('nvidia-smi')\n"
        "q = 'name,driver_version,memory.total,power.limit,clocks.max.sm'\n"
        "gpu = subprocess.run([smi, '--query-gpu=' + q, '--format=csv'], capture_output=True,"
        " text=True).stdout.strip().splitlines() if smi else []\n"
        "doc = {'python': sys.version.split()[0], 'platform': platform.platform(),"
        " 'cpu_count': __import__('os').cpu_count(), 'versions': v, 'nvidia_smi': gpu}\n"
        f"open({str(folder / 'environment.json')!r}, 'w').write(json.dumps(doc, indent=1))\n")
    return [[ctx.python, "-c", code]]


def devices_commands(ctx: Context, folder: Path) -> list[list[str]]:
    return [edgekit(ctx, "devices", "--json", str(folder / "devices.json"))]
