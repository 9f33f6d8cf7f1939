"""Schemathesis hooks for tests/test_fuzz.py (loaded through SCHEMATHESIS_HOOKS): bodies for the media types it
cannot make itself. `POST /_emulator/apply` takes a declared state as `application/toml`: random text, and
small documents that get past the TOML parser to the checks behind it."""

from __future__ import annotations

import schemathesis
from hypothesis import strategies as st

_KEYS = st.sampled_from(["orgs", "users", "registrations", "api_keys", "secrets", "clock", "name", "trial"])
_VALUES = st.one_of(
    st.integers(), st.booleans(), st.text(max_size=40).map(lambda s: '"' + s.replace("\\", "").replace('"', "") + '"')
)
_TABLE = st.builds(lambda k, v: f"{k} = {v}\n", _KEYS, _VALUES)
_DOCUMENT = st.lists(st.one_of(_TABLE, st.builds(lambda k: f"[[{k}]]\n", _KEYS)), max_size=8).map("".join)

schemathesis.openapi.media_type(
    "application/toml", st.one_of(st.text(max_size=500), _DOCUMENT).map(lambda s: s.encode("utf-8", "surrogatepass"))
)
