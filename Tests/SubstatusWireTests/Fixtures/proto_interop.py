"""Independent encoder for the wire tests: Python's protobuf (upb) on the same .proto files.

generate PROTOS OUT.jsonl [SEED]   random, fully populated messages of every type: binary and JSON
verify PROTOS ORIGINAL.jsonl SWIFT.jsonl   checks that what Swift re-encoded parses back equal
"""
import base64, glob, importlib, json, os, random, struct, sys, tempfile

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor as FD
from grpc_tools import protoc
import grpc_tools


def load(protos):
    out = tempfile.mkdtemp()
    files = sorted(os.path.relpath(p, protos) for p in glob.glob(os.path.join(protos, "**/*.proto"), recursive=True))
    builtin = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    if protoc.main(["protoc", f"-I{protos}", f"-I{builtin}", f"--python_out={out}", *files]) != 0:
        sys.exit("protoc failed")
    sys.path.insert(0, out)
    # Our grpc/... protos share the top-level package name with grpcio itself: extend it.
    import grpc
    grpc.__path__.append(os.path.join(out, "grpc"))
    types = {}
    for f in files:
        module = importlib.import_module(f[:-len(".proto")].replace("/", ".") + "_pb2")
        def visit(d):
            if not d.GetOptions().map_entry:
                types[d.full_name] = d._concrete_class
            for n in d.nested_types:
                visit(n)
        for d in module.DESCRIPTOR.message_types_by_name.values():
            visit(d)
    return types


def scalar(field, rng):
    t = field.type
    if t == FD.TYPE_DOUBLE:
        return rng.choice([0.5, -1.25e300, 3.141592653589793, 1e-310, rng.uniform(-1e6, 1e6)])
    if t == FD.TYPE_FLOAT:
        return struct.unpack("f", struct.pack("f", rng.uniform(-1e6, 1e6)))[0]
    if t in (FD.TYPE_INT64, FD.TYPE_SINT64, FD.TYPE_SFIXED64):
        return rng.choice([-(2**63), 2**63 - 1, -1, rng.randint(-(2**63), 2**63 - 1)])
    if t in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
        return rng.choice([2**64 - 1, 1, rng.randint(0, 2**64 - 1)])
    if t in (FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32):
        return rng.choice([-(2**31), 2**31 - 1, -1, rng.randint(-(2**31), 2**31 - 1)])
    if t in (FD.TYPE_UINT32, FD.TYPE_FIXED32):
        return rng.choice([2**32 - 1, 1, rng.randint(0, 2**32 - 1)])
    if t == FD.TYPE_BOOL:
        return True
    if t == FD.TYPE_STRING:
        alphabet = "abcXYZ09 _-é日本😀\"\\\n\t/"
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
    if t == FD.TYPE_BYTES:
        return bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 16)))
    if t == FD.TYPE_ENUM:
        values = [v.number for v in field.enum_type.values if v.number != 0] or [0]
        return rng.choice(values + [77])  # 77: a number no enum declares (open enums keep it)
    raise ValueError(t)


def fill(msg, rng, depth=0):
    d = msg.DESCRIPTOR
    # Well-known types with a JSON form of their own: only valid values.
    if d.full_name == "google.protobuf.Duration":
        seconds = rng.randint(-315576000000, 315576000000)
        nanos = rng.choice([0, 500000000, 1000, 7])
        msg.seconds, msg.nanos = seconds, (-nanos if seconds < 0 else nanos)
        return msg
    if d.full_name == "google.protobuf.Any":
        from google.rpc import error_details_pb2
        inner = error_details_pb2.BadRequest()
        fill(inner, rng, depth + 1)
        msg.Pack(inner)
        return msg
    chosen = {o.name: rng.choice(list(o.fields) + [None]) for o in d.oneofs}
    for field in d.fields:
        if field.containing_oneof is not None and chosen[field.containing_oneof.name] is not field:
            continue
        is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
        if is_map:
            key_f, val_f = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            for _ in range(rng.randint(0, 3)):
                k = scalar(key_f, rng)
                if val_f.type == FD.TYPE_MESSAGE:
                    if depth < 3:
                        fill(getattr(msg, field.name)[k], rng, depth + 1)
                else:
                    getattr(msg, field.name)[k] = scalar(val_f, rng)
        elif field.is_repeated:
            for _ in range(rng.randint(0, 3)):
                if field.type == FD.TYPE_MESSAGE:
                    if depth < 3:
                        fill(getattr(msg, field.name).add(), rng, depth + 1)
                else:
                    getattr(msg, field.name).append(scalar(field, rng))
        elif field.type == FD.TYPE_MESSAGE:
            if depth < 3 and rng.random() < 0.8:
                sub = getattr(msg, field.name)
                sub.SetInParent()
                fill(sub, rng, depth + 1)
        elif rng.random() < 0.85:
            setattr(msg, field.name, scalar(field, rng))
    return msg


def main():
    mode, protos = sys.argv[1], sys.argv[2]
    types = load(protos)
    if mode == "generate":
        rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 20261129)
        with open(sys.argv[3], "w") as out:
            for name in sorted(types):
                for n in range(6):
                    msg = fill(types[name](), rng) if n else types[name]()
                    out.write(json.dumps({
                        "type": name,
                        "binary": base64.b64encode(msg.SerializeToString()).decode(),
                        "json": json_format.MessageToJson(msg, indent=None),
                    }) + "\n")
    elif mode == "verify":
        originals = [json.loads(l) for l in open(sys.argv[3])]
        swift = [json.loads(l) for l in open(sys.argv[4])]
        assert len(originals) == len(swift), (len(originals), len(swift))
        failures = 0
        for o, s in zip(originals, swift):
            cls = types[o["type"]]
            want = cls.FromString(base64.b64decode(o["binary"]))
            got = cls.FromString(base64.b64decode(s["binary"]))
            from_json = json_format.Parse(s["json"], cls())
            if got != want or from_json != want:
                failures += 1
                print(f"MISMATCH {o['type']}: python={want} swift-binary={got} swift-json={from_json}", file=sys.stderr)
        if failures:
            sys.exit(f"{failures} of {len(originals)} messages differ")
        print(f"verified {len(originals)} messages")
    else:
        sys.exit("usage: generate|verify")


main()
