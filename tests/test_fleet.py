"""The device fleet on a real local Dask cluster: a scheduler and worker processes started by
``edgekit fleet``, labelled as different device kinds with ``--as-device`` (all really this
CPU, which every report they return says)."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from edgekit.fleet.child import DONE, RESULT_FILE, lines_of
from tests.oneline import one_line_error

distributed = pytest.importorskip("distributed", reason="the fleet extra is not installed")

EXE = [sys.executable, "-m", "edgekit"]
ORIN, XAVIER = "jetson-orin-nano-8gb", "jetson-xavier-nx"
HERE = "generic-x86-64-cpu"  # what every worker really is
START_S = 120.0  # processes import torch to detect their device: slow on a loaded 2-core box


class Cluster:
    """``edgekit fleet scheduler`` on a free localhost port and ``edgekit fleet worker``s, each in
    its own session so a test can kill a worker with its child process, as a device vanishes."""

    def __init__(self) -> None:
        self.scheduler = subprocess.Popen([*EXE, "fleet", "scheduler", "--port", "0"],
                                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                          text=True, start_new_session=True)
        self.workers: dict[str, subprocess.Popen] = {}
        try:
            self.address = self._listening()
        except BaseException:
            self.close()  # no scheduler left running after a failed start
            raise

    def _listening(self) -> str:
        """The address from the scheduler's "listening" line. The lines are read by a thread:
        select() on the pipe beside a buffered readline() missed the line whenever one read had
        taken it into the buffer with the lines before it (a loaded machine, where the scheduler
        writes them all before the test reads), and waited out START_S on a running scheduler."""
        lines = lines_of(self.scheduler.stderr)
        started, said = time.monotonic(), []
        while (left := started + START_S - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                if self.scheduler.poll() is not None and lines.empty():
                    break  # exited without saying where it listens
                continue
            if line is None:
                break  # its stderr closed: it exited without saying where it listens
            if line.startswith("fleet scheduler listening on "):
                return line.split()[-1]
            said.append(line.rstrip())
        raise RuntimeError(f"the scheduler did not start in {time.monotonic() - started:.0f} s "
                           f"(exit code {self.scheduler.poll()}); it said: {said[-8:]}")

    def add(self, name: str, device: str) -> None:
        self.workers[name] = subprocess.Popen(
            [*EXE, "fleet", "worker", self.address, "--as-device", device, "--name", name],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
            start_new_session=True)

    def client(self):
        from edgekit.fleet import connect

        client = connect(self.address)
        client.wait_for_workers(len(self.workers), timeout=START_S)
        return client

    def kill(self, name: str) -> None:
        os.killpg(self.workers[name].pid, signal.SIGKILL)
        self.workers[name].wait()

    def close(self) -> None:
        for proc in [*self.workers.values(), self.scheduler]:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def cluster():
    made = Cluster()
    yield made
    made.close()


def test_a_child_runs_every_job_sent_in_one_write(tmp_path):
    """Two job lines in one write reach the child in one read: both must run. (It waited with
    select() beside a buffered readline(), which left the second line unseen in the buffer
    until the idle timeout ended the child with the job not run.)"""
    jobs = [tmp_path / "a", tmp_path / "b"]
    for job in jobs:
        job.mkdir()  # no settings: each job fails fast, with its error in result.json
    child = subprocess.Popen([sys.executable, "-m", "edgekit.fleet.child", "serve", "30"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child.stdin.write("".join(f"{job}\n" for job in jobs))
        child.stdin.flush()
        done = [line.split()[-1] for line in _lines_until(child.stdout, DONE, 2, START_S)]
        assert done == [str(job) for job in jobs]
        for job in jobs:
            assert "error" in json.loads((job / RESULT_FILE).read_text())
        child.stdin.close()  # stdin closed: the child exits at once, not after its idle time
        assert child.wait(timeout=30) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _lines_until(stream, prefix: str, count: int, timeout_s: float) -> list[str]:
    """The first ``count`` lines of ``stream`` that start with ``prefix``, within ``timeout_s``."""
    lines, found = lines_of(stream), []
    deadline = time.monotonic() + timeout_s
    while len(found) < count:
        line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        assert line is not None, f"the stream ended after {found}"
        if line.startswith(prefix):
            found.append(line.strip())
    return found


def _cli(*args: str) -> tuple[int, str]:
    from edgekit.cli import cli

    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_compare_across_device_kinds_then_merge_saved_reports(cluster, trained_mlp, tmp_path):
    from edgekit.exporters import export_onnx
    from edgekit.targets import load_model_source

    cluster.add("orin-1", ORIN)
    cluster.add("xavier-1", XAVIER)
    artifact = export_onnx(load_model_source(str(trained_mlp)), tmp_path / "mlp-art").folder
    with cluster.client():
        pass  # both workers joined
    code, out = _cli("fleet", "status", cluster.address, "--json", str(tmp_path / "st.json"))
    assert code == 0, out
    status = json.loads((tmp_path / "st.json").read_text())["devices"]
    assert [(d["profile"], d["name"], d["busy"]) for d in status] == [
        (ORIN, "orin-1", False), (XAVIER, "xavier-1", False)]
    assert all(d["sensors"] == [] and d["edgekit"] for d in status)  # this VM has no sensors
    assert all(d["measured_on"] == HERE for d in status)  # labelled, and says so
    one_line_error(*_cli("fleet", "worker", cluster.address, "--device", ORIN), 2,
                   f"this machine is not a {ORIN}", "--as-device")  # a claim is checked
    code, out = _cli("compare", "mlp:small", "--fleet", cluster.address, "--devices",
                     "jetson-nano")
    one_line_error(code, out, 2, "no worker of device kind jetson-nano", ORIN, XAVIER)

    report = tmp_path / "fleet.json"
    code, out = _cli("compare", "mlp:small", str(artifact), "--fleet", cluster.address,
                     "--duration", "0.2", "--threads", "1", "--json", str(report),
                     "--plot", str(tmp_path / "fleet.png"))
    assert code == 0, out
    doc = json.loads(report.read_text())
    rows = {(r["device"], r["name"]): r for r in doc["rows"]}
    assert set(rows) == {(d, n) for d in (ORIN, XAVIER) for n in ("mlp:small", str(artifact))}
    for (device, name), row in rows.items():
        assert row["profile"]["device"]["profile"] == device  # labelled as that kind there
        assert row["measured_on"] == row["profile"]["device"]["measured_on"] == HERE
        assert row["worker"] == ("orin-1" if device == ORIN else "xavier-1")
        assert row["accuracy"] == rows[(ORIN, name)]["accuracy"] > 0.5  # scored once, here
        assert row["latency_p50_ms"] > 0
    for device in (ORIN, XAVIER):  # each device has its own front
        assert any(r["pareto_latency"] for r in doc["rows"] if r["device"] == device)
    assert doc["failures"] == []
    assert (tmp_path / "fleet.png").stat().st_size > 0
    assert f"{ORIN} (on {HERE})" in out and "mlp:small" in out

    code, out = _cli("profile", str(artifact), "--fleet", cluster.address, "--devices", XAVIER,
                     "--backend", "onnxruntime", "--duration", "0.1", "--threads", "1",
                     "--json", str(tmp_path / "prof.json"))
    assert code == 0, out
    (prof,) = json.loads((tmp_path / "prof.json").read_text())["reports"]
    assert prof["device"]["profile"] == XAVIER and prof["target"] == str(artifact)
    assert prof["device"]["measured_on"] == HERE and f"{XAVIER} (measured on {HERE})" in out
    one_line_error(*_cli("compare", "--from", str(tmp_path / "prof.json")), 2,
                   "prof.json: a 'fleet-profile' report, not a compare report")

    # one more device, measured earlier on its own: --from merges without measuring again
    from edgekit.compare import compare
    from edgekit.profiler.run import ProfileSettings
    from edgekit.profiler.timing import TimingPlan
    from edgekit.provenance import report_document

    single = compare(["mlp:small"], ProfileSettings(backend="onnxruntime", threads=1,
                                                    device="jetson-agx-orin-64gb",
                                                    as_device=True,
                                                    plan=TimingPlan(duration_s=0.1)))
    alone = tmp_path / "agx.json"
    alone.write_text(json.dumps(report_document("compare", single)))
    merged = tmp_path / "merged.json"
    code, out = _cli("compare", "--from", str(report), "--from", str(alone), "--json",
                     str(merged), "--csv", str(tmp_path / "merged.csv"))
    assert code == 0, out
    mdoc = json.loads(merged.read_text())
    assert sorted(d["profile"] for d in mdoc["devices"]) == sorted(
        [ORIN, XAVIER, "jetson-agx-orin-64gb"])
    agx = [r for r in mdoc["rows"] if r["device"] == "jetson-agx-orin-64gb"]
    assert len(mdoc["rows"]) == 5 and agx[0]["pareto_latency"]  # alone on its device's front
    assert agx[0]["latency_p50_ms"] == single["rows"][0]["latency_p50_ms"]  # not re-measured
    assert "jetson-agx-orin-64gb" in (tmp_path / "merged.csv").read_text()

    code, out = _cli("compare", "--from", str(report), "--from", str(report))
    one_line_error(code, out, 2, "mlp:small on", "is in both")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**doc, "rows": [{**doc["rows"][0], "latency_p50_ms": "fast"}]}))
    one_line_error(*_cli("compare", "--from", str(bad)), 2, str(bad), "latency_p50_ms")


def _tiny_onnx(path: Path) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((8, 8), dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                              [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_worker_lost_mid_job_is_retried_or_named_and_jobs_time_out(cluster, tmp_path):
    from edgekit.fleet.jobs import Job, Limits, run_jobs
    from edgekit.fleet.payload import pack
    from edgekit.profiler.run import ProfileSettings
    from edgekit.profiler.timing import TimingPlan

    cluster.add("orin-a", ORIN)
    cluster.add("orin-b", ORIN)
    cluster.add("xavier", XAVIER)
    payload = pack("tiny", _tiny_onnx(tmp_path / "tiny.onnx"))
    settings = ProfileSettings(backend="onnxruntime", threads=1,
                               plan=TimingPlan(warmup_s=0.0, duration_s=0.2))
    killed: dict[str, str] = {}  # device kind -> the worker killed mid-job

    def kill_where_jobs_start() -> None:  # a device vanishes once its job started a runner
        deadline = time.monotonic() + START_S
        while len(killed) < 2 and time.monotonic() < deadline:
            for name, proc in list(cluster.workers.items()):
                kind = ORIN if name.startswith("orin") else XAVIER
                if kind in killed or proc.poll() is not None:
                    continue
                try:
                    children = psutil.Process(proc.pid).children()
                    busy = any("edgekit.fleet.child" in c.cmdline() for c in children)
                except psutil.Error:
                    continue
                if busy:
                    killed[kind] = name
                    cluster.kill(name)
            time.sleep(0.05)

    with cluster.client() as client:
        watcher = threading.Thread(target=kill_where_jobs_start)
        watcher.start()
        outcomes = run_jobs(client, [Job("tiny", ORIN), Job("tiny", XAVIER)], {"tiny": payload},
                            settings, limits=Limits(job_timeout_s=120, no_worker_s=2))
        watcher.join()
        orin, xavier = outcomes
        assert set(killed) == {ORIN, XAVIER}
        survivor = ({"orin-a", "orin-b"} - {killed[ORIN]}).pop()
        assert orin.error is None and orin.worker == survivor  # retried on its twin
        assert orin.report["device"]["profile"] == ORIN
        assert xavier.report is None and xavier.error.startswith(f"{XAVIER}: no worker")
        assert "xavier left mid-job" in xavier.error
        assert xavier.worker == killed[XAVIER]  # issue 45: it was null

        started = time.monotonic()
        slow = ProfileSettings(backend="onnxruntime", threads=1,
                               plan=TimingPlan(warmup_s=0.0, duration_s=600.0))
        (late,) = run_jobs(client, [Job("tiny", ORIN)], {"tiny": payload}, slow,
                           limits=Limits(job_timeout_s=1.0, grace_s=60.0))
        assert late.report is None and "timed out after 1 s on the device" in late.error
        assert late.error.startswith(f"{ORIN} ({survivor})")
        assert time.monotonic() - started < 60  # killed on the device, not waited out


def test_a_failure_is_one_line_naming_its_device_once(capsys):
    """Issue 45: with stderr a file, a long failure wrapped onto a second line and named the
    device twice; a TensorRT failure from a device spanned four lines."""
    from edgekit.cli.fleet import _print_failures
    from edgekit.fleet.jobs import Job, Outcome

    lost = Outcome(Job("mlp", ORIN), None, f"{ORIN}: no worker is connected for 30 s; orin-a "
                                          "left mid-job " + "and more words " * 8, "orin-a")
    trt = Outcome(Job("mlp", XAVIER), None, f"{XAVIER} (xavier): TensorRT: build failed:\n"
                                            "[E] [TRT] 1: parse error\n  at node 3\n\n", "xavier")
    failures = [lost.to_failure(), trt.to_failure()]
    assert "\n" not in failures[1]["error"] and failures[0]["worker"] == "orin-a"
    _print_failures(failures)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"failed: mlp on {ORIN}: no worker") and lines[0].count(ORIN) == 1
    assert lines[1] == (f"failed: mlp on {XAVIER} (xavier): TensorRT: build failed: [E] [TRT] 1: "
                        "parse error at node 3")


def _saved_compare(path, **row):
    """A one-device compare report as ``edgekit compare --json`` writes it, ``row`` changed."""
    doc = {"kind": "compare", "metric": "accuracy", "higher_is_better": True,
           "backend": "onnxruntime", "device": {"profile": "cpu", "display_name": "CPU"},
           "rows": [{"name": "mlp:small", "family": "mlp", "metric": "accuracy",
                     "dataset": "digits", "params": 100, "flops_per_sample": 200.0,
                     "latency_p50_ms": 0.1, "latency_p99_ms": 0.2, "throughput_per_s": 1e4,
                     "energy_per_inference_j": 1e-4, "energy_source": "estimated: tdp",
                     "peak_rss_mib": 300.0, "accuracy": 0.9, **row}]}
    path.write_text(json.dumps(doc))  # NaN as Python's json writes it, which JSON is not
    return path


def test_compare_from_refuses_nan_and_names_a_missing_file(tmp_path):
    """Issue 45: a saved report with accuracy NaN merged with exit 0, printed nan% and wrote a
    bare NaN into the JSON; a missing file was 'not valid JSON ([Errno 2] ...)'."""
    good = _saved_compare(tmp_path / "good.json")
    code, out = _cli("compare", "--from", str(good), "--json", str(tmp_path / "merged.json"))
    assert code == 0, out
    for field in ("accuracy", "latency_p50_ms", "energy_per_inference_j"):
        bad = _saved_compare(tmp_path / f"{field}.json", **{field: float("nan")})
        one_line_error(*_cli("compare", "--from", str(bad)), 2, str(bad),
                       f"field 'rows[0].{field}'", "finite")
    inf = _saved_compare(tmp_path / "inf.json", latency_p99_ms=float("inf"))
    one_line_error(*_cli("compare", "--from", str(inf)), 2, "rows[0].latency_p99_ms")
    missing = tmp_path / "nope.json"
    line = one_line_error(*_cli("compare", "--from", str(missing)), 2, f"{missing}: no such file")
    assert "JSON" not in line and "Errno" not in line


def test_addresses_and_tls_options(tmp_path):
    from edgekit.errors import UsageError
    from edgekit.fleet.engine import address, security

    assert address("jetson.local", tls=False) == "tcp://jetson.local:8786"
    assert address("10.0.0.5:9000", tls=True) == "tls://10.0.0.5:9000"
    for bad in ("ws://h:1", "h:port", ":8786"):
        with pytest.raises(UsageError):
            address(bad, tls=False)
    with pytest.raises(UsageError, match="--tls was given"):
        address("tcp://h:1", tls=True)
    (tmp_path / "ca.pem").write_text("x")
    with pytest.raises(UsageError, match="missing cert.pem, key.pem"):
        security(tmp_path)
    one_line_error(*_cli("fleet", "status", "h:1", "--tls", str(tmp_path)), 2,
                   "missing cert.pem, key.pem")
    one_line_error(*_cli("compare", "mlp:small", "--fleet", "h:1", "--device", ORIN), 2,
                   "--device does not apply with --fleet")
    one_line_error(*_cli("fleet", "status", "127.0.0.1:1"), 2,
                   "no fleet scheduler at tcp://127.0.0.1:1")  # at once, not after a timeout
    one_line_error(*_cli("fleet", "worker", "127.0.0.1:1"), 2, "no fleet scheduler at")
    one_line_error(*_cli("fleet", "status", "h:port"), 2, "port 'port' is not a number")
    one_line_error(*_cli("compare", "mlp", "--fleet", "h:1", "--job-timeout", "nan"), 2,
                   "--job-timeout")
    one_line_error(*_cli("compare", "--from", str(tmp_path)), 2, str(tmp_path))


def test_a_users_own_model_goes_to_the_fleet_scored_on_the_users_data(cluster, tmp_path):
    """A user's callable is loaded, scored and exported once on the client; the device gets
    the artifact (with its input spec) and profiles it."""
    import numpy as np

    script = Path(__file__).parent / "user_models" / "my_model.py"
    cluster.add("orin-1", ORIN)
    with cluster.client():
        pass  # the worker joined
    rng = np.random.default_rng(0)
    data = tmp_path / "images.npz"
    np.savez(data, image=rng.random((24, 3, 32, 32), dtype=np.float32),
             labels=rng.integers(0, 5, 24))
    report = tmp_path / "fleet.json"
    code, out = _cli("compare", f"{script}:build", "--fleet", cluster.address, "--data",
                     str(data), "--duration", "0.2", "--threads", "1", "--json", str(report))
    assert code == 0, out
    (row,) = json.loads(report.read_text())["rows"]
    assert row["family"] == "user" and row["metric"] == "accuracy" and row["device"] == ORIN
    assert 0 <= row["accuracy"] <= 1 and row["dataset"].startswith("images.npz")
    assert row["profile"]["source"]["kind"] == "callable"  # the export's manifest travelled
    code, out = _cli("compare", f"{script}:build", "--fleet", cluster.address)
    one_line_error(code, out, 2, "scores your own models on --data", "profile --fleet")
    code, out = _cli("profile", f"{script}:bare", "--input", "image:1x3x16x16", "--fleet",
                     cluster.address, "--backend", "onnxruntime", "--duration", "0.1",
                     "--json", str(tmp_path / "prof.json"))
    assert code == 0, out
    (prof,) = json.loads((tmp_path / "prof.json").read_text())["reports"]
    assert prof["source"]["inputs"][0]["shape"] == [1, 3, 16, 16]


def _listening_ports(pid: int) -> set[int]:
    return {c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN}


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_no_http_server_unless_asked_for(cluster, tmp_path):
    """Dask starts an unauthenticated HTTP server (/info/logs, /metrics; the scheduler's on
    8787 of every interface it listens on) beside every scheduler and worker: a fleet's
    processes listen on their Dask port alone, and --dashboard opens one on localhost."""
    import urllib.request

    cluster.add("orin-1", ORIN)
    with cluster.client():
        pass  # the worker joined
    port = int(cluster.address.rsplit(":", 1)[1])
    assert _listening_ports(cluster.scheduler.pid) == {port}
    assert len(_listening_ports(cluster.workers["orin-1"].pid)) == 1  # its Dask port, no HTTP

    http = _free_port()
    proc = subprocess.Popen([*EXE, "fleet", "scheduler", "--port", "0", "--dashboard", str(http)],
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    try:
        lines, said = lines_of(proc.stderr), []
        while not any(line.startswith("dashboard on ") for line in said):
            said.append((lines.get(timeout=START_S) or "").rstrip())
            assert said[-1] or proc.poll() is None, said
        assert f"dashboard on http://127.0.0.1:{http}/ (no authentication)" in said, said
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/health", timeout=10) as answer:
            assert answer.status == 200
        opened = [c for c in psutil.Process(proc.pid).net_connections(kind="tcp")
                  if c.status == psutil.CONN_LISTEN and c.laddr.port == http]
        assert [c.laddr.ip for c in opened] == ["127.0.0.1"]  # localhost unless told otherwise
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
