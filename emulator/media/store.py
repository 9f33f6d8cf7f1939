"""The hosted media store: every database's home bucket (`pxt://ORG:DB/buckets/home`), which the control plane's
`get_bucket_credentials`, `get_presigned_url` and `get_presigned_urls` (emulator.cloud.media) hand out.

The objects live in an S3-compatible endpoint on loopback (`s3_port`, default 8705). It is moto's S3
server, run in a thread of `emulator up`, rather than a hand-written S3: the client drives the bucket
with boto3 (SigV4, path-style addressing, multipart uploads, listings, range reads) and downloads through
presigned URLs, and moto is a maintained, widely used implementation of exactly that API that runs from
PyPI, in process, with no binary to fetch. One physical bucket per database, `pxt-<org_id>-<db>`, made on
first use. moto accepts any key pair; the layer in front of it (`_authorized`) takes only the key of the
bucket a request names (SigV4, SigV2 or a browser form's signed policy) or the emulator's own. The
per-database keys are derived from a key in `<state-dir>/keys/`, never stored and never logged. Presigned
URLs (SigV4 and SigV2) and browser-form uploads do expire, on the emulator's clock: a small WSGI layer
refuses them at their end, which moto alone does not, so the client's re-sign on 403 is exercised.

The trial's 50 GB (`media_quota_bytes`) is the sum of the object sizes in the organization's buckets, read
with an S3 listing. At or over it, `get_bucket_credentials` answers `no_space_left: true` with a
`no_space_detail` the client shows as is, and a presigned PUT is refused with `STORE_FULL` (a
user-action code the client surfaces verbatim). Writes with credentials already handed out are not
cut off by the endpoint: the client itself stops writing once it sees the flag.

moto keeps objects in memory; `Mirror` writes every acknowledged change through to `<state-dir>/media/`
before the client hears of it (so it survives `kill -9`) and restores the buckets at start, while clients'
requests wait. `uploads/` (a request's staged files) expires after a day of
emulator time, as the real bucket's lifecycle rule makes it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import io
import logging
import math
import os
import re
import secrets
import select
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import parse_qs, unquote
from wsgiref.types import StartResponse, WSGIEnvironment
from xml.etree import ElementTree
from xml.parsers.expat import ExpatError
from xml.sax.saxutils import escape as xml_escape

import msgspec

from emulator.core.context import Core
from emulator.core.payloads import MediaBucketCreated, MediaBucketDropped, MediaRestored, MediaUploadsExpired
from emulator.core.private import private_key
from emulator.core.snapshots import copy_tree, in_thread
from emulator.media import form, sigv2, sigv4

if TYPE_CHECKING:
    from werkzeug.serving import BaseWSGIServer

log = logging.getLogger("emulator.media")

HOME = "home"
CREDENTIAL_TTL = 3600
MAX_URL_TTL = 7 * 24 * 3600  # SigV4's own limit on a presigned URL
MAX_KEYS = 100  # keys per get_presigned_urls call (the client's MAX_PRESIGNED_URL_KEYS)
UPLOADS_TTL = 86_400  # the real bucket's lifecycle rule expires uploads/; here after a day of emulator time
SWEEP_EVERY = 600  # seconds of emulator time between two sweeps of uploads/
_LABEL = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_T = TypeVar("_T")


# --- the S3 endpoint -------------------------------------------------------------------------------


MIB = 1 << 20
MAX_OBJECT_BYTES = 5 * 1024**3  # S3's largest single PUT (5 GiB): beyond, EntityTooLarge


class _CountingSocket(io.RawIOBase):
    """The connection's reading side, counting what arrives and when the first byte of a request came (for the
    deadline of `serve`'s handler)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.count = 0
        self.first_at: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self.sock.recv_into(buffer)
        if n and self.first_at is None:
            self.first_at = time.monotonic()
        self.count += n
        return n


def serve(
    host: str, fd: int, app: Callable[..., Iterable[bytes]], idle: float = 30.0, deadline: float = 30.0
) -> BaseWSGIServer:
    """werkzeug's threaded server on the bound socket `fd`, without its access log: presigned URLs carry
    credentials in their query.

    As on the other origins (`http_request_timeout`, `http_body_deadline`): a connection that sends nothing for
    `idle` seconds is closed, and a request whose head and body are not whole `deadline` seconds after its first
    byte (plus a second per MiB it brought: an upload at a working speed is never cut) has its reading side shut,
    however steadily it drips; its thread and descriptor are freed."""
    from moto.moto_server import werkzeug_app
    from werkzeug.serving import WSGIRequestHandler, make_server

    # moto 5.2's handler keeps the underscores of `x-amz-meta-my_key` headers, which werkzeug's drops; 5.1 has none.
    handler: type[WSGIRequestHandler] = getattr(werkzeug_app, "MotoRequestHandler", WSGIRequestHandler)

    class QuietHandler(handler):
        timeout = idle  # socketserver sets it on the connection: no recv or send waits longer

        def setup(self) -> None:
            super().setup()
            self._raw = _CountingSocket(self.connection)
            self.rfile = io.BufferedReader(self._raw, 64 * 1024)
            self._reading = False

        def handle_one_request(self) -> None:
            self._raw.first_at, self._from, self._reading = None, self._raw.count, True
            watch = threading.Timer(1.0, self._watch)
            watch.daemon = True
            self._watching = watch
            watch.start()
            try:
                super().handle_one_request()
            finally:
                self._reading = False
                self._watching.cancel()

        def _watch(self) -> None:
            first = self._raw.first_at
            if not self._reading:
                return
            if first is not None and time.monotonic() - first > deadline + (self._raw.count - self._from) / MIB:
                self._reading = False
                log.info("s3 endpoint: a request not whole within %g s was cut off", deadline)
                try:
                    self.connection.shutdown(socket.SHUT_RD)
                except OSError:
                    pass
                return
            self._watching = threading.Timer(1.0, self._watch)
            self._watching.daemon = True
            self._watching.start()

        def send_response(self, code: int, message: str | None = None) -> None:
            self._reading = False  # the request was read whole: answering is not bounded here
            super().send_response(code, message)

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            pass

        def log(self, type: str, message: str, *args: Any) -> None:
            log.debug("s3 endpoint %s: %s", type, message % args if args else message)

    return make_server(host, 0, _bounded(app), threaded=True, request_handler=QuietHandler, fd=fd)


