"""HTTP for scripts in the sandbox, which has no sockets and no `ssl`.

`install()` gives `http.client` (and so `urllib.request`) and `urllib3`
(and so `requests`) connections whose socket is the door, `/run/skillbox`
(see skillbox_process). What the library writes on it, a whole HTTP/1.1
request, is sent to the host when the library first reads the response,
with the scheme, host and port it connected to. The host sends it under
the call's network grants, as it would a `wasi:http` request, with TLS of
its own; the reply is the response, which ends the connection, read as
off a socket. A refused request raises PermissionError in the host's
words, which say how the user can grant the host.

The modules are patched when they are first imported, so a script that
never uses HTTP never pays for importing them.
"""

import base64
import json
import sys

import skillbox_process

# The arguments urllib3's plain connection takes; its HTTPS connection's
# others (certificates, TLS versions) are the host's business.
_PLAIN_ARGS = ("timeout", "source_address", "blocksize", "socket_options", "proxy", "proxy_config")


def _seconds(timeout):
    return float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else None


# Targets the host refused, with its refusal. A call's grants do not
# change while it runs, so a library that retries (urllib3 does, three
# times) gets the same answer without spending the call's request cap.
_refused = {}


def exchange(tls, host, port, raw, timeout=None):
    """Sends one request's bytes; returns the response as a binary file."""
    scheme = "https" if tls else "http"
    target = f"{scheme}://{host}:{port}"
    if target in _refused:
        raise skillbox_process.refusal(target, _refused[target])
    request = {
        "http": {
            "scheme": scheme,
            "host": host,
            "port": int(port),
            "request": base64.b64encode(raw).decode("ascii"),
            "timeout": _seconds(timeout),
        }
    }
    try:
        reply = skillbox_process.door_exchange(request)
    except FileNotFoundError:
        raise skillbox_process.refusal(target, "this call has no network (the host gave it no way out)")
    if reply.peek(5)[:5] == b"HTTP/":
        return reply
    with reply:
        answer = json.loads(reply.read() or b"{}")
    why = answer.get("error") or f"the host sent no response from {target}"
    kind = answer.get("kind")
    if kind == "refused":
        _refused[target] = why
        raise skillbox_process.refusal(target, why)
    if kind == "invalid":
        raise OSError(22, why, target)
    raise ConnectionError(why)


class DoorSocket:
    """A connected socket as an HTTP library uses one: it keeps what is
    written, and `makefile("rb")`, which the library calls to read the
    response, sends it."""

    def __init__(self, tls, host, port, timeout=None):
        self.tls, self.host, self.port, self.timeout = tls, host, port, _seconds(timeout)
        self._written = bytearray()
        self._sent = None

    def sendall(self, data):
        self._written += data

    def send(self, data):
        self._written += data
        return len(data)

    def _response(self):
        raw = bytes(self._written)
        self._written.clear()
        return _Response(lambda: exchange(self.tls, self.host, self.port, raw, self.timeout))

    def send_now(self):
        """Sends what was written, so a refusal is raised where a library
        expects a connection's errors: while it sends the request."""
        self._sent = self._response()
        self._sent.send()

    def makefile(self, mode="rb", *args, **kwargs):
        if "r" not in mode:
            raise OSError(95, "a connection's socket in this sandbox is only read through makefile('rb')")
        if self._sent is not None:
            response, self._sent = self._sent, None
            return response
        return self._response()

    def settimeout(self, timeout):
        self.timeout = _seconds(timeout)

    def gettimeout(self):
        return self.timeout

    def setsockopt(self, *args):
        pass

    def shutdown(self, how):
        pass

    def close(self):
        pass


class _Response:
    """The response's file, sent for at its first read: a refusal is then
    raised where the library reads the status line, as a network error
    would be, not while it makes its response object."""

    def __init__(self, send):
        self._send, self._file, self._failure, self.closed = send, None, None, False

    def send(self):
        self._opened()

    def _opened(self):
        # Sent once: a library that reads again after a refusal gets the
        # same refusal, not a second request.
        if self._failure is not None:
            raise self._failure
        if self._file is None:
            try:
                self._file = self._send()
            except OSError as failure:
                self._failure = failure
                raise
        return self._file

    def close(self):
        self.closed = True
        if self._file is not None:
            self._file.close()

    def __getattr__(self, name):
        return getattr(self._opened(), name)


def _patch_http_client(client):
    def connect(self):
        if self._tunnel_host:
            raise OSError(95, "requests through a proxy are not sent from this sandbox")
        self.sock = DoorSocket(getattr(self, "_door_tls", False), self.host, self.port, self.timeout)

    client.HTTPConnection.connect = connect
    send_request = client.HTTPConnection.request

    # urllib.request wraps only the errors of `request` as URLError.
    # (urllib3 writes its requests itself, and reads errors either way.)
    def request(self, *args, **kwargs):
        send_request(self, *args, **kwargs)
        if isinstance(self.sock, DoorSocket):
            self.sock.send_now()

    client.HTTPConnection.request = request

    class HTTPSConnection(client.HTTPConnection):
        """https through the door: the host makes the TLS connection and
        checks the server's certificate."""

        default_port = client.HTTPS_PORT
        _door_tls = True

        def __init__(self, host, port=None, *, context=None, **kwargs):
            super().__init__(host, port, **kwargs)

    client.HTTPSConnection = HTTPSConnection
    if "HTTPSConnection" not in client.__all__:
        client.__all__.append("HTTPSConnection")


def _patch_urllib_request(request):
    # Its own, where there is one, makes an ssl context first.
    import http.client

    class HTTPSHandler(request.AbstractHTTPHandler):
        def https_open(self, req):
            return self.do_open(http.client.HTTPSConnection, req)

        https_request = request.AbstractHTTPHandler.do_request_

    # build_opener adds it when http.client has HTTPSConnection, as now.
    request.HTTPSHandler = HTTPSHandler
    if "HTTPSHandler" not in request.__all__:
        request.__all__.append("HTTPSHandler")


def _patch_urllib3(pool):
    import urllib3.connection as connection

    class DoorConnection(connection.HTTPConnection):
        _door_tls = False

        def _new_conn(self):
            return DoorSocket(self._door_tls, self.host, self.port, self.timeout)

    class DoorHTTPSConnection(DoorConnection):
        """https through the door: the host makes the TLS connection and
        checks the server's certificate, so the connection is verified."""

        default_port = 443
        _door_tls = True

        # urllib3 warns about an unverified connection when this is false,
        # and sets it so when it closes one.
        @property
        def is_verified(self):
            return True

        @is_verified.setter
        def is_verified(self, value):
            pass

        def __init__(self, host, port=None, **kwargs):
            plain = {k: v for k, v in kwargs.items() if k in _PLAIN_ARGS}
            super().__init__(host, port, **plain)

    pool.HTTPConnectionPool.ConnectionCls = DoorConnection
    pool.HTTPSConnectionPool.ConnectionCls = DoorHTTPSConnection


_PATCHES = {
    "http.client": _patch_http_client,
    "urllib.request": _patch_urllib_request,
    "urllib3.connectionpool": _patch_urllib3,
}


class _PatchingLoader:
    """A module's own loader, which patches the module once it has run."""

    def __init__(self, inner, patch):
        self._inner, self._patch = inner, patch

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        self._patch(module)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _Patcher:
    """Finds the modules in _PATCHES with the finders after it, and gives
    them a loader that patches them."""

    def find_spec(self, name, path=None, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


def install():
    """Puts HTTP through the door in place: now for what is imported, at
    import for the rest."""
    for name, patch in _PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, _Patcher())
