"""`/ask`: the JSON and SSE answers, query rules, and the errors of the spec."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from httpx_sse import aconnect_sse

from tests.conftest import Emulator


def sse_events(text: str) -> list[dict]:
    """Parse an SSE body strictly: every event must be unnamed and carry one JSON `data:` line."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert not any(line.startswith("event:") for line in lines), f"named event: {block!r}"
        data = [line[len("data: ") :] for line in lines if line.startswith("data: ")]
        assert len(data) == 1, block
        events.append(json.loads(data[0]))
    return events


async def test_json_answer_has_the_spec_shape(client: httpx.AsyncClient, emu: Emulator) -> None:
    r = await client.post("/ask", json={"query": "How do I add an embedding index to a column?"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"query_id", "query", "results", "answer", "_meta"}
    uuid.UUID(body["query_id"])
    assert body["query"] == "How do I add an embedding index to a column?"
    assert body["_meta"] == {
        "response_type": "summary",
        "version": "0.1",
        "site": "pixeltable.com",
        "streaming": False,
    }
    assert 1 <= len(body["results"]) <= 5
    for result in body["results"]:
        assert result["@type"] == "WebPage"
        assert result["name"] and result["description"]
        assert result["url"].startswith(emu.url + "/")
    assert "embedding" in body["results"][0]["name"].lower()
    assert "index" in body["answer"].lower() and len(body["answer"]) > 80


async def test_result_urls_are_pages_the_site_serves(client: httpx.AsyncClient) -> None:
    r = await client.get("/ask", params={"query": "trial organization claim link"})
    url = r.json()["results"][0]["url"]
    async with httpx.AsyncClient() as plain:
        page = await plain.get(url)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        md = await plain.get(url + ".md")
        assert md.status_code == 200 and md.text.startswith("---")
        assert (await plain.get(url, headers={"Accept": "text/markdown"})).text == md.text


@pytest.mark.parametrize(
    ("question", "expected_path"),
    [
        ("embedding index similarity search", "/docs/concepts/embedding"),
        ("how long does an unclaimed trial live before deletion", "/docs/trials/"),
        ("RateLimit-Policy header and Retry-After", "/docs/errors/rate"),
        ("pxt secret set and db restart", "/docs/cli/"),
    ],
)
async def test_search_ranks_the_page_about_the_question_first(emu: Emulator, question: str, expected_path: str) -> None:
    async with emu.client() as c:
        results = (await c.get("/ask", params={"q": question})).json()["results"]
    assert results, question
    assert results[0]["url"].startswith(emu.url + expected_path), [r["url"] for r in results]


async def test_a_question_with_no_match_gets_an_empty_list_and_says_so(client: httpx.AsyncClient) -> None:
    body = (await client.get("/ask", params={"query": "zyxwvut qqqqq"})).json()
    assert body["results"] == []
    assert "nothing that matches" in body["answer"]


async def test_q_is_an_alias_and_query_wins_when_both_are_sent(client: httpx.AsyncClient) -> None:
    assert (await client.get("/ask", params={"q": "computed columns"})).json()["query"] == "computed columns"
    both = await client.post("/ask", json={"query": "computed columns", "q": "video frames"})
    assert both.json()["query"] == "computed columns"
    get_both = await client.get("/ask", params={"query": "api keys", "q": "video frames"})
    assert get_both.json()["query"] == "api keys"


async def test_nlweb_v054_query_object_is_accepted(client: httpx.AsyncClient) -> None:
    r = await client.post("/ask", json={"query": {"text": "what is a view", "site": "docs"}})
    assert r.status_code == 200 and r.json()["query"] == "what is a view"


async def test_query_length_limit_is_2000(client: httpx.AsyncClient) -> None:
    ok = await client.post("/ask", json={"query": "table " + "a" * 1994})
    assert ok.status_code == 200
    r = await client.post("/ask", json={"query": "a" * 2001})
    assert r.status_code == 400
    assert r.json()["error"] == {
        "code": "bad_request",
        "message": "`query` is 2001 characters long; the limit is 2000",
        "status": 400,
        "retryable": False,
    }
    assert (await client.get("/ask", params={"q": "b" * 2001})).status_code == 400


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({}, "non-empty `query` is required"),
        ({"query": "   "}, "non-empty `query`"),
        ({"query": 42}, "`query` must be a string"),
        ({"q": ["a"]}, "`q` must be a string"),
        ({"query": {"site": "x"}}, "`query` must be a string"),
        ({"query": "x", "prefer": "stream"}, "`prefer` must be an object"),
        ({"query": "x", "prefer": {"streaming": "maybe"}}, "prefer.streaming"),
        (["query"], "JSON object"),
    ],
)
async def test_invalid_queries_are_400_bad_request(emu: Emulator, body: object, fragment: str) -> None:
    async with emu.client() as c:
        r = await c.post("/ask", json=body)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "bad_request" and error["status"] == 400 and error["retryable"] is False
    assert fragment in error["message"]


