"""Runs scenario.json (every RPC of every service) against a running substatusd with one real client.

usage: interop.py CLIENT PROTOCOL CODEC URL HTTP OPERATOR_KEY PROTOS_DIR
  CLIENT    connectrpc (PyPI's Connect client, code generated here from PROTOS_DIR with
            grpcio-tools' protoc and protoc-gen-connectrpc), bufcurl (the Buf CLI's `buf curl`:
            server reflection over HTTP/2, an image built from PROTOS_DIR over HTTP/1.1) or curl
            (plain curl posting JSON, as the README shows)
  PROTOCOL  connect, grpc or grpcweb
  CODEC     json or proto (bufcurl sends proto; curl sends json)
  URL       http://HOST:PORT of the listener
  HTTP      h2 (HTTP/2 with prior knowledge) or h1 (HTTP/1.1)
Prints `ok`, `FAIL` or `skipped` with a reason for every step, then `N passed, N failed, N skipped`.
"""
import base64, importlib, json, os, re, subprocess, sys, tempfile, uuid

import substatus_python

client_name, protocol, codec, base_url, http, operator_key, protos = sys.argv[1:8]
fixtures = os.path.dirname(os.path.abspath(__file__))


class CallError(Exception):
    """An RPC's error as every client reports it: the Connect code name, message, details (type, bytes)."""

    def __init__(self, code, message, details):
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.details = code, message, details


def unpadded_b64decode(text):
    return base64.b64decode(text + "=" * (-len(text) % 4))


class ConnectRPC:
    """PyPI's connectrpc with generated clients, in any protocol and codec, over HTTP/1.1 or HTTP/2."""

    def __init__(self):
        from google.protobuf import json_format, message_factory
        from connectrpc.compat import google_protobuf_binary_codec, google_protobuf_json_codec
        from connectrpc.protocol import ProtocolType
        from pyqwest import HTTPVersion, SyncClient, SyncHTTPTransport
        files = substatus_python.generate(protos, connect=True)
        self.json_format, self.message_factory = json_format, message_factory
        self.services = {}
        for f in files:
            pb2 = importlib.import_module(f[:-6].replace("/", ".") + "_pb2")
            for service in pb2.DESCRIPTOR.services_by_name.values():
                connect = importlib.import_module(f[:-6].replace("/", ".") + "_connect")
                self.services[service.full_name] = (service, getattr(connect, service.name + "ClientSync"))
        transport = SyncHTTPTransport(http_version=HTTPVersion.HTTP2 if http == "h2" else HTTPVersion.HTTP1)
        self.http_client = SyncClient(transport)
        self.options = dict(
            codec=google_protobuf_json_codec() if codec == "json" else google_protobuf_binary_codec(),
            protocol={"connect": ProtocolType.CONNECT, "grpc": ProtocolType.GRPC, "grpcweb": ProtocolType.GRPC_WEB}[protocol],
            http_client=self.http_client)  # the client's defaults: gzip requests, accept gzip replies
        self.clients = {}

    def call(self, method, request_json, key, stream, take_first):
        from connectrpc.errors import ConnectError
        service_name, method_name = method.split("/")
        service, client_class = self.services[service_name]
        if service_name not in self.clients:
            self.clients[service_name] = client_class(base_url, **self.options)
        descriptor = service.methods_by_name[method_name]
        request = self.json_format.ParseDict(request_json, self.message_factory.GetMessageClass(descriptor.input_type)())
        function = getattr(self.clients[service_name], re.sub(r"(?<!^)(?=[A-Z])", "_", method_name).lower())
        headers = {"authorization": f"Bearer {key}"} if key else None
        to_json = lambda m: self.json_format.MessageToDict(m)
        try:
            if stream == "bidi":
                return [to_json(m) for m in function(iter([request]), headers=headers)]
            if stream == "server":
                answers = []
                for message in function(request, headers=headers, timeout_ms=5000):
                    answers.append(to_json(message))
                    if take_first:
                        break
                return answers
            return to_json(function(request, headers=headers))
        except ConnectError as e:
            raise CallError(e.code.value, e.message, [(d.type_name, d.message_bytes) for d in e.details])


def decode_json_error(text):
    """A Connect error body (also what buf curl prints): code, message, details (type, value)."""
    body = json.loads(text)
    details = [(d["type"], unpadded_b64decode(d["value"])) for d in body.get("details", [])]
    return CallError(body["code"], body.get("message", ""), details)


class BufCurl:
    """The Buf CLI's `buf curl`: server reflection over HTTP/2, an image of PROTOS_DIR over HTTP/1.1
    (reflection is a bidirectional stream, which buf curl runs over HTTP/2 only)."""

    def __init__(self):
        self.buf = os.path.join(os.path.dirname(sys.executable), "buf")
        if http == "h1":
            image = os.path.join(tempfile.mkdtemp(), "image.binpb")
            subprocess.run([self.buf, "build", protos, "-o", image], check=True)
            self.schema = ["--schema", image]
        else:
            self.schema = ["--http2-prior-knowledge"]

    def call(self, method, request_json, key, stream, take_first):
        args = [self.buf, "curl", "--protocol", protocol, *self.schema, "-d", json.dumps(request_json)]
        if key:
            args += ["-H", f"Authorization: Bearer {key}"]
        if take_first:
            # The stream never ends: a deadline ends it after its first message.
            args += ["--timeout", "2s"]
        result = subprocess.run(args + [f"{base_url}/{method}"], capture_output=True, text=True, timeout=30)
        # One JSON document per response message.
        decoder, text, answers, at = json.JSONDecoder(), result.stdout, [], 0
        while True:
            while at < len(text) and text[at].isspace():
                at += 1
            if at == len(text):
                break
            value, at = decoder.raw_decode(text, at)
            answers.append(value)
        if result.returncode != 0 and not (take_first and answers):
            if result.returncode < 8:
                raise AssertionError(f"buf curl failed (exit {result.returncode}): {result.stderr.strip()}")
            raise decode_json_error(result.stderr)
        return answers if stream else answers[0]