def _bounded(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """S3's size bound on one request's body (a single PUT), refused from its Content-Length before it is read."""

    def wsgi(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        length = environ.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > MAX_OBJECT_BYTES:
            start_response("400 Bad Request", [("Content-Type", "application/xml")])
            message = f"Your proposed upload exceeds the maximum allowed size ({MAX_OBJECT_BYTES} bytes)"
            return [_s3_error("EntityTooLarge", message)]
        return app(environ, start_response)

    return wsgi


def _refuse_expired(app: Callable[..., Iterable[bytes]], now: Callable[[], float]) -> Callable[..., Iterable[bytes]]:
    """Refuse a presigned request after `X-Amz-Date + X-Amz-Expires` (SigV4) or after `Expires` (SigV2's instant),
    as S3 does (moto does not check), on the emulator's clock (`now`): the URLs the emulator presigns are dated on
    it, and a URL a client presigned at its wall clock expires when the emulator's clock passes its end (a test
    moves the clock rather than sleeping). A URL dated ahead of the clock is taken (S3 says "Request is not yet
    valid"): a clock frozen in the past would otherwise refuse every URL a client signs."""

    def wsgi(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        query = parse_qs(environ.get("QUERY_STRING", ""))
        end: float | None = None
        try:
            if "X-Amz-Date" in query and "X-Amz-Expires" in query:
                signed = datetime.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
                end = signed.timestamp() + int(query["X-Amz-Expires"][0])
            elif "Expires" in query and ("Signature" in query or "AWSAccessKeyId" in query):
                end = float(int(query["Expires"][0]))
        except (ValueError, OverflowError):
            end = -math.inf
        if end is not None and now() > end:
            start_response("403 Forbidden", [("Content-Type", "application/xml")])
            if environ.get("REQUEST_METHOD") == "HEAD":
                return []
            ends = _iso(end) if math.isfinite(end) else ""
            extra = {"Expires": ends, "ServerTime": _iso(now())}
            return [_s3_error("AccessDenied", "Request has expired", extra)]
        return app(environ, start_response)

    return wsgi


def _iso(ts: float) -> str:
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return ""


def _refuse_unreadable(
    app: Callable[..., Iterable[bytes]], raised: Callable[[BaseException], None] | None = None
) -> Callable[..., Iterable[bytes]]:
    """A request moto cannot read (malformed XML, a subresource with nonsense arguments, an odd header) raises
    inside it; S3 answers such a request with a 400 in its XML error format, and so does this layer, naming what
    it could not read. The write-through mirror never sees it (it is not a 2xx). `raised` is told of each such
    exception (the start-up check names the library it came from)."""

    def wsgi(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        started: list[str] = []

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            started.append(status)
            return start_response(status, headers, exc_info)

        try:
            return app(environ, capture)
        except Exception as e:
            if started:
                raise
            if raised is not None:
                raised(e)
            code = "MalformedXML" if isinstance(e, ExpatError | ElementTree.ParseError) else "InvalidRequest"
            what = f"{environ.get('REQUEST_METHOD', '')} {environ.get('PATH_INFO', '')[:200]}"
            log.info("s3 endpoint: %s refused: %s: %s", what, type(e).__name__, str(e)[:200])
            message = f"The media store cannot read this request ({type(e).__name__}: {str(e)[:200]})"
            start_response("400 Bad Request", [("Content-Type", "application/xml")])
            return [_s3_error(code, message)]

    return wsgi


def _s3_error(code: str, message: str, extra: dict[str, str] | None = None) -> bytes:
    """S3's XML error body; `extra`: the elements S3 adds for some codes (an expired URL's `Expires`...)."""
    more = "".join(f"<{k}>{xml_escape(v)}</{k}>" for k, v in (extra or {}).items() if v)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{xml_escape(message)}</Message>{more}</Error>"
    ).encode()


# Query parameters that sign, address or label a request rather than name a subresource (another operation).
_NOT_SUBRESOURCES = frozenset(
    {
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
        "X-Amz-Security-Token",
        "x-id",
        "versionId",
    }
)
Change = Literal["object", "bucket"]


def object_change(method: str, key: str, query: Iterable[str]) -> Change | None:
    """What a successful request changed that the mirror keeps: an object's bytes (`PutObject`, `CopyObject`,
    `CompleteMultipartUpload`, `DeleteObject`), the bucket's list (`DeleteObjects`), or nothing it keeps (parts of a
    multipart upload, and subresources: tagging, ACLs, retention, an aborted upload...)."""
    sub = set(query) - _NOT_SUBRESOURCES
    if not key:
        return "bucket" if method == "POST" and sub == {"delete"} else None
    if (method in ("PUT", "DELETE") and not sub) or (method == "POST" and sub == {"uploadId"}):
        return "object"
    return None


class NotMirrored(Exception):
    """A change the endpoint made could not be written to disk: the request must not be acknowledged."""


def _bucket_and_key(environ: WSGIEnvironment) -> tuple[str, str]:
    """The bucket and key a path-style request names. PATH_INFO holds the path's bytes as latin-1 (PEP 3333); keys
    are UTF-8."""
    path = environ.get("PATH_INFO", "").encode("latin-1", "replace").decode("utf-8", "replace")
    bucket, _, key = path.lstrip("/").partition("/")
    return bucket, key


def _write_through(
    app: Callable[..., Iterable[bytes]], changed: Callable[[Change, str, str], None]
) -> Callable[..., Iterable[bytes]]:
    """Tell `changed(what, bucket, key)` of every object a request wrote or deleted, before the client hears that
    it succeeded: an acknowledged write is on disk (the mirror), so it survives a killed emulator. Parts of a
    multipart upload are not objects yet; its completion is. When `changed` cannot write it (`NotMirrored`), the
    client gets a 500 `InternalError`, which S3 clients retry, instead of the 2xx: the write is not durable."""

    def wsgi(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "")
        if method not in ("PUT", "POST", "DELETE"):
            return app(environ, start_response)
        started: list[tuple[str, list[tuple[str, str]]]] = []

        def hold(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            if exc_info is not None and started:
                raise exc_info[1].with_traceback(exc_info[2])
            started[:] = [(status, headers)]
            return lambda data: None  # the legacy write() callable; moto returns its body instead

        result = app(environ, hold)
        try:
            body = b"".join(result)  # the answer is held until the write is mirrored
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        status, headers = started[0]
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        bucket, key = _bucket_and_key(environ)
        what = object_change(method, key, query)
        if environ.get(FORM_KEY):  # a browser-form upload: the object its form named
            key, what = str(environ[FORM_KEY]), "object"
        if status[:1] == "2" and bucket and what is not None:
            try:
                changed(what, bucket, key)
            except NotMirrored as e:
                start_response("500 Internal Server Error", [("Content-Type", "application/xml")])
                return [_s3_error("InternalError", f"The change was not written to the media store's disk: {e}")]
        start_response(status, headers)
        return [body]

    return wsgi


_MULTIPART_ETAG = re.compile(r'^"?[0-9a-fA-F]{32}-(\d+)"?$')
_CHECKSUM_HEADERS = ("x-amz-checksum-crc32", "x-amz-checksum-crc32c", "x-amz-checksum-sha1", "x-amz-checksum-sha256")


def composite_checksum(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """An object's headers with a multipart object's composite checksum declared as S3 declares it: the value
    `<checksum of the parts' checksums>-<parts>` and `x-amz-checksum-type: COMPOSITE`. Without the suffix a client
    checks the value against the whole body (boto3 does, by default) and refuses every read: moto 5.1 gives neither
    on a GET, moto 5.2 neither on a HEAD. A full-object checksum (which moto declares `FULL_OBJECT`) is left as is."""
    names = {name.lower() for name, _ in headers}
    if "x-amz-checksum-type" in names:
        return headers
    etag = next((value for name, value in headers if name.lower() == "etag"), "")
    multipart = _MULTIPART_ETAG.match(etag)
    if multipart is None:
        return headers
    out, declared = [], False
    for name, value in headers:
        if name.lower() in _CHECKSUM_HEADERS and "-" not in value:
            value, declared = f"{value}-{multipart.group(1)}", True
        out.append((name, value))
    return [*out, ("x-amz-checksum-type", "COMPOSITE")] if declared else headers


def _declare_composite(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """Reads of an object (GET, HEAD) declare a composite checksum as S3 does (see `composite_checksum`)."""

    def wsgi(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return app(environ, start_response)

        def declare(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, composite_checksum(headers), exc_info)

        return app(environ, declare)

    return wsgi


def _until_restored(
    app: Callable[..., Iterable[bytes]], restored: threading.Event, own: str
) -> Callable[..., Iterable[bytes]]:
    """Hold every request but the restore's own (signed with the emulator's access key, which no client has) until
    the restore at start is done: a write taken before would be overwritten by the restore, and not written through.
    The port is the same across restarts, so a client that holds a signed URL may well call in that window."""

    def wsgi(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if not restored.is_set() and f"Credential={own}/" not in environ.get("HTTP_AUTHORIZATION", ""):
            restored.wait()
        return app(environ, start_response)

    return wsgi


class Keys:
    """The key pairs the endpoint takes: the emulator's own (every bucket; no client has it), and one per bucket,
    derived from a private key and the bucket's name (never stored), which `get_bucket_credentials` hands out for
    that database's bucket alone."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self.own = self._derive("emulator")

    def _derive(self, label: str) -> tuple[str, str]:
        digest = hmac.new(self._key, f"media\0{label}".encode(), hashlib.sha256).digest()
        return KEY_PREFIX + base64.b32encode(digest[:10]).decode()[:16], base64.b64encode(digest[10:]).decode()[:40]

    def of_bucket(self, bucket: str) -> tuple[str, str]:
        """(access key id, secret) of one bucket."""
        return self._derive(f"bucket\0{bucket}")


def _authorized(
    app: Callable[..., Iterable[bytes]], keys: Keys, now: Callable[[], float] = time.time
) -> Callable[..., Iterable[bytes]]:
    """Who may do what: a request must be signed with the emulator's own key, or with the key of the one bucket it
    names (a copy's source included): SigV4 (a header or a presigned URL's query), SigV2 (a presigned URL's query,
    boto3's default in us-east-1, or a header), or a browser form's signed policy (`form`, checked on the emulator's
    clock `now`); anything else is S3's 403 (400 for a malformed signature or policy), before moto sees it. moto
    itself accepts any key pair."""

    def wsgi(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        bucket, key = _bucket_and_key(environ)
        allowed = dict([keys.own, keys.of_bucket(bucket)]) if bucket else dict([keys.own])
        spool: IO[bytes] | None = None
        try:
            if _is_form_upload(environ, bucket, key):
                spool, posted = _read_form(environ)
                if isinstance(posted, sigv4.Refused):
                    verdict: sigv4.Signed | sigv4.Refused = posted
                else:
                    checked = form.check(posted, bucket, allowed.get, now())
                    verdict = checked if isinstance(checked, sigv4.Refused) else checked[0]
                    if not isinstance(checked, sigv4.Refused):
                        environ[FORM_KEY] = checked[1]  # the object it writes, for the mirror
            elif sigv2.signed_with_v2(environ):
                verdict = sigv2.check(environ, allowed.get)
            else:
                verdict = sigv4.check(environ, allowed.get)
            if isinstance(verdict, sigv4.Signed) and verdict.access_key != keys.own[0]:
                source = unquote(environ.get("HTTP_X_AMZ_COPY_SOURCE", "")).split("?")[0].lstrip("/").partition("/")[0]
                if source and source != bucket:
                    verdict = sigv4.Refused("AccessDenied", f"Access Denied: this key does not reach bucket {source}")
            if isinstance(verdict, sigv4.Refused):
                if verdict.code == "InvalidAccessKeyId" and verdict.access_key.startswith(KEY_PREFIX):
                    # one of the emulator's keys (their prefix says so), for another bucket
                    what = f"bucket {bucket}" if bucket else "the list of buckets"
                    verdict = sigv4.Refused("AccessDenied", f"Access Denied: this key does not reach {what}")
                status = "403 Forbidden" if verdict.code in _FORBIDDEN else "400 Bad Request"
                start_response(status, [("Content-Type", "application/xml")])
                return [] if environ.get("REQUEST_METHOD") == "HEAD" else [_s3_error(verdict.code, verdict.message)]
            return app(environ, start_response)
        finally:
            if spool is not None:
                spool.close()  # moto has read it: `_write_through` holds the answer until the body is consumed

    return wsgi


FORM_KEY = "emulator.media.form_key"  # environ: the object key a browser-form upload writes
_FORM_SPOOL = 8 * MIB  # a form's body stays in memory up to this, then goes to a temporary file


def _is_form_upload(environ: WSGIEnvironment, bucket: str, key: str) -> bool:
    """A browser-form upload: a multipart form POSTed to a bucket (S3's POST Object)."""
    content_type = str(environ.get("CONTENT_TYPE", "")).lower()
    return (
        environ.get("REQUEST_METHOD") == "POST"
        and bool(bucket)
        and not key
        and content_type.startswith("multipart/form-data")
    )


def _read_form(environ: WSGIEnvironment) -> tuple[IO[bytes], form.Posted | sigv4.Refused]:
    """The form's body, read into a spool that replaces `wsgi.input` (moto reads it again), and its fields."""
    from werkzeug.formparser import parse_form_data

    spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=_FORM_SPOOL)
    length = str(environ.get("CONTENT_LENGTH") or "")
    if not length.isdigit():
        return spool, sigv4.Refused("MissingContentLength", "You must provide the Content-Length HTTP header.")
    remaining, source = int(length), environ["wsgi.input"]
    try:
        while remaining > 0:
            chunk = source.read(min(remaining, 1 << 16))
            if not chunk:
                break
            spool.write(chunk)
            remaining -= len(chunk)
    except OSError:  # the connection's reading side was shut (the body's deadline) or reset
        pass
    if remaining > 0:
        message = "You did not provide the number of bytes specified by the Content-Length HTTP header."
        return spool, sigv4.Refused("IncompleteBody", message)
    spool.seek(0)
    try:
        _, fields, files = parse_form_data({**environ, "wsgi.input": spool}, max_form_parts=1000)
    except Exception as e:  # werkzeug's bounds (too many parts...) raise even when parsing is silent
        message = f"The body of your POST request is not well-formed multipart/form-data ({type(e).__name__})."
        return spool, sigv4.Refused("MalformedPOSTRequest", message)
    spool.seek(0)
    environ["wsgi.input"] = spool
    named = {name.lower(): str(fields.get(name, "")) for name in fields}
    upload = files.get("file")
    if upload is not None:
        upload.stream.seek(0, os.SEEK_END)
        return spool, form.Posted(named, upload.filename or "", upload.stream.tell())
    if "file" in named:  # a file sent as a plain field: its text is the object
        return spool, form.Posted(named, "", len(named["file"].encode()))
    return spool, form.Posted(named, None, None)


_FORBIDDEN = frozenset({"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"})
KEY_PREFIX = "PXTE"  # every access key id the emulator makes (as AWS's begin with AKIA or ASIA)


def s3_app(
    changed: Callable[[Change, str, str], None],
    restored: threading.Event,
    keys: Keys,
    raised: Callable[[BaseException], None] | None = None,
    now: Callable[[], float] = time.time,
) -> Callable[..., Iterable[bytes]]:
    """The endpoint's WSGI app: moto's S3 inside the layers above (`raised`: see `_refuse_unreadable`)."""
    # Imported here: moto is large, and only `emulator up` needs its server.
    from moto.moto_server.werkzeug_app import create_backend_app

    # S3 only: moto's dispatcher would also serve every other AWS service and /moto-api (which resets state).
    app = create_backend_app("s3")
    # The app's own request class is extended, not replaced: moto 5.2 gives it one of its own (the only type its
    # core accepts), 5.1 Flask's.
    base: type[Any] = app.request_class

    class S3Request(base):
        """S3 takes a body as bytes whatever its Content-Type says; only a browser's upload form (a POST to the
        bucket) is a form. moto's server would parse any form-typed body (curl's `-d` default) as form fields: an
        object PUT that way was stored empty and acknowledged, and its fields read as query parameters."""

        @property
        def want_form_data_parsed(self) -> bool:
            to_bucket = "/" not in self.path.strip("/")
            return self.method == "POST" and to_bucket and super().want_form_data_parsed

    app.request_class = S3Request
    served = _declare_composite(_write_through(_refuse_unreadable(app, raised), changed))
    return _until_restored(_refuse_expired(_authorized(served, keys, now), now), restored, keys.own[0])


def client(endpoint: str, key: tuple[str, str], **config: Any) -> Any:
    """A boto3 client of the endpoint with a key pair (the emulator's own, or a bucket's), path-style and SigV4 as
    the real client's; boto3 is imported here, not at import (see `MediaStore`)."""
    import boto3
    import botocore.config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=key[0],
        aws_secret_access_key=key[1],
        config=botocore.config.Config(signature_version="s3v4", s3={"addressing_style": "path"}, **config),
    )


def bucket_name(org_id: str, db: str) -> str:
    """`pxt-<org_id>-<db>`, lowercased: a valid S3 name (3-63 characters, [a-z0-9-]).

    A part that is not already such a label, or a name too long, is replaced by a digest of the exact
    value, so two databases never share a bucket. The `pxt-<org>-` prefix always stays: it is how the
    organization's usage is found.
    """
    name = f"{org_prefix(org_id)}{db}"
    if not _LABEL.match(db) or len(name) > 63:
        name = f"{org_prefix(org_id)}{hashlib.sha256(db.encode()).hexdigest()[:16]}"
    return name


def org_prefix(org_id: str) -> str:
    """`pxt-<org_id>-`, the start of every bucket name of the organization."""
    org = org_id.lower().replace("_", "-")
    if not _LABEL.match(org) or len(org) > 40:
        org = hashlib.sha256(org_id.encode()).hexdigest()[:16]
    return f"pxt-{org}-"


class MediaStore:
    """The S3 endpoint (moto, in a thread) and what the control plane asks of it.

    moto, boto3 and the restore of the last run's buckets cost about a third of a second and 40 MiB, and most runs
    never store media: `start` only listens, and the endpoint comes up at the first connection to its port or the
    first control-plane call that needs it (`running`). A client's request meanwhile waits in the listen backlog.
    """

    def __init__(
        self,
        core: Core,
        sock: socket.socket,
        endpoint: str,
        quota_bytes: int,
        databases: Callable[[], Awaitable[list[tuple[str, str]]]],
    ) -> None:
        self.core = core
        self._databases = databases  # (org id, db) of every database there is: the buckets to keep
        self.endpoint = endpoint
        self.quota_bytes = quota_bytes
        self._sock = sock
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._buckets: set[str] = set()
        self._bucket_lock = asyncio.Lock()
        self._key = private_key(core.settings.state_dir / "keys" / "media-credentials.key")
        self._mirror = Mirror(core.settings.state_dir / "media")
        self._swept = -math.inf
        self._restoring = False
        self._restored = threading.Event()  # clients' requests wait for it (see _until_restored)
        self.keys = Keys(self._key)
        self._s3_client: Any = None  # the emulator's own boto3 client (see _bring_up)
        self._up = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake_r, self._wake_w = socket.socketpair()  # ends the first-connection watch at close
        self._watch: threading.Thread | None = None

    @property
    def _s3(self) -> Any:
        if self._s3_client is None:
            raise RuntimeError("the media store's endpoint is not up yet (await running() first)")
        return self._s3_client

    @property
    def started(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        """Listen on the socket bound by the caller (so port 0 is already resolved); serve from the first
        connection or the first `running()`."""
        self._sock.listen(128)
        self._loop = asyncio.get_running_loop()
        self._watch = threading.Thread(target=self._first_connection, name="s3-first-connection", daemon=True)
        self._watch.start()
        self.core.clock.on_due(self.sweep)

    def _first_connection(self) -> None:
        try:
            ready, _, _ = select.select([self._sock, self._wake_r], [], [])
        except (OSError, ValueError):
            return  # closed meanwhile
        if self._sock in ready and self._wake_r not in ready:
            try:
                self._bring_up()
            except Exception:
                log.exception("the media store's endpoint did not start")

    async def running(self) -> None:
        """The endpoint is up and the last run's buckets are back."""
        if self._server is None or not self._restored.is_set():
            await asyncio.to_thread(self._bring_up)

    def _bring_up(self) -> None:
        """Serve, in a daemon thread, and put back what the last run saved (once; any thread)."""
        with self._up:
            if self._server is not None:
                return
            # The emulator's own client: creates buckets, lists them for usage, signs URLs (signing is local).
            retry = {"max_attempts": 2, "mode": "standard"}
            self._s3_client = client(self.endpoint, self.keys.own, retries=retry, max_pool_connections=16)
            host = self._sock.getsockname()[0]
            app = s3_app(self._changed, self._restored, self.keys, now=self.core.clock.now)
            bounds = self.core.settings.http_request_timeout, self.core.settings.http_body_deadline
            server = serve(host, self._sock.fileno(), app, *bounds)
            self._thread = threading.Thread(target=server.serve_forever, name="s3-endpoint", daemon=True)
            self._thread.start()
            self._server = server
            self._restoring = True  # the restore's own writes are on disk already
            try:
                objects, size = self._mirror.restore(self._s3)
            finally:
                self._restoring = False
                self._restored.set()
            self._buckets.update(self._mirror.buckets())
            if objects and self._loop is not None:
                publish = self.core.bus.publish
                self._loop.call_soon_threadsafe(lambda: publish(None, MediaRestored(objects=objects, bytes=size)))

    def _changed(self, what: Change, bucket: str, key: str) -> None:
        """An object was written or deleted (in the S3 endpoint's thread, before the client is answered)."""
        if self._restoring:
            return
        try:
            self._mirror.record(self._s3, what, bucket, key)
        except Exception as e:
            reason = f"{type(e).__name__}: {e}"
            log.error("media store: a change to %s/%s was not mirrored to disk (%s)", bucket, key[:200], reason)
            raise NotMirrored(reason) from e

    async def close(self) -> None:
        self._wake_w.send(b"x")
        if self._watch is not None:
            await asyncio.to_thread(self._watch.join, 30)  # a start it began finishes first
        if self._server is not None:
            try:
                await asyncio.to_thread(self._mirror.save, self._s3)
            except Exception:
                log.exception("the media store could not be saved; objects written in this run are lost")
            await asyncio.to_thread(self._server.shutdown)
            self._server.server_close()
            self._server = None
        self._sock.close()
        self._wake_r.close()
        self._wake_w.close()

    async def sweep(self, now: float) -> None:
        """Due job, every ten minutes of emulator time: delete `uploads/` objects older than a day, as the
        real bucket's lifecycle rule does (they are a request's staged files, never cell values), and the
        buckets of databases that no longer exist (deleted, or gone with an expired trial)."""
        if now - self._swept < SWEEP_EVERY:
            return
        self._swept = now
        if not self.started and not self._mirror.buckets():
            return  # nothing stored: no reason to bring the endpoint up
        await self.running()
        live = {bucket_name(org_id, db) for org_id, db in await self._databases()}
        removed, dropped = await asyncio.to_thread(self._sweep, now - UPLOADS_TTL, live)
        if removed:
            self.core.bus.publish(None, MediaUploadsExpired(objects=removed))
        for name in dropped:
            self._buckets.discard(name)
            self.core.bus.publish(name, MediaBucketDropped())

    def _sweep(self, cutoff: float, live: set[str], *, every: bool = False) -> tuple[int, list[str]]:
        """Expire `uploads/` before `cutoff`; drop the databases' buckets not in `live` (`every`: any bucket): a
        database's end drops its bucket at once (`drop`), this catches what an emulator killed meanwhile left."""
        removed, dropped = 0, []
        for name in (b["Name"] for b in self._s3.list_buckets().get("Buckets", [])):
            if (every or name.startswith("pxt-")) and name not in live:
                self._drop_bucket(name)
                dropped.append(name)
                continue
            for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=name, Prefix="uploads/"):
                old = [{"Key": o["Key"]} for o in page.get("Contents", []) if o["LastModified"].timestamp() < cutoff]
                if old:
                    self._s3.delete_objects(Bucket=name, Delete={"Objects": old, "Quiet": True})
                    removed += len(old)
        return removed, dropped

    def _drop_bucket(self, name: str) -> None:
        """The bucket, its objects and its copy on disk, gone."""
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            batch = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if batch:
                self._s3.delete_objects(Bucket=name, Delete={"Objects": batch, "Quiet": True})
        self._s3.delete_bucket(Bucket=name)
        self._mirror.forget(name)

    async def drop(self, org_id: str, db: str) -> None:
        """A database ended: its bucket goes with it (the reconciler's teardown calls this)."""
        name = bucket_name(org_id, db)
        if name not in self._buckets and name not in self._mirror.buckets():
            return  # never made: nothing to bring the endpoint up for
        await self.running()
        try:
            await asyncio.to_thread(self._drop_bucket, name)
        except self._s3.exceptions.NoSuchBucket:
            await asyncio.to_thread(self._mirror.forget, name)
        self._buckets.discard(name)
        self.core.bus.publish(name, MediaBucketDropped())

    async def reset(self) -> None:
        """Every bucket and object gone, from the endpoint and from disk (a reset of the emulator)."""
        await asyncio.to_thread(self._drop_all)
        self._buckets.clear()
        self._swept = -math.inf  # the clock is back at its start: the next due sweep runs

    def _drop_all(self) -> None:
        with self._up:  # not while the endpoint comes up: its restore would bring the buckets back
            if self._server is not None:
                self._sweep(math.inf, set(), every=True)
            self._mirror.clear()

    # --- credentials and buckets ----------------------------------------------------------------------

    async def save_to(self, folder: Path) -> None:
        """The media as the mirror holds it (every write is mirrored before the client hears back)."""
        await in_thread(lambda cancel: self._mirror.copy_to(folder / "mirror", cancel))

    async def load_from(self, folder: Path) -> None:
        """The media a snapshot holds, into the mirror, and into the endpoint if it is up (after a reset emptied
        both); an endpoint not up yet restores it when it comes up."""
        await asyncio.to_thread(self._load, folder / "mirror")

    def _load(self, mirror: Path) -> None:
        with self._up:
            self._mirror.replace_with(mirror)
            if self._server is None:
                return
            self._restoring = True  # the restore's own writes are on disk already
            try:
                self._mirror.restore(self._s3)
            finally:
                self._restoring = False
            self._buckets.update(self._mirror.buckets())

    async def ensure_bucket(self, name: str) -> None:
        """The bucket exists, and the endpoint is up (every control-plane operation on media starts here)."""
        await self.running()
        if name in self._buckets:
            return
        async with self._bucket_lock:
            if name not in self._buckets:
                # us-east-1: creating a bucket one already owns succeeds, so a restart needs no special case.
                await asyncio.to_thread(self._s3.create_bucket, Bucket=name)
                self._buckets.add(name)
                self.core.bus.publish(name, MediaBucketCreated())

    async def usage(self, org_id: str) -> int:
        """Bytes the organization's buckets hold: the sum of the object sizes an S3 listing reports."""
        await self.running()
        return await asyncio.to_thread(self._usage, org_prefix(org_id))

    def _usage(self, prefix: str) -> int:
        total = 0
        for bucket in self._s3.list_buckets().get("Buckets", []):
            if not bucket["Name"].startswith(prefix):
                continue
            for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=bucket["Name"]):
                total += sum(obj["Size"] for obj in page.get("Contents", []))
        return total

    def presign(self, bucket: str, key: str, method: Literal["get", "put"], expires: int) -> str:
        """A presigned URL (after `ensure_bucket`, which brings the endpoint up), dated on the emulator's clock."""
        url = f"{self.endpoint}/{bucket}/{key}"
        return sigv4.presign("PUT" if method == "put" else "GET", url, self.keys.own, self.core.clock.now(), expires)

    async def fullness(self, org_id: str, trial: bool) -> str | None:
        """None while there is room; else the text for the user (it ends with what to do)."""
        if not trial:
            return None  # the emulator knows the trial's plan only
        used = await self.usage(org_id)
        if used < self.quota_bytes:
            return None
        return (
            f"The trial's media store is full ({_size(used)} used of {_size(self.quota_bytes)}); only reads and "
            "deletes are allowed. Delete media (drop tables or rows with media) or claim the organization."
        )


class Entry(msgspec.Struct, kw_only=True):
    """An object the mirror holds: its ETag and size as the endpoint reported them, its type, and its file."""

    etag: str
    size: int
    content_type: str | None = None
    file: str | None = None  # None: written before objects had versions (the key's digest names the file)


_decode_manifest = msgspec.json.Decoder(dict[str, Entry]).decode


class Mirror:
    """The buckets on disk, between runs: moto keeps objects in memory only.

    Every acknowledged write is written through (`refresh_object`, `sync_bucket`), so it survives a killed emulator;
    `save` (at shutdown) catches up with anything else, by ETag, and drops what was deleted; `restore` (at start)
    puts it all back. Layout: `<bucket>.json` (key → etag, size, content type, file) and
    `<bucket>/<sha256 of the key>.<version>` for the bytes (keys may be 1024 bytes long, or unfit as file names).
    Each write of a key goes to a file of its own, and the manifest's rename is the one commit point: a kill
    before it leaves the previous version whole (its bytes and its content type), never a mix of the two.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()  # the S3 endpoint's threads write manifests too

    def record(self, s3: Any, what: Change, bucket: str, key: str) -> None:
        """Write through what a request changed: one object, or the bucket's list (a multi-object delete)."""
        if what == "bucket":
            self.sync_bucket(s3, bucket)
        else:
            self.refresh_object(s3, bucket, key)

    def refresh_object(self, s3: Any, bucket: str, key: str) -> None:
        """Make the disk hold what the endpoint holds for one key, which a request just wrote or deleted."""
        with self._lock:
            entries = self._manifest(bucket)
            old = entries.get(key)
            try:
                entries[key] = self._copy(s3, bucket, key)
            except s3.exceptions.NoSuchKey:
                if entries.pop(key, None) is None:
                    return
            self._write_manifest(bucket, entries)
            if old is not None:
                self._file(bucket, key, old).unlink(missing_ok=True)

    def sync_bucket(self, s3: Any, bucket: str) -> None:
        """Drop from disk what the bucket no longer holds (after a delete)."""
        with self._lock:
            entries = self._manifest(bucket)
            live = {
                obj["Key"]
                for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
                for obj in page.get("Contents", [])
            }
            gone = {key: entries.pop(key) for key in entries.keys() - live}
            self._write_manifest(bucket, entries)
            for key, entry in gone.items():
                self._file(bucket, key, entry).unlink(missing_ok=True)

    def _copy(self, s3: Any, bucket: str, key: str) -> Entry:
        """Write the object's current bytes to a new file; the entry that names it, for the manifest."""
        answer = s3.get_object(Bucket=bucket, Key=key)
        name = f"{_digest(key)}.{secrets.token_hex(6)}"
        path = self.root / bucket / name[:2] / name
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{name}.part")
        with open(part, "wb") as f:
            shutil.copyfileobj(answer["Body"], f)
            f.flush()
            os.fsync(f.fileno())
        part.replace(path)
        return Entry(
            etag=answer["ETag"], size=answer["ContentLength"], content_type=answer.get("ContentType"), file=name
        )

    def buckets(self) -> list[str]:
        return [p.stem for p in self.root.glob("*.json")]

    def _file(self, bucket: str, key: str, entry: Entry) -> Path:
        name = entry.file or _digest(key)  # an entry written before versions had none
        return self.root / bucket / name[:2] / name

    def _manifest(self, bucket: str) -> dict[str, Entry]:
        try:
            return _decode_manifest((self.root / f"{bucket}.json").read_bytes())
        except (OSError, msgspec.DecodeError):  # a manifest cut short by a kill: its bucket restores empty
            return {}

    def _write_manifest(self, bucket: str, entries: dict[str, Entry]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{bucket}.json"
        tmp = path.with_name(f"{bucket}.{threading.get_ident()}.tmp")
        with open(tmp, "w") as f:
            f.write(msgspec.json.encode(entries).decode())
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)

    def save(self, s3: Any) -> None:
        with self._lock:
            self._save(s3)

    def clear(self) -> None:
        with self._lock:
            shutil.rmtree(self.root, ignore_errors=True)

    def forget(self, bucket: str) -> None:
        """A dropped bucket: its manifest and files go, so the next start does not make it again."""
        with self._lock:
            (self.root / f"{bucket}.json").unlink(missing_ok=True)
            shutil.rmtree(self.root / bucket, ignore_errors=True)

    def copy_to(self, target: Path, cancel: threading.Event | None = None) -> None:
        with self._lock:  # no manifest changes while its files are copied
            if self.root.is_dir():
                copy_tree(self.root, target, cancel)
            else:
                target.mkdir(parents=True)

    def replace_with(self, source: Path) -> None:
        with self._lock:
            shutil.rmtree(self.root, ignore_errors=True)
            copy_tree(source, self.root)

    def _save(self, s3: Any) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        present = set()
        for bucket in (b["Name"] for b in s3.list_buckets().get("Buckets", [])):
            present.add(bucket)
            old, new = self._manifest(bucket), dict[str, Entry]()
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for obj in page.get("Contents", []):
                    key, was = obj["Key"], old.get(obj["Key"])
                    if was is not None and was.etag == obj["ETag"] and self._file(bucket, key, was).is_file():
                        new[key] = was
                        continue
                    new[key] = self._copy(s3, bucket, key)
            self._write_manifest(bucket, new)
            for key, entry in old.items():
                kept = new.get(key)
                if kept is None or kept.file != entry.file:
                    self._file(bucket, key, entry).unlink(missing_ok=True)
        for bucket in set(self.buckets()) - present:
            shutil.rmtree(self.root / bucket, ignore_errors=True)
            (self.root / f"{bucket}.json").unlink(missing_ok=True)

    def restore(self, s3: Any) -> tuple[int, int]:
        objects = size = 0
        for bucket in self.buckets():
            s3.create_bucket(Bucket=bucket)
            entries = self._manifest(bucket)
            for key, entry in list(entries.items()):
                path = self._file(bucket, key, entry)
                if not path.is_file():
                    del entries[key]
                    continue
                extra = {"ContentType": entry.content_type} if entry.content_type else {}
                with open(path, "rb") as f:
                    # A multipart object's ETag changes on a single PUT: keep the new one, or the next save
                    # would copy the object again.
                    entry.etag = s3.put_object(Bucket=bucket, Key=key, Body=f, **extra)["ETag"]
                objects, size = objects + 1, size + entry.size
            self._write_manifest(bucket, entries)
            # What a killed emulator left half done: files the manifest does not name (a write it never committed,
            # a version it replaced), and their parts.
            kept = {self._file(bucket, key, entry) for key, entry in entries.items()}
            for path in (self.root / bucket).glob("*/*"):
                if path not in kept:
                    path.unlink(missing_ok=True)
        return objects, size


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _size(n: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
