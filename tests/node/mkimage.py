#!/usr/bin/python3
"""mkimage.py — writes a one-layer container image as a `docker save` archive that
`ctr images import` (containerd) and `podman load` accept, without a registry or a builder.

  mkimage.py --name feedguard.local/pause:3.10 --out pause.tar \
      --file /tmp/pause:/pause --entrypoint '["/pause"]'

--file SRC:DST          copy a host file (follows symlinks; keeps the executable bit)
--symlink DST:TARGET    a symbolic link
--dir DST[:MODE]        an empty directory (MODE octal, e.g. 1777)
--entrypoint / --cmd    JSON lists
--env KEY=VALUE         (repeatable; PATH has a default)
--user USER[:GROUP]     the image's user
--label KEY=VALUE       (repeatable)

The layer is reproducible: entries sorted, owner root, mtime 0. Prints the image size.
"""
import argparse
import hashlib
import io
import json
import os
import stat
import sys
import tarfile

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def norm(dst):
    dst = "/" + dst.strip("/")
    if dst == "/" or ".." in dst.split("/"):
        raise SystemExit(f"mkimage: bad path in image: {dst!r}")
    return dst.lstrip("/")


def build_layer(files, symlinks, dirs):
    """Returns the uncompressed layer tar as bytes."""
    entries = {}  # path in image -> (kind, payload)

    def add_parents(path):
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            p = "/".join(parts[:i])
            entries.setdefault(p, ("dir", 0o755))

    for src, dst in files:
        p = norm(dst)
        if not os.path.isfile(src):
            raise SystemExit(f"mkimage: {src} is not a file")
        add_parents(p)
        entries[p] = ("file", src)
    for dst, target in symlinks:
        p = norm(dst)
        add_parents(p)
        entries[p] = ("symlink", target)
    for dst, mode in dirs:
        p = norm(dst)
        add_parents(p)
        entries[p] = ("dir", mode)

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in sorted(entries):
            kind, payload = entries[p]
            info = tarfile.TarInfo(p)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = payload
                tar.addfile(info)
            elif kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = payload
                info.mode = 0o777
                tar.addfile(info)
            else:
                st = os.stat(payload)
                info.type = tarfile.REGTYPE
                info.size = st.st_size
                info.mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
                with open(payload, "rb") as f:
                    tar.addfile(info, f)
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--file", action="append", default=[])
    ap.add_argument("--symlink", action="append", default=[])
    ap.add_argument("--dir", action="append", default=[])
    ap.add_argument("--entrypoint")
    ap.add_argument("--cmd")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--user", default="")
    ap.add_argument("--label", action="append", default=[])
    a = ap.parse_args()

    def pair(s, what):
        if ":" not in s:
            raise SystemExit(f"mkimage: --{what} wants A:B, got {s!r}")
        return tuple(s.split(":", 1))

    files = [pair(s, "file") for s in a.file]
    symlinks = [pair(s, "symlink") for s in a.symlink]
    dirs = []
    for s in a.dir:
        d, _, m = s.partition(":")
        dirs.append((d, int(m, 8) if m else 0o755))

    layer = build_layer(files, symlinks, dirs)
    layer_hex = hashlib.sha256(layer).hexdigest()
    env = list(a.env)
    if not any(e.startswith("PATH=") for e in env):
        env.insert(0, DEFAULT_PATH)
    cfg = {"Env": env, "WorkingDir": "/"}
    if a.entrypoint:
        cfg["Entrypoint"] = json.loads(a.entrypoint)
    if a.cmd:
        cfg["Cmd"] = json.loads(a.cmd)
    if a.user:
        cfg["User"] = a.user
    if a.label:
        cfg["Labels"] = dict(s.split("=", 1) for s in a.label if "=" in s)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + layer_hex]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "tests/node/mkimage.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_hex = hashlib.sha256(config_bytes).hexdigest()
    manifest = [{"Config": config_hex + ".json", "RepoTags": [a.name], "Layers": [layer_hex + "/layer.tar"]}]

    tmp = a.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as out:

        def put(name, data, mode=0o644):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            info.mtime = 0
            out.addfile(info, io.BytesIO(data))

        d = tarfile.TarInfo(layer_hex)
        d.type = tarfile.DIRTYPE
        d.mode = 0o755
        out.addfile(d)
        put(layer_hex + "/layer.tar", layer)
        put(config_hex + ".json", config_bytes)
        put("manifest.json", json.dumps(manifest).encode())
    os.replace(tmp, a.out)
    print(f"mkimage: {a.name} -> {a.out} ({len(layer) / 1e6:.1f} MB layer, config sha256:{config_hex[:12]})")


if __name__ == "__main__":
    sys.exit(main())