class Curl:
    """Plain curl posting JSON (unary Connect, as the README shows); checks each error's HTTP status."""

    def call(self, method, request_json, key, stream, take_first):
        args = ["curl", "-sS", "-H", "Content-Type: application/json", "-d", json.dumps(request_json),
                "-w", "\n%{http_code} %{content_type}"]
        if key:
            args += ["-H", f"Authorization: Bearer {key}"]
        if http == "h2":
            args.append("--http2-prior-knowledge")
        result = subprocess.run(args + [f"{base_url}/{method}"], capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, f"curl failed: {result.stderr}"
        body, _, tail = result.stdout.rpartition("\n")
        status, content_type = tail.split(" ", 1)
        assert content_type.startswith("application/json"), f"content-type {content_type!r}, body {body[:200]!r}"
        if status == "200":
            return json.loads(body)
        error = decode_json_error(body)
        assert int(status) == substatus_python.HTTP_STATUS[error.code], f"HTTP {status} for {error.code} (the spec says {substatus_python.HTTP_STATUS[error.code]})"
        raise error


def substitute(value, names):
    if isinstance(value, str):
        def name(match):
            if match.group(1) not in names:
                raise AssertionError(f"no ${{{match.group(1)}}}: the step that captures it failed")
            return names[match.group(1)]
        return re.sub(r"\$\{(\w+)\}", name, value)
    if isinstance(value, list):
        return [substitute(v, names) for v in value]
    if isinstance(value, dict):
        if "$file" in value:
            return open(os.path.join(fixtures, value["$file"])).read()
        if "$base64json" in value:
            return base64.b64encode(json.dumps(value["$base64json"]).encode()).decode()
        return {k: substitute(v, names) for k, v in value.items()}
    return value


def values_at(value, path):
    """Every value at a dotted path; [] fans out over a list, a number indexes one."""
    found = [value]
    for part in path.split("."):
        fan = part.endswith("[]")
        part = part[:-2] if fan else part
        next_found = []
        for v in found:
            if isinstance(v, list) and part.isdigit():
                v = v[int(part)] if int(part) < len(v) else None
            elif isinstance(v, dict):
                v = v.get(part)
            else:
                v = None
            if v is None:
                continue
            next_found.extend(v if fan and isinstance(v, list) else [v])
        found = next_found
    return found


def field_violations(details):
    from google.rpc import error_details_pb2
    fields = []
    for type_name, data in details:
        if type_name == "google.rpc.BadRequest":
            fields += [v.field for v in error_details_pb2.BadRequest.FromString(data).field_violations]
    return fields


def skip_reason(step):
    if client_name == "curl" and step.get("stream"):
        return "plain curl posts unary Connect requests only"
    if client_name == "bufcurl" and http == "h1" and step.get("stream") == "bidi":
        # connectrpc sends the one request, then reads the answers (half duplex); buf curl insists on HTTP/2.
        return "buf curl runs a bidirectional stream over HTTP/2 only"
    return None


def main():
    assert not (http == "h1" and protocol == "grpc"), "gRPC needs HTTP/2"
    client = {"connectrpc": ConnectRPC, "bufcurl": BufCurl, "curl": Curl}[client_name]()
    if client_name != "connectrpc":
        substatus_python.generate(protos)  # google.rpc's BadRequest, to read error details
    scenario = json.load(open(os.path.join(fixtures, "scenario.json")))
    names = {"run": uuid.uuid4().hex[:8], "operator": operator_key}
    passed = failed = skipped = 0
    for step in scenario["steps"]:
        label = step["call"]
        reason = skip_reason(step)
        if reason:
            print(f"skipped {label}: {reason}")
            skipped += 1
            continue
        try:
            request = substitute(step["request"], names)
            key = substitute(step.get("key", ""), names)
            try:
                answer = client.call(step["call"], request, key, step.get("stream"), step.get("open", False))
            except CallError as e:
                want = step.get("error")
                assert want, f"unexpected error {e.code}: {e.message}"
                assert e.code == want["code"], f"code {e.code} ({e.message}), expected {want['code']}"
                if "field" in want:
                    fields = field_violations(e.details)
                    assert want["field"] in fields, f"BadRequest field violations {fields}, expected {want['field']}"
                print(f"ok {label}: {e.code} {e.message!r}")
                passed += 1
                continue
            assert "error" not in step, f"expected {step['error']['code']}, got {json.dumps(answer)[:300]}"
            for path, want in step.get("expect", {}).items():
                want = substitute(want, names)
                found = values_at(answer, path)
                ok = any(found) if want == "*" else want in found
                assert ok, f"{path}: {found[:5]}, expected {want!r}; answer {json.dumps(answer)[:400]}"
            for name, path in step.get("capture", {}).items():
                names[name] = values_at(answer, path)[0]
            print(f"ok {label}")
            passed += 1
        except Exception as e:  # every step is reported; the first failure does not hide the others
            print(f"FAIL {label}: {type(e).__name__}: {e}")
            failed += 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    sys.exit(1 if failed else 0)


main()
