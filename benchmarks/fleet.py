"""What a device fleet costs on Dask distributed: the idle agent, dispatch, transfer, a job.

Starts ``edgekit fleet scheduler`` on localhost and one ``edgekit fleet worker`` (as a
generic-x86-64-cpu), then measures, each over ``--rounds`` rounds:

- the idle agent (worker process alone): CPU as a share of one core over ``--window`` s, and
  its resident memory (RSS and USS), beside a plain ``dask worker`` with Dask's default settings
  (one thread, no nanny, no dashboard, a resource of its own so no job lands there) measured over
  the same window; the idle scheduler beside them;
- dispatch: ``--tasks`` no-op tasks restricted to the device's resource, seconds per task (the
  scheduler's share of every job);
- transfer: one ``--payload-mib`` payload shipped to the worker with a job (localhost, so an upper
  bound on what a network gives);
- one profiling job of a tiny ONNX model (0.1 s timed): its wall time from submit to report,
  minus the timed phase, is the per-job cost. The first round's job starts the agent's runner
  process (imports); later rounds find it warm. The runner's memory while it waits for the next
  job is reported beside the agent's.

    .venv/bin/python benchmarks/fleet.py --rounds 5
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import markdown_table, write_result  # noqa: E402
from edgekit.interpreter import module_command  # noqa: E402

DEVICE = "generic-x86-64-cpu"
EXE = module_command("edgekit")


def _start(port: int) -> tuple[subprocess.Popen, ...]:
    log = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the processes
    scheduler = subprocess.Popen([*EXE, "fleet", "scheduler", "--port", str(port)],
                                 stdout=log, stderr=log, start_new_session=True)
    time.sleep(3.0)
    address = f"127.0.0.1:{port}"
    worker = subprocess.Popen([*EXE, "fleet", "worker", address, "--device", DEVICE, "--name",
                               "bench"], stdout=log, stderr=log, start_new_session=True)
    plain = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address,
                              "--nthreads", "1", "--no-nanny", "--no-dashboard", "--resources",
                              "baseline=1", "--name", "plain-dask"], stdout=log, stderr=log,
                             start_new_session=True)
    return scheduler, worker, plain


def _idle(proc: psutil.Process, window_s: float) -> tuple[float, float, float]:
    """(share of one core, RSS MiB, USS MiB) of ``proc`` over ``window_s``."""
    t0, c0 = time.monotonic(), proc.cpu_times()
    time.sleep(window_s)
    t1, c1 = time.monotonic(), proc.cpu_times()
    cpu = (c1.user + c1.system - c0.user - c0.system) / (t1 - t0)
    mem = proc.memory_full_info()
    return cpu, mem.rss / 2**20, mem.uss / 2**20


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


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.4g} ({min(values):.4g}-{max(values):.4g})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=float, default=10.0, help="idle seconds per round")
    parser.add_argument("--tasks", type=int, default=500, help="no-op tasks per round")
    parser.add_argument("--payload-mib", type=float, default=16.0)
    parser.add_argument("--port", type=int, default=8797)
    args = parser.parse_args()

    from edgekit.fleet import Limits, connect
    from edgekit.fleet.engine import resource_for
    from edgekit.fleet.jobs import Job, run_jobs
    from edgekit.fleet.payload import pack
    from edgekit.profiler.run import ProfileSettings
    from edgekit.profiler.timing import TimingPlan

    scheduler, worker, plain = _start(args.port)
    try:
        client = connect(f"127.0.0.1:{args.port}", timeout_s=60)
        client.wait_for_workers(2, timeout=300)
        agent, sched = psutil.Process(worker.pid), psutil.Process(scheduler.pid)
        baseline = psutil.Process(plain.pid)
        time.sleep(5.0)  # let start-up settle
        resource = {resource_for(DEVICE): 1}
        payload = os.urandom(int(args.payload_mib * 2**20))
        tmp = Path(tempfile.mkdtemp(prefix="edgekit-bench-fleet-"))
        tiny = pack("tiny", _tiny_onnx(tmp / "tiny.onnx"))
        settings = ProfileSettings(backend="onnxruntime", threads=1,
                                   plan=TimingPlan(warmup_s=0.0, duration_s=0.1))
        results: dict[str, list[float]] = {k: [] for k in (
            "agent_cpu_share", "agent_rss_mib", "agent_uss_mib", "plain_dask_worker_cpu_share",
            "plain_dask_worker_rss_mib", "scheduler_cpu_share",
            "scheduler_rss_mib", "warm_runner_rss_mib", "dispatch_s_per_task", "transfer_mib_s",
            "job_wall_s", "job_overhead_s")}
        loads = []
        for _ in range(args.rounds):
            loads.append(os.getloadavg()[0])
            # the idle agent and scheduler over the same window (no client traffic)
            s0, sc0, b0 = time.monotonic(), sched.cpu_times(), baseline.cpu_times()
            cpu, rss, uss = _idle(agent, args.window)
            sc1, b1 = sched.cpu_times(), baseline.cpu_times()
            results["plain_dask_worker_cpu_share"].append(
                (b1.user + b1.system - b0.user - b0.system) / (time.monotonic() - s0))
            results["plain_dask_worker_rss_mib"].append(baseline.memory_info().rss / 2**20)
            results["agent_cpu_share"].append(cpu)
            results["agent_rss_mib"].append(rss)
            results["agent_uss_mib"].append(uss)
            results["scheduler_cpu_share"].append(
                (sc1.user + sc1.system - sc0.user - sc0.system) / (time.monotonic() - s0))
            results["scheduler_rss_mib"].append(sched.memory_info().rss / 2**20)
            results["warm_runner_rss_mib"].append(
                sum(c.memory_info().rss for c in agent.children()) / 2**20)
            t0 = time.perf_counter()
            futures = [client.submit(abs, -i, resources=resource, pure=False)
                       for i in range(args.tasks)]
            client.gather(futures)
            results["dispatch_s_per_task"].append((time.perf_counter() - t0) / args.tasks)
            del futures
            t0 = time.perf_counter()
            client.submit(len, payload, resources=resource, pure=False).result(timeout=300)
            results["transfer_mib_s"].append(args.payload_mib / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            (job,) = run_jobs(client, [Job("tiny", DEVICE)], {"tiny": tiny}, settings,
                              limits=Limits(job_timeout_s=300))
            wall = time.perf_counter() - t0
            if job.report is None:
                raise SystemExit(f"job failed: {job.error}")
            results["job_wall_s"].append(wall)
            results["job_overhead_s"].append(wall - job.report["timed_s"])
        client.close()
    finally:
        for proc in (worker, plain, scheduler):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    rows = [[k, _spread(v)] for k, v in results.items()]
    print(markdown_table(["figure", f"median (min-max) of {args.rounds} rounds"], rows))
    print(f"1-minute load average at each round: {', '.join(f'{x:.1f}' for x in loads)}")
    write_result("fleet", {"settings": vars(args), "samples": results, "load_average": loads,
                           "medians": {k: statistics.median(v) for k, v in results.items()}})


if __name__ == "__main__":
    main()
