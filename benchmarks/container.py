"""The emulator as a container image: its size, and its start to a healthy /health as a ratio to the pip-installed
emulator's start in the same run.

    python benchmarks/container.py [--runs 5] [--tag pxt-emulator:bench] [--keep-image] [--out PATH]

The image is built once (`python -m emulator image build --tag TAG`, timed); its size and its base image's size
(the base `emulator image build` picks, checked to be the image's first layers) give the emulator's own layers.
Then one unmeasured start of each, and `--runs` rounds of, interleaved, each on a fresh state:

- `pip`: `python -m emulator up --runtime process --no-watch` on ports 0 in a new state dir, timed from the spawn
  until its site's /health (named by `<state-dir>/endpoints.json`) answers 200, polled every 10 ms; SIGTERM, waited;
- `container`: `PxtEmulatorContainer(TAG).start()` of the Testcontainers module, timed (it polls /health every
  0.2 s), then `.stop()`; a poller beside it records when /health first answered, at the pip side's 10 ms grain.

Medians, the ratio container/pip of the medians and per run; JSON at --out (default
benchmarks/container-results.json). Every wait is bounded; the emulator, the container, the state dirs and (unless
--keep-image) the image are removed on success, errors, Ctrl-C and SIGTERM. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx
from testcontainers.core.config import testcontainers_config

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from emulator.container.testcontainer import PxtEmulatorContainer  # noqa: E402
from emulator.runtime.choose import default_base_image  # noqa: E402
from emulator.runtime.engine import Engine  # noqa: E402

# No registry answers here, so Testcontainers' reaper (Ryuk, pulled from Docker Hub) cannot run: this script removes
# what it starts itself.
testcontainers_config.ryuk_disabled = True

DEFAULT_TAG = "pxt-emulator:bench"
DEFAULT_OUT = HERE / "container-results.json"
BUILD_TIMEOUT_S = 1800.0  # pip may install the dependencies from the index
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
POLL_S = 0.01
MIB = 2**20


class BenchError(RuntimeError):
    pass


def tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


def healthy(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url + "/health").status_code == 200
    except httpx.HTTPError:
        return False


# --- the image ------------------------------------------------------------------------------------


def build(tag: str) -> float:
    started = time.perf_counter()
    argv = [sys.executable, "-m", "emulator", "image", "build", "--tag", tag]
    try:
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BenchError(f"emulator image build: not done within {BUILD_TIMEOUT_S:.0f} s") from None
    if r.returncode != 0:
        raise BenchError(f"emulator image build failed ({r.returncode}):\n{tail(r.stdout + r.stderr)}")
    return time.perf_counter() - started


def sizes(client: Any, tag: str) -> dict[str, Any]:
    """The image's size, its base's (the one `emulator image build` picks) and what the build added, per layer."""
    engine = Engine.from_env()
    base_tag = default_base_image(engine) if engine is not None else "python:3.11-slim-bookworm"
    image, base = client.images.get(tag), client.images.get(base_tag)
    ours, theirs = image.attrs["RootFS"]["Layers"], base.attrs["RootFS"]["Layers"]
    if ours[: len(theirs)] != theirs:
        raise BenchError(f"{tag} is not built on {base_tag}: its first layers are not {base_tag}'s")
    # History is newest first; the entries above the base's are the Dockerfile's steps (ENV etc. add 0 bytes).
    history = image.history()
    added = history[: len(history) - len(base.history())]
    return {
        "image": tag,
        "image_id": image.id,
        "base": base_tag,
        "image_bytes": image.attrs["Size"],
        "base_bytes": base.attrs["Size"],
        "emulator_layers_bytes": image.attrs["Size"] - base.attrs["Size"],
        "image_mib": round(image.attrs["Size"] / MIB, 1),
        "base_mib": round(base.attrs["Size"] / MIB, 1),
        "emulator_layers_mib": round((image.attrs["Size"] - base.attrs["Size"]) / MIB, 1),
        "layers_mib": [
            {
                "step": re.sub(r"^/bin/sh -c #\(nop\) +| dir:[0-9a-f]+ in", "", h["CreatedBy"]).strip(),
                "mib": round(h["Size"] / MIB, 1),
            }
            for h in reversed(added)
            if h["Size"]
        ],
    }


# --- the two starts -------------------------------------------------------------------------------


def compile_emulator() -> None:
    """Bytecode for the emulator's package, as a pip install writes it: with an editable install and
    PYTHONDONTWRITEBYTECODE (as here) every start would otherwise compile it again."""
    spec = importlib.util.find_spec("emulator")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        compileall.compile_dir(folder, quiet=1)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def pip_start(scratch: Path) -> dict[str, float]:
    """`emulator up` in a new state dir: spawn to the first 200 on /health, then SIGTERM to its exit."""
    state = Path(tempfile.mkdtemp(prefix="pip-", dir=scratch))
    log_path = state.parent / f"{state.name}.log"
    argv = [sys.executable, "-m", "emulator", "up", "--state-dir", str(state), "--runtime", "process", "--no-watch"]
    for origin in ("site", "auth", "api", "tunnel", "s3"):
        argv += [f"--{origin}-port", "0"]
    endpoints = state / "endpoints.json"
    with open(log_path, "wb") as log, httpx.Client(timeout=2, trust_env=False) as http:
        started = time.perf_counter()
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT, start_new_session=True
        )
        try:
            url = None
            deadline = started + START_TIMEOUT_S
            while True:
                if proc.poll() is not None:
                    raise BenchError(f"emulator up exited with {proc.returncode}:\n{tail(log_path.read_text())}")
                if time.perf_counter() > deadline:
                    raise BenchError(f"emulator up: no healthy /health within {START_TIMEOUT_S:.0f} s")
                if url is None:
                    with contextlib.suppress(OSError, ValueError):
                        found = json.loads(endpoints.read_text())
                        if found.get("pid") == proc.pid:  # not a file a crashed run left
                            url = str(found["site"]).rstrip("/")
                if url is not None and healthy(http, url):
                    break
                time.sleep(POLL_S)
            start_s = time.perf_counter() - started
            stopping = time.perf_counter()
            stop_process(proc)
            stop_s = time.perf_counter() - stopping
        finally:
            stop_process(proc)
    shutil.rmtree(state, ignore_errors=True)
    return {"start_s": start_s, "stop_s": stop_s}


class TimedContainer(PxtEmulatorContainer):
    """The module's container as it is, plus a poller that notes when /health first answers, at 10 ms."""

    def __init__(self, image: str) -> None:
        super().__init__(image)
        self.first_200: float | None = None
        self._done = threading.Event()

    def _publish(self) -> None:
        super()._publish()  # the ports, hence the URL, are known from here on
        threading.Thread(target=self._poll, daemon=True).start()

    def _poll(self) -> None:
        with httpx.Client(timeout=2, trust_env=False) as http:
            deadline = time.perf_counter() + START_TIMEOUT_S
            while not self._done.is_set() and time.perf_counter() < deadline:
                if healthy(http, self.url):
                    self.first_200 = time.perf_counter()
                    return
                time.sleep(POLL_S)

    def stop(self, force: bool = True, delete_volume: bool = True) -> None:
        self._done.set()
        super().stop(force, delete_volume)


