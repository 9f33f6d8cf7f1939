"""Full-text search over the docs corpus (SQLite FTS5, BM25 ranking) and extractive answers.

The index lives in the store and is rebuilt only when the corpus changes (its fingerprint is kept in
`meta`). Queries run on a read-only connection on the event loop: they take microseconds, and a thread
hop would cost more than the query.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sqlite3
from collections import OrderedDict
from pathlib import Path

import msgspec

from emulator.core.context import Core
from emulator.site import corpus

log = logging.getLogger(__name__)

STOPWORDS = frozenset(
    """a an and are as at be but by can could do does did for from had has have how i if in into is it its
    me my of on or our should so than that the their them then there these they this to up us was we what
    when where which who why will with would you your please tell explain about""".split()
)
_WORD = re.compile(r"\w+", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\"'])|\n\s*\n|\n(?=\s*[-*|>] )")


class Hit(msgspec.Struct):
    name: str
    path: str
    description: str
    score: float
    passages: list[corpus.Passage]


_CAMEL = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def query_terms(query: str) -> list[str]:
    """The words that carry meaning; all words if the question is nothing but stopwords.

    A camel-case word also stands for its parts (`RateLimit` → ratelimit, rate, limit), since prose
    spells out what header names glue together.
    """
    words = []
    for raw in _WORD.findall(query):
        words.append(raw.lower())
        parts = _CAMEL.findall(raw)
        if len(parts) > 1:
            words += [p.lower() for p in parts]
    words = [w for w in words if len(w) > 1 or w.isdigit()]
    meaningful = [w for w in words if w not in STOPWORDS]
    return list(dict.fromkeys(meaningful or words))


def stem(word: str) -> str:
    for suffix in ("ations", "ation", "ings", "ing", "ies", "ied", "ed", "es", "s", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


class DocsIndex:
    def __init__(self, core: Core, root: Path) -> None:
        self.core = core
        self.root = root
        self.generation = 0
        self._reader: sqlite3.Connection | None = None
        self._cache: OrderedDict[tuple[str, ...], list[Hit]] = OrderedDict()
        self._watch: asyncio.Task[None] | None = None

    async def build(self, force: bool = False) -> bool:
        """Index the corpus unless the stored index already matches it. True if it reindexed."""
        fp = corpus.fingerprint(self.root)
        if not force and await self.core.store.get_meta("docs_fingerprint") == fp:
            self._open_reader()
            return False
        pages = await asyncio.to_thread(corpus.load, self.root)
        async with self.core.store.transaction() as conn:
            await conn.execute("DELETE FROM docs_fts")
            await conn.execute("DELETE FROM docs_passages")
            await conn.execute("DELETE FROM docs_pages")
            for page in pages:
                cur = await conn.execute(
                    "INSERT INTO docs_pages (path, url, title, description, body) VALUES (?, ?, ?, ?, ?)",
                    (page.source, page.path, page.title, page.description, page.body),
                )
                page_id = cur.lastrowid
                for p in page.passages:
                    cur = await conn.execute(
                        "INSERT INTO docs_passages (page_id, heading, body) VALUES (?, ?, ?)",
                        (page_id, p.heading, p.text),
                    )
                    await conn.execute(
                        "INSERT INTO docs_fts (rowid, title, heading, body, code) VALUES (?, ?, ?, ?, ?)",
                        (cur.lastrowid, page.title, p.heading, p.text, p.code),
                    )
            await conn.execute(
                "INSERT INTO meta (key, value) VALUES ('docs_fingerprint', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (fp,),
            )
        self._open_reader()
        self.generation += 1
        self._cache.clear()
        self.core.bus.publish(
            "docs.indexed", str(self.root), pages=len(pages), passages=sum(len(p.passages) for p in pages)
        )
        return True

    def _open_reader(self) -> None:
        if self._reader is None:
            self._reader = self.core.store.reader()

    def watch(self) -> None:
        """Reindex when files in the docs folder change (an author editing docs sees it at once)."""

        async def run() -> None:
            from watchfiles import awatch

            async for _ in awatch(self.root, debounce=300, step=100):
                try:
                    await self.build()
                except Exception:
                    log.exception("reindexing %s failed", self.root)

        self._watch = asyncio.create_task(run(), name="docs-watch")

    async def close(self) -> None:
        if self._watch:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._reader:
            self._reader.close()

    @property
    def db(self) -> sqlite3.Connection:
        assert self._reader is not None, "build() first"
        return self._reader

    def search(self, query: str, limit: int = 5) -> list[Hit]:
        terms = query_terms(query)
        if not terms:
            return []
        key = (str(limit), *terms)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        expr = " OR ".join(f'"{t}"' for t in terms)
        rows = self.db.execute(
            "SELECT p.url, p.title, p.description, s.heading, s.body, "
            "bm25(docs_fts, 6.0, 3.0, 1.0, 0.25) AS rank "
            "FROM docs_fts JOIN docs_passages s ON s.id = docs_fts.rowid "
            "JOIN docs_pages p ON p.id = s.page_id "
            "WHERE docs_fts MATCH ? ORDER BY rank LIMIT 60",
            (expr,),
        ).fetchall()
        # A page's score: its best passage, plus half its second and a quarter of its third, so a
        # page with several sections on the topic beats a page that mentions it once.
        hits: dict[str, Hit] = {}
        for r in rows:
            hit = hits.get(r["url"])
            if hit is None:
                hit = hits[r["url"]] = Hit(r["title"], r["url"], r["description"], 0.0, [])
            n = len(hit.passages)
            if n < 3:
                hit.score += -r["rank"] / (1 << n)
                hit.passages.append(corpus.Passage(r["heading"], r["body"]))
        result = sorted(hits.values(), key=lambda h: -h.score)[:limit]
        self._cache[key] = result
        if len(self._cache) > 512:
            self._cache.popitem(last=False)
        return result

    def answer(self, query: str, hits: list[Hit], max_chars: int = 700) -> str:
        """An answer built from the best passages: their sentences that say most about the query."""
        if not hits:
            return (
                f"The {self.core.settings.site_name} documentation has nothing that matches "
                f"\u201c{query.strip()}\u201d. Try other words, or read the page index at /llms.txt."
            )
        stems = {stem(t) for t in query_terms(query)}
        candidates: list[tuple[int, int, str]] = []
        order = 0
        for hit in hits[:3]:
            for passage in hit.passages[:2]:
                for sentence in _SENTENCE.split(passage.text):
                    sentence = " ".join(sentence.split()).lstrip("-*> ").strip()
                    if len(sentence) < 25 or sentence.startswith("|"):
                        continue
                    words = {stem(w) for w in _WORD.findall(sentence.lower())}
                    candidates.append((len(stems & words), order, sentence))
                    order += 1
        best = sorted(candidates, key=lambda c: (-c[0], c[1]))
        # Sentences that say nearly as much about the question as the best one; the rest is noise.
        floor = max(1, best[0][0] - 1) if best else 1
        chosen: list[tuple[int, str]] = []
        size = 0
        for score, pos, sentence in best:
            if score < floor and chosen:
                break
            if size + len(sentence) > max_chars and chosen:
                continue
            chosen.append((pos, sentence))
            size += len(sentence) + 1
            if len(chosen) == 4:
                break
        text = " ".join(s if s.endswith((".", "!", "?", ":")) else s + "." for _, s in sorted(chosen))
        if not text:
            text = hits[0].description
        sources = ", ".join(f"\u201c{h.name}\u201d" for h in hits[:2])
        return f"{text} (From {sources}.)"

    def page(self, path: str) -> sqlite3.Row | None:
        return self.db.execute(
            "SELECT url, title, description, body FROM docs_pages WHERE url = ?", (path,)
        ).fetchone()

    def pages(self) -> list[sqlite3.Row]:
        return self.db.execute("SELECT url, title, description FROM docs_pages ORDER BY url").fetchall()
