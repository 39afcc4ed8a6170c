"""HTTP for scripts in the sandbox, which has no sockets and no `ssl`.

`install()` gives `http.client` (and so `urllib.request`), `urllib3`
(and so `requests`) and httpcore (and so httpx's `Client`) connections
whose socket is the door, `/run/skillbox`
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
import types

import skillbox_process

# The arguments urllib3's plain connection takes; its HTTPS connection's
# others (certificates, TLS versions) are the host's business.
_PLAIN_ARGS = ("timeout", "source_address", "blocksize", "socket_options", "proxy", "proxy_config")


# The host makes the TLS connection with the system's certificate
# authorities and no certificate of the script's.
_NO_CLIENT_CERTIFICATES = (
    "a client certificate cannot be sent from this sandbox: the host makes the TLS "
    "connection, with the system's certificate authorities and no client certificate"
)


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
    if kind == "timeout":
        # socket.timeout: urllib3 (so requests) reads it as a read timeout.
        raise TimeoutError(why)
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
            if kwargs.get("cert_file"):
                raise OSError(95, _NO_CLIENT_CERTIFICATES)
            plain = {k: v for k, v in kwargs.items() if k in _PLAIN_ARGS}
            super().__init__(host, port, **plain)

    pool.HTTPConnectionPool.ConnectionCls = DoorConnection
    pool.HTTPSConnectionPool.ConnectionCls = DoorHTTPSConnection


class _DoorStream:
    """httpcore's network stream over a DoorSocket: what is written is
    kept, and the first read sends it."""

    def __init__(self, sock):
        self._sock, self._reader = sock, None

    def write(self, buffer, timeout=None):
        self._sock.sendall(buffer)

    def read(self, max_bytes, timeout=None):
        import httpcore

        try:
            if self._reader is None:
                if timeout is not None:
                    self._sock.settimeout(timeout)
                self._reader = self._sock.makefile("rb")
            return self._reader.read1(max_bytes)
        except TimeoutError as failure:
            raise httpcore.ReadTimeout(str(failure)) from failure
        except OSError as failure:
            # httpx reads httpcore's errors, not the socket's.
            raise httpcore.ConnectError(str(failure)) from failure

    def close(self):
        if self._reader is not None:
            self._reader.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        # The host makes the TLS connection and checks the certificate.
        self._sock.tls = True
        return self

    def get_extra_info(self, info):
        # Not readable while idle: the connection has not been dropped.
        return False if info == "is_readable" else None


def _patch_httpcore_sync(sync):
    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return _DoorStream(DoorSocket(False, host, port, timeout))

    sync.SyncBackend.connect_tcp = connect_tcp


def _ssl_stand_in():
    """What httpx and httpcore use of `ssl`, which this Python does not
    have: contexts that hold settings and make no connection, since the
    host makes the TLS connection. It is seen only by httpx and httpcore
    (see _StandIn): urllib3 and requests probe for `ssl` and work
    without it, and a stand-in would mislead them."""
    ssl = types.ModuleType("ssl", "skillbox: TLS is made by the host, not in the sandbox")

    class SSLContext:
        verify_mode, check_hostname = 2, True
        minimum_version = maximum_version = None

        def __init__(self, protocol=None, *args, **kwargs):
            self.protocol = protocol

        def _ignored(self, *args, **kwargs):
            pass

        def load_cert_chain(self, *args, **kwargs):
            raise OSError(95, _NO_CLIENT_CERTIFICATES)

        load_verify_locations = load_default_certs = _ignored
        set_default_verify_paths = set_alpn_protocols = set_ciphers = _ignored
        set_ecdh_curve = _ignored

        def wrap_socket(self, *args, **kwargs):
            raise OSError(95, "TLS is the host's in this sandbox; use http.client, urllib, requests or httpx")

    class SSLError(OSError):
        pass

    class TLSVersion:
        MINIMUM_SUPPORTED, TLSv1, TLSv1_1, TLSv1_2, TLSv1_3, MAXIMUM_SUPPORTED = range(6)

    class Purpose:
        SERVER_AUTH, CLIENT_AUTH = "server", "client"

    def create_default_context(purpose=None, *, cafile=None, capath=None, cadata=None):
        return SSLContext()

    ssl.__dict__.update(
        SSLContext=SSLContext,
        SSLError=SSLError,
        SSLWantReadError=type("SSLWantReadError", (SSLError,), {}),
        SSLWantWriteError=type("SSLWantWriteError", (SSLError,), {}),
        SSLSocket=type("SSLSocket", (), {}),
        SSLObject=type("SSLObject", (), {}),
        MemoryBIO=type("MemoryBIO", (), {}),
        TLSVersion=TLSVersion,
        Purpose=Purpose,
        create_default_context=create_default_context,
        PROTOCOL_TLS_CLIENT=16,
        PROTOCOL_TLS=2,
        CERT_NONE=0,
        CERT_OPTIONAL=1,
        CERT_REQUIRED=2,
        OP_NO_COMPRESSION=1 << 17,
        OP_NO_TICKET=1 << 14,
        SSL_ERROR_WANT_READ=2,
        SSL_ERROR_WANT_WRITE=3,
        HAS_ALPN=False,
    )
    return ssl


class _StandIn:
    """While it is entered, `import ssl` gives the stand-in, where this
    Python has no `ssl` of its own."""

    module = None

    def __enter__(self):
        self.placed = "ssl" not in sys.modules and not _has_ssl()
        if self.placed:
            if _StandIn.module is None:
                _StandIn.module = _ssl_stand_in()
            sys.modules["ssl"] = _StandIn.module
        return self

    def __exit__(self, *exc):
        if self.placed and sys.modules.get("ssl") is _StandIn.module:
            del sys.modules["ssl"]

    @staticmethod
    def placed_now():
        return _StandIn.module is not None and sys.modules.get("ssl") is _StandIn.module


class _Hidden:
    """While it is entered, the stand-in is out of sight: for a module
    that httpx or httpcore import (anyio, asyncio), which must find `ssl`
    missing, as it is, and not keep the stand-in as its own.

    Swapping `sys.modules["ssl"]` assumes one thread, which WASI gives."""

    def __enter__(self):
        self.hid = _StandIn.placed_now()
        if self.hid:
            del sys.modules["ssl"]
        return self

    def __exit__(self, *exc):
        if self.hid:
            sys.modules["ssl"] = _StandIn.module


_HAS_SSL = []


def _has_ssl():
    if not _HAS_SSL:
        import importlib.util

        _HAS_SSL.append(importlib.util.find_spec("_ssl") is not None)
    return _HAS_SSL[0]


def _patch_httpx_config(config):
    make = config.create_ssl_context

    def create_ssl_context(*args, **kwargs):
        with _StandIn():
            return make(*args, **kwargs)

    config.create_ssl_context = create_ssl_context


_PATCHES = {
    "http.client": _patch_http_client,
    "urllib.request": _patch_urllib_request,
    "urllib3.connectionpool": _patch_urllib3,
    "httpcore._backends.sync": _patch_httpcore_sync,
    "httpx._config": _patch_httpx_config,
}

# Packages whose modules import `ssl` as they load, given the stand-in.
_STAND_IN_FOR = ("httpx", "httpcore")


class _PatchingLoader:
    """A module's own loader, which patches the module once it has run."""

    def __init__(self, inner, patch):
        self._inner, self._patch = inner, patch

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        seen = _StandIn() if module.__name__.split(".")[0] in _STAND_IN_FOR else _Hidden()
        with seen:
            self._inner.exec_module(module)
        if self._patch is not None:
            self._patch(module)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _Patcher:
    """Finds the modules in _PATCHES and those of _STAND_IN_FOR, and any
    module loaded while the stand-in is in place, with the finders after
    it, and gives them a loader that patches them or shows them the
    right `ssl`."""

    def find_spec(self, name, path=None, target=None):
        patch = _PATCHES.get(name)
        ours = patch is not None or name.split(".")[0] in _STAND_IN_FOR
        if not ours and not _StandIn.placed_now():
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
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