def container_start(tag: str) -> dict[str, float]:
    """The Testcontainers module's start() (until it sees /health answer), then its stop() (SIGTERM, removal)."""
    container = TimedContainer(tag)
    started = time.perf_counter()
    try:
        container.start()
    except BaseException:
        with contextlib.suppress(Exception):
            container.stop()  # what was created, if anything
        raise
    start_s = time.perf_counter() - started
    first = container.first_200
    stopping = time.perf_counter()
    container.stop()
    stop_s = time.perf_counter() - stopping
    return {"start_s": start_s, "first_200_s": (first - started) if first else start_s, "stop_s": stop_s}


# --- the report -----------------------------------------------------------------------------------


def summarize(runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    medians = {side: {k: round(statistics.median(r[k] for r in rs), 3) for k in rs[0]} for side, rs in runs.items()}
    spread = {side: {k: [round(min(r[k] for r in rs), 3), round(max(r[k] for r in rs), 3)] for k in rs[0]}
              for side, rs in runs.items()}  # fmt: skip
    pip, ctr = runs["pip"], runs["container"]
    return {
        "ratios": {
            "start_ratio": round(medians["container"]["start_s"] / medians["pip"]["start_s"], 3),
            "first_200_ratio": round(medians["container"]["first_200_s"] / medians["pip"]["start_s"], 3),
            "stop_ratio": round(medians["container"]["stop_s"] / medians["pip"]["stop_s"], 3),
        },
        "per_run_start_ratio": [round(c["start_s"] / p["start_s"], 3) for p, c in zip(pip, ctr, strict=True)],
        "per_run_first_200_ratio": [round(c["first_200_s"] / p["start_s"], 3) for p, c in zip(pip, ctr, strict=True)],
        "medians_s": medians,
        "min_max_s": spread,
        "runs_s": {side: [{k: round(v, 3) for k, v in r.items()} for r in rs] for side, rs in runs.items()},
    }


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="measured starts of each, interleaved (default 5)")
    p.add_argument("--tag", default=DEFAULT_TAG, help=f"the image to build and start (default {DEFAULT_TAG})")
    p.add_argument("--keep-image", action="store_true", help="leave the image built (default: removed at the end)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    args = p.parse_args(argv)
    if not 1 <= args.runs <= 50:
        p.error("--runs must be between 1 and 50")
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    load_at_start = os.getloadavg()
    client = docker.from_env()
    runs: dict[str, list[dict[str, float]]] = {"pip": [], "container": []}
    engine_version = client.version().get("Version")
    try:
        before = {i.id for i in client.images.list()}
        print(f"building {args.tag}", flush=True)
        build_s = build(args.tag)
        image = sizes(client, args.tag)
        image["build_s"] = round(build_s, 2)
        image["build_reused_an_existing_image"] = image["image_id"] in before  # every layer came from the cache
        print(f"built in {build_s:.1f} s: {image['image_mib']} MiB, {image['base']} {image['base_mib']} MiB, "
              f"the emulator's layers {image['emulator_layers_mib']} MiB", flush=True)  # fmt: skip
        compile_emulator()
        with tempfile.TemporaryDirectory(prefix="pxt-emulator-ctr-bench-") as tmp:
            scratch = Path(tmp)
            # Unmeasured: warm file caches for both.
            pip_start(scratch)
            container_start(args.tag)
            for i in range(1, args.runs + 1):
                runs["pip"].append(pip_start(scratch))
                runs["container"].append(container_start(args.tag))
                pip, ctr = runs["pip"][-1], runs["container"][-1]
                print(f"run {i}/{args.runs}: pip {pip['start_s']:.3f} s, container {ctr['start_s']:.3f} s "
                      f"(first 200 at {ctr['first_200_s']:.3f} s), ratio {ctr['start_s'] / pip['start_s']:.2f}",
                      flush=True)  # fmt: skip
    finally:
        if not args.keep_image:
            with contextlib.suppress(docker.errors.DockerException):
                client.images.remove(args.tag)
        client.close()
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "nproc": len(os.sched_getaffinity(0)),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "docker": engine_version,
            "loadavg_at_start": [round(x, 2) for x in load_at_start],
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "settings": {"runs": args.runs, "runtime": "process", "poll_s": POLL_S, "image_removed": not args.keep_image},
        "image": image,
        **summarize(runs),
    }
    med, ratios = report["medians_s"], report["ratios"]
    print()
    print(f"image {image['image_mib']} MiB (the emulator's layers {image['emulator_layers_mib']} MiB over "
          f"{image['base']}, {image['base_mib']} MiB); built in {image['build_s']} s")  # fmt: skip
    print(f"start to healthy, median of {args.runs}: pip {med['pip']['start_s']:.3f} s, container "
          f"{med['container']['start_s']:.3f} s (first 200 at {med['container']['first_200_s']:.3f} s): ratio "
          f"{ratios['start_ratio']:.2f} ({ratios['first_200_ratio']:.2f} at 10 ms)")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"container.py: {e}", file=sys.stderr)
        sys.exit(1)