async def test_missing_query_on_get_is_400(client: httpx.AsyncClient) -> None:
    r = await client.get("/ask")
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"


async def test_body_that_does_not_parse_is_400_invalid_json(client: httpx.AsyncClient) -> None:
    r = await client.post("/ask", content=b'{"query": "x",', headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "invalid_json" and error["status"] == 400 and error["retryable"] is False
    assert "not valid JSON" in error["message"]


async def test_curl_style_form_body_with_json_is_read_as_json(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/ask",
        content=b'{"query": "pxt login"}',
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200 and r.json()["query"] == "pxt login"
    form = await client.post("/ask", data={"query": "pxt whoami"})
    assert form.json()["query"] == "pxt whoami"


def _assert_stream(r: httpx.Response, query: str) -> list[dict]:
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    # a reconnecting EventSource waits a whole rate window, not its default 3 s; the `retry:` rides in the first
    # event's block, as a block of its own would be an event with empty data to some clients
    assert r.text.startswith("retry: 60000\ndata: {")
    events = sse_events(r.text)
    kinds = [e["message_type"] for e in events]
    assert kinds == ["begin-nlweb-response", "result", "summary", "end-nlweb-response", "complete"]
    begin = events[0]
    assert begin["query"] == query and begin["_meta"]["streaming"] is True
    assert events[3]["query_id"] == begin["query_id"]
    assert all(item["@type"] == "WebPage" for item in events[1]["content"])
    assert events[2]["message"]
    return events


async def test_accept_event_stream_streams_a_get(client: httpx.AsyncClient) -> None:
    r = await client.get("/ask", params={"query": "video frames"}, headers={"Accept": "text/event-stream"})
    _assert_stream(r, "video frames")
    assert "RateLimit" in r.headers and "Retry-After" in r.headers


async def test_httpx_sse_reads_one_json_object_per_event(client: httpx.AsyncClient) -> None:
    # httpx-sse's documented pattern, as is: every event it yields must be JSON (an empty first event, from a
    # `retry:` sent in a block of its own, fails json.loads).
    async with aconnect_sse(client, "GET", "/ask", params={"query": "embedding index"}) as source:
        events = [sse async for sse in source.aiter_sse()]
    messages = [json.loads(sse.data) for sse in events]
    assert [m["message_type"] for m in messages] == [
        "begin-nlweb-response",
        "result",
        "summary",
        "end-nlweb-response",
        "complete",
    ]
    assert events[0].retry == 60000 and all(sse.event == "message" for sse in events)


async def test_httpx_sse_reads_the_emulators_event_stream_as_json_too(client: httpx.AsyncClient) -> None:
    # The control API's live feed: its opening comment and its `retry:` must not become an event without data.
    events = []
    async with aconnect_sse(client, "GET", "/_emulator/events", params={"since": "0"}) as source:
        async for sse in source.aiter_sse():
            events.append(sse)
            if len(events) == 3:
                break
    assert [json.loads(sse.data)["seq"] for sse in events] == [int(sse.id) for sse in events]
    assert events[0].retry == 1000


async def test_prefer_header_streams_and_says_it_was_applied(client: httpx.AsyncClient) -> None:
    r = await client.post("/ask", json={"query": "chunk documents"}, headers={"Prefer": "streaming=true"})
    _assert_stream(r, "chunk documents")
    assert r.headers["preference-applied"] == "streaming=true"


async def test_prefer_streaming_in_the_body_streams(client: httpx.AsyncClient) -> None:
    r = await client.post("/ask", json={"query": "api keys", "prefer": {"streaming": True}})
    _assert_stream(r, "api keys")


async def test_explicit_false_wins_over_accept(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/ask",
        json={"query": "api keys", "prefer": {"streaming": False}},
        headers={"Accept": "text/event-stream, application/json"},
    )
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["_meta"]["streaming"] is False


async def test_streaming_is_not_sent_to_a_client_that_only_accepts_json(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/ask", json={"query": "api keys"}, headers={"Prefer": "streaming=true", "Accept": "application/json"}
    )
    assert r.headers["content-type"].startswith("application/json")


async def test_json_and_stream_carry_the_same_results(client: httpx.AsyncClient) -> None:
    plain = (await client.get("/ask", params={"query": "service gateway X-api-key"})).json()
    streamed = await client.get(
        "/ask", params={"query": "service gateway X-api-key"}, headers={"Accept": "text/event-stream"}
    )
    events = _assert_stream(streamed, "service gateway X-api-key")
    assert events[1]["content"] == plain["results"]
    assert events[2]["message"] == plain["answer"]


async def test_client_query_id_is_echoed(client: httpx.AsyncClient) -> None:
    qid = str(uuid.uuid4())
    assert (await client.post("/ask", json={"query": "x y", "query_id": qid})).json()["query_id"] == qid


async def test_each_ask_is_an_event(emu: Emulator, client: httpx.AsyncClient) -> None:
    await client.get("/ask", params={"query": "journal marker question"})
    events = [e for e in emu.journal("site.ask") if e["data"]["query"] == "journal marker question"]
    assert len(events) == 1
    assert events[0]["data"]["status"] == 200 and events[0]["data"]["method"] == "GET"


async def test_other_methods_get_405_in_the_error_envelope(client: httpx.AsyncClient) -> None:
    r = await client.put("/ask", json={"query": "x"})
    assert r.status_code == 405 and r.json()["error"]["status"] == 405


async def test_unknown_path_is_404_not_found(client: httpx.AsyncClient) -> None:
    r = await client.get("/no/such/thing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def test_own_docs_folder_replaces_the_corpus(tmp_path: Path, start_emulator) -> None:
    docs = tmp_path / "mydocs"
    (docs / "guide").mkdir(parents=True)
    (docs / "guide" / "widgets.md").write_text(
        "---\ntitle: Widget frobnication\ndescription: How widgets frobnicate.\n---\n"
        "# Widget frobnication\n\n## Frobnicating\nA widget frobnicates when its gizmo spins twice.\n"
    )
    (docs / "about.html").write_text(
        "<html><head><title>About Sprockets</title><meta name='description' content='Sprocket facts.'>"
        "</head><body><nav>menu</nav><h1>About Sprockets</h1><h2>Teeth</h2><p>Every sprocket has "
        "exactly thirty-two teeth.</p></body></html>"
    )
    e = start_emulator("--docs", str(docs), "--no-watch")
    async with e.client() as c:
        widget = (await c.get("/ask", params={"query": "frobnicate widget"})).json()
        assert widget["results"][0] == {
            "@type": "WebPage",
            "name": "Widget frobnication",
            "url": e.url + "/guide/widgets",
            "description": "How widgets frobnicate.",
        }
        assert "gizmo spins twice" in widget["answer"]
        sprocket = (await c.get("/ask", params={"query": "how many teeth has a sprocket"})).json()
        assert sprocket["results"][0]["name"] == "About Sprockets"
        assert sprocket["results"][0]["url"] == e.url + "/about"
        assert "thirty-two teeth" in sprocket["answer"]
        shipped = (await c.get("/ask", params={"query": "embedding index"})).json()
        assert shipped["results"] == []
        assert (await c.get("/about")).text.startswith("<html>")


async def test_docs_are_reindexed_when_a_file_changes(tmp_path: Path, start_emulator) -> None:
    docs = tmp_path / "live"
    docs.mkdir()
    (docs / "a.md").write_text("---\ntitle: Alpha\ndescription: a\n---\n# Alpha\n\n## One\nAlpha is first.\n")
    e = start_emulator("--docs", str(docs))
    since = e.journal()[-1]["seq"]
    (docs / "b.md").write_text("---\ntitle: Bravo\ndescription: b\n---\n# Bravo\n\n## Two\nBravo quokkas are second.\n")
    async with e.client() as c:
        # Wait for the reindex event on the live stream (bounded by the read timeout), not for wall time.
        params = {"since": since, "kinds": "docs."}
        async with c.stream("GET", "/_emulator/events", params=params) as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data: ") and json.loads(line[6:])["data"]["pages"] == 2:
                    break
        assert (await c.get("/ask", params={"q": "quokkas"})).json()["results"][0]["name"] == "Bravo"


@pytest.mark.parametrize(
    ("body", "accept"),
    [
        ({"query": "how do I create a trial"}, "application/json"),
        ({"query": "embedding index"}, "text/event-stream"),
        ({"quer": "no query"}, "application/json"),
    ],
)
async def test_a_chunked_post_gets_the_same_answer_as_one_with_a_length(emu: Emulator, body: dict, accept: str) -> None:
    """A small POST with a Content-Length is answered before the router (AskFastPath), a chunked one by the route:
    the same status, headers and body (the query ids aside), JSON or an event stream."""
    raw = json.dumps(body).encode()

    async def chunks() -> AsyncIterator[bytes]:
        yield raw[:7]
        yield raw[7:]

    headers = {"Content-Type": "application/json", "Accept": accept}
    async with emu.client() as c:
        answers = [
            await c.post("/ask", content=raw, headers=headers),
            await c.post("/ask", content=chunks(), headers=headers),
        ]
    assert "content-length" not in answers[1].request.headers  # really chunked

    def same(r: httpx.Response) -> tuple:
        names = [n for n in r.headers if n not in ("date", "ratelimit", "transfer-encoding", "content-length")]
        text = re.sub(r'"query_id":"[0-9a-f-]+"', "", r.text)
        return r.status_code, names, [r.headers[n] for n in names], text

    assert same(answers[0]) == same(answers[1])
    if accept == "text/event-stream":
        assert answers[0].headers["content-type"] == "text/event-stream; charset=utf-8"
        assert [e["message_type"] for e in sse_events(answers[0].text)][-1] == "complete"
    else:
        assert answers[0].headers["content-length"] == str(len(answers[0].content))
