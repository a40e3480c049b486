#!/usr/bin/python3
"""podresources_list.py SOCKET — calls kubelet's PodResources v1 List over its unix socket and
prints one line per container: NAMESPACE/POD CONTAINER cpu_ids=[...]. Exit 0 when the call
returned a response, 1 otherwise.

No gRPC library is installed on the test machines, so this speaks the few bytes of HTTP/2 (h2c)
that one unary gRPC call needs: the connection preface, SETTINGS (+ ACK), a HEADERS frame with
HPACK literal fields, one DATA frame with the empty request, then it reads DATA frames of stream 1
until the stream ends and decodes the protobuf response by hand (field numbers from
proto/kubelet/podresources/v1/api.proto).
"""
import socket
import struct
import sys

PATH = "/v1.PodResourcesLister/List"


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    # Literal header field without indexing, new name, no Huffman coding (RFC 7541 6.2.2).
    n, v = name.encode(), value.encode()
    assert len(n) < 127 and len(v) < 127
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return buf


def varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def fields(buf):
    """Yields (field_number, wire_type, value) of one protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, i = varint(buf, i)
        elif wt == 2:
            ln, i = varint(buf, i)
            val = buf[i : i + ln]
            i += ln
        elif wt == 1:
            val = buf[i : i + 8]
            i += 8
        elif wt == 5:
            val = buf[i : i + 4]
            i += 4
        else:
            raise ValueError(f"wire type {wt}")
        yield num, wt, val


def cpu_ids(wt, val):
    if wt == 0:
        return [val]
    out, i = [], 0
    while i < len(val):
        v, i = varint(val, i)
        out.append(v)
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sys.argv[1])
    headers = b"".join(
        hpack_literal(k, v)
        for k, v in [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", PATH),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
    )
    s.sendall(
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        + frame(4, 0, 0)  # SETTINGS
        + frame(1, 0x4, 1, headers)  # HEADERS, END_HEADERS
        + frame(0, 0x1, 1, b"\x00\x00\x00\x00\x00")  # DATA, END_STREAM: empty request
    )
    data, ended = b"", False
    while not ended:
        hdr = recv_exact(s, 9)
        ln = int.from_bytes(hdr[:3], "big")
        ftype, flags, stream = hdr[3], hdr[4], int.from_bytes(hdr[5:9], "big") & 0x7FFFFFFF
        payload = recv_exact(s, ln)
        if ftype == 4 and not flags & 1:
            s.sendall(frame(4, 1, 0))  # ACK the server's SETTINGS
        elif ftype == 6 and not flags & 1:
            s.sendall(frame(6, 1, 0, payload))  # PING ACK
        elif ftype == 7:
            raise SystemExit(f"podresources_list: GOAWAY from server: {payload[8:]!r}")
        elif ftype == 3 and stream == 1:
            raise SystemExit(f"podresources_list: stream reset, code {int.from_bytes(payload, 'big')}")
        elif stream == 1 and ftype in (0, 1, 9):
            if ftype == 0:
                data += payload
            ended = bool(flags & 1)
    s.close()
    if len(data) < 5:
        print("podresources_list: no response message (the call failed; see kubelet's log)", file=sys.stderr)
        return 1
    msg_len = int.from_bytes(data[1:5], "big")
    msg = data[5 : 5 + msg_len]
    n = 0
    for num, _, pod in fields(msg):
        if num != 1:
            continue
        name = ns = ""
        containers = []
        for f, _, v in fields(pod):
            if f == 1:
                name = v.decode()
            elif f == 2:
                ns = v.decode()
            elif f == 3:
                cname, cpus = "", []
                for cf, cwt, cv in fields(v):
                    if cf == 1:
                        cname = cv.decode()
                    elif cf == 3:
                        cpus += cpu_ids(cwt, cv)
                containers.append((cname, cpus))
        for cname, cpus in containers or [("", [])]:
            print(f"{ns}/{name} {cname} cpu_ids={sorted(cpus)}")
            n += 1
    print(f"podresources_list: {n} container(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
