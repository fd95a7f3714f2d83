"""Guards every HTTP request passes before a route sees it (ASGI middleware, outermost).

A local server must not be drivable by a web page the user happens to visit:
- Host allow-list: loopback names, the bind address and --allowed-hosts; any other Host header is
  refused (421), which defeats DNS rebinding (a page whose name resolves to 127.0.0.1).
- Origin: a request from a browser page (Origin header) is refused (403) unless --allowed-origins
  names that origin; only then are CORS headers sent (Starlette's CORSMiddleware).
- Every POST must say `Content-Type: application/json` (415 otherwise): a page's no-cors fetch and an
  HTML form can only send text/plain, form or multipart bodies.
- --max-request-bytes bounds a body before anything parses it (413), from Content-Length or while
  it arrives; the body is then handed to the route as it came.
"""

import ipaddress

from starlette.middleware.cors import CORSMiddleware

from radixlm.runtime.api.http import error_response

LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1", "localhost.localdomain"}
WILDCARD_BINDS = {"0.0.0.0", "::", ""}


def _split(value) -> list:
    if not value:
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return [v.strip() for v in items if v.strip()]


def host_name(header: str) -> str:
    """The name part of a Host header: 'example.com:80' -> 'example.com', '[::1]:8000' -> '::1'."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    if header.count(":") == 1:
        return header.split(":")[0]
    return header


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class HostPolicy:
    """Which Host headers are served.  A server bound to a wildcard address also serves any IP literal
    (a page cannot rebind an IP address), so LAN clients that use its address keep working."""

    def __init__(self, bind_host: str, allowed_hosts=None):
        extra = [h.lower() for h in _split(allowed_hosts)]
        self.any = "*" in extra
        self.names = LOOPBACK_HOSTS | {host_name(h) for h in extra if h != "*"}
        self.wildcard = bind_host in WILDCARD_BINDS
        if not self.wildcard:
            self.names.add(host_name(bind_host))

    def allows(self, header) -> bool:
        if header is None or self.any:
            return True   # non-browser HTTP/1.0 clients send none; browsers always do
        name = host_name(header)
        return name in self.names or (self.wildcard and _is_ip(name))


def _header(scope, name: bytes):
    for k, v in scope["headers"]:
        if k == name:
            return v.decode("latin-1")
    return None


class GuardMiddleware:
    def __init__(self, app, hosts: HostPolicy, origins: list, max_request_bytes: int):
        self.app, self.hosts, self.origins, self.max_bytes = app, hosts, set(origins), max_request_bytes
        self.any_origin = "*" in self.origins

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refusal = self._refusal(scope)
        if refusal is None and scope["method"] == "POST":
            refusal, receive = await self._read_body(scope, receive)
        if refusal is not None:
            return await refusal(scope, receive, send)
        await self.app(scope, receive, send)

    def _refusal(self, scope):
        host = _header(scope, b"host")
        if not self.hosts.allows(host):
            return error_response(421, f"Host {host!r} is not served here; start the server with "
                                       f"--allowed-hosts {host_name(host)} to allow it", code="host_not_allowed")
        origin = _header(scope, b"origin")
        if origin is not None and not (self.any_origin or origin in self.origins):
            return error_response(403, f"requests from the web origin {origin!r} are refused; start the server "
                                       f"with --allowed-origins {origin} to allow it", code="origin_not_allowed")
        if scope["method"] == "POST":
            ctype = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
            if ctype != "application/json" and not ctype.endswith("+json"):
                got = f"got {ctype!r}" if ctype else "the header is missing"
                return error_response(415, f"Content-Type must be application/json ({got}); send the header "
                                           f"'Content-Type: application/json' with a JSON body")
            length = _header(scope, b"content-length")
            if length is not None and length.strip().isdigit() and int(length) > self.max_bytes:
                return self._too_large(int(length))
        return None

    def _too_large(self, size: int, so_far: bool = False) -> object:
        what = f"at least {size}" if so_far else str(size)
        return error_response(413, f"the request body has {what} bytes, more than the {self.max_bytes} bytes "
                                   f"this server accepts (--max-request-bytes)", code="request_too_large")

    async def _read_body(self, scope, receive):
        """Read the whole body within the bound: (refusal, None) or (None, a receive that replays it)."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None, _replay([message], receive)     # the client left; let the route see it
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return self._too_large(size, so_far=True), None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return None, _replay([{"type": "http.request", "body": b"".join(chunks), "more_body": False}], receive)


def _replay(messages: list, receive):
    async def replayed():
        if messages:
            return messages.pop(0)
        return await receive()
    return replayed


def add_guards(app, args) -> None:
    """Install CORS (only for --allowed-origins) and the guard outside every other middleware."""
    origins = _split(getattr(args, "allowed_origins", None))
    if origins:
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(GuardMiddleware, hosts=HostPolicy(args.host, getattr(args, "allowed_hosts", None)),
                       origins=origins, max_request_bytes=args.max_request_bytes)
