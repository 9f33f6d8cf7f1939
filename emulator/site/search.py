"""Full-text search over the docs corpus (SQLite FTS5, BM25 ranking) and extractive answers.

The index lives in the store and is rebuilt only when the corpus changes (its fingerprint is kept in
`meta`). Queries run on a read-only connection on the event loop: they take microseconds, and a thread
hop would cost more than the query.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import sqlite3
from collections import OrderedDict
from pathlib import Path

import msgspec

from emulator.core.context import Core
from emulator.core.payloads import DocsIndexed
from emulator.core.tasks import cancel
from emulator.site import corpus

log = logging.getLogger(__name__)

STOPWORDS = frozenset(
    """a an and are as at be but by can could do does did for from had has have how i if in into is it its
    me my of on or our should so than that the their them then there these they this to up us was we what
    when where which who why will with would you your please tell explain about""".split()
)
_WORD = re.compile(r"\w+", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\"'])|\n\s*\n|\n(?=\s*[-*|>] )")


@functools.lru_cache(maxsize=8192)
def sentences(text: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """A passage's readable sentences with the stems of their words (memoized: passages repeat)."""
    out = []
    for sentence in _SENTENCE.split(text):
        sentence = " ".join(sentence.split()).lstrip("-*> ").strip()
        if len(sentence) >= 25 and not sentence.startswith("|"):
            out.append((sentence, frozenset(stem(w) for w in _WORD.findall(sentence.lower()))))
    return tuple(out)


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
        self._cache: OrderedDict[tuple[str, ...], tuple[list[Hit], str]] = OrderedDict()
        self._keys: dict[tuple[str, int], tuple[str, ...]] = {}  # question as typed -> cache key
        self._watch: asyncio.Task[None] | None = None

    async def build(self, force: bool = False) -> bool:
        """Index the corpus unless the stored index already matches it. True if it reindexed."""
        fp = corpus.fingerprint(self.root)
        if not force and await self.core.store.get_meta("docs_fingerprint") == fp:
            self._open_reader()
            return False
        pages = await asyncio.to_thread(corpus.load, self.root)
        page_rows, passage_rows, fts_rows = [], [], []
        for page_id, page in enumerate(pages, 1):
            page_rows.append((page_id, page.source, page.path, page.title, page.description, page.body))
            for p in page.passages:
                passage_rows.append((len(passage_rows) + 1, page_id, p.heading, p.text))
                fts_rows.append((len(passage_rows), page.title, p.heading, p.text, p.code))
        async with self.core.store.transaction() as conn:
            for table in ("docs_fts", "docs_passages", "docs_pages"):
                await conn.execute(f"DELETE FROM {table}")
            await conn.executemany(
                "INSERT INTO docs_pages (id, path, url, title, description, body) VALUES (?, ?, ?, ?, ?, ?)",
                page_rows,
            )
            await conn.executemany(
                "INSERT INTO docs_passages (id, page_id, heading, body) VALUES (?, ?, ?, ?)", passage_rows
            )
            await conn.executemany(
                "INSERT INTO docs_fts (rowid, title, heading, body, code) VALUES (?, ?, ?, ?, ?)", fts_rows
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
            str(self.root), DocsIndexed(pages=len(pages), passages=sum(len(p.passages) for p in pages))
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
        await cancel(self._watch)
        if self._reader:
            self._reader.close()

    @property
    def db(self) -> sqlite3.Connection:
        assert self._reader is not None, "build() first"
        return self._reader

    def lookup(self, query: str, limit: int = 5) -> tuple[list[Hit], str]:
        """The best pages for a question and the answer built from them.

        Both are cached per (limit, meaningful words) until the corpus is reindexed: the same
        question asked again costs a dictionary lookup.
        """
        key = self._keys.get((query, limit))
        if key is None:
            key = (str(limit), *query_terms(query))
            if len(self._keys) > 4096:
                self._keys.clear()
            self._keys[(query, limit)] = key
        cached = self._cache.get(key)
        if cached is None:
            hits = self._search(list(key[1:]), limit)
            cached = (hits, self.answer(query, hits) if hits else "")
            self._cache[key] = cached
            if len(self._cache) > 1024:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        hits, answer = cached
        return hits, answer or self.answer(query, hits)

    def _search(self, terms: list[str], limit: int) -> list[Hit]:
        if not terms:
            return []
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
        return sorted(hits.values(), key=lambda h: -h.score)[:limit]

    def answer(self, query: str, hits: list[Hit], max_chars: int = 700) -> str:
        """An answer built from the best passages: their sentences that say most about the query."""
        if not hits:
            return (
                f"The {self.core.settings.site_name} documentation has nothing that matches "
                f"\u201c{query.strip()}\u201d. Try other words, or read the page index at /llms.txt."
            )
        stems = {stem(t) for t in query_terms(query)}
        candidates: list[tuple[int, int, str]] = []
        for hit in hits[:3]:
            for passage in hit.passages[:2]:
                for sentence, words in sentences(passage.text):
                    candidates.append((len(stems & words), len(candidates), sentence))
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
        return self.db.execute("SELECT url, title, description, body FROM docs_pages WHERE url = ?", (path,)).fetchone()

    def pages(self) -> list[sqlite3.Row]:
        return self.db.execute("SELECT url, title, description FROM docs_pages ORDER BY url").fetchall()
