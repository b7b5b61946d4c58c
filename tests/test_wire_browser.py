"""Opt-in browser access to the HTTP host: CORS for named origins (``serve --allow-origin``), and a
single-use, short-lived ticket so that an ``EventSource`` (which cannot send a header) never needs the
long-lived token in its URL."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import httpx
import pytest
from wire_support import SseReader, of_type

from run_supervisor.actors import Supervisor, SupervisorConfig
from run_supervisor.actors._cli import main
from run_supervisor.actors.hosts import HttpSettings, ServerThread, WireHost

PAGE = "http://localhost:5173"


@contextlib.contextmanager
def server(**settings: object) -> Iterator[ServerThread]:
    sup = Supervisor.start(SupervisorConfig(shutdown_at_exit=False))
    host = WireHost(sup)
    sup.load("/w/a")
    thread = ServerThread(host, settings=HttpSettings(token="the-token", **settings)).start()  # type: ignore[arg-type]
    try:
        yield thread
    finally:
        sup.shutdown(grace_ms=200, reason="test_teardown")
        host.hub.join(5.0)
        thread.stop()


def run(scenario: Callable[[httpx.AsyncClient], Awaitable[None]], **settings: object) -> None:
    with server(**settings) as srv:

        async def main_() -> None:
            async with httpx.AsyncClient(base_url=srv.url, timeout=10) as client:
                await scenario(client)

        asyncio.run(asyncio.wait_for(main_(), 40))


AUTH = {"Authorization": "Bearer the-token"}
PREFLIGHT = {
    "Origin": PAGE,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type",
}


def test_a_named_origin_gets_its_preflight_answered_and_its_answers_carry_the_cors_headers() -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        preflight = await client.options("/global/dispose", headers=PREFLIGHT)  # no token: browsers send none
        assert preflight.status_code == 204, preflight.text
        assert preflight.headers["access-control-allow-origin"] == PAGE
        assert "POST" in preflight.headers["access-control-allow-methods"]
        allowed = preflight.headers["access-control-allow-headers"]
        assert "authorization" in allowed and "last-event-id" in allowed
        assert "access-control-allow-credentials" not in preflight.headers  # the token is a header, no cookie
        disposed = await client.post("/global/dispose", headers={**AUTH, "Origin": PAGE})
        assert disposed.status_code == 200 and disposed.json()["status"] == "completed"
        assert disposed.headers["access-control-allow-origin"] == PAGE
        refused = await client.get("/statistics", headers={"Origin": PAGE})  # still needs the token
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == PAGE

    run(scenario, cors_origins=(PAGE,))


def test_an_origin_not_named_is_refused_preflight_and_all_and_no_origin_is_named_by_default() -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        other = {**PREFLIGHT, "Origin": "http://evil.example"}
        preflight = await client.options("/global/dispose", headers=other)
        assert preflight.status_code == 403 and preflight.json()["code"] == "forbidden"
        assert "access-control-allow-origin" not in preflight.headers
        call = await client.post("/global/dispose", headers={**AUTH, "Origin": "http://evil.example"})
        assert call.status_code == 403

    run(scenario, cors_origins=(PAGE,))

    async def by_default(client: httpx.AsyncClient) -> None:
        preflight = await client.options("/global/dispose", headers=PREFLIGHT)
        assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers

    run(by_default)


def test_an_event_stream_ticket_opens_one_stream_once_and_the_token_never_goes_in_the_url() -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        issued = await client.post("/events/ticket", headers=AUTH)
        assert issued.status_code == 201, issued.text
        ticket = issued.json()["ticket"]
        assert issued.json()["expires_in_ms"] == 30_000 and "the-token" not in ticket
        reader = await SseReader(client, f"/events?after=0&ticket={ticket}").open()
        try:
            assert reader.status == 200
            await reader.until(of_type("instance.started", directory="/w/a"))
        finally:
            await reader.close()
        again = await client.get(f"/events?after=0&ticket={ticket}")
        assert again.status_code == 401 and again.json()["code"] == "unauthorized"
        other = (await client.post("/events/ticket", headers=AUTH)).json()["ticket"]
        elsewhere = await client.get(f"/statistics?ticket={other}")  # a ticket opens event streams only
        assert elsewhere.status_code == 401
        compat = await SseReader(client, f"/event?ticket={other}").open()  # still unused: good once
        try:
            assert compat.status == 200
            assert (await compat.next()).type == "server.connected"  # type: ignore[union-attr]
        finally:
            await compat.close()
        assert (await client.get("/events?ticket=made-up")).status_code == 401

    run(scenario)


def test_an_expired_ticket_opens_nothing() -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        ticket = (await client.post("/events/ticket", headers=AUTH)).json()["ticket"]
        assert (await client.get(f"/events?ticket={ticket}")).status_code == 401

    run(scenario, ticket_ttl_s=0.0)


@pytest.mark.parametrize("origin", ["*", "localhost:5173", "http://localhost:5173/app", "ftp://x"])
def test_serve_refuses_an_allowed_origin_that_is_not_an_origin(
    origin: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--allow-origin", origin]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--allow-origin" in err and repr(origin) in err


PAGE_JS = """<!doctype html><html><body><pre id="out">pending</pre><script>
const api = "%(api)s", auth = {Authorization: "Bearer %(token)s"};
(async () => {
  const out = [];
  try {
    const issued = await fetch(api + "/events/ticket", {method: "POST", headers: auth});
    out.push("ticket:" + issued.status);
    const {ticket} = await issued.json();
    const stream = new EventSource(api + "/events?after=0&ticket=" + encodeURIComponent(ticket));
    const first = await new Promise((resolve, reject) => {
      stream.onmessage = (e) => resolve(JSON.parse(e.data));
      stream.onerror = () => reject(new Error("EventSource failed"));
    });
    out.push("event:" + first.type);
    stream.close();
    const disposed = await fetch(api + "/global/dispose", {method: "POST", headers: auth});
    out.push("dispose:" + disposed.status + ":" + (await disposed.json()).status);
  } catch (e) {
    out.push("error:" + e.message);
  }
  document.getElementById("out").textContent = out.join(" ");
})();
</script></body></html>"""


@contextlib.contextmanager
def page_server(box: dict[str, str]) -> Iterator[str]:
    """A one-page HTTP server on 127.0.0.1 (another origin than the supervisor's): it serves
    ``box["html"]``, set once its URL is known. Yields its URL."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = box["html"].encode()
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (.ci/run installs it)")
@pytest.mark.parametrize("allowed", [True, False])
def test_a_page_of_another_origin_opens_an_event_source_with_a_ticket_in_chromium_if_its_origin_is_allowed(
    tmp_path: Path, allowed: bool
) -> None:
    from wire_support import chromium

    with contextlib.ExitStack() as stack:
        # The page's origin must be known before the supervisor's settings: serve the page first.
        html_box: dict[str, str] = {}
        page_url = stack.enter_context(page_server(html_box))
        srv = stack.enter_context(server(cors_origins=(page_url,) if allowed else ()))
        html_box["html"] = PAGE_JS % {"api": srv.url, "token": "the-token"}
        dom = chromium(page_url, str(tmp_path / "profile"), "--dump-dom")
    shown = dom.split('<pre id="out">', 1)[1].split("</pre>", 1)[0]
    if allowed:
        assert shown == "ticket:201 event:instance.started dispose:200:completed", shown
    else:
        assert shown.startswith("error:"), shown  # the preflight is refused: the page gets nothing
