#!/usr/bin/env bash
# The emulator as users install it: build the sdist and the wheel, check them, install THE WHEEL into a new virtual
# environment outside the clone and, from an empty directory (the clone on no path), run what a user runs first:
# up -d / status / events / down, exec, the dashboard under Textual's pilot, the pytest plugin in a scratch project,
# an eval of a shipped task with a shipped reference agent, and `image build --help`.
#
# Usage: scripts/smoke-installed.sh   (from any directory; needs `build`, `twine` and `check-wheel-contents`, the
# test extra's, in the Python it is started with: `python3`, or $PYTHON)
set -euo pipefail
clone="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
started=$SECONDS
work="$(mktemp -d "${TMPDIR:-/tmp}/pxt-smoke.XXXXXX")"
state="$work/state"
venv="$work/venv"

cleanup() {
    status=$?
    # An emulator left by a failed step: stopped, so nothing outlives the run.
    if [ -x "$venv/bin/emulator" ] && [ -d "$state" ]; then
        "$venv/bin/emulator" down --state-dir "$state" >/dev/null 2>&1 || true
    fi
    if [ $status -ne 0 ] && [ -f "$state/emulator.log" ]; then
        echo "== the emulator's log (last 40 lines)"
        tail -40 "$state/emulator.log"
    fi
    rm -rf "$work"
    exit $status
}
trap cleanup EXIT

echo "== building the sdist and the wheel"
"$python" -m build --outdir "$work/dist" "$clone" >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
wheel="$(ls "$work"/dist/*.whl)"
# Metadata (the README as the long description) renders; the wheel holds no duplicate or misplaced file. W009 (more
# than one top-level package) is the design: `emulator` and `tui`.
"$python" -m twine check --strict "$work"/dist/*
check-wheel-contents --ignore W009 "$wheel"

echo "== installing $(basename "$wheel") into a new virtual environment"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "$wheel"
empty="$work/empty"
mkdir "$empty"
cd "$empty"
# From here on only the installed package: nothing of the clone is on the path (PYTHONPATH unset, an empty cwd).
unset PYTHONPATH
export PATH="$venv/bin:$PATH"
CLONE="$clone" python - <<'EOF'
import os, sys
import emulator, tui
for module in (emulator, tui):
    assert not module.__file__.startswith(os.environ["CLONE"]), f"{module.__name__} imported from the clone: {module.__file__}"
assert not any(p.startswith(os.environ["CLONE"]) for p in sys.path), sys.path
print(f"== emulator imported from {os.path.dirname(emulator.__file__)}")
EOF

echo "== emulator up -d / status / events / down"
ports=(--site-port 0 --auth-port 0 --api-port 0 --tunnel-port 0 --s3-port 0)
emulator up -d --state-dir "$state" --runtime process "${ports[@]}"
emulator status --state-dir "$state"
emulator events --state-dir "$state" | head -5
test -n "$(emulator events --state-dir "$state" --json)"

echo "== the dashboard under Textual's pilot, attached to that emulator"
STATE="$state" python - <<'EOF'
import asyncio, os, time
from pathlib import Path

from emulator.admin.client import Locator
from tui.app import Dashboard


async def main() -> None:
    app = Dashboard(Locator(state_dir=Path(os.environ["STATE"])), label="emulator")
    async with app.run_test(size=(120, 40)) as pilot:
        deadline = time.monotonic() + 30
        while app.connection != "live":
            assert time.monotonic() < deadline, f"the dashboard did not go live: {app.connection}"
            await pilot.pause(0.05)
        await pilot.pause()
        # Rendered with its stylesheet (package data): the screen has its widgets and the CSS file was read.
        assert app.screen.query("*"), "nothing rendered"
        assert any(str(p).endswith("dashboard.tcss") for p in app.css_path), app.css_path
    print("== the dashboard went live and rendered")


asyncio.run(main())
EOF
emulator down --state-dir "$state"

echo "== emulator exec -- true"
emulator exec --runtime process -- true

echo "== the pytest plugin from a scratch project"
mkdir "$work/project"
cat >"$work/project/test_uses_plugin.py" <<'EOF'
import httpx


def test_the_emulator_answers(emulator):
    assert httpx.get(f"{emulator.url}/health").status_code == 200
EOF
(cd "$work/project" && python -m pytest -q -p no:cacheprovider test_uses_plugin.py)

echo "== emulator eval of a shipped task with a shipped reference agent"
# shellcheck disable=SC2016  # $EMULATOR_EXAMPLES is the agent's, set by the trial
emulator eval create-a-trial --agent 'python "$EMULATOR_EXAMPLES/eval/careful_agent.py"' -k 1

echo "== emulator image build --help"
emulator image build --help >/dev/null

echo "== the installed wheel's smoke tier passed in $((SECONDS - started)) s"
