"""Does the media store answer, with the libraries this environment has? Asked at `emulator up`, before it serves.

The S3 endpoint is moto's server inside the emulator's own layers (`store.s3_app`). A moto, Flask, werkzeug or
boto3 release that changes what those layers rely on breaks every media operation; without this check it showed
as 500s from the control plane long after the emulator said it was up (moto 5.2 refused the request class that
5.1 took). So the same app is brought up on a loopback port in a child process (moto costs a third of a second
and 40 MiB, which an emulator that never stores media should not carry), and sent what the real client sends:
a bucket, an object, a read with boto3's default checksum validation, and a multipart upload read back, each
change written through to a mirror on disk. An error names the library it came from, with its version and the
range the emulator declares for it.

A passing check is remembered in the user's cache (`$XDG_CACHE_HOME/pxt-emulator`, else `~/.cache/pxt-emulator`)
under a fingerprint of the installed libraries' files and of this package's source, so the next `emulator up` in
the same environment does not pay for it again; any reinstall or upgrade changes the fingerprint.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import os
import socket
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from types import TracebackType

# What the endpoint is made of: the modules whose files make the fingerprint and whose versions a failure names.
LIBRARIES = {
    "moto": "moto",
    "flask": "flask",
    "flask_cors": "flask-cors",
    "werkzeug": "werkzeug",
    "boto3": "boto3",
    "botocore": "botocore",
    "s3transfer": "s3transfer",
    "xmltodict": "xmltodict",
}
DISTRIBUTION = "pxt-cloud-emulator"
TIMEOUT = 60.0  # s: the child imports moto and boto3 and sends a few requests; a hang is a failure too
_HERE = Path(__file__).resolve().parent


class MediaStoreBroken(RuntimeError):
    """The media store cannot answer with the libraries installed; the message says which and what to do."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pxt-emulator" / "media-checked"


def fingerprint() -> str:
    """The installed libraries (their module files' path, size and time) and this package's source, with no import:
    `importlib.metadata` would take 20 ms, a tenth of what the start-up is allowed to take."""
    h = hashlib.sha256(sys.version.encode() + b"\0" + sys.executable.encode())
    for module in LIBRARIES:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec is not None else None
        if origin is None:
            h.update(f"\0{module}:missing".encode())
            continue
        info = os.stat(origin)
        h.update(f"\0{origin}:{info.st_size}:{info.st_mtime_ns}".encode())
    for source in sorted(_HERE.glob("*.py")):
        h.update(b"\0" + source.read_bytes())
    return h.hexdigest()[:32]


async def ensure_answers(cache: Path | None = None) -> None:
    """Return once the media store is known to answer in this environment; raise `MediaStoreBroken` otherwise."""
    marker = (cache or cache_dir()) / fingerprint()
    if marker.is_file():
        return
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "emulator.media.selfcheck",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise MediaStoreBroken(
            f"the media store (moto's S3) did not answer its start-up check within {TIMEOUT:.0f} s ({versions()})"
        ) from None
    finally:
        if proc.returncode is None:  # cancelled (Ctrl-C during the start): the child goes with it
            proc.kill()
            await proc.wait()
    try:
        answer = json.loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = err.decode(errors="replace").strip().splitlines()[-3:]
        raise MediaStoreBroken(
            f"the media store's start-up check exited {proc.returncode} without an answer: {' / '.join(tail)}"
        ) from None
    if not answer.get("ok"):
        raise MediaStoreBroken(str(answer.get("message")))
    try:
        marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        marker.touch()
    except OSError:
        pass  # not remembered: the next start checks again


# --- in the child -----------------------------------------------------------------------------------------


def check() -> str | None:
    """None when the endpoint answers as S3 does; else what failed, in which library, and what to do."""
    raised: list[BaseException] = []
    step = "importing the media store"
    try:
        from boto3.s3.transfer import TransferConfig

        from emulator.media.store import Change, Keys, Mirror, client, s3_app, serve

        with tempfile.TemporaryDirectory(prefix="pxt-media-check-") as tmp:
            sock = socket.create_server(("127.0.0.1", 0))
            keys = Keys(os.urandom(32))
            step = "making a boto3 client"
            endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
            # a database's key, as the client gets one
            s3 = client(endpoint, keys.of_bucket("pxt-check"), retries={"max_attempts": 1})
            mirror = Mirror(Path(tmp))
            restored = threading.Event()
            restored.set()

            def changed(what: Change, bucket: str, key: str) -> None:
                mirror.record(s3, what, bucket, key)

            step = "starting moto's S3 server"
            server = serve("127.0.0.1", sock.fileno(), s3_app(changed, restored, keys, raised.append))
            threading.Thread(target=server.serve_forever, daemon=True).start()
            try:
                step = "creating a bucket"
                s3.create_bucket(Bucket="pxt-check")
                step = "storing an object"
                s3.put_object(Bucket="pxt-check", Key="media/a.bin", Body=b"a" * 1000, ContentType="image/png")
                step = "reading the object back"
                if s3.get_object(Bucket="pxt-check", Key="media/a.bin")["Body"].read() != b"a" * 1000:
                    return _failure(step, None, "the object read back differs from what was stored")
                step = "a multipart upload (boto3's transfer manager, as the client uploads a large file)"
                body = b"p" * 5 * 2**20 + b"q" * 1000
                five = 5 * 2**20
                chunks = TransferConfig(multipart_threshold=five, multipart_chunksize=five, use_threads=False)
                s3.upload_fileobj(io.BytesIO(body), "pxt-check", "big.bin", Config=chunks)
                step = "reading the multipart object back (boto3's default checksum validation)"
                if s3.get_object(Bucket="pxt-check", Key="big.bin")["Body"].read() != body:
                    return _failure(step, None, "the multipart object read back differs from what was stored")
            finally:
                server.shutdown()
                server.server_close()
                sock.close()
    except Exception as e:
        return _failure(step, raised[0] if raised else e, None)
    if raised:  # answered, but something inside moto raised on the way
        return _failure(step, raised[0], None)
    return None


def _failure(step: str, error: BaseException | None, what: str | None) -> str:
    library = _library_of(error) if error is not None else None
    if isinstance(error, ModuleNotFoundError) and error.name:
        top = error.name.split(".")[0]
        cause = f"{LIBRARIES.get(top, top)} is not installed ({error})"
        library = LIBRARIES.get(top, top)
    elif error is not None:
        where = f"{library} {_version(library)}" if library else "the emulator"
        cause = f"{where} raised {type(error).__name__}: {str(error)[:300]}"
    else:
        cause = what or "it failed"
    advice = _advice(library)
    return f"the media store (moto's S3) does not answer: {step}: {cause}. Installed: {versions()}.{advice}"


def _advice(library: str | None) -> str:
    declared = _declared()
    wanted = declared.get((library or "moto").lower()) or declared.get("moto")
    if wanted is None:
        return ""
    return f" The emulator declares {wanted} (pyproject.toml); with a version outside it, run: pip install '{wanted}'"


def _declared() -> dict[str, str]:
    """The emulator's own requirements, by distribution name: the ranges its pyproject.toml declares."""
    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    out = {}
    for req in requires:
        spec = req.split(";")[0].strip()
        if "extra ==" in req:
            continue
        name = spec.split("[")[0].split("<")[0].split(">")[0].split("=")[0].split("!")[0].strip().lower()
        out[name] = spec
    return out


def _library_of(error: BaseException) -> str | None:
    """The distribution whose code raised `error` (its innermost frame outside the emulator and the stdlib)."""
    mapping = importlib.metadata.packages_distributions()
    found: str | None = None
    tb: TracebackType | None = error.__traceback__
    for frame, _ in traceback.walk_tb(tb):
        module = frame.f_globals.get("__name__", "")
        top = module.split(".")[0]
        if top and top != "emulator" and top in mapping:
            found = mapping[top][0]
    return found


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def versions() -> str:
    return ", ".join(f"{name} {_version(name)}" for name in dict.fromkeys(LIBRARIES.values()))


def main() -> int:
    try:
        message = check()
    except BaseException as e:  # the parent needs an answer whatever happened
        message = f"the media store's start-up check failed: {type(e).__name__}: {e}"
    print(json.dumps({"ok": message is None, "message": message}), flush=True)
    return 0 if message is None else 1


if __name__ == "__main__":
    sys.exit(main())
